#!/bin/bash
# t_shm_plain_peers: only one end runs under the shim (RDMASHIM_TRANSPORTS=shm,
# so it does try to upgrade): a shimmed client against a server without the
# shim, and a plain client against a shimmed server, each with an echo server
# and with a server that speaks first (serverfirst).
#   1. short request/response (echo_client, 1 KiB, one connection; blocking,
#      --nonblock, --half-close, and the banner of serverfirst): the client's
#      output equals the baseline without any shim (echo_client checks every
#      byte, so a stray shim byte in either direction fails it), both ends
#      exit 0, the shimmed side traced upgrade.start but never upgrade.done or
#      a switch, and any upgrade.fail it traced says peer_no_shim or timeout;
#      and the shimmed side adds no wait: the client's wall time (date +%s%N,
#      median of 3 runs) with the shim is at most the baseline's + 0.5 s.
#   2. a connection that outlives RDMASHIM_UPGRADE_TIMEOUT_MS (300 ms here; 5 s
#      for a shimmed server, which must conclude by itself, upgrade.plain_client,
#      that its client has no shim once bytes keep coming): a
#      small Python talker exchanges messages for ~1 s, both roles, with and
#      without a banner; the whole transcript each side received must equal
#      the baseline's byte for byte, and the shimmed side's trace must say
#      upgrade.fail reason peer_no_shim (or timeout), never upgrade.done.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/echo_server" "$PROGS/echo_client" "$PROGS/serverfirst"
need_cmd python3

BANNER=$'HELLO rdmashim\r\n'
RUNS=3
CASE=0

ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# trace_plain DIR LABEL PORT SIDE LONG: checks the shimmed side's trace.
trace_plain() {
  trace_py "$1" "$2" "$3" "$4" "$5" <<'PY'
label, port, side, long_lived = ARGS[0], int(ARGS[1]), ARGS[2], ARGS[3] == "1"
L = label + ": "
tr = tracks(side, port)
check(len(tr) >= 1 and all(r["eligible"] is True and r["reason"] == "whitelisted" for r in tr),
      L + "the shimmed %s tracked its connections as eligible (%d)" % (side, len(tr)))
starts = [r for r in events("upgrade.start") if r.get("role") == side]
check(len(starts) == len(tr), L + "upgrade.start for each (%d)" % len(starts))
check(not events("upgrade.done") and not events("tx.switch") and not events("rx.switch"),
      L + "no upgrade.done, no tx.switch/rx.switch")
fails = events("upgrade.fail")
reasons = sorted({r.get("reason") for r in fails})
print("    upgrade.fail reasons: %s (%d of %d connections)" % (reasons, len(fails), len(tr)))
check(set(reasons) <= {"peer_no_shim", "timeout"}, L + "any upgrade.fail says peer_no_shim or timeout")
if side == "client":
    # No process with the shim serves the port: the client sees no beacon
    # and never opens a rendezvous (shim/PROTOCOL.md "Port beacon").
    nb = events("upgrade.no_beacon")
    check(len(nb) == len(tr), L + "no beacon: the client offered nothing, for each (%d)" % len(nb))
if side == "server" and long_lived:
    # Bytes kept coming after a miss RDMASHIM_PLAIN_PEER_MS old: the server
    # took the client for one without the shim long before its timeout.
    pc = events("upgrade.plain_client")
    check(len(pc) == len(tr), L + "the server concluded the client has no shim, for each (%d)" % len(pc))
if long_lived:
    check(len(fails) == len(tr), L + "the connection outlived the timeout: upgrade.fail traced for each")
PY
}

