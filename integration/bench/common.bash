# common.bash: helpers the shim-vs-TCP benchmarks share (sourced, not run:
# run-all.sh runs *.sh only).
#
# Every comparison is made within one run, the two sides alternated round by
# round (even rounds shim first, odd rounds TCP first) so that drift on a
# shared machine hits both alike; a ratio is the median of per-round ratios.
# A benchmark reports, it never fails on a slow machine: it exits non-zero
# only when something could not run.
#
# Environment every benchmark honours:
#   BENCH_LIB     the library shim runs preload (default build/lib/librdmashim.so)
#   BENCH_ROUNDS  alternated rounds per comparison (each script has a default)
set -u
set -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIB=${BENCH_LIB:-$ROOT/build/lib/librdmashim.so}
PROGS=$ROOT/build/progs
BENCH=$(basename "$0" .sh)

# Only what a benchmark sets reaches the programs.
while read -r _v; do unset "$_v"; done < <(compgen -e | grep '^RDMASHIM_' || true)
unset LD_PRELOAD _v

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rdmashim-$BENCH.XXXXXX")
BG_PIDS=()
bench_cleanup() {
	local p
	declare -F bench_stop >/dev/null && bench_stop
	for p in "${BG_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${BG_PIDS[@]}"; do wait "$p" 2>/dev/null; done
	[[ -n ${BENCH_KEEP:-} ]] || rm -rf "$WORK"
}
trap bench_cleanup EXIT
# A benchmark may define bench_stop: run first at exit (servers that a
# signal to the background job does not reach).

die() { echo "$BENCH: $*" >&2; exit 2; }
say() { echo "[$BENCH] $*"; }

need() {
	local c
	for c in "$@"; do command -v "$c" >/dev/null || die "$c is missing (make deps)"; done
}
[[ -f $LIB ]] || die "$LIB missing: run make first"

# A port below the ephemeral range that nothing listens on, never the same twice.
USED_PORTS=" "
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((20000 + RANDOM % 12000))
		[[ $USED_PORTS == *" $p "* ]] && continue
		[[ -n $(ss -Htan "( sport = :$p )" 2>/dev/null) ]] && continue
		USED_PORTS+="$p "
		echo "$p"
		return 0
	done
	die "no free port found"
}

wait_listen() {
	local port=$1 i
	for ((i = 0; i < 200; i++)); do
		[[ -n $(ss -Htln "( sport = :$port )" 2>/dev/null) ]] && return 0
		sleep 0.05
	done
	die "nothing listens on 127.0.0.1:$port after 10 s"
}

# mode_env MODE PORT: the `env` words for one side. shim (or shim_NAME): the library on
# PORT (plus BENCH_SHIM_ENV, words like RDMASHIM_SPIN_US=0); tcp: nothing.
# Other shim modes (shim_NAME) add the words in VARIANT_ENV[shim_NAME].
declare -A VARIANT_ENV=()
mode_env() {
	if [[ $1 == shim* ]]; then
		# shellcheck disable=SC2086
		echo env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$2" ${BENCH_SHIM_ENV:-} ${VARIANT_ENV[$1]:-}
	else
		echo env -u LD_PRELOAD
	fi
}

# start_bg LOG CMD...: in the background, its pid in LAST_BG
start_bg() {
	local log=$1; shift
	"$@" >"$log" 2>&1 &
	LAST_BG=$!
	BG_PIDS+=("$LAST_BG")
}
stop_bg() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; return 0; }

# seq_pair MODE CONNS ROUNDS [FLAG...]: build/progs/conn_hold --seq (CONNS
# connections one after the other, ROUNDS one-byte ping-pongs each), both
# ends as MODE says (mode_env), the FLAGs (e.g. --think 50) to both; their
# output in $WORK/server.log and $WORK/client.log ("DONE ms=... cpu_us=...").
# The words of SEQ_CLIENT_WRAP, when set, run the client (e.g. strace -c).
seq_pair() {
	local mode=$1 n=$2 k=$3 P srv
	shift 3
	P=$(free_port)
	# shellcheck disable=SC2046
	start_bg "$WORK/server.log" $(mode_env "$mode" "$P") timeout -k 5 300 \
		"$PROGS/conn_hold" server --port "$P" --conns "$n" --rounds "$k" --seq "$@"
	srv=$LAST_BG
	wait_listen "$P"
	# shellcheck disable=SC2046,SC2086
	$(mode_env "$mode" "$P") timeout -k 5 300 ${SEQ_CLIENT_WRAP:-} "$PROGS/conn_hold" client --port "$P" \
		--conns "$n" --rounds "$k" --seq "$@" >"$WORK/client.log" 2>&1 ||
		die "$mode: the client failed: $(tail -n 2 "$WORK/client.log")"
	wait "$srv" || die "$mode: the server failed: $(tail -n 2 "$WORK/server.log")"
}

