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
#                    slice (bells on the line, and on TCP)
#       switch_late  the peer's rx.switch for it, after its frame came
#                    500 ms late, and upgrade.done at both ends
#   - and nowhere a conn.abort or an rx.switch_refused, nothing on stderr.
# No check is on time: it must pass on a loaded machine (two CPU hogs).
# The timeouts only bound the runs.
: "${CMD_TIMEOUT:=90}"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STRESS=$PROGS/stress
need_built "$STRESS"
need_cmd python3
TMO=$((CMD_TIMEOUT - 20))

# fault_run LABEL SIDE FAULTS EXPECT MODE CONNS STREAM-ARGS... [-- VAR=V...]
#   SIDE: server or client, the process given RDMASHIM_TEST_FAULTS=FAULTS;
#   EXPECT: the outcome check (see check_outcome below).
fault_run() {
  local label=$1 side=$2 faults=$3 expect=$4 mode=$5 conns=$6 port dir spid rc src line cli srv
  shift 6
  local stream=() extra=()
  while (($#)) && [[ $1 != -- ]]; do stream+=("$1"); shift; done
  (($#)) && shift
  extra=("$@")
  # A warm-up connection (upgraded, and its rendezvous kept as the two
  # processes' pair) comes first: the server counts it too.
  local sconns=$conns
  [[ " ${stream[*]} " == *" --warm-up "* ]] && sconns=$((conns + 1))
  dir=$WORK/$label
  mkdir -p "$dir"
  port=$(free_port)
  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info
              "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" "${extra[@]}")
  local svars=("${vars[@]}") cvars=("${vars[@]}")
  if [[ $side == server ]]; then svars+=(RDMASHIM_TEST_FAULTS="$faults"); else cvars+=(RDMASHIM_TEST_FAULTS="$faults"); fi
  start_bg "$label-server" shim "${svars[@]}" "$STRESS" server --port "$port" --bind 127.0.0.1 \
    --exit-after "$sconns" --mode "$mode" --timeout "$TMO"
  spid=$BG_PID
  if ! wait_ready "$label-server" >/dev/null; then
    not_ok "$label: server ready"
    stop_bg "$spid"
    return
  fi
  rc=0
  with_shim "${cvars[@]}" "$STRESS" client --host 127.0.0.1 --port "$port" --conns "$conns" \
    --mode "$mode" --seed 7 --timeout "$TMO" -v "${stream[@]}" \
    >"$WORK/$label-client.out" 2>"$WORK/$label-client.err" || rc=$?
  line=$(tail -n 1 "$WORK/$label-client.out")
  log "$label ($side $faults): $line (status $rc)"
  check "$label: client exit 0 and OK line" test "$rc" -eq 0 -a "$(awk '{print $2}' <<<"$line")" = OK
  src=0
  wait_bg "$spid" 60 || src=$?
  same "$label: server exit status" 0 "$src"
  same "$label: server verdict" "stress-server: OK conns=$sconns" \
    "$(grep -o '^stress-server: [A-Z]* conns=[0-9]*' "$WORK/$label-server.out")"
  cli=$(awk '$2 ~ /^conn=/ && $3 == "OK" { print $2, $5, $6, $7, $8 }' "$WORK/$label-client.out" | sort)
  srv=$(awk '$2 ~ /^conn=/ && $3 == "OK" {
               sub("recv=", "sent=", $5); sub("sent=", "recv=", $7); print $2, $5, $6, $7, $8 }' \
          "$WORK/$label-server.out" | sort)
  check "$label: $sconns connections reported OK by each side" \
    test "$(grep -c . <<<"$cli")" -eq "$sconns" -a "$(grep -c . <<<"$srv")" -eq "$sconns"
  same "$label: byte counts and CRC32C agree, both directions, every connection" "$cli" "$srv"
  check "$label: nothing on client stderr" test ! -s "$WORK/$label-client.err"
  check "$label: nothing on server stderr" test ! -s "$WORK/$label-server.err"
  check_outcome "$dir" "$label" "${faults%%@*}" "$side" "$expect"
}

# check_outcome DIR LABEL KIND SIDE EXPECT: the trace checks above.
check_outcome() {
  trace_py "$@" <<'PY'
label, kind, side, expect = ARGS
L = label + ": "
other = "client" if side == "server" else "server"
role_of = {}
for r in events("conn.track"):
    role_of[r["pid"]] = r.get("role")
def ends(r):
    """The connection's (client end, server end), from a line of a process of role_of."""
    if role_of.get(r["pid"]) == "client":
        return (r.get("local"), r.get("peer"))
    return (r.get("peer"), r.get("local"))
def at(event, role, key, **kw):
    return [r for r in events(event, **kw) if role_of.get(r["pid"]) == role and ends(r) == key]
inj = events("fault.injected")
mine = [r for r in inj if r.get("kind") == kind]
check(mine, L + "fault.injected kind=%s traced (%d: %s)" % (kind, len(mine),
      ", ".join("n=%s at %s" % (r.get("n"), r.get("where")) for r in mine)))
check(all(role_of.get(r["pid"]) == side for r in inj) and len(mine) == len(inj),
      L + "every fault.injected is of kind %s in the %s" % (kind, side))
for r in mine:
    key = ends(r)
    where = "%s (n=%s, %s)" % (key[0], r.get("n"), r.get("where"))
    done = at("upgrade.done", side, key) + at("upgrade.done", other, key)
    if expect.startswith("fail:"):
        reason = expect[5:]
        fails = at("upgrade.fail", side, key)
        check([f for f in fails if f.get("reason") == reason],
              L + "%s: upgrade.fail %s at the %s (%s)" % (where, reason, side,
              ",".join(f.get("reason") for f in fails) or "none"))
        check(not done, L + "%s: stays on TCP (no upgrade.done at either end: %d)" % (where, len(done)))
    elif expect.startswith("waiter:"):
        # The silent end's peer waited for it: its upgrade ends at its
        # deadline, or when the silent end gives up first and closes.
        reasons = set(expect[7:].split("|"))
        fails = at("upgrade.fail", other, key) + at("upgrade.fail", side, key)
        check([f for f in fails if f.get("reason") == "timeout"],
              L + "%s: an upgrade.fail timeout for it (%s)" % (where,
              ",".join("%s:%s" % (role_of.get(f["pid"]), f.get("reason")) for f in fails) or "none"))
        check(all(f.get("reason") in reasons for f in fails),
              L + "%s: every upgrade.fail for it is one of %s" % (where, "/".join(sorted(reasons))))
        check(not done, L + "%s: stays on TCP (no upgrade.done at either end: %d)" % (where, len(done)))
    elif expect == "refused":
        ref = at("rv.refused", side, key)
        check(ref and all(x.get("reason") == "verify_failed" for x in ref),
              L + "%s: rv.refused verify_failed at the %s (%d)" % (where, side, len(ref)))
        check(not done, L + "%s: stays on TCP (no upgrade.done at either end: %d)" % (where, len(done)))
    elif expect == "spill":
        sp = at("failover.spill", other, key)
        check(sp and all(x.get("reason") == "ring_full" for x in sp),
              L + "%s: the %s's writer spilled to TCP (failover.spill ring_full: %d)" % (where, other, len(sp)))
    elif expect == "switch":
        rx = at("rx.switch", other, key)
        check(rx, L + "%s: the %s took the late SWITCH frame (rx.switch: %d)" % (where, other, len(rx)))
        check(len(at("upgrade.done", side, key)) == 1 and len(at("upgrade.done", other, key)) == 1,
              L + "%s: upgrade.done at both ends" % where)
    else:
        check(expect == "none", L + "known outcome check %r" % expect)
bad = events("conn.abort") + events("rx.switch_refused")
check(not bad, L + "no conn.abort, no rx.switch_refused (%d)" % len(bad))
for r in bad[:5]:
    print("    %s" % r)
PY
}

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

# Known bug, run with FAULTS_KNOWN=1: the client's check of the socket a
# pair COMMIT carries fails (client_commit, the third check after a
# warm-up), and the client gives the upgrade up as if a stranger had
# committed, while the real server did: its SWITCH frame reaches the
# program as data (the client's verdict: FAIL offset=0 got=0x57, 'W').
if [[ ${FAULTS_KNOWN:-0} == 1 ]]; then
  fault_run verify-commit client verify_fail@3 refused blocking 1 "${B[@]}" --warm-up 1 -- \
    "${PAIR_VARS[@]}"
else
  log "skipped verify-commit (client_commit): a known bug, FAULTS_KNOWN=1 runs it"
fi

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

# switch_late: the server's first SWITCH frame, the client's second.
fault_run late-s1 server switch_late@1 switch blocking 2 "${B[@]}"
fault_run late-c2 client switch_late@2 switch mixed 4 "${B[@]}"

finish
