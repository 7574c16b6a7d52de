# shellcheck shell=bash
# integration/faults_lib.sh: one checksummed stress run with a fault list in
# one process, and its checks (t_faults.sh, soak_faults.sh). Source it after
# lib.sh; it needs STRESS (the stress tool) and TMO (its --timeout).
#
#   fault_run LABEL SIDE FAULTS EXPECT MODE CONNS STREAM-ARGS... [-- VAR=V...]
#     runs a stress server and client under the shim (RDMASHIM_TRANSPORTS=
#     shm), RDMASHIM_TEST_FAULTS=FAULTS in the SIDE one (server or client),
#     and checks every byte, the faults traced and the outcome EXPECT names
#     for the connection each struck (check_outcome). A --warm-up in
#     STREAM-ARGS makes the server count one connection more.
#   EXPECT: fail:REASON, waiter:REASON|REASON..., refused, reset (a failed
#     check of a pair COMMIT: the connection reset, no wrong byte), spill, switch,
#     none (only the bytes and the trace), any (random lists: a fault that
#     never came is no failure, and only what holds whatever else struck is
#     checked: a connection a ring_alloc or rv_silent struck never
#     upgrades).

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
  src=0
  wait_bg "$spid" 60 || src=$?
  # A client whose check of a pair COMMIT fails resets the connection (the
  # server switched already: shm_pair_neg.c); a reset is allowed there,
  # expected with EXPECT reset, never a wrong byte.
  local resets=0
  [[ $expect == reset || ($expect == any && $side == client && $faults == *verify_fail*) ]] && resets=1
  if ((resets)) && grep -q 'reason=.*[Rr]eset' "$WORK/$label-client.out" "$WORK/$label-server.out"; then
    log "$label: a connection was reset, as a failed COMMIT check does"
    check "$label: no wrong byte at either end (a reset, not a mismatch)" \
      bash -c '! grep -hE "expected=0x|got=0x" "$@"' _ "$WORK/$label-client.out" "$WORK/$label-server.out"
  else
    check "$label: a connection was reset" test "$expect" != reset
    check "$label: client exit 0 and OK line" test "$rc" -eq 0 -a "$(awk '{print $2}' <<<"$line")" = OK
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
  fi
  check "$label: nothing on client stderr" test ! -s "$WORK/$label-client.err"
  check "$label: nothing on server stderr" test ! -s "$WORK/$label-server.err"
  local kinds
  kinds=$(tr ',' '\n' <<<"$faults" | sed 's/@.*//' | sort -u | paste -sd, -)
  check_outcome "$dir" "$label" "$kinds" "$side" "$expect"
}

# check_outcome DIR LABEL KINDS SIDE EXPECT: the trace checks (KINDS: the
# kinds listed, comma-separated).
check_outcome() {
  trace_py "$@" <<'PY'
label, kinds, side, expect = ARGS
kinds = kinds.split(",")
kind = kinds[0]
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
mine = [r for r in inj if r.get("kind") in kinds]
desc = ", ".join("%s n=%s at %s" % (r.get("kind"), r.get("n"), r.get("where")) for r in mine)
if expect == "any":
    print("    faults struck: %d (%s)" % (len(mine), desc))
else:
    check(mine, L + "fault.injected kind=%s traced (%d: %s)" % ("/".join(kinds), len(mine), desc))
check(all(role_of.get(r["pid"]) == side for r in inj) and len(mine) == len(inj),
      L + "every fault.injected is of kind %s in the %s" % ("/".join(kinds), side))
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
    elif expect == "reset":
        ab = at("conn.abort", side, key)
        check(ab and all(x.get("reason") == "verify_failed" for x in ab),
              L + "%s: the %s reset it (conn.abort verify_failed: %d)" % (where, side, len(ab)))
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
    elif expect == "any":
        # Random lists: what holds whatever else struck. A ring that was
        # not had, or a rendezvous one end kept silent, never upgrades.
        if r.get("kind") in ("ring_alloc", "rv_silent"):
            check(not done, L + "%s %s: stays on TCP (no upgrade.done at either end: %d)" %
                  (r.get("kind"), where, len(done)))
    else:
        check(expect == "none", L + "known outcome check %r" % expect)
# A failed check of a pair COMMIT resets its connection (shm_pair_neg.c).
commit_reset = lambda r: r.get("reason") == "verify_failed" and any(
    x.get("where") == "client_commit" for x in mine)
bad = [r for r in events("conn.abort") if not commit_reset(r)] + events("rx.switch_refused")
check(not bad, L + "no conn.abort, no rx.switch_refused (%d)" % len(bad))
for r in bad[:5]:
    print("    %s" % r)
PY
}

# fault_schedule SEED: prints a random run for fault_run, from SEED alone
# (Python's random: the same on every machine), one word a line:
#   SIDE FAULTS MODE CONNS STREAM-ARGS... -- VAR=V...
# One to three faults of any kind, at an N where that kind's attempts come
# in a run; a side, a mode, a load; the settings that change which sites
# are reached (busy polling off, bells on TCP, pairs off, a warm-up that
# makes the next connections take the pair way, a short upgrade timeout).
fault_schedule() {
  "$PYTHON" - "$1" <<'PY'
import random, sys
r = random.Random(int(sys.argv[1]))
most = {"ring_alloc": 4, "verify_fail": 6, "rv_silent": 3, "switch_late": 4,
        "peer_stall": 200, "bell_loss": 300}
faults = []
for _ in range(r.randint(1, 3)):
    k = r.choice(sorted(most))
    faults.append("%s@%d" % (k, r.randint(1, most[k])))
words = [r.choice(["server", "client"]), ",".join(faults),
         r.choice(["blocking", "nonblock", "epoll-et", "mixed"]), str(r.randint(1, 8))]
if r.random() < 0.7:
    words += ["--bytes", "%dM" % r.choice([16, 32, 64, 128])]
else:
    words += ["--duration", str(r.choice([2, 3]))]
if r.random() < 0.3:
    words.append("--half-close")
if r.random() < 0.25:
    words += ["--warm-up", "1"]
words.append("--")
for var, p in (("RDMASHIM_SPIN_US=0", 0.5), ("RDMASHIM_SHM_BELL_LINE=0", 0.3),
               ("RDMASHIM_SHM_PAIRS=0", 0.3), ("RDMASHIM_UPGRADE_TIMEOUT_MS=500", 0.3)):
    if r.random() < p:
        words.append(var)
print("\n".join(words))
PY
}

# fault_seed_run LABEL SEED: fault_run with SEED's schedule, any outcome.
fault_seed_run() {
  local label=$1 seed=$2 sched
  mapfile -t sched < <(fault_schedule "$seed")
  log "$label: seed $seed: ${sched[*]}"
  fault_run "$label" "${sched[0]}" "${sched[1]}" any "${sched[@]:2}"
}
