#!/bin/bash
# t_shadow: RDMASHIM_MODE=shadow negotiates up to the switch and stays on
# TCP. redis-server and redis-benchmark (and redis-cli with a 100 KiB value)
# on shm:
#  - both ends in shadow: the results are right, no byte went over a channel
#    (no tx.switch or rx.switch in any trace, nothing counted under shm),
#    every connection is traced upgrade.shadow at its client end, with
#    transport shm (C proves S, then withdraws before its ACCEPT) or, for one
#    that ended first, the reason it would have failed for; the processes
#    count them under reason shadow, and a live one shows state shadow in
#    `rdmashim stat`;
#  - one end in shadow, the other on (either way round): everything stays on
#    TCP, right, and the shadow end traces upgrade.shadow.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TOOL=$ROOT/build/bin/rdmashim
need_built "$TOOL"
need_cmd redis-server redis-benchmark redis-cli python3

"$PYTHON" -c '
import random, sys
r = random.Random(35)
sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(100 * 1024)))' >"$WORK/value.bin"
printf '\n' | cat "$WORK/value.bin" - >"$WORK/value.expected"

# shadow_case LABEL SERVER_MODE CLIENT_MODE
shadow_case() {
  local label=$1 smode=$2 cmode=$3 port pid bpid out rc dir stats
  port=$(free_port)
  dir=$WORK/$label
  stats=$dir/stats
  mkdir -p "$stats"
  local common=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
                "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" RDMASHIM_STATS_DIR="$stats" RDMASHIM_UNPAID_PERCENT=0)
  start_bg "$label-redis" shim "${common[@]}" RDMASHIM_MODE="$smode" redis-server --save '' --appendonly no \
    --port "$port" --bind 127.0.0.1 --dir "$WORK" --daemonize no --logfile '' --unixsocket '' --protected-mode yes
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "$label: redis-server listening"
    stop_bg "$pid"
    return
  fi
  local cli=(with_shim "${common[@]}" RDMASHIM_MODE="$cmode")
  out=$("${cli[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -n 20000 -c 10 -t set,get -q 2>"$dir/bench.err" |
        tr '\r' '\n')
  rc=$?
  check "$label: redis-benchmark exit status 0 (got $rc)" test "$rc" -eq 0
  local t rps
  for t in SET GET; do
    rps=$(awk -v t="$t:" '$1 == t && $3 == "requests" { print $2; exit }' <<<"$out")
    check "$label: redis-benchmark $t: ${rps:-none} requests per second" test -n "$rps"
  done
  out=$("${cli[@]}" redis-cli -h 127.0.0.1 -p "$port" -x SET bigvalue <"$WORK/value.bin" 2>&1)
  same "$label: redis-cli SET of 100 KiB" "OK" "$out"
  "${cli[@]}" redis-cli -h 127.0.0.1 -p "$port" --raw GET bigvalue >"$dir/got.bin" 2>&1
  check "$label: redis-cli GET returns the 100 KiB value byte for byte" cmp -s "$WORK/value.expected" "$dir/got.bin"
  # A connection that stays: its record while it lives (after the
  # handshake's time at both ends).
  start_bg "$label-held" shim "${common[@]}" RDMASHIM_MODE="$cmode" redis-benchmark -h 127.0.0.1 -p "$port" \
    -n 100000000 -c 2 -t ping_inline -q
  bpid=$BG_PID
  sleep 2
  timeout 30 "$TOOL" stat --json --dir "$stats" >"$dir/stat.json" 2>&1
  stop_bg "$bpid"
  local spid
  spid=$(pgrep -P "$pid" redis-server | head -1)
  "${cli[@]}" redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
  rc=0; wait_bg "$pid" 30 || rc=$?
  check "$label: redis-server exits 0 after SHUTDOWN (got $rc)" test "$rc" -eq 0
  check "$label: traces, stats and shadow outcomes" \
    "$PYTHON" "$WORK/judge.py" "$dir" "$label" "$smode" "$cmode" "$port" "${spid:-0}"
}

cat >"$WORK/judge.py" <<'PY'
import glob, json, sys
d, label, smode, cmode, port, spid = sys.argv[1:7]
port, spid = int(port), int(spid)
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
    print("    [%s] %s: %s" % (label, "ok" if ok else "FAILED", what))
    bad += 0 if ok else 1
ev = lambda name: [r for r in recs if r.get("event") == name]
say(not ev("tx.switch") and not ev("rx.switch") and not ev("upgrade.done"),
    "no tx.switch, rx.switch or upgrade.done (%d, %d, %d)" % (len(ev("tx.switch")), len(ev("rx.switch")),
                                                             len(ev("upgrade.done"))))
def key(r):
    return (r.get("local"), r.get("peer")) if r.get("role", "") != "server" else (r.get("peer"), r.get("local"))
cli_tracked = {key(r) for r in ev("conn.track") if r.get("role") == "client" and r.get("eligible")}
sh = ev("upgrade.shadow")
sh_cli = {key(r): r for r in sh if r.get("role") == "client"}
sh_srv = {key(r): r for r in sh if r.get("role") == "server"}
shadow_end = sh_cli if cmode == "shadow" else sh_srv
other = [r for r in sh if r.get("role") == ("server" if cmode == "shadow" else "client")]
if cmode == "shadow":
    # C withdraws after S proved itself: every connection that got as far.
    # One that ends first (redis-benchmark's short CONFIG connection) is
    # traced with the reason it would have failed for instead.
    with_shm = [k for k in cli_tracked if k in sh_cli and sh_cli[k].get("transport") == "shm"]
    traced = [k for k in cli_tracked if k in sh_cli]
    why = sorted({sh_cli[k].get("reason") for k in traced if k not in with_shm})
    say(len(cli_tracked) > 10 and len(traced) == len(cli_tracked),
        "every client connection traced upgrade.shadow (%d of %d)" % (len(traced), len(cli_tracked)))
    say(len(with_shm) >= len(cli_tracked) - 3 and all(why),
        "with transport shm: %d of %d; the others with a reason %s" % (len(with_shm), len(cli_tracked), why))
if smode == "shadow" and cmode == "on":
    # S withdraws after C proved itself and sent its ring.
    shm_srv = [k for k, r in sh_srv.items() if r.get("transport") == "shm"]
    say(len(shm_srv) > 10, "server connections traced upgrade.shadow with transport shm (%d)" % len(shm_srv))
if smode == "on" or cmode == "on":
    on_role = "server" if smode == "on" else "client"
    say(not [r for r in sh if r.get("role") == on_role], "the end that is on traces no upgrade.shadow")
# Stats: nothing under shm, the server's reason counts, a live record in state shadow.
st = json.load(open(d + "/stat.json"))
shm_bytes = sum(p["by_path"]["shm"]["tx_bytes"] + p["by_path"]["shm"]["rx_bytes"]
                for p in st["processes"] if not p.get("error"))
say(shm_bytes == 0, "no byte counted under shm in any stats area (%d)" % shm_bytes)
states = sorted({c["state"] for c in st["connections"]})
shadow_procs = [p for p in st["processes"] if not p.get("error") and p["reasons"].get("shadow")]
if smode == "shadow" or cmode == "shadow":
    say(any(c["state"] == "shadow" for c in st["connections"]),
        "a live connection shows state shadow (states %s)" % states)
    say(bool(shadow_procs), "reason shadow counted (%s)" % [(p["program"], p["reasons"].get("shadow"))
                                                           for p in shadow_procs])
sys.exit(1 if bad else 0)
PY

shadow_case both shadow shadow
shadow_case srv-shadow shadow on
shadow_case cli-shadow on shadow
finish
