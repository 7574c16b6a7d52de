#!/bin/bash
# guest-rdma-shadow.sh — RDMASHIM_MODE=shadow between two hosts, over RDMA:
# run by guest-rdma-two.sh after its links part (t_rdma_two_hosts), or
# alone with its doctor check before it:
#
#   RDMA_TWO_ONLY=shadow integration/run-all.sh t_rdma_two_hosts
#
# Host A runs redis-server, host B redis-benchmark (SET and GET, 10
# clients) and redis-cli (a 100 KiB value, byte for byte), every process
# under the shim in shadow mode with the default transports (the peer is
# on another host: the shim picks RDMA). At each end:
#  - no byte on a channel: no tx.switch, rx.switch or upgrade.done in the
#    traces, nothing counted under rdma or shm in the stats areas;
#  - every connection counted as one that would have upgraded: each
#    tracked connection that lasted as long as its negotiation (not
#    redis-cli's and redis-benchmark's short ones, which end first and
#    would not have moved when on either) is traced upgrade.shadow with
#    transport rdma and proved: the rdma_cm exchange ran to the cut
#    (shim/PROTOCOL.md, "Shadow mode"); the areas count reason shadow; a
#    connection held while `rdmashim stat` looks shows state shadow.
# Then B runs redis-benchmark again with its shim on (not in shadow): A
# withdraws at the ACCEPT of each of its connections with the shadow
# marker, and B's clients give up for reason shadow (upgrade.fail), all on
# TCP. B ends A's server (SHUTDOWN NOSAVE) when done; A samples its own area
# while the server lives (the area goes with the process). Prints
# "ok - " / "not ok - " lines and "== host X shadow: N ok, M failed".
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
: "${ROLE:?} ${ADDR:?} ${PEER:?}"
T=/tmp/rdma-shadow
P=7205
TOOL=${SHIM_TOOL:-$(dirname "$LIB")/../bin/rdmashim}
n_ok=0 n_fail=0
X=${ROLE^^}
rm -rf "$T"
mkdir -p "$T/stats"

ok() { n_ok=$((n_ok + 1)); echo "ok - $*"; }
not_ok() { n_fail=$((n_fail + 1)); echo "not ok - $*"; }
check() { local m=$1; shift; if "$@"; then ok "$m"; else not_ok "$m"; fi; }
shadow() {
  env RDMASHIM_MODE=shadow RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_PORTS=$P RDMASHIM_TRACE=debug \
    RDMASHIM_TRACE_FILE="$T/trace.%p.jsonl" RDMASHIM_STATS_DIR="$T/stats" LD_PRELOAD="$LIB" "$@"
}

