#!/bin/bash
# t_shm_many: 1000 concurrent upgraded connections in one process, and what
# each costs. RDMASHIM_RING_KB=64 keeps it light: every connection maps one
# memfd (memfd:rdmashim-ring) of 2 * (64 KiB + 4 KiB header) = 136 KiB at
# each end.
#   1. the stress tool, as the brief of this scenario asks: server and client
#      both under the shim, --mode epoll-et, --conns 1000, --duration (so all
#      1000 stay open together): while they run, the trace must show 1000
#      upgrade.done per side; the client's and server's VmRSS and ring
#      mappings are read then; the client must end OK.
#   2. the same measurement with two small Python holders (one process per
#      side, single-threaded blocking I/O; a few 1-byte ping-pong rounds per
#      connection drive the handshakes): VmRSS and the memfd mappings of each
#      process are read before any connection, with all 1000 open and
#      upgraded, and after they all closed (the mappings must be gone again);
#      the same holders without the shim give the baseline RSS per connection.
#      Then 256 KiB go each way on every connection (16 KiB echoes, so each
#      ring wraps several times) and RSS is read again: every ring page is
#      resident by then.
# For each measured process it prints "per-connection: N KiB mapped, M KiB
# RSS" and checks that the mappings are exactly one per connection of
# 2 * (RING_KB * 1024 + 4096) bytes each.
: "${CMD_TIMEOUT:=120}"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/stress"
need_cmd python3

CONNS=${MANY_CONNS:-1000}
RING_KB=64
MAP_EACH=$((2 * (RING_KB * 1024 + 4096)))

# File descriptors: each side holds CONNS sockets plus, during the
# handshakes, rendezvous sockets.
want_fds=$((4 * CONNS + 256))
if (($(ulimit -n) < want_fds)); then
  ulimit -n "$want_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
fi
(($(ulimit -n) >= 2 * CONNS + 64)) || skip "ulimit -n is $(ulimit -n), need $((2 * CONNS + 64)) (hard limit $(ulimit -Hn))"
log "ulimit -n $(ulimit -n)"

# mem PID: "rss_kb shmem_kb nmaps mapped_bytes sizes" of a process.
mem() {
  timeout 20 "$PYTHON" - "$1" <<'PY'
import sys
pid = sys.argv[1]
st = {}
try:
    for line in open("/proc/%s/status" % pid):
        k, _, v = line.partition(":")
        st[k] = v.split()[0] if v.split() else "0"
    sizes = []
    for line in open("/proc/%s/maps" % pid):
        if "memfd:rdmashim-ring" in line:
            a, b = line.split()[0].split("-")
            sizes.append(int(b, 16) - int(a, 16))
except OSError:
    print("0 0 0 0 -")
    sys.exit(0)
print(st.get("VmRSS", "0"), st.get("RssShmem", "0"), len(sizes), sum(sizes),
      ",".join(str(s) for s in sorted(set(sizes))) or "-")
PY
}

# child PID: the program a start_bg timeout runs.
child() {
  local c
  c=$(cat "/proc/$1/task/$1/children" 2>/dev/null | awk '{ print $1 }')
  echo "${c:-$1}"
}

# count_done DIR ROLE: upgrade.done lines of one role in DIR's traces.
count_done() {
  cat "$1"/trace.*.jsonl 2>/dev/null | grep '"event":"upgrade.done"' | grep -c "\"role\":\"$2\""
}

