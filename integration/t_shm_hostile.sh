#!/bin/bash
# t_shm_hostile: a hostile peer of another user against root programs under
# the shim (RDMASHIM_TRANSPORTS=shm). build/progs/hostile_shm (sources in
# integration/hostile/) speaks the documented protocol itself and lies in
# one field per run (ring indices, sizes, seals, fds passed, truncated
# messages, frames, nonces, offsets); see integration/hostile/main.c.
#   (a) fake client against root servers: echo_server (epoll shape, then a
#       few lies against the threads shape) and redis-server (it writes more
#       at once than it read, which an echo never does: the head lies).
#       Each lie gets a fresh server, and a root shim client (echo_client or
#       redis-cli, byte-checked) uses it at the same time. After each run:
#       the server is alive, its fd count is back at its baseline and it
#       holds none of the attacker's memfds, it does not spin (it is found
#       runnable in few of 20 looks), it still serves a new client, and the
#       attacker received no byte it did not write (hostile_shm classifies
#       every echoed byte). Lies made after the switch must have reached a
#       switched server (reached=yes), so no check passes for want of an
#       attack. Two more: a 64 MiB ring (the largest the ACCEPT may name)
#       whose echo the attacker never reads must not make the server hold
#       more than 16 MiB of it, and a switched connection that says nothing
#       must not make the server spin.
#   (b) fake server against a root shim client (echo_client, 4 KiB rings,
#       writes up to 1 MiB): the client must end by itself, not by a signal,
#       within 5 s of the attacker's exit, must keep none of the fds the
#       attacker passed, and must not write outside its own ring
#       (hostile_shm's "oob").
#   (c) rendezvous flood: 4 processes of the other user connect in a loop to
#       every @rdmashim1/ name of /proc/net/unix (those for this test's
#       port) while a root shim client's upgrade is pending (its server has
#       no shim; the attacker holds the port's beacon); the client's rv.refused trace lines stay bounded and its
#       bytes stay exact.
# Run as root (it creates the user rdmashim-hostile if missing).
# HOSTILE_PARTS ("a b c d" by default) picks the parts, HOSTILE_B_MODES the
# lies of (b): to chase one failure without the rest. HOSTILE_REPEATS=0
# (tests/sanitize.sh's ASan run) leaves out of (a) the runs that repeat a
# lie already made against the epoll server with other options: every lie
# still runs, and the 4 KiB ring, a blocking fd, the threads server and
# the redis head lies each at least once.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
HOSTILE=$PROGS/hostile_shm
need_built "$PROGS/echo_server" "$PROGS/echo_client" "$PROGS/spoof_offer" "$HOSTILE"
[[ $(id -u) -eq 0 ]] || skip "needs root: the victims run as root, the attacker as another user"

OTHER=rdmashim-hostile
if ! id -u "$OTHER" >/dev/null 2>&1; then
  timeout 20 useradd -r -M -s /usr/sbin/nologin "$OTHER" >/dev/null 2>&1 ||
    timeout 20 useradd -M "$OTHER" >/dev/null 2>&1 || skip "useradd $OTHER failed"
fi
if command -v runuser >/dev/null 2>&1; then
  AS_OTHER=(runuser -u "$OTHER" --)
elif command -v setpriv >/dev/null 2>&1; then
  AS_OTHER=(setpriv --reuid="$(id -u "$OTHER")" --regid="$(id -g "$OTHER")" --clear-groups --)
else
  skip "neither runuser nor setpriv"