# short_case SIDE KIND [CLIENT-FLAG...]: SIDE is the shimmed one (client or
# server), KIND echo or first.
short_case() {
  local side=$1 kind=$2
  shift 2
  local flags=("$@") label port dir base got i t0 brc rc walls_base=() walls_shim=() srv cli
  CASE=$((CASE + 1))
  label="#$CASE shimmed $side, $kind server, ${flags[*]:-blocking}"
  dir=$WORK/case$CASE
  mkdir -p "$dir"
  port=$(free_port)
  if [[ $kind == echo ]]; then
    srv=("$PROGS/echo_server" --shape threads --bind 127.0.0.1 --port "$port" --max-conns "$RUNS" --timeout 60)
  else
    srv=("$PROGS/serverfirst" --bind 127.0.0.1 --port "$port" --max-conns "$RUNS" --timeout 60)
    flags+=(--expect-banner "$BANNER")
  fi
  cli=("$PROGS/echo_client" --host 127.0.0.1 --port "$port" --bytes 1K --conns 1 --seed "$CASE" --timeout 20
       "${flags[@]}")
  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
              "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")

  # Baseline: nobody under the shim.
  start_bg "case$CASE-base-server" plain "${srv[@]}"
  local pid=$BG_PID
  wait_ready "case$CASE-base-server" >/dev/null || { not_ok "$label: baseline server ready"; stop_bg "$pid"; return; }
  for ((i = 0; i < RUNS; i++)); do
    t0=$(date +%s%N)
    got=$(no_shim "${cli[@]}" 2>&1)
    walls_base+=("$(ms_since "$t0")")
    [[ $i -eq 0 ]] && base=$got
    [[ $got == "$base" ]] || base="inconsistent baseline: $got"
  done
  brc=0; wait_bg "$pid" 30 || brc=$?
  if [[ $base != OK* || $brc -ne 0 ]]; then
    not_ok "$label: baseline without shim: client '$base', server status $brc"
    return
  fi

  # One end under the shim.
  if [[ $side == server ]]; then
    start_bg "case$CASE-server" shim "${vars[@]}" "${srv[@]}"
  else
    start_bg "case$CASE-server" plain "${srv[@]}"
  fi
  pid=$BG_PID
  wait_ready "case$CASE-server" >/dev/null || { not_ok "$label: server ready"; stop_bg "$pid"; return; }
  for ((i = 0; i < RUNS; i++)); do
    t0=$(date +%s%N)
    if [[ $side == client ]]; then
      got=$(with_shim "${vars[@]}" "${cli[@]}" 2>"$dir/client$i.err")
    else
      got=$(no_shim "${cli[@]}" 2>"$dir/client$i.err")
    fi
    walls_shim+=("$(ms_since "$t0")")
    same "$label: run $i: client output = baseline" "$base" "$got"
    check "$label: run $i: nothing on client stderr" test ! -s "$dir/client$i.err"
  done
  rc=0; wait_bg "$pid" 30 || rc=$?
  check "$label: server exit status 0 (got $rc)" test "$rc" -eq 0
  check "$label: nothing on server stderr" test ! -s "$WORK/case$CASE-server.err"
  local mb ms
  mb=$(median "${walls_base[@]}")
  ms=$(median "${walls_shim[@]}")
  log "$label: client wall time baseline ${walls_base[*]} ms (median $mb), one end shimmed ${walls_shim[*]} ms (median $ms)"
  check "$label: no added wait: median ${ms} ms <= baseline ${mb} ms + 500 ms" test "$ms" -le $((mb + 500))
  trace_plain "$dir" "$label" "$port" "$side" 0
}

# The long-lived talker: one connection, a few messages ~250 ms apart.
cat >"$WORK/talk.py" <<'PYEOF'
import hashlib, socket, sys, time
role, port, banner, out = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4]
got = bytearray()
def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise SystemExit("EOF after %d of %d bytes" % (len(buf), n))
        buf += b
    return bytes(buf)
if role == "server":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", port))
    l.listen(1)
    print("READY %d" % port, flush=True)
    s, _ = l.accept()
    if banner:
        s.sendall(banner)
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
        s.sendall(b)
    s.shutdown(socket.SHUT_WR)
    s.close()
else:
    s = socket.create_connection(("127.0.0.1", port))
    if banner:
        got += recv_exact(s, len(banner))
    for i in range(5):
        msg = (b"round %d " % i) * (1 + 300 * i)
        s.sendall(msg)
        echo = recv_exact(s, len(msg))
        if echo != msg:
            raise SystemExit("echo mismatch in round %d" % i)
        got += echo
        time.sleep(0.25)
    s.shutdown(socket.SHUT_WR)
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b   # anything after our shutdown would be a stray byte
    s.close()