# report LABEL BEFORE DURING [AFTER [BUSY]]: per-connection figures and checks.
report() {
  local label=$1 before=$2 during=$3 after=${4:-} busy=${5:-}
  local rss0 sh0 n0 m0 rss1 sh1 n1 m1 sizes1
  read -r rss0 sh0 n0 m0 _ <<<"$before"
  read -r rss1 sh1 n1 m1 sizes1 <<<"$during"
  log "$label: before: VmRSS ${rss0} KiB, RssShmem ${sh0} KiB, ring mappings $n0 ($m0 bytes)"
  log "$label: with $CONNS upgraded: VmRSS ${rss1} KiB, RssShmem ${sh1} KiB, ring mappings $n1 ($m1 bytes; sizes $sizes1)"
  local per_map per_rss per_shm
  per_map=$(awk -v a="$m0" -v b="$m1" -v n="$CONNS" 'BEGIN { printf "%.1f", (b - a) / 1024 / n }')
  per_rss=$(awk -v a="$rss0" -v b="$rss1" -v n="$CONNS" 'BEGIN { printf "%.1f", (b - a) / n }')
  per_shm=$(awk -v a="$sh0" -v b="$sh1" -v n="$CONNS" 'BEGIN { printf "%.1f", (b - a) / n }')
  echo "[$T_NAME] $label: per-connection: $per_map KiB mapped, $per_rss KiB RSS (of which $per_shm KiB ring pages resident)"
  same "$label: one ring mapping per connection" "$CONNS" "$((n1 - n0))"
  same "$label: every mapping is 2 * (RING_KB*1024 + 4096) = $MAP_EACH bytes" "$MAP_EACH" "$sizes1"
  same "$label: mapped bytes = $CONNS * $MAP_EACH" "$((CONNS * MAP_EACH))" "$((m1 - m0))"
  if [[ -n $busy ]]; then
    local rss3 sh3
    read -r rss3 sh3 _ <<<"$busy"
    awk -v a="$rss0" -v b="$rss3" -v c="$sh0" -v d="$sh3" -v n="$CONNS" -v t="$T_NAME" -v l="$label" 'BEGIN {
      printf "[%s] %s: after 256 KiB each way on every connection: per-connection: %.1f KiB RSS (of which %.1f KiB ring pages resident)\n",
        t, l, (b - a) / n, (d - c) / n }'
  fi
  if [[ -n $after ]]; then
    local rss2 sh2 n2 m2
    read -r rss2 sh2 n2 m2 _ <<<"$after"
    log "$label: after all closed: VmRSS ${rss2} KiB, RssShmem ${sh2} KiB, ring mappings $n2 ($m2 bytes)"
    same "$label: every ring unmapped once its connection closed" "$n0 $m0" "$n2 $m2"
  fi
}

# ------------------------------------------------------------------ holders
cat >"$WORK/holder.py" <<'PYEOF'
import os, socket, sys, time
role, port, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
go, busy, release, leave = sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8]
CHUNK, CHUNKS = 16 * 1024, 16   # busy phase: 256 KiB each way per connection
def wait_for(path):
    end = time.time() + 90
    while not os.path.exists(path):
        if time.time() > end:
            raise SystemExit("%s: no %s" % (role, path))
        time.sleep(0.02)
def recv_exact(s, k):
    buf = bytearray()
    while len(buf) < k:
        b = s.recv(k - len(buf))
        if not b:
            raise SystemExit("%s: EOF" % role)
        buf += b
    return bytes(buf)
if role == "server":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", port))
    l.listen(4096)
    print("READY %d pid=%d" % (port, os.getpid()), flush=True)
    conns = [l.accept()[0] for _ in range(n)]
    for r in range(rounds):
        for s in conns:
            if recv_exact(s, 1) != b"x":
                raise SystemExit("server: bad byte")
            s.sendall(b"x")
    print("EXCHANGED", flush=True)
    wait_for(busy)
    for s in conns:
        for k in range(CHUNKS):
            s.sendall(recv_exact(s, CHUNK))
else:
    print("STARTED pid=%d" % os.getpid(), flush=True)
    wait_for(go)
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    for r in range(rounds):
        for s in conns:
            s.sendall(b"x")
        for s in conns:
            if recv_exact(s, 1) != b"x":
                raise SystemExit("client: bad byte")
    print("EXCHANGED", flush=True)
    wait_for(busy)
    for i, s in enumerate(conns):
        for k in range(CHUNKS):
            msg = bytes([(i + k) & 255]) * CHUNK
            s.sendall(msg)
            if recv_exact(s, CHUNK) != msg:
                raise SystemExit("client: echo mismatch")
print("BUSY", flush=True)
wait_for(release)
for s in conns:
    s.close()
print("CLOSED", flush=True)
wait_for(leave)
print("%s: OK" % role, flush=True)
PYEOF

