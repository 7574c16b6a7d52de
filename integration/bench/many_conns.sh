#!/bin/bash
# many_conns.sh: N concurrent upgraded connections between one client and
# one server process (shm), what each idle one costs in memory and how long
# setting them all up takes.
#
# build/progs/conn_hold: the client makes N connections one after the
# other, each with BENCH_MANY_EACH (default 3) rounds of a 1-byte ping-pong
# as it is made (its upgrade starts at the first and ends within them), then
# runs BENCH_MANY_ROUNDS (default 10) rounds over each in turn; both then
# hold every connection open, idle. Both ends under the shim
# (RDMASHIM_TRANSPORTS=shm, RDMASHIM_UPGRADE_AFTER_MS=0, default ring size
# unless BENCH_MANY_RING_KB), trace at info level.
#
#   memory   /proc/PID/smaps_rollup Rss and Pss of each process, read before
#            the first connection (client waiting, server listening) and
#            with all N upgraded and idle; the delta / N. Pss splits the ring
#            pages the two ends share, so client + server Pss is what the
#            machine pays per connection. The same run without the shim
#            gives the plain-TCP figures (the kernel's socket buffers are in
#            neither).
#   time     from the client's first connect to the last upgrade.done in
#            either trace (all N on shm); and the time the client took for
#            the connects and the rounds, shim and TCP.
#
# The fd limit is raised to what N needs (1 per connection and side, plus
# the 1/32 the shim leaves to the program and 1024) when allowed; N
# shrinks to what the limit allows otherwise. Prints
#   bench many_conns: N upgraded: per idle connection rss X KiB pss Y KiB (client+server); setup Z ms (tcp W ms)
# Environment: BENCH_MANY_CONNS (default 10000), BENCH_MANY_EACH, BENCH_MANY_ROUNDS,
# BENCH_MANY_RING_KB.
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need python3 ss
[[ -x $PROGS/conn_hold ]] || die "$PROGS/conn_hold missing: run make first"
N=${BENCH_MANY_CONNS:-10000}
ROUNDS=${BENCH_MANY_ROUNDS:-10}

# An upgraded connection holds one fd (its socket); a handshake under way
# holds a rendezvous socket too, until the peer's next call on it. Each
# connection makes BENCH_MANY_EACH (default 3) rounds as it is made, with
# the upgrade at the first data call, so its handshake ends before the next
# connection's begins. The shim leaves the last 1/32 of the limit to the
# program (reason fd_limit).
EACH=${BENCH_MANY_EACH:-3}
want=$((9 * N / 8 + 1024))
if (($(ulimit -n) < want)); then
	# root may raise the hard limit too (up to fs.nr_open)
	(($(ulimit -Hn) < want)) && ulimit -Hn "$want" 2>/dev/null
	ulimit -n "$want" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
fi
lim=$(ulimit -n)
if ((lim < want)); then
	N=$(((lim - 1024) * 8 / 9))
	say "fd limit $lim: N lowered to $N"
fi
((N > 0)) || die "fd limit $lim is too low"

# mem PID: "rss_kib pss_kib"
mem() { awk '/^Rss:/ { r = $2 } /^Pss:/ { p = $2 } END { print r + 0, p + 0 }' "/proc/$1/smaps_rollup" 2>/dev/null; }
# pid_of LOG: the pid conn_hold printed
pid_of() {
	local i
	for ((i = 0; i < 200; i++)); do
		sed -n 's/^READY [0-9]* pid=\([0-9]*\).*/\1/p' "$1" | grep . && return 0
		sleep 0.05
	done
	die "no READY in $1"
}
count_done() { cat "$WORK"/trace-"$1".*.jsonl 2>/dev/null | grep -c '"event":"upgrade.done"'; }