# seq_cost MODE CONNS ROUNDS: one seq_pair run, its CPU (both processes,
# as each measures its own) and wall time per connection appended to
# CPU[MODE] and WALL[MODE]; seq_cost_report MODE...: a line per mode
# (medians, CPU range); seq_cost_delta MODE BASE: MODE - BASE, round by
# round, on one line.
declare -A CPU=() WALL=()
seq_cost() {
	local mode=$1 n=$2 c s
	seq_pair "$mode" "$n" "$3"
	c=$(sed -n 's/^DONE .*cpu_us=\([0-9.]*\).*/\1/p' "$WORK/client.log")
	s=$(sed -n 's/^DONE .*cpu_us=\([0-9.]*\).*/\1/p' "$WORK/server.log")
	CPU[$mode]+="$(calc %.3f "($c + $s) / $n") "
	WALL[$mode]+="$(calc %.3f "$(sed -n 's/^DONE ms=\([0-9.]*\).*/\1/p' "$WORK/client.log") * 1000 / $n") "
}
seq_cost_report() {
	local mode lo hi
	for mode in "$@"; do
		read -r lo hi < <(minmax ${CPU[$mode]})
		# shellcheck disable=SC2086
		say "${mode#shim_}: cpu $(median ${CPU[$mode]}) us/conn ($lo..$hi), wall $(median ${WALL[$mode]}) us/conn"
	done
}
seq_cost_delta() {
	local -a a b diffs=()
	local i
	read -ra a <<<"${CPU[$1]}"
	read -ra b <<<"${CPU[$2]}"
	for ((i = 0; i < ${#a[@]}; i++)); do diffs+=("$(calc %.1f "${a[i]} - ${b[i]}")"); done
	echo "cpu $(median "${diffs[@]}") us/conn (per round: ${diffs[*]})"
}

# Even rounds shim first, odd rounds TCP first. order ROUND MODE...: more
# than two modes rotate, one step a round.
order() {
	local r=$1; shift
	(($# == 0)) && set -- shim tcp
	local m=("$@") i n=$#
	for ((i = 0; i < n; i++)); do printf '%s ' "${m[(i + r) % n]}"; done
	echo
}

# alternate FN [MODE...]: ROUNDS rounds of `FN MODE` for each mode (shim and
# tcp by default) in the order `order` gives, each value appended to
# VALS[MODE] (space-separated, for median and paired_ratio), each round said
# on one line.
declare -A VALS=()
alternate() {
	local fn=$1 r mode v line
	shift
	for ((r = 0; r < ROUNDS; r++)); do
		line="round $((r + 1)):"
		for mode in $(order "$r" "$@"); do
			v=$("$fn" "$mode")
			VALS[$mode]+="$v "
			line+=" $mode $v"
		done
		say "$line"
	done
}

# rate_over "S1 S2 ..." N: N requests a run over the runs' summed wall
# seconds (nan runs left out; nan when none ran).
rate_over() {
	local v sum=0 n=0
	for v in $1; do
		[[ $v == nan ]] && continue
		sum=$(calc %.4f "$sum + $v")
		n=$((n + 1))
	done
	if ((n)); then calc %.0f "$n * $2 / $sum"; else echo nan; fi
}

# rates_ratio N: from VALS (alternate's wall seconds, N requests a run)
# S and T, the shim and tcp sides' requests per second, and R = S / T
# (nan when a side never ran).
rates_ratio() {
	S=$(rate_over "${VALS[shim]}" "$1") T=$(rate_over "${VALS[tcp]}" "$1") R=nan
	[[ $S == nan || $T == nan ]] || R=$(calc %.3f "$S / $T")
}

# Pinning words for a redis server and its benchmark client: SERVER_CPU
# (CPU 0) and CLIENT_CPU (CPU 1) when there are two CPUs or more, which
# keeps the scheduler's placement out of a ratio; none with
# BENCH_PLAIN_PIN=0.
SERVER_CPU=() CLIENT_CPU=()
if [[ ${BENCH_PLAIN_PIN:-1} != 0 ]] && (($(nproc) >= 2)); then
	SERVER_CPU=(taskset -c 0) CLIENT_CPU=(taskset -c 1)
fi

# redis_get_secs PORT CLIENTS WORD...: wall seconds of one redis-benchmark
# GET run of $REQS requests against 127.0.0.1:PORT, run under WORD... (env
# words, taskset); nan when it failed.
redis_get_secs() {
	local port=$1 c=$2 t0 t1 out
	shift 2
	t0=$EPOCHREALTIME
	out=$("$@" timeout -k 5 300 redis-benchmark -h 127.0.0.1 -p "$port" -c "$c" -n "$REQS" -t get --csv \
		2>/dev/null) || { echo nan; return; }
	t1=$EPOCHREALTIME
	grep -q '"GET"' <<<"$out" || { echo nan; return; }
	calc %.4f "$t1 - $t0"
}

median() {
	printf '%s\n' "$@" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 }
	  END { if (NR == 0) { print "nan"; exit }
	        if (NR % 2) printf "%.6g\n", v[(NR + 1) / 2]
	        else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
calc() { awk "BEGIN { printf \"$1\\n\", ($2) }"; }
minmax() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo, hi }'; }

# paired_ratio "A1 A2 .." "B1 B2 ..": median of the per-round A/B
paired_ratio() {
	local a b i r=()
	read -ra a <<<"$1"
	read -ra b <<<"$2"
	for ((i = 0; i < ${#a[@]} && i < ${#b[@]}; i++)); do
		[[ ${a[i]} == nan || ${b[i]} == nan ]] && continue
		r+=("$(calc %.4f "${a[i]} / ${b[i]}")")
	done
	((${#r[@]})) || { echo nan; return; }
	calc %.3f "$(median "${r[@]}")"
}

# verdict RATIO BAR: "meets the bar >= BAR" or "below the bar >= BAR"
verdict() {
	if [[ $1 != nan ]] && awk "BEGIN { exit !(($1) >= ($2)) }"; then
		echo "(bar >= ${2}x: met)"
	else
		echo "(bar >= ${2}x: NOT met)"
	fi
}