# holders MODE: MODE shim or plain; sets H_BEFORE_S/C, H_DURING_S/C, H_AFTER_S/C.
holders() {
  local mode=$1 dir=$WORK/holders-$1 port spid cpid sp cp i rc src
  mkdir -p "$dir"
  port=$(free_port)
  local vars=()
  [[ $mode == shim ]] && vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info
                               RDMASHIM_RING_KB="$RING_KB" "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  local args=("$CONNS" 6 "$dir/go" "$dir/busy" "$dir/release" "$dir/leave")
  start_bg "h-$mode-server" "$mode" "${vars[@]}" "$PYTHON" "$WORK/holder.py" server "$port" "${args[@]}"
  spid=$BG_PID
  start_bg "h-$mode-client" "$mode" "${vars[@]}" "$PYTHON" "$WORK/holder.py" client "$port" "${args[@]}"
  cpid=$BG_PID
  wait_ready "h-$mode-server" >/dev/null || { not_ok "holders $mode: server ready"; return; }
  for ((i = 0; i < 500; i++)); do
    grep -q STARTED "$WORK/h-$mode-client.out" 2>/dev/null && break
    sleep 0.02
  done
  sp=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' "$WORK/h-$mode-server.out" | head -n 1)
  cp=$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' "$WORK/h-$mode-client.out" | head -n 1)
  H_BEFORE_S=$(mem "$sp") H_BEFORE_C=$(mem "$cp")
  local t0
  t0=$(date +%s%N)
  touch "$dir/go"
  for ((i = 0; i < 3000; i++)); do
    grep -q EXCHANGED "$WORK/h-$mode-client.out" 2>/dev/null && grep -q EXCHANGED "$WORK/h-$mode-server.out" 2>/dev/null && break
    kill -0 "$cpid" 2>/dev/null || break
    sleep 0.02
  done
  log "holders $mode: $CONNS connections opened and exchanged in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  check "holders $mode: both sides exchanged on all $CONNS connections" \
    grep -q EXCHANGED "$WORK/h-$mode-client.out" "$WORK/h-$mode-server.out"
  if [[ $mode == shim ]]; then
    local ds dc
    ds=$(count_done "$dir" server) dc=$(count_done "$dir" client)
    log "holders shim: upgrade.done: server $ds, client $dc"
    check "holders shim: all $CONNS connections upgraded at the server (upgrade.done $ds)" test "$ds" -eq "$CONNS"
    check "holders shim: all $CONNS connections upgraded at the client (upgrade.done $dc)" test "$dc" -eq "$CONNS"
  fi
  H_DURING_S=$(mem "$sp") H_DURING_C=$(mem "$cp")
  t0=$(date +%s%N)
  touch "$dir/busy"
  for ((i = 0; i < 3000; i++)); do
    grep -q BUSY "$WORK/h-$mode-client.out" 2>/dev/null && grep -q BUSY "$WORK/h-$mode-server.out" 2>/dev/null && break
    kill -0 "$cpid" 2>/dev/null || break
    sleep 0.02
  done
  log "holders $mode: 256 KiB echoed each way on every connection in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  check "holders $mode: the busy phase (256 KiB each way per connection) completed" \
    grep -q BUSY "$WORK/h-$mode-client.out" "$WORK/h-$mode-server.out"
  H_BUSY_S=$(mem "$sp") H_BUSY_C=$(mem "$cp")
  touch "$dir/release"
  for ((i = 0; i < 1000; i++)); do
    grep -q CLOSED "$WORK/h-$mode-client.out" 2>/dev/null && grep -q CLOSED "$WORK/h-$mode-server.out" 2>/dev/null && break
    sleep 0.02
  done
  sleep 0.2
  H_AFTER_S=$(mem "$sp") H_AFTER_C=$(mem "$cp")
  touch "$dir/leave"
  rc=0; wait_bg "$cpid" 30 || rc=$?
  src=0; wait_bg "$spid" 30 || src=$?
  check "holders $mode: client exit 0 (got $rc: $(tail -n 1 "$WORK/h-$mode-client.err" 2>/dev/null))" test "$rc" -eq 0
  check "holders $mode: server exit 0 (got $src: $(tail -n 1 "$WORK/h-$mode-server.err" 2>/dev/null))" test "$src" -eq 0
  if [[ $mode == shim ]]; then
    trace_py "$dir" "$CONNS" <<'PY'
conns = int(ARGS[0])
done = events("upgrade.done", reason="upgraded", transport="shm")
ds = {conn_key(r) for r in done if r.get("role") == "server"}
dc = {conn_key(r) for r in done if r.get("role") == "client"}
check(len(ds) == conns and ds == dc, "holders shim: the same %d 4-tuples upgraded at both ends" % conns)
check(all(r.get("ring_bytes") == 64 * 1024 for r in done), "holders shim: ring_bytes 65536 everywhere")
check(not events("upgrade.fail"), "holders shim: no upgrade.fail")
PY
  fi
}

