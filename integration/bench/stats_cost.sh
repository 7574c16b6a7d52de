#!/bin/bash
# stats_cost.sh: what the live stats area (shim/core/statarea.h) costs the
# data path: the same runs with it on (the default) and off
# (RDMASHIM_STATS=0, where the data path counts nothing), in one run.
#
# integration/bench/xfer.c, 64 B: ping-pong latency p50 and p99, and
# one-way messages per second. Modes, rotated round by round (BENCH_ROUNDS,
# default 7; BENCH_SECS seconds a run, default 1):
#   shm          both ends under the shim on shm, stats on
#   shm_nostats  the same with RDMASHIM_STATS=0
#   shm_again    shm once more, stats on: the A/A pair, this run's own
#                noise floor for the on/off ratio
#   pass         the shim loaded, the port not whitelisted (pass-through)
#   pass_nostats the same with RDMASHIM_STATS=0
# What "on" costs against "off" is taken round by round, in percent (the
# latency it adds, the messages a second it loses): median (lowest..
# highest). The A/A pair's figure, shm against shm_again, says what this
# run can tell from noise. Prints
#   bench stats_cost: shm pp p50: on costs +X% (lo..hi), A/A +Y% (lo..hi); ...
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need ss taskset python3
ROUNDS=${BENCH_ROUNDS:-7}
SECS=${BENCH_SECS:-1}
MODES=(shm shm_nostats shm_again pass pass_nostats)
BIN=$ROOT/build/bench
mkdir -p "$BIN" "$WORK/stats" "$WORK/trace"
if ! [[ $BIN/xfer -nt $ROOT/integration/bench/xfer.c ]]; then
	cc -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$BIN/xfer" "$ROOT/integration/bench/xfer.c" ||
		die "xfer.c does not build"
fi

# menv MODE PORT: the `env` words of one end.
menv() {
	local shim="env LD_PRELOAD=$LIB RDMASHIM_STATS_DIR=$WORK/stats RDMASHIM_TRACE=info"
	shim+=" RDMASHIM_TRACE_FILE=$WORK/trace/$1.%p ${BENCH_SHIM_ENV:-}"
	case $1 in
	shm | shm_again) echo "$shim RDMASHIM_PORTS=$2" ;;
	shm_nostats) echo "$shim RDMASHIM_PORTS=$2 RDMASHIM_STATS=0" ;;
	pass) echo "$shim RDMASHIM_PORTS=1" ;;
	pass_nostats) echo "$shim RDMASHIM_PORTS=1 RDMASHIM_STATS=0" ;;
	*) die "unknown mode $1" ;;
	esac
}

declare -A PORT=()
for m in "${MODES[@]}"; do
	PORT[$m]=$(free_port)
	# shellcheck disable=SC2046
	start_bg "$WORK/server-$m.log" $(menv "$m" "${PORT[$m]}") "${SERVER_CPU[@]}" "$BIN/xfer" server \
		--port "${PORT[$m]}"
	wait_listen "${PORT[$m]}"
done

# One client run: its JSON line appended to $WORK/MODE.jsonl.
run() {
	local m=$1 op=$2 line
	# shellcheck disable=SC2046
	line=$($(menv "$m" "${PORT[$m]}") "${CLIENT_CPU[@]}" timeout -k 5 60 "$BIN/xfer" client \
		--port "${PORT[$m]}" --op "$op" --size 64 --secs "$SECS" --warm-ms 40 2>"$WORK/xfer.err") ||
		die "$m $op: $(tail -n 1 "$WORK/xfer.err")"
	echo "$line" >>"$WORK/$m.jsonl"
}

for ((r = 0; r < ROUNDS; r++)); do
	for op in pp bw; do
		for m in $(order "$r" "${MODES[@]}"); do run "$m" "$op"; done
	done
	say "round $((r + 1)) of $ROUNDS done"
done
# The shm modes must have been on shm, with the area holding their counts
# or not: a look while the servers still run.
"$ROOT/build/bin/rdmashim" stat --json --dir "$WORK/stats" >"$WORK/stat.json" 2>&1 || true

python3 - "$WORK" "$ROUNDS" "${PORT[shm]}" "${PORT[shm_nostats]}" "${MODES[@]}" <<'PY'
import json, statistics, sys
work, rounds, p_on, p_off, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
runs = {m: [json.loads(l) for l in open("%s/%s.jsonl" % (work, m))] for m in modes}
def series(m, op, key):
    return [r[key] if key != "rate" else r["msgs"] / r["secs"] for r in runs[m] if r["op"] == op]
# What a costs against b, in percent, round by round: the latency a adds,
# or the messages a second it loses; median (lowest..highest).
def cost(a, b, op, key, lower_better):
    x, y = series(a, op, key), series(b, op, key)
    rs = [100.0 * ((p - q) / q if lower_better else (q - p) / q) for p, q in zip(x, y)]
    return "%+.1f%% (%+.1f..%+.1f)" % (statistics.median(rs), min(rs), max(rs))
for m in modes:
    print("[stats_cost] %-12s pp p50 %.3f us, p99 %.3f us; one-way 64 B %.0f msgs/s (medians of %d)" % (
        m, statistics.median(series(m, "pp", "p50_us")), statistics.median(series(m, "pp", "p99_us")),
        statistics.median(series(m, "bw", "rate")), rounds))
# Every connection of a shm mode must have reached shm: its client's
# upgrade.done, against the connections made (one a run).
import glob
for m in ("shm", "shm_nostats", "shm_again"):
    n = sum(1 for f in glob.glob("%s/trace/%s.*" % (work, m)) for l in open(f)
            if '"event":"upgrade.done"' in l and '"role":"client"' in l)
    print("[stats_cost] %-12s connections upgraded to shm: %d of %d" % (m, n, len(runs[m])))
st = json.load(open(work + "/stat.json"))
counted = sum(p["by_path"]["shm"]["tx_bytes"] for p in st.get("processes", []) if not p.get("error"))
print("[stats_cost] the area's count of shm bytes sent (servers, stats on): %d" % counted)
line = []
for what, op, key, lb in (("pp p50", "pp", "p50_us", True), ("pp p99", "pp", "p99_us", True),
                          ("one-way 64 B", "bw", "rate", False)):
    line.append("shm %s: on costs %s, A/A %s" % (what, cost("shm", "shm_nostats", op, key, lb),
                                                  cost("shm", "shm_again", op, key, lb)))
line.append("pass-through pp p50: on costs %s" % cost("pass", "pass_nostats", "pp", "p50_us", True))
line.append("pass-through one-way 64 B: on costs %s" % cost("pass", "pass_nostats", "bw", "rate", False))
print("bench stats_cost: " + "; ".join(line))
PY