# judge ROLE: the traces and the stats looks ($T/stat.*.json) of this host,
# its lines counted here.
judge() {
  judge_py "$1" > "$T/judge.out" 2>&1
  cat "$T/judge.out"
  n_ok=$((n_ok + $(grep -c '^ok - ' "$T/judge.out")))
  n_fail=$((n_fail + $(grep -c '^not ok - ' "$T/judge.out")))
  grep -q '^ok - \|^not ok - ' "$T/judge.out" || not_ok "$X: shadow: the judge ran"
}
judge_py() {
  python3 - "$T" "$1" <<'PY'
import glob, json, sys
d, role = sys.argv[1], sys.argv[2]
X = role.upper()
recs = []
for f in glob.glob(d + "/trace.*.jsonl"):
    for line in open(f, errors="replace"):
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
bad = 0
def say(ok, what):
    global bad
    print(("ok - " if ok else "not ok - ") + "%s: shadow: %s" % (X, what))
    bad += 0 if ok else 1
ev = lambda name: [r for r in recs if r.get("event") == name]
say(not ev("tx.switch") and not ev("rx.switch") and not ev("upgrade.done"),
    "no tx.switch, rx.switch or upgrade.done in the traces (%d, %d, %d)" % (
        len(ev("tx.switch")), len(ev("rx.switch")), len(ev("upgrade.done"))))
me = "client" if role == "b" else "server"
key = lambda r: (r.get("local"), r.get("peer"))
tracked = {key(r) for r in ev("conn.track") if r.get("role") == me and r.get("eligible")}
sh = {key(r): r for r in ev("upgrade.shadow") if r.get("role") == me}
rdma = [k for k in tracked if sh.get(k, {}).get("transport") == "rdma"]
proved = [k for k in rdma if sh[k].get("proved")]
closed = {key(r) for r in ev("upgrade.closed") if r.get("role") == me} - set(sh)
started = {key(r) for r in ev("upgrade.start") if r.get("role") == me} | set(sh)
# A process that exits in the middle of a negotiation (redis-cli, right
# after its answer) writes its process.stats line and nothing for the
# connection: that one ended with its program.
pid_of = {key(r): r.get("pid") for r in ev("conn.track") if r.get("role") == me}
exited = {r.get("pid") for r in ev("process.stats")}
gone = {k for k in tracked if k in started and k not in sh and k not in closed and pid_of.get(k) in exited}
untraced = [k for k in tracked if k in started and k not in sh and k not in closed and k not in gone]
# A connection the program ended before its negotiation did (redis-cli's,
# redis-benchmark's CONFIG one) would not have moved when on either: it
# began none (no upgrade.start: closed before its first data call, or a
# connect refused while A's server was not up yet), or it is traced
# upgrade.closed (this end closed) or with peer_closed (the other end
# did). Every other one must have reached the cut.
short = [k for k in tracked
         if k not in started or k in closed or k in gone or sh.get(k, {}).get("reason") == "peer_closed"]
rest = [k for k in tracked if k not in short]
others = sorted({(sh[k].get("reason"), sh[k].get("transport")) for k in rest if k in sh and k not in rdma})
say(not untraced, "every connection that began a negotiation has an outcome (%d of %d without; %d began none, "
    "%d ended with their process)" % (len(untraced), len(started & tracked), len(tracked - started), len(gone)))
for k in untraced + [k for k in tracked if k not in started][:3]:
    print("    %s: %s" % (k, [r.get("event") for r in recs if key(r) == k and r.get("role") == me]))
say(len(rdma) >= 10 and len(rdma) == len(rest) and len(proved) == len(rdma),
    "every connection that lasted its negotiation traced upgrade.shadow, transport rdma, proved: "
    "%d of %d (%d ended first; others %s)" % (len(proved), len(rest), len(short), others))
looks = []
for f in sorted(glob.glob(d + "/stat.*.json")):
    try:
        looks.append(json.load(open(f)))
    except ValueError:
        pass
procs = [p for j in looks for p in j["processes"] if not p.get("error")]
conns = [c for j in looks for c in j["connections"]]
chan = sum(p["by_path"][x]["tx_bytes"] + p["by_path"][x]["rx_bytes"] for p in procs for x in ("rdma", "shm"))
tcp = max([p["by_path"]["tcp"]["tx_bytes"] for p in procs] or [0])
say(len(looks) > 0 and chan == 0 and tcp > 0,
    "stat: %d looks, no byte under rdma or shm (%d), bytes on tcp (%d)" % (len(looks), chan, tcp))
say(any(c["state"] == "shadow" for c in conns),
    "stat: a live connection in state shadow (states %s)" % sorted({c["state"] for c in conns}))
shadow = max([p["reasons"].get("shadow", 0) for p in procs] or [0])
say(shadow > 0, "stat: reason shadow counted (%d)" % shadow)
sys.exit(1 if bad else 0)
PY
}

if [[ $ROLE == a ]]; then
  rc=0
  shadow timeout 400 redis-server --save '' --appendonly no --port "$P" --bind "$ADDR" --dir "$T" \
    --daemonize no --logfile '' --unixsocket '' --protected-mode no > "$T/redis.out" 2>&1 &
  srv=$!
  # Look at the area while the server lives: its last look holds the most
  # counts; the latest look that saw a connection in state shadow is kept
  # too (B's held connection; the last looks may come after it ended).
  i=0
  while kill -0 "$srv" 2>/dev/null; do
    timeout 20 "$TOOL" stat --json --dir "$T/stats" > "$T/look.json" 2>/dev/null &&
      grep -q '"program":"redis-server"' "$T/look.json" && cp "$T/look.json" "$T/stat.$((i % 2)).json" &&
      { ! grep -q '"state":"shadow"' "$T/look.json" || cp "$T/look.json" "$T/stat.shadow.json"; }
    i=$((i + 1))
    sleep 0.5
  done
  wait "$srv" || rc=$?
  check "A: shadow: redis-server ran and ended at B's SHUTDOWN (status $rc)" test "$rc" -eq 0
  judge a
