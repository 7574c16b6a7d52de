#!/bin/bash
# t_ab_verdict: `rdmashim stat --ab` judges an A/B test. redis-server and
# redis-benchmark, both under the shim at RDMASHIM_AB_PERCENT=50:
#  - on shm, run long enough: the accelerated (shm) arm is BETTER, exit 0;
#  - with RDMASHIM_TRANSPORTS=tcp (both arms TCP, an A/A test): never
#    BETTER nor WORSE (EQUIVALENT or INCONCLUSIVE, exit 3 or 4);
#  - a run of about a second: INSUFFICIENT_DATA, exit 5.
# The verdict is taken from the client's area while it runs (its round
# trips are its requests' latency; its area goes when it exits). The
# figures are printed. AB_SECS sets the long runs' length (default 30 s:
# 30 intervals of thousands of round trips each, three times the floor of
# 10 intervals); AB_HOGS=N runs N busy loops beside (AB_HOG_NICE, default
# 0, their nice value). 4 clients: in one event loop that holds both arms
# the shm arm's edge shrinks as its connections in the loop grow in number
# (p50 ratio about 0.6 with 1 of them, 0.8 with 3 or 4, 1.07 to 1.15 with 8
# to 12), and with two busy loops at the same priority on two cores it is
# judged WORSE (its receivers can not spin and pay a bell per message): the
# verdict says so, docs/OPERATIONS.md. With 4 clients an arm is left empty
# by the hash one time in 8: that run is made again.
# RDMASHIM_UNPAID_PERCENT=0 keeps the shm arm on shm on a machine so loaded
# that its exchanges wake sleeping receivers (otherwise those go back to
# TCP as unpaid, and the fallback guardrail makes the verdict WORSE, as it
# must: that is a separate policy, t_shm_unpaid).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$ROOT/build/bin/rdmashim"
need_cmd redis-server redis-benchmark redis-cli python3

TOOL=$ROOT/build/bin/rdmashim
AB_SECS=${AB_SECS:-30}
AB_HOGS=${AB_HOGS:-0}
CLIENTS=4
HOGS=()
for ((i = 0; i < AB_HOGS; i++)); do
  timeout -k 5 $((AB_SECS * 3 + 60)) nice -n "${AB_HOG_NICE:-0}" sh -c 'while :; do :; done' &
  HOGS+=("$!")
done

cat >"$WORK/figures.py" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
label = sys.argv[2]
a, c = doc["arms"]["accelerated"], doc["arms"]["control"]
codes = {"BETTER": 0, "WORSE": 1, "EQUIVALENT": 3, "INCONCLUSIVE": 4, "INSUFFICIENT_DATA": 5}
print("    [%s] json: %d intervals; n %d / %d; p50 ratio %.3f %s; verdict %s (exit %d)" % (
    label, doc["intervals"], a["samples"], c["samples"], doc["p50"]["ratio"], doc["p50"]["ci95"],
    doc["verdict"], doc["exit_status"]))
print("    [%s] json: connections %d / %d, fallbacks %d / %d, errors %d / %d" % (
    label, a["connections"], c["connections"], a["fallbacks"], c["fallbacks"], a["errors"], c["errors"]))
ok = doc["exit_status"] == codes[doc["verdict"]]
sys.exit(0 if ok else 1)
PY

cat >"$WORK/arms.py" <<'PY'
import re, sys
kind, path = sys.argv[1:3]
lines = open(path).read().splitlines()
if kind == "table":
    head = lines[0].split()
    assert head[-1] == "ARM", head
    rows = [l.split() for l in lines[1:] if l and l.split()[0].isdigit()]
    arms = sorted({r[len(head) - 1] for r in rows})
    print("    arms in the table: %s (%d rows)" % (arms, len(rows)))
    assert rows and set(arms) <= {"accelerated", "control"}, arms
    sys.exit(0)
fam = {}
for l in lines:
    m = re.match(r'(rdmashim_\w+?)(\{[^}]*\})? (\S+)$', l)
    if m:
        fam.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
armed = {f for f, v in fam.items() if any("arm=" in lab for lab, _ in v)}
want = {"rdmashim_ab_connections_total", "rdmashim_ab_sent_bytes_total", "rdmashim_ab_received_bytes_total",
        "rdmashim_ab_fallbacks_total", "rdmashim_ab_errors_total"}
print("    families with an arm label: %s" % sorted(armed))
assert armed == want, armed
conns = dict(fam["rdmashim_ab_connections_total"])
assert set(conns) == {'{arm="accelerated"}', '{arm="control"}'}, conns
assert sum(conns.values()) >= 4 and sum(v for _, v in fam["rdmashim_ab_sent_bytes_total"]) > 0, fam
sys.exit(0)
PY

