#!/bin/bash
# t_faults: test-only fault injection (RDMASHIM_TEST_FAULTS, shim/core/faults.h)
# under checksummed streams. For each kind, the stress tool (integration/
# stress/) runs connections between a server and a client both under the
# shim (RDMASHIM_TRANSPORTS=shm), with the fault in one of them at an N or
# two; each run checks:
#   - every byte right: both sides exit 0, OK verdicts, and the client's
#     byte counts and CRC32C equal the server's for every connection;
#   - the faulted process traced fault.injected with that kind (and no
#     other), the other none;
#   - the outcome the kind must have, for the connection it struck (by
#     4-tuple):
#       ring_alloc   the faulted end's upgrade.fail ring_alloc_failed, and
#                    no upgrade.done for it at either end (it stays on TCP)
#       verify_fail  rv.refused (verify_failed) at the faulted end, no
#                    upgrade.done for it at either end
#       rv_silent    upgrade.fail timeout at the end that waited for the
#                    silent one (RDMASHIM_UPGRADE_TIMEOUT_MS=500, streams
#                    of 3 s), none done
#       peer_stall   with a blocking writer: failover.spill (ring_full) at
#                    the writer, which stays within its one ring and goes
#                    on over TCP; with event loops: nothing but the bytes
#       bell_loss    nothing but the bytes: the sleeper finds them by its
#                    slice (bells on the line, and on TCP); and a sockperf
#                    ping-pong, where every message needs its bell, ends
#                    with its report
#       switch_late  the peer's rx.switch for it, after its frame came
#                    500 ms late, and upgrade.done at both ends
#   - and nowhere a conn.abort or an rx.switch_refused, nothing on stderr.
# Then the random schedules that once failed (integration/faults_seeds.txt,
# written by `make soak-faults`: integration/soak_faults.sh) run again.
# No check is on time: it must pass on a loaded machine (two CPU hogs).
# The timeouts only bound the runs.
: "${CMD_TIMEOUT:=90}"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STRESS=$PROGS/stress
need_built "$STRESS"
need_cmd python3
TMO=$((CMD_TIMEOUT - 20))

. "$(dirname "${BASH_SOURCE[0]}")/faults_lib.sh"

B=(--bytes 64M)
# Streams that outlive the upgrade timeout, for the silent rendezvous.
D=(--duration 3)

# ring_alloc: the client's ring (named way), the server's attach of it.
fault_run ring-c1 client ring_alloc@1 fail:ring_alloc_failed blocking 2 "${B[@]}"
fault_run ring-s2 server ring_alloc@2 fail:ring_alloc_failed epoll-et 4 "${B[@]}"

# The pair way: after a warm-up connection, the next ones are offered over
# the two processes' pair (a HINT); the server's third ring is its second
# connection's, taken from the HINT. The warm-up upgrades at its first
# call (RDMASHIM_UPGRADE_AFTER_ROUNDS=0: its 64 KiB may carry no round
# trip), and the client waits for the COMMIT for the whole upgrade
# timeout (RDMASHIM_PLAIN_PEER_MS=0).
PAIR_VARS=(RDMASHIM_UPGRADE_AFTER_ROUNDS=0 RDMASHIM_PLAIN_PEER_MS=0)
fault_run ring-pair server ring_alloc@2 fail:ring_alloc_failed blocking 2 "${B[@]}" --warm-up 1 -- \
  "${PAIR_VARS[@]}"

# verify_fail: each of the four checks of the named way (client: S's user,
# then that S holds its socket; server: C's user, C holds its socket).
# One connection for N=2, so that it is the second check of the same one.
# Pairs off, so that a refused HINT does not go on by the named way.
fault_run verify-c1 client verify_fail@1 refused blocking 2 "${B[@]}" -- RDMASHIM_SHM_PAIRS=0
fault_run verify-c2 client verify_fail@2 refused epoll-et 1 "${B[@]}" -- RDMASHIM_SHM_PAIRS=0
fault_run verify-s1 server verify_fail@1 refused mixed 2 "${B[@]}" -- RDMASHIM_SHM_PAIRS=0
fault_run verify-s2 server verify_fail@2 refused blocking 1 "${B[@]}" -- RDMASHIM_SHM_PAIRS=0

