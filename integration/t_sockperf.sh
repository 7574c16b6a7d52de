#!/bin/bash
# t_sockperf: an unmodified sockperf server (sr --tcp) with the ping-pong,
# throughput and under-load clients. Without the shim briefly (1 s each) as a
# reference, then 3 s each with both ends under the shim on the whitelisted
# port (tracked, never upgraded). Every run must exit 0, print no ERROR, and
# report messages: observations and valid received messages > 0 for the
# latency tests (no drops, duplicates or reordering), messages sent and a
# message rate > 0 for throughput. The trace shows each client connection
# from both ends.
#
# Speed guard (issue 34): sockperf ping-pong 64 B, plain TCP and both ends
# under the shim over shared memory at its defaults, SPEED_ROUNDS (3)
# alternated rounds of SPEED_T (1) s each in this run; the shim's median p50
# must not be above TCP's (10% for noise: idle, the shim is 2x lower here;
# beside two CPU hogs on two cores its spin is held, both ride the kernel's
# wake-up and come out even, 7.32 against 7.32 us). It judges a ratio within
# one run, never an absolute time; it fails with one line giving both
# figures and every round's.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
need_cmd sockperf python3

# run_round MODE SECONDS [VAR=V...]
run_round() {
  local mode=$1 secs=$2 port pid rc test
  shift 2
  local run=(no_shim)
  [[ $mode == shim ]] && run=(with_shim "$@")
  port=$PORT
  start_bg "$mode-server" "$mode" "$@" sockperf sr --tcp -i 127.0.0.1 -p "$port"
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "$mode: sockperf server listening"
    stop_bg "$pid"
    return
  fi
  for test in ping-pong throughput under-load; do
    rc=0
    "${run[@]}" sockperf "$test" --tcp -i 127.0.0.1 -p "$port" -t "$secs" -m 64 \
      >"$WORK/$mode-$test.out" 2>&1 || rc=$?
    check "$mode $test -t $secs: exit status 0 (got $rc)" test "$rc" -eq 0
    check_sockperf_report "$mode $test" "$test" "$WORK/$mode-$test.out"
  done
  check "$mode: server still running after the three clients" kill -0 "$pid"
  stop_bg "$pid"
  if grep -qi 'ERROR' "$WORK/$mode-server.out" "$WORK/$mode-server.err"; then
    not_ok "$mode: no ERROR from the server"
    grep -hi 'ERROR' "$WORK/$mode-server.out" "$WORK/$mode-server.err" | head -n 5
  else
    ok "$mode: no ERROR from the server"
  fi
}

PORT=$(free_port)
run_round plain 1

PORT=$(free_port)
dir=$WORK/trace
mkdir -p "$dir"
shim_vars "$dir" "$PORT"
run_round shim 3 "${SHIM_VARS[@]}"

# pp_p50 MODE -> sockperf ping-pong p50 in us (empty: no figure)
pp_p50() {
  local mode=$1 port pid out
  local run=(no_shim)
  port=$(free_port)
  out=$WORK/speed-$mode-$port.out
  [[ $mode == shim ]] && run=(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm)
  start_bg "speed-$mode-server" "$mode" "${run[@]:1}" sockperf sr --tcp -i 127.0.0.1 -p "$port"
  pid=$BG_PID
  if wait_listen "$port"; then
    # --mps: sockperf sizes its sequence table from it; over shm a round
    # trip can take under a microsecond, past the default's (ERROR:
    # _seqN > m_maxSequenceNo), as integration/bench/shm.sh found.
    "${run[@]}" sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t "${SPEED_T:-1}" -m 64 --mps 20000000 >"$out" 2>&1
    sed 's/\x1b\[[0-9;]*m//g' "$out" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | head -n 1
  fi
  stop_bg "$pid"
}
median() { grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
tcp_r="" shm_r=""
for ((r = 0; r < ${SPEED_ROUNDS:-3}; r++)); do
  tcp_r="$tcp_r $(pp_p50 plain)"
  shm_r="$shm_r $(pp_p50 shim)"
done
tcp_m=$(tr ' ' '\n' <<<"$tcp_r" | median) shm_m=$(tr ' ' '\n' <<<"$shm_r" | median)
n_fig=$(tr ' ' '\n' <<<"$tcp_r $shm_r" | grep -cE '^[0-9.]+$')
check "speed: every round gave a figure ($n_fig of $((2 * ${SPEED_ROUNDS:-3})))" test "$n_fig" -eq $((2 * ${SPEED_ROUNDS:-3}))
check "speed: shim over shm p50 ${shm_m:-none} us no slower than plain TCP p50 ${tcp_m:-none} us (sockperf ping-pong 64 B, medians of ${SPEED_ROUNDS:-3} alternated rounds; shm:$shm_r; tcp:$tcp_r)" \
  awk -v s="$shm_m" -v t="$tcp_m" 'BEGIN { exit !(s + 0 > 0 && t + 0 > 0 && s + 0 <= 1.1 * t) }'

trace_py "$dir" "$PORT" <<'PY'
port = int(ARGS[0])
lis = events("listen.track")
check(len(lis) == 1 and port_of(lis[0]["local"]) == port, "sockperf server: one listen.track on %d" % port)
srv, cli = tracks("server", port), tracks("client", port)
check(len(srv) >= 3, "server tracked the 3 client connections (got %d)" % len(srv))
check(len(cli) == len(srv), "each client tracked its connection too (%d vs %d)" % (len(cli), len(srv)))
check({conn_key(r) for r in srv} == {conn_key(r) for r in cli}, "both ends agree on the 4-tuples")
check(all(decided(r) for r in srv + cli), "all " + DECISION)
PY

finish