else
  python3 -c '
import random, sys
r = random.Random(35)
sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(100 * 1024)))' > "$T/value.bin"
  printf '\n' | cat "$T/value.bin" - > "$T/value.expected"
  # A's server may not listen yet: retried until it answers.
  rxe_retry 180 shadow timeout 30 redis-cli -h "$PEER" -p "$P" PING > "$T/ping.out" 2>&1
  check "B: shadow: A's redis-server answers PING" grep -qx PONG "$T/ping.out"
  out=$(shadow timeout 300 redis-benchmark -h "$PEER" -p "$P" -n 4000 -c 10 -t set,get -q 2>"$T/bench.err" |
        tr '\r' '\n')
  for t in SET GET; do
    rps=$(awk -v t="$t:" '$1 == t && $3 == "requests" { print $2; exit }' <<<"$out")
    check "B: shadow: redis-benchmark $t over TCP: ${rps:-none} requests per second" test -n "$rps"
  done
  got=$(shadow timeout 60 redis-cli -h "$PEER" -p "$P" -x SET bigvalue < "$T/value.bin" 2>&1)
  check "B: shadow: redis-cli SET of 100 KiB ($got)" test "$got" = OK
  shadow timeout 60 redis-cli -h "$PEER" -p "$P" --raw GET bigvalue > "$T/got.bin" 2>&1
  check "B: shadow: redis-cli GET returns the 100 KiB value byte for byte" cmp -s "$T/value.expected" "$T/got.bin"
  # B on, A in shadow: A withdraws at C's ACCEPT with its marker, B's
  # clients give up for reason shadow, everything on TCP.
  mkdir -p "$T/on"
  out=$(env RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_PORTS=$P RDMASHIM_TRACE=info \
        RDMASHIM_TRACE_FILE="$T/on/trace.%p.jsonl" RDMASHIM_STATS=0 LD_PRELOAD="$LIB" \
        timeout 300 redis-benchmark -h "$PEER" -p "$P" -n 4000 -c 4 -t get -q 2>&1 | tr '\r' '\n')
  rps=$(awk '$1 == "GET:" && $3 == "requests" { print $2; exit }' <<<"$out")
  check "B: on against A's shadow server: redis-benchmark GET over TCP: ${rps:-none} requests per second" \
    test -n "$rps"
  python3 - "$T/on" > "$T/on.out" 2>&1 <<'PY'
import glob, json, sys
recs = [json.loads(l) for f in glob.glob(sys.argv[1] + "/trace.*.jsonl") for l in open(f) if l.startswith("{")]
ev = lambda n: [r for r in recs if r.get("event") == n]
fails = [r.get("reason") for r in ev("upgrade.fail")]
moved = len(ev("upgrade.done")) + len(ev("tx.switch")) + len(ev("rx.switch"))
print("   B on: upgrade.fail reasons %s; upgrade.done/switches %d" % (sorted(set(fails)), moved))
sys.exit(0 if moved == 0 and fails.count("shadow") >= 4 else 1)
PY
  rc=$?
  cat "$T/on.out"
  check "B: on against A's shadow server: no switch, the benchmark's connections fail for reason shadow" \
    test "$rc" -eq 0
  # A connection that stays while both ends look at their areas.
  shadow timeout 60 redis-benchmark -h "$PEER" -p "$P" -n 100000000 -c 2 -t ping_inline -q > /dev/null 2>&1 &
  held=$!
  sleep 4
  timeout 20 "$TOOL" stat --json --dir "$T/stats" > "$T/stat.0.json" 2>&1
  kill "$held" 2>/dev/null
  wait "$held" 2>/dev/null
  shadow timeout 30 redis-cli -h "$PEER" -p "$P" SHUTDOWN NOSAVE > /dev/null 2>&1
  judge b
fi
echo "== host $ROLE shadow: $n_ok ok, $n_fail failed"
[[ $n_fail -eq 0 ]]