# one MODE: runs the pair; sets RES_<field>
one() {
	local mode=$1 P vars=() spid cpid s0 c0 s1 c1 up i
	P=$(free_port)
	rm -f "$WORK/go" "$WORK/hold"
	if [[ $mode == shim ]]; then
		vars=(LD_PRELOAD="$LIB" RDMASHIM_PORTS="$P" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_TRACE=info
			RDMASHIM_TRACE_FILE="$WORK/trace-$mode.%p.jsonl")
		[[ -n ${BENCH_MANY_RING_KB:-} ]] && vars+=(RDMASHIM_RING_KB="$BENCH_MANY_RING_KB")
	fi
	start_bg "$WORK/$mode-server.log" env "${vars[@]}" timeout -k 5 600 "$PROGS/conn_hold" server \
		--port "$P" --conns "$N" --rounds "$ROUNDS" --each "$EACH" --hold "$WORK/hold"
	local sbg=$LAST_BG
	spid=$(pid_of "$WORK/$mode-server.log")
	start_bg "$WORK/$mode-client.log" env "${vars[@]}" timeout -k 5 600 "$PROGS/conn_hold" client \
		--port "$P" --conns "$N" --rounds "$ROUNDS" --each "$EACH" --go "$WORK/go" --hold "$WORK/hold"
	local cbg=$LAST_BG
	cpid=$(pid_of "$WORK/$mode-client.log")
	wait_listen "$P"
	s0=$(mem "$spid") c0=$(mem "$cpid")
	touch "$WORK/go"
	for ((i = 0; i < 6000; i++)); do
		up=$(sed -n 's/^UP ms=\([0-9.]*\).*/\1/p' "$WORK/$mode-client.log")
		[[ -n $up ]] && break
		kill -0 "$cbg" 2>/dev/null || break
		sleep 0.05
	done
	[[ -n $up ]] || { touch "$WORK/hold"; die "$mode: the client did not finish: $(tail -n 3 "$WORK/$mode-client.log")"; }
	if [[ $mode == shim ]]; then
		# The last handshakes may finish after the client's last round.
		for ((i = 0; i < 100; i++)); do
			(($(count_done "$mode") >= 2 * N)) && break
			sleep 0.1
		done
		RES_done=$(count_done "$mode")
	fi
	sleep 0.5 # let both settle into their idle wait
	s1=$(mem "$spid") c1=$(mem "$cpid")
	touch "$WORK/hold"
	wait "$cbg" || say "$mode: client exited with an error: $(tail -n 2 "$WORK/$mode-client.log")"
	wait "$sbg" || say "$mode: server exited with an error: $(tail -n 2 "$WORK/$mode-server.log")"
	read -r sr0 sp0 <<<"$s0"; read -r cr0 cp0 <<<"$c0"
	read -r sr1 sp1 <<<"$s1"; read -r cr1 cp1 <<<"$c1"
	RES_up=$up
	RES_rss=$(calc %.1f "(($sr1 - $sr0) + ($cr1 - $cr0)) / $N")
	RES_pss=$(calc %.1f "(($sp1 - $sp0) + ($cp1 - $cp0)) / $N")
	RES_detail="client rss $(calc %.1f "($cr1 - $cr0) / $N") pss $(calc %.1f "($cp1 - $cp0) / $N"), server rss $(calc %.1f "($sr1 - $sr0) / $N") pss $(calc %.1f "($sp1 - $sp0) / $N") KiB"
}

say "$N connections, $EACH ping-pong rounds each as made, then $ROUNDS over all, fd limit $(ulimit -n)"
one tcp
T_UP=$RES_up T_RSS=$RES_rss T_PSS=$RES_pss
say "tcp: connected and $ROUNDS rounds in $T_UP ms; per connection: $RES_detail"
one shim
say "shim: connected and $ROUNDS rounds in $RES_up ms; upgrade.done lines $RES_done of $((2 * N)); per connection: $RES_detail"
setup=$(python3 - "$WORK"/trace-shim.*.jsonl <<'PY'
import datetime, json, sys
def us(ts):
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return (d - datetime.datetime(1970, 1, 1)).total_seconds() * 1e6
first = last = None
for path in sys.argv[1:]:
    for line in open(path):
        if '"conn.track"' in line and '"role":"client"' in line:
            t = us(json.loads(line)["ts"])
            first = t if first is None else min(first, t)
        elif '"upgrade.done"' in line:
            t = us(json.loads(line)["ts"])
            last = t if last is None else max(last, t)
print("%.0f" % ((last - first) / 1000) if first is not None and last is not None else "nan")
PY
)
echo "bench many_conns: $((RES_done / 2)) of $N upgraded (shm): per idle connection rss $RES_rss KiB pss $RES_pss KiB (client+server; tcp: rss $T_RSS pss $T_PSS); setup of all: $setup ms to the last upgrade.done (client connects + $ROUNDS rounds: shim $RES_up ms, tcp $T_UP ms)"
exit 0