open(out, "wb").write(got)
print("%s: %d bytes md5 %s" % (role, len(got), hashlib.md5(got).hexdigest()), flush=True)
PYEOF

# long_case SIDE BANNER
long_case() {
  local side=$1 banner=$2 label port dir pid rc crc b_srv b_cli
  CASE=$((CASE + 1))
  label="#$CASE long-lived, shimmed $side${banner:+, server speaks first}"
  dir=$WORK/case$CASE
  mkdir -p "$dir"
  # A shimmed server no longer waits out its timeout for a plain client
  # (upgrade.plain_client): give it one longer than the talk.
  local timeout_ms=300
  [[ $side == server ]] && timeout_ms=5000
  local vars=(RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug RDMASHIM_UPGRADE_TIMEOUT_MS=$timeout_ms
              "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  # Baseline.
  port=$(free_port)
  start_bg "case$CASE-base-server" plain "$PYTHON" "$WORK/talk.py" server "$port" "$banner" "$dir/base-server.bin"
  pid=$BG_PID
  wait_ready "case$CASE-base-server" >/dev/null || { not_ok "$label: baseline server ready"; stop_bg "$pid"; return; }
  b_cli=$(no_shim "$PYTHON" "$WORK/talk.py" client "$port" "$banner" "$dir/base-client.bin" 2>&1)
  rc=0; wait_bg "$pid" 20 || rc=$?
  b_srv=$(cat "$WORK/case$CASE-base-server.out")
  if [[ $rc -ne 0 || $b_cli != client:* ]]; then
    not_ok "$label: baseline: client '$b_cli', server status $rc"
    return
  fi
  # One end shimmed.
  port=$(free_port)
  if [[ $side == server ]]; then
    start_bg "case$CASE-server" shim RDMASHIM_PORTS="$port" "${vars[@]}" \
      "$PYTHON" "$WORK/talk.py" server "$port" "$banner" "$dir/server.bin"
  else
    start_bg "case$CASE-server" plain "$PYTHON" "$WORK/talk.py" server "$port" "$banner" "$dir/server.bin"
  fi
  pid=$BG_PID
  wait_ready "case$CASE-server" >/dev/null || { not_ok "$label: server ready"; stop_bg "$pid"; return; }
  crc=0
  if [[ $side == client ]]; then
    with_shim RDMASHIM_PORTS="$port" "${vars[@]}" "$PYTHON" "$WORK/talk.py" client "$port" "$banner" \
      "$dir/client.bin" >"$dir/client.out" 2>&1 || crc=$?
  else
    no_shim "$PYTHON" "$WORK/talk.py" client "$port" "$banner" "$dir/client.bin" >"$dir/client.out" 2>&1 || crc=$?
  fi
  rc=0; wait_bg "$pid" 20 || rc=$?
  check "$label: client exit 0 (got $crc: $(head -c 200 "$dir/client.out"))" test "$crc" -eq 0
  check "$label: server exit 0 (got $rc)" test "$rc" -eq 0
  check "$label: what the client received = baseline, byte for byte ($(wc -c <"$dir/client.bin" 2>/dev/null) bytes)" \
    cmp -s "$dir/base-client.bin" "$dir/client.bin"
  check "$label: what the server received = baseline, byte for byte ($(wc -c <"$dir/server.bin" 2>/dev/null) bytes)" \
    cmp -s "$dir/base-server.bin" "$dir/server.bin"
  trace_plain "$dir" "$label" "$port" "$side" 1
}

for side in client server; do
  short_case "$side" echo
  short_case "$side" echo --nonblock
  short_case "$side" echo --half-close
  short_case "$side" first
  short_case "$side" first --nonblock --half-close
done
for side in client server; do
  long_case "$side" ""
  long_case "$side" "HELLO rdmashim"
done

finish