# 2. first: the figures, from processes that only hold connections.
holders plain
P_BEFORE_C=$H_BEFORE_C P_DURING_C=$H_DURING_C P_BEFORE_S=$H_BEFORE_S P_DURING_S=$H_DURING_S
P_BUSY_C=$H_BUSY_C P_BUSY_S=$H_BUSY_S
holders shim
report "holders, client process" "$H_BEFORE_C" "$H_DURING_C" "$H_AFTER_C" "$H_BUSY_C"
report "holders, server process" "$H_BEFORE_S" "$H_DURING_S" "$H_AFTER_S" "$H_BUSY_S"
for side in C S; do
  for phase in DURING BUSY; do
    b=P_BEFORE_$side d=P_${phase}_$side sb=H_BEFORE_$side sd=H_${phase}_$side
    read -r pr0 _ <<<"${!b}"
    read -r pr1 _ <<<"${!d}"
    read -r sr0 _ <<<"${!sb}"
    read -r sr1 _ <<<"${!sd}"
    awk -v side="$([[ $side == C ]] && echo client || echo server)" -v n="$CONNS" -v p0="$pr0" -v p1="$pr1" \
      -v s0="$sr0" -v s1="$sr1" -v t="$T_NAME" -v ph="$([[ $phase == BUSY ]] && echo "after 256 KiB each way" || echo "idle after the handshake")" 'BEGIN {
        printf "[%s] holders, %s, %s: RSS per connection %.1f KiB without the shim, %.1f KiB with it: the shim adds %.1f KiB\n",
          t, side, ph, (p1 - p0) / n, (s1 - s0) / n, ((s1 - s0) - (p1 - p0)) / n }'
  done
done

# 1. The stress tool, 1000 connections, epoll-et at both ends.
stress_many() {
  local dir=$WORK/stress port spid cpid sp cp i ds dc rc src
  mkdir -p "$dir"
  port=$(free_port)
  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info RDMASHIM_RING_KB="$RING_KB"
              "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  start_bg s-server shim "${vars[@]}" "$PROGS/stress" server --port "$port" --bind 127.0.0.1 --mode epoll-et \
    --timeout 60
  spid=$BG_PID
  wait_ready s-server >/dev/null || { not_ok "stress: server ready"; stop_bg "$spid"; return; }
  sp=$(child "$spid")
  local before_s
  before_s=$(mem "$sp")
  start_bg s-client shim "${vars[@]}" "$PROGS/stress" client --host 127.0.0.1 --port "$port" --conns "$CONNS" \
    --mode epoll-et --duration 8 --max-msg 4K --timeout 60 --seed 3
  cpid=$BG_PID
  ds=0 dc=0
  for ((i = 0; i < 600; i++)); do
    ds=$(count_done "$dir" server) dc=$(count_done "$dir" client)
    ((ds >= CONNS && dc >= CONNS)) && break
    kill -0 "$cpid" 2>/dev/null && kill -0 "$spid" 2>/dev/null || break
    sleep 0.02
  done
  local during_s during_c
  # The client's process exists for sure only once it made connections.
  cp=$(child "$cpid")
  during_s=$(mem "$sp") during_c=$(mem "$cp")
  log "stress: upgrade.done while running: server $ds, client $dc"
  check "stress: all $CONNS connections upgraded at the server while open (upgrade.done $ds)" test "$ds" -eq "$CONNS"
  check "stress: all $CONNS connections upgraded at the client while open (upgrade.done $dc)" test "$dc" -eq "$CONNS"
  rc=0; wait_bg "$cpid" 90 || rc=$?
  log "stress client: $(tail -n 1 "$WORK/s-client.out") (status $rc)"
  check "stress: client exit 0 and OK (got $rc: $(tail -n 1 "$WORK/s-client.out"))" \
    test "$rc" -eq 0 -a "$(tail -n 1 "$WORK/s-client.out" | awk '{print $2}')" = OK
  sleep 0.3
  local after_s
  after_s=$(mem "$sp")
  if kill -0 "$spid" 2>/dev/null; then
    ok "stress: server still running after the client finished"
  else
    src=0; wait_bg "$spid" 1 || src=$?
    not_ok "stress: server still running after the client finished (it exited with status $src)"
    head -n 5 "$WORK/s-server.err" "$WORK/s-server.out" | sed 's/^/    /'
  fi
  stop_bg "$spid"
  if ((ds == CONNS && dc == CONNS)); then
    # The memory figures and their checks come from the holders above; the
    # stress processes' snapshot is timing-dependent, so it is only logged.
    log "stress, server process: before [$before_s] during [$during_s] after [$after_s]"
    log "stress, client process: during [$during_c]"
  fi
  trace_py "$dir" "$CONNS" <<'PY'
conns = int(ARGS[0])
done = events("upgrade.done", reason="upgraded", transport="shm")
ds = {conn_key(r) for r in done if r.get("role") == "server"}
dc = {conn_key(r) for r in done if r.get("role") == "client"}
check(len(dc) == conns and ds == dc, "stress: the same %d 4-tuples upgraded at both ends (server %d, client %d)" % (conns, len(ds), len(dc)))
check(not events("upgrade.fail"), "stress: no upgrade.fail (%s)" % sorted({r.get("reason") for r in events("upgrade.fail")}))
PY
}
stress_many

finish