fi
[[ $(timeout 10 "${AS_OTHER[@]}" id -u 2>/dev/null) == "$(id -u "$OTHER")" ]] || skip "can not run as $OTHER"
log "attacker: $OTHER (uid $(id -u "$OTHER")) via ${AS_OTHER[0]}"
TICKS=$(getconf CLK_TCK)
wants() { [[ " ${HOSTILE_PARTS:-a b c d} " == *" $1 "* ]]; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null; }
# runnable PID: of 20 looks over 0.5 s, how many found one of PID's threads
# runnable (R). A process that waits is found sleeping; one that spins is
# found runnable even when a loaded machine gives it little CPU (CPU time
# would then look small), so this does not depend on the load.
SPIN_MAX=6
runnable() {
  local i n=0 f line r
  for ((i = 0; i < 20; i++)); do
    r=0
    for f in "/proc/$1"/task/*/stat; do
      read -r line <"$f" 2>/dev/null || continue
      line=${line##*) }  # the state follows the command name's ")"
      [[ ${line%% *} == R ]] && r=1
    done
    n=$((n + r))
    sleep 0.025
  done
  echo "$n"
}
# The count leaves out eventfds: an epoll set's kick (io/epoll_set.c) is
# made at the first switched registration, which may come with the first
# attack rather than the warm-up, and lives as long as its set. What an
# attack could leak (sockets, memfds, pipes) is counted.
fd_count() {
  local f n=0
  for f in "/proc/$1"/fd/*; do
    [[ -e $f || -L $f ]] || continue
    [[ $(readlink "$f" 2>/dev/null) == "anon_inode:[eventfd]" ]] && continue
    n=$((n + 1))
  done
  echo "$n"
}
# fds of process $1 that are memfds the attacker made (it names them hostile-*)
hostile_fds() {
  local f n=0
  for f in "/proc/$1"/fd/*; do
    [[ $(readlink "$f" 2>/dev/null) == /memfd:hostile* ]] && n=$((n + 1))
  done
  echo "$n"
}
result_of() { grep '^RESULT' "$1" | tail -n 1; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

# ---- (a) root servers ----
# The victims keep no pair channels (RDMASHIM_SHM_PAIRS=0): a pair is only
# ever kept with a process of the same user (never with the attacker), but
# one kept with a root client that has since exited is let go only at the
# server's next handshake, which would blur the fd count below. The pair
# way's own checks are t_shm_pair's.
VPORT='' VPID='' VTPID='' VBASE='' VN=0
start_victim() {
  local shape=$1 i
  VN=$((VN + 1))
  VPORT=$(free_port)
  mkdir -p "$WORK/srv$VN"
  if [[ $shape == redis ]]; then
    start_bg "victim$VN" shim RDMASHIM_PORTS="$VPORT" RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=64 RDMASHIM_SHM_PAIRS=0 \
      RDMASHIM_TRACE=warn "RDMASHIM_TRACE_FILE=$WORK/srv$VN/trace.%p.jsonl" \
      redis-server --save '' --appendonly no --bind 127.0.0.1 --port "$VPORT"
    VTPID=$BG_PID
    wait_listen "$VPORT" >/dev/null || { not_ok "redis victim listening"; return 1; }
  else
    start_bg "victim$VN" shim RDMASHIM_PORTS="$VPORT" RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=64 RDMASHIM_SHM_PAIRS=0 \
      RDMASHIM_TRACE=warn "RDMASHIM_TRACE_FILE=$WORK/srv$VN/trace.%p.jsonl" ${VICTIM_ENV:-} \
      "$PROGS/echo_server" --shape "$shape" --bind 127.0.0.1 --port "$VPORT" --timeout 280
    VTPID=$BG_PID
    wait_ready "victim$VN" >/dev/null || { not_ok "$shape victim ready"; return 1; }
  fi
  for ((i = 0; i < 50; i++)); do
    VPID=$(pgrep -P "$VTPID" | head -n 1)
    [[ -n $VPID ]] && break
    sleep 0.02
  done
  # Warm up (the shim opens its trace file and netlink socket lazily), then
  # the baseline.
  legit "$shape warm-up" 128K || return 1
  # The baseline once the count holds still: a loaded host may leave the
  # warm-up's connection, or a lazily made fd of the shim's, in flight for
  # longer than one look.
  local n prev=-1 same_looks=0
  for ((i = 0; i < 30 && same_looks < 3; i++)); do
    sleep 0.1
    n=$(fd_count "$VPID")
    if [[ $n == "$prev" ]]; then same_looks=$((same_looks + 1)); else same_looks=0; fi
    prev=$n
  done
  VBASE=$prev
  log "$shape victim pid $VPID port $VPORT: $VBASE fds at rest"
}

# legit LABEL BYTES: a root shim client, byte-checked, must succeed.
legit() {
  local out
  if [[ $SHAPE == redis ]]; then
    out=$(with_shim RDMASHIM_PORTS="$VPORT" RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=64 \
      bash "$WORK/legit_redis.sh" "$VPORT" 1 2>&1 | tail -n 1)
  else
    out=$(with_shim RDMASHIM_PORTS="$VPORT" RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=64 \
    "$PROGS/echo_client" --port "$VPORT" --bytes "$2" --conns 2 --timeout 10 2>&1 | tail -n 1)
  fi
  if [[ $out == OK* ]]; then ok "$1: a legitimate client is served ($out)"; return 0; fi
  not_ok "$1: a legitimate client is served ($out)"
  return 1
}

# after_attack LABEL: the server survived, leaks nothing, does not spin.
after_attack() {
  local label=$1 i n c0 c1
  if ! kill -0 "$VPID" 2>/dev/null || [[ $(awk '{ print $3 }' "/proc/$VPID/stat" 2>/dev/null) == Z ]]; then
    not_ok "$label: the server is alive"
    tail -n 3 "$WORK/victim$VN.err" | sed 's/^/    | /'
    wait "$VTPID" 2>/dev/null
    log "server exit status $?"
    return
  fi
  ok "$label: the server is alive"
  for ((i = 0; i < 50; i++)); do
    n=$(fd_count "$VPID")
    ((n <= VBASE)) && break
    sleep 0.1
  done
  check "$label: the server's fds are back at $VBASE after the attacker left (now $n)" test "$n" -le "$VBASE"
  ((n <= VBASE)) || log "its fds: $(ls -l "/proc/$VPID/fd" 2>/dev/null | awk 'NR > 1 { printf "%s->%s ", $9, $11 }')"
  n=$(hostile_fds "$VPID")
  check "$label: the server holds none of the attacker's memfds ($n)" test "$n" -eq 0
  c0=$(cpu_ticks "$VPID")
  n=$(runnable "$VPID")
  c1=$(cpu_ticks "$VPID")
  check "$label: the server does not spin once the attacker is gone (runnable $n of 20 looks; $((c1 - c0)) ticks)" \
    test "$n" -le "$SPIN_MAX"
  legit "$label: after the attack" 128K
}

# attack_server MODE [HOSTILE OPTIONS...]
attack_server() {
  local mode=$1 label out res arc=0 lpid reached lname
  shift
  label="(a) $SHAPE server, $mode${*:+ $*}"
  out=$WORK/a-$SHAPE-$mode${1:+-opts}.out
  # A fresh server per lie: one broken by a lie does not fail the next.
  start_victim "$SHAPE" || return
  # A legitimate connection is open while the attacker maps its ring.
  if [[ $SHAPE == redis ]]; then
    start_bg "legit-$SHAPE-$mode" shim RDMASHIM_PORTS="$VPORT" RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=64 \
      bash "$WORK/legit_redis.sh" "$VPORT" 5
  else
    start_bg "legit-$SHAPE-$mode" shim RDMASHIM_PORTS="$VPORT" RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=64 \
      "$PROGS/echo_client" --port "$VPORT" --bytes 1M --conns 2 --max-write 4K --timeout 10
  fi
  lpid=$BG_PID
  lname=legit-$SHAPE-$mode
  sleep 0.3
  if [[ $mode == idle || $mode == line_hup ]]; then
    # The attacker's connection switched and says nothing: the server must
    # sleep meanwhile (the legitimate client is done by then).
    local apid c0 c1 i n
    wait_bg "$lpid" 20 >/dev/null
    start_bg "a-$SHAPE-$mode" plain "${AS_OTHER[@]}" "$HOSTILE" --role client --connect "127.0.0.1:$VPORT" \
      --mode "$mode" --seconds 4 "$@"
    apid=$BG_PID
    for ((i = 0; i < 100; i++)); do
      grep -q 'both directions switched' "$WORK/a-$SHAPE-$mode.out" 2>/dev/null && break
      sleep 0.05
    done
    sleep 0.5
    c0=$(cpu_ticks "$VPID")
    n=$(runnable "$VPID")
    c1=$(cpu_ticks "$VPID")
    check "$label: the server sleeps while the attacker's switched connection idles (runnable $n of 20 looks; $((c1 - c0)) ticks)" \
      test "$n" -le "$SPIN_MAX"
    wait_bg "$apid" 20 || arc=$?
    out=$WORK/a-$SHAPE-$mode.out
    start_bg "legit-$SHAPE-$mode-2" shim RDMASHIM_PORTS="$VPORT" RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=64 \
      "$PROGS/echo_client" --port "$VPORT" --bytes 256K --conns 2 --timeout 10
    lpid=$BG_PID
    lname=legit-$SHAPE-$mode-2
  else
    timeout -k 5 60 "${AS_OTHER[@]}" "$HOSTILE" --role client --connect "127.0.0.1:$VPORT" --mode "$mode" \
      --seconds 1 "$@" >"$out" 2>&1 || arc=$?
  fi
  res=$(result_of "$out")
  echo "    $res"
  reached=$(field reached "$res")
  case $mode in
    trunc | ctrunc | ring_size | ring_hdr | noseal | sealwrite | notmemfd | tiny | ring_huge) ;;
    *) check "$label: the lie reached a switched server" test "$reached" = yes ;;
  esac
  check "$label: the attacker got back only bytes it wrote (exit $arc)" test "$arc" -eq 0
  if [[ $SHAPE == redis && $mode == honest ]]; then
    check "$label: redis answered the SET (+OK)" test "$(field echoed "$res")" -ge 5
  elif [[ $mode == ring_huge ]]; then
    # TCP would hold a few MiB for a peer that never reads; a ring the peer
    # sized holds what the peer likes, in the victim's memory.
    check "$label: the server holds at most 16 MiB of echo the attacker never read ($(field parked "$res"))" \
      test "$(field parked "$res")" -le $((16 << 20))
  elif [[ $mode == line_foreign ]]; then
    # The line is a socket connected to another process's service: taken,
    # the victim's bells would go there with its credentials.
    check "$label: the echo is exact" test "$(field good "$res")" = "$(field sent "$res")"
    check "$label: the victim sent nothing to the foreign service ($(grep -o 'LINE_FOREIGN rang=[-0-9]*' "$out"))" \
      grep -q 'LINE_FOREIGN rang=0$' "$out"
  elif [[ $mode == honest || $mode == extra_fds || $mode == hdr_after ]]; then
    check "$label: the echo is exact" test "$(field good "$res")" = "$(field sent "$res")"
  fi
  if wait_bg "$lpid" 20; then
    ok "$label: the concurrent legitimate client was served ($(tail -n 1 "$WORK/$lname.out"))"
  else
    not_ok "$label: the concurrent legitimate client was served ($(tail -n 1 "$WORK/$lname.out"))"
  fi
  after_attack "$label"
  stop_bg "$VTPID"
}

if wants a; then
SHAPE=epoll
for m in honest tail_far tail_over head_ahead head_behind flip hdr_after ring_size ring_hdr tiny noseal sealwrite \
         notmemfd trunc ctrunc extra_fds line_foreign resume garbage badnonce offset_huge; do
  attack_server "$m"
done
attack_server ring_huge --payload $((24 << 20)) --seconds 3
attack_server idle
attack_server line_hup
# The attacker picks the ring size: a 4 KiB ring under the server's 64 KiB
# reads (the over-read reaches the neighbouring mapping: the legitimate
# connection's ring).
# repeats: 0 under HOSTILE_REPEATS=0 (the header).
repeats() { [[ ${HOSTILE_REPEATS:-1} != 0 ]]; }
for m in tail_far tail_over flip; do
  repeats || [[ $m == tail_far ]] || continue
  attack_server "$m" --ring 4096
done
# Files whose release blocks (reaper.h): each passed fd is a TCP socket
# with SO_LINGER {1, 3600}, a full queue and a receiver the attacker keeps
# silent for BLOCK_S after it left. Released on the server's own thread,
# it would stall the server that long: the concurrent and the later
# legitimate clients would time out. The bell line's message is sent with
# SO_PASSRIGHTS off at the server, as on kernels before 6.16.
BLOCK_S=40
for m in notmemfd trunc ctrunc extra_fds; do
  repeats || [[ $m == notmemfd ]] || continue
  attack_server "$m" --blocking "$BLOCK_S"
done
VICTIM_ENV=RDMASHIM_TEST_NO_PASSRIGHTS=1 attack_server line_hup --blocking "$BLOCK_S"
check "(a) line_hup --blocking: the message with a blocking fd reached the line" \
  grep -q 'line fd sent' "$WORK/a-$SHAPE-line_hup.out"
# With SO_PASSRIGHTS off (Linux 6.16 and later), the kernel refuses it.
if [[ $(uname -r | awk -F. '{ print ($1 > 6 || ($1 == 6 && $2 >= 16)) }') == 1 ]]; then
  attack_server line_hup --blocking "$BLOCK_S"
  check "(a) line_hup --blocking: the kernel refused the fd at the send (SO_PASSRIGHTS)" \
    grep -q 'line fd refused' "$WORK/a-$SHAPE-line_hup.out"
fi
SHAPE=threads
attack_server tail_far --ring 4096
attack_server line_hup
if repeats; then
  attack_server ctrunc
  attack_server resume
fi
# A server that writes more at once than it read (an echo never does): redis
# answers GET with the whole value, into a ring whose head the attacker moved.
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  head -c 49152 /dev/urandom | base64 -w 0 >"$WORK/legit.value"
  cat >"$WORK/legit_redis.sh" <<'SHEOF'
# legit_redis.sh PORT ROUNDS: SET and GET a 64 KiB value, byte-checked.
v=$(cat "$(dirname "$0")/legit.value")
for ((i = 0; i < $2; i++)); do
  out=$(redis-cli -h 127.0.0.1 -p "$1" SET "legit$i" "$v" 2>&1)
  [[ $out == OK ]] || { echo "FAIL SET $i: $out"; exit 1; }
  [[ $(redis-cli -h 127.0.0.1 -p "$1" --raw GET "legit$i" 2>&1) == "$v" ]] || { echo "FAIL GET $i"; exit 1; }
done
echo "OK $2 SET/GET of 64 KiB"
SHEOF
  SHAPE=redis
  for m in honest head_ahead head_behind; do
    repeats || [[ $m != honest ]] || continue
    attack_server "$m" --resp 1 --payload 262144
  done
else
  log "redis-server or redis-cli missing: the big-writer victim is left out"
fi
log "(a) took ${SECONDS}s"
fi
T0=$SECONDS

# ---- (b) a root client ----
attack_client() {
  local mode=$1 label port apid vpid rc=0 res i c0 c1
  shift
  label="(b) client, $mode${*:+ $*}"
  port=$(free_port)
  start_bg "b-$mode-attacker" plain "${AS_OTHER[@]}" "$HOSTILE" --role server --listen "127.0.0.1:$port" \
    --mode "$mode" --seconds 1 "$@"
  apid=$BG_PID
  wait_ready "b-$mode-attacker" >/dev/null || { not_ok "$label: attacker ready"; stop_bg "$apid"; return; }
  start_bg "b-$mode-victim" shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=4 \
    "$PROGS/echo_client" --port "$port" --bytes 2M --max-write 1M --timeout 15
  vpid=$BG_PID
  # While the attacker is there: does the client keep an fd it passed?
  local kept=0 n p
  for ((i = 0; i < 300; i++)); do
    kill -0 "$apid" 2>/dev/null || break
    p=$(pgrep -P "$vpid" | head -n 1)
    n=$(hostile_fds "${p:-0}")
    ((n > kept)) && kept=$n
    sleep 0.1
  done
  wait_bg "$apid" 30 || true
  res=$(result_of "$WORK/b-$mode-attacker.out")
  echo "    $res"
  # The attacker is gone: the client must finish by itself, promptly.
  for ((i = 0; i < 50; i++)); do
    kill -0 "$vpid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$vpid" 2>/dev/null; then
    local p
    p=$(pgrep -P "$vpid" | head -n 1)
    c0=$(cpu_ticks "$p")
    sleep 1
    c1=$(cpu_ticks "$p")
    not_ok "$label: the client ends within 5 s of the attacker's exit (still running, $((c1 - c0)) of $TICKS ticks in 1 s)"
    stop_bg "$vpid"
    rc=124
  else
    ok "$label: the client ends within 5 s of the attacker's exit"
    wait_bg "$vpid" 5 || rc=$?
  fi
  echo "    client: $(tail -n 1 "$WORK/b-$mode-victim.out") (status $rc)"
  check "$label: the client was not killed by a signal (status $rc)" test "$rc" -lt 124
  check "$label: the lie reached a switched client" test "$(field reached "$res")" = yes
  check "$label: the client kept none of the fds the attacker passed ($kept)" test "$kept" -eq 0
  check "$label: the client wrote nothing outside its own ring (oob=$(field oob "$res"))" \
    test "$(field oob "$res")" = 0
  if [[ $mode == honest ]]; then
    check "$label: the echo through the honest fake server is exact" \
      grep -q '^OK ' "$WORK/b-$mode-victim.out"
  fi
}

B_MODES="honest tail_far tail_over head_ahead head_behind flip hdr_after resume garbage badnonce offset_huge trunc ctrunc
         extra_fds offer_fds"
if wants b; then
  for m in ${HOSTILE_B_MODES:-$B_MODES}; do
    attack_client "$m"
  done
  # Files whose release blocks, as in (a): the client must still end
  # within 5 s of the attacker's exit, though their receiver stays silent.
  for m in ${HOSTILE_B_BLOCKING:-trunc ctrunc extra_fds offer_fds}; do
    attack_client "$m" --blocking 40
  done
fi

log "(b) took $((SECONDS - T0))s"
T0=$SECONDS

# ---- (c) rendezvous flood ----
cat >"$WORK/pending.py" <<'PYEOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("LOCAL %s:%d" % s.getsockname(), flush=True)
got = 0
end = time.time() + float(sys.argv[2])
while time.time() < end:  # keeps making I/O calls while its upgrade is pending
    s.sendall(b"x" * 100)
    n = 0
    while n < 100:
        b = s.recv(100 - n)
        if not b:
            raise SystemExit("EOF")
        n += len(b)
    got += n
    time.sleep(0.005)
print("pending: %d bytes" % got, flush=True)
PYEOF
# flood [HOSTILE OPTIONS...]
flood() {
local label=${*:+ ($*)} port cspid cbpid cvpid rc refused connects
rm -rf "$WORK/flood"
port=$(free_port)
start_bg c-server plain "$PROGS/echo_server" --shape threads --bind 127.0.0.1 --port "$port" --timeout 60
cspid=$BG_PID
if wait_ready c-server >/dev/null; then
  mkdir -p "$WORK/flood"
  # The attacker holds the port's beacon (anybody may: shim/PROTOCOL.md
  # "Port beacon"); without it the victim, whose server has no shim, would
  # open no rendezvous to flood.
  start_bg c-beacon plain "${AS_OTHER[@]}" "$PROGS/spoof_offer" --beacon "$port"
  cbpid=$BG_PID
  wait_line c-beacon '^BEACON' || log "the attacker's beacon never came up"
  # The plain echo server answers over TCP: without RDMASHIM_PLAIN_PEER_MS=0
  # the victim would stop waiting after 50 ms, before the flood began.
  start_bg c-victim shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_TIMEOUT_MS=5000 RDMASHIM_PLAIN_PEER_MS=0 \
    RDMASHIM_TRACE=info "RDMASHIM_TRACE_FILE=$WORK/flood/trace.%p.jsonl" \
    "$PYTHON" "$WORK/pending.py" "$port" 6
  cvpid=$BG_PID
  sleep 0.2
  timeout -k 5 30 "${AS_OTHER[@]}" "$HOSTILE" --role flood --seconds 4 --procs 4 --connect "127.0.0.1:$port" \
    "$@" >"$WORK/flood.out" 2>&1
  echo "    $(result_of "$WORK/flood.out")"
  rc=0; wait_bg "$cvpid" 20 || rc=$?
  stop_bg "$cbpid"
  check "(c) flood$label: the pending client carried on ($(tail -n 1 "$WORK/c-victim.out"), status $rc)" test "$rc" -eq 0
  refused=$(cat "$WORK"/flood/trace.*.jsonl 2>/dev/null | grep -c '"rv.refused"')
  connects=$(field connects "$(result_of "$WORK/flood.out")")
  check "(c) flood$label: the attacker reached the rendezvous (${connects:-0} connects)" test "${connects:-0}" -gt 0
  check "(c) flood$label: rv.refused trace lines bounded ($refused for ${connects:-0} connects; at most 64)" \
    test "$refused" -le 64
else
  not_ok "(c) plain server ready$label"
fi
stop_bg "$cspid"
}
if wants c; then
flood
# Each stranger leaves a message with a file whose release blocks queued on
# the victim's rendezvous: refusing it must not stall the victim.
flood --blocking 40
log "(c) took $((SECONDS - T0))s"
fi

# ---- (d) close stall ----
# 50 connections of the attacker to a root redis-server: each takes every
# arm of the server's (promising a bell), rings none, ends its stream and
# keeps TCP open and silent. Each close of the server waits for the bells
# it was promised; one after another, 2 s each, that was 100 s of a server
# that answers no one meanwhile. The waits share one budget per process
# (close_budget.h): a plain client's PINGs, meanwhile, may wait no longer
# than about one such wait, however many attackers there are.
cat >"$WORK/pinger.py" <<'PYEOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
worst = 0.0
end = time.time() + float(sys.argv[2])
while time.time() < end:
    t = time.time()
    s.sendall(b"PING\r\n")
    if s.recv(16) != b"+PONG\r\n":
        raise SystemExit("bad answer")
    worst = max(worst, time.time() - t)
    time.sleep(0.02)
print("WORST_MS %d" % (worst * 1000), flush=True)
PYEOF
if wants d && command -v redis-server >/dev/null; then
  T0=$SECONDS
  port=$(free_port)
  mkdir -p "$WORK/stall"
  start_bg d-redis shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_SHM_PAIRS=0 RDMASHIM_TRACE=warn \
    "RDMASHIM_TRACE_FILE=$WORK/stall/trace.%p.jsonl" redis-server --save '' --appendonly no --bind 127.0.0.1 --port "$port"
  drpid=$BG_PID
  if wait_listen "$port" >/dev/null; then
    start_bg d-pinger plain "$PYTHON" "$WORK/pinger.py" "$port" 9
    dppid=$BG_PID
    apids=()
    for ((i = 0; i < 50; i++)); do
      timeout -k 5 40 "${AS_OTHER[@]}" "$HOSTILE" --role client --connect "127.0.0.1:$port" --mode silent_close \
        --resp 1 --payload 4096 --seconds 7 >"$WORK/stall/a$i.out" 2>&1 &
      apids+=($!)
    done
    for p in "${apids[@]}"; do wait "$p" 2>/dev/null; done
    rc=0; wait_bg "$dppid" 40 || rc=$?
    worst=$(sed -n 's/^WORST_MS //p' "$WORK/d-pinger.out")
    ended=$(grep -l 'stream ended, arms taken' "$WORK"/stall/a*.out 2>/dev/null | wc -l)
    late=$(cat "$WORK"/stall/trace.*.jsonl 2>/dev/null | grep -c '"close.frames_late"\|"close.budget_spent"')
    check "(d) close stall: the attackers ended their streams with arms taken ($ended of 50)" test "$ended" -ge 25
    check "(d) close stall: the server's closes met the silent peers ($late waits cut short)" test "$late" -ge 25
    check "(d) close stall: a plain client's PINGs went on (status $rc)" test "$rc" -eq 0
    check "(d) close stall: its worst PING waited ${worst:-?} ms, within one close wait and a margin (4000)" \
      test "${worst:-999999}" -lt 4000
  else
    not_ok "(d) redis-server listening"
  fi
  stop_bg "$drpid"
  log "(d) took $((SECONDS - T0))s"
fi

finish