# The client's check of the socket a pair COMMIT carries fails
# (client_commit, the third check after a warm-up): the server switched
# already, so the connection is reset, with no wrong byte. Before, the
# client gave up as if a stranger had committed, and the server's SWITCH
# frame reached the program as data (FAIL offset=0 got=0x57, 'W'). When
# the third check falls elsewhere (timing), the named way's refusal holds.
fault_run verify-commit client verify_fail@3 any blocking 1 "${B[@]}" --warm-up 1 -- "${PAIR_VARS[@]}"

# rv_silent: a silent server (the client waits for its OFFER) and a silent
# client (the server waits for its ACCEPT; the client itself times out).
# Pairs off: the kind is of the named rendezvous, and the second connection
# must take one too.
fault_run silent-s1 server rv_silent@1 "waiter:timeout|peer_closed" blocking 2 "${D[@]}" -- \
  RDMASHIM_UPGRADE_TIMEOUT_MS=500 RDMASHIM_SHM_PAIRS=0
fault_run silent-c2 client rv_silent@2 "waiter:timeout|peer_closed" epoll-et 2 "${D[@]}" -- \
  RDMASHIM_UPGRADE_TIMEOUT_MS=500 RDMASHIM_SHM_PAIRS=0

# peer_stall: the server's first recv on a channel sleeps 2 s; its blocking
# writer spills after 1 s. Then a later one under event loops.
fault_run stall-s1 server peer_stall@1 spill blocking 2 "${B[@]}"
fault_run stall-c40 client peer_stall@40 none epoll-et 2 "${B[@]}"

# bell_loss: no busy polling, so that sleepers ask for bells; on the bell
# line, then on TCP.
fault_run bell-line client bell_loss@1,bell_loss@4 none blocking 2 "${B[@]}" -- RDMASHIM_SPIN_US=0
fault_run bell-tcp server bell_loss@2,bell_loss@9 none epoll-et 4 "${B[@]}" -- RDMASHIM_SPIN_US=0 \
  RDMASHIM_SHM_BELL_LINE=0

# bell_loss where every message needs its bell: a sockperf ping-pong, no
# busy polling, no unpaid hand-back. A lost bell leaves its receiver asleep
# until its slice ends (200 ms), never for good: the run must end with its
# report. The slices that expired are counted, not checked (a receiver that
# rechecked the ring after its arm found the bytes without sleeping).
if command -v sockperf >/dev/null; then
  dir=$WORK/bell-pingpong
  mkdir -p "$dir"
  port=$(free_port)
  pp_vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
           "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" RDMASHIM_SPIN_US=0 RDMASHIM_UNPAID_PERCENT=0)
  start_bg bell-pingpong-server shim "${pp_vars[@]}" RDMASHIM_TEST_FAULTS=bell_loss@20,bell_loss@21,bell_loss@200 \
    sockperf sr --tcp -i 127.0.0.1 -p "$port"
  spid=$BG_PID
  if wait_listen "$port"; then
    rc=0
    with_shim "${pp_vars[@]}" sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t 3 \
      >"$WORK/bell-pingpong-client.out" 2>&1 || rc=$?
    same "bell-pingpong: sockperf ping-pong exit status" 0 "$rc"
    check_sockperf_report bell-pingpong ping-pong "$WORK/bell-pingpong-client.out"
  else
    not_ok "bell-pingpong: sockperf server listening"
  fi
  stop_bg "$spid"
  trace_py "$dir" <<'PY'
inj = events("fault.injected", kind="bell_loss")
check(inj, "bell-pingpong: fault.injected bell_loss in the server (%d)" % len(inj))
check(len(events("fault.injected")) == len(inj), "bell-pingpong: no other fault")
check(not events("conn.abort"), "bell-pingpong: no conn.abort")
print("    slices that expired: %d" % len(events("wait.slice_expired")))
PY
else
  log "no sockperf: bell-pingpong not run"
fi

# switch_late: the server's first SWITCH frame, the client's second.
fault_run late-s1 server switch_late@1 switch blocking 2 "${B[@]}"
fault_run late-c2 client switch_late@2 switch mixed 4 "${B[@]}"

# Seeds of random schedules that once failed (make soak-faults), again.
while read -r seed note; do
  [[ -z $seed || $seed == \#* ]] && continue
  if [[ $note == "# known:"* && ${FAULTS_KNOWN:-0} != 1 ]]; then
    log "skipped seed $seed, a known bug ($note); FAULTS_KNOWN=1 runs it"
    continue
  fi
  fault_seed_run "seed-$seed" "$seed"
done <"$ROOT/integration/faults_seeds.txt"

finish