# ab_case LABEL SECS TRANSPORTS: prints the verdict's exit status last.
ab_case() {
  local label=$1 secs=$2 transports=$3 port pid bpid cpid rc stats
  port=$(free_port)
  stats=$WORK/stats-$label
  mkdir -p "$stats"
  chmod 0755 "$stats"
  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS="$transports" RDMASHIM_AB_PERCENT=50
              RDMASHIM_UNPAID_PERCENT=0 RDMASHIM_STATS_DIR="$stats")
  start_bg "$label-redis" shim "${vars[@]}" redis-server --save '' --appendonly no --port "$port" \
    --bind 127.0.0.1 --dir "$WORK" --daemonize no --logfile '' --unixsocket '' --protected-mode yes
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "$label: redis-server listening"
    stop_bg "$pid"
    AB_RC=-1
    return
  fi
  # As many requests as it takes: the run is cut after secs.
  start_bg "$label-bench" shim "${vars[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -n 1000000000 \
    -c "$CLIENTS" -t get -q
  bpid=$BG_PID
  sleep "$secs"
  cpid=$(pgrep -P "$bpid" redis-benchmark | head -1)
  check "$label: redis-benchmark still running after ${secs}s" test -n "$cpid"
  rc=0
  timeout 60 "$TOOL" stat --ab --pid "${cpid:-1}" --dir "$stats" >"$WORK/$label.txt" 2>&1 || rc=$?
  timeout 60 "$TOOL" stat --ab --json --seed 7 --pid "${cpid:-1}" --dir "$stats" >"$WORK/$label.json" 2>&1
  sed "s/^/    [$label] /" "$WORK/$label.txt"
  # The arms outside --ab: each connection's in the table, the sums per arm
  # (and only those families labelled by arm) in the Prometheus text.
  timeout 60 "$TOOL" stat --pid "${cpid:-1}" --dir "$stats" >"$WORK/$label.table" 2>&1
  timeout 60 "$TOOL" stat --prom --dir "$stats" >"$WORK/$label.prom" 2>&1
  stop_bg "$bpid"
  check "$label: the table names each connection's arm" \
    "$PYTHON" "$WORK/arms.py" table "$WORK/$label.table"
  check "$label: --prom passes the exposition checker" "$PYTHON" "$ROOT/integration/promcheck.py" "$WORK/$label.prom"
  check "$label: --prom sums the arms, labelled by arm only there" \
    "$PYTHON" "$WORK/arms.py" prom "$WORK/$label.prom"
  # The server kept answering all along: a last request comes back right.
  local got
  got=$(with_shim "${vars[@]}" redis-cli -h 127.0.0.1 -p "$port" SET k v 2>&1)
  same "$label: redis-cli SET after the run" "OK" "$got"
  got=$(with_shim "${vars[@]}" redis-cli -h 127.0.0.1 -p "$port" GET k 2>&1)
  same "$label: redis-cli GET after the run" "v" "$got"
  with_shim "${vars[@]}" redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
  wait_bg "$pid" 30 || true
  check "$label: the JSON verdict and its exit status agree" \
    "$PYTHON" "$WORK/figures.py" "$WORK/$label.json" "$label"
  AB_RC=$rc
  # The fewer round trips of the two arms: an arm that only held
  # redis-benchmark's first, short-lived connection has a handful.
  AB_ARM_SAMPLES=$("$PYTHON" -c 'import json, sys
arms = json.load(open(sys.argv[1]))["arms"]
print(min(arms["accelerated"]["samples"], arms["control"]["samples"]))' \
                 "$WORK/$label.json" 2>/dev/null || echo 0)
}

# ab_long LABEL TRANSPORTS: as ab_case for AB_SECS, again (at most 4
# times) when the hash's draw of the clients' ports left an arm with none
# of the benchmark's 4 connections: then there is nothing to compare.
# Such an arm may still hold redis-benchmark's first connection, which
# makes a round trip or two and closes, so an arm is taken as empty when
# it saw fewer than 1000 round trips in the whole run (one connection does
# thousands a second, even beside hogs).
ab_long() {
  local try
  for try in 1 2 3 4; do
    ab_case "$1-$try" "$AB_SECS" "$2"
    ((AB_ARM_SAMPLES >= 1000)) && return
    log "$1: an arm had no benchmark connection (try $try, $AB_ARM_SAMPLES round trips): again with new ports"
  done
}

ab_long shm shm
# The shm arm wins at p50 on a machine with cores to spare. On a full one
# (two CPU hogs beside the suite) its receivers can not spin and each
# message pays a bell, and the verdict says so: WORSE, correctly
# (docs/OPERATIONS.md, "A/B"). The requirement holds only where it can;
# elsewhere the verdict is printed and the check says why it was skipped.
read -r load1 _ </proc/loadavg
if awk -v l="$load1" -v c="$(nproc)" 'BEGIN { exit !(l > c) }'; then
  ok "shm arm at AB 50%: verdict BETTER # SKIP host loaded (load $load1 on $(nproc) cores; the verdict was exit $AB_RC)"
else
  check "shm arm at AB 50%: verdict BETTER (exit 0, got $AB_RC; load $load1)" test "$AB_RC" -eq 0
fi
ab_long tcp tcp
check "both arms TCP: neither BETTER nor WORSE (exit 3 or 4, got $AB_RC)" \
  test "$AB_RC" -eq 3 -o "$AB_RC" -eq 4
ab_case short 1.2 shm
check "a run of a second: INSUFFICIENT_DATA (exit 5, got $AB_RC)" test "$AB_RC" -eq 5

# Bad usage is 2, whatever the data.
rc=0; "$TOOL" stat --ab --margin x >/dev/null 2>&1 || rc=$?
check "--margin x: exit 2 (got $rc)" test "$rc" -eq 2
rc=0; "$TOOL" stat --ab --quantile 90 >/dev/null 2>&1 || rc=$?
check "--quantile 90: exit 2 (got $rc)" test "$rc" -eq 2

for h in "${HOGS[@]}"; do kill "$h" 2>/dev/null; wait "$h" 2>/dev/null; done
finish
