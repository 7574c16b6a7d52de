#!/bin/bash
# t_redis: an unmodified redis-server and redis-benchmark / redis-cli, without
# the shim and then with both ends under it on the whitelisted server port
# (tracked, never upgraded). Both times: redis-benchmark reports a non-zero
# rate for SET and GET, and a 100 KiB binary value round-trips exactly through
# redis-cli SET/GET. With the shim the trace shows the server's accepted
# connections and the clients' connects, the two ends agreeing on every
# 4-tuple.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
need_cmd redis-server redis-benchmark redis-cli python3

REQUESTS=20000
CLIENTS=50

"$PYTHON" -c '
import random, sys
r = random.Random(20240601)
sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(100 * 1024)))' >"$WORK/value.bin"
printf '\n' | cat "$WORK/value.bin" - >"$WORK/value.expected"

# run_redis MODE LABEL PORT [VAR=V...]: one full round; MODE is shim or plain.
run_redis() {
  local mode=$1 label=$2 port=$3 pid out rps rc t
  shift 3
  local run=(no_shim)
  [[ $mode == shim ]] && run=(with_shim "$@")
  start_bg "$label-redis" "$mode" "$@" redis-server --save '' --appendonly no --port "$port" \
    --bind 127.0.0.1 --dir "$WORK" --daemonize no --logfile '' --unixsocket '' --protected-mode yes
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "$label: redis-server listening"
    tail -n 20 "$WORK/$label-redis.out" "$WORK/$label-redis.err"
    stop_bg "$pid"
    return
  fi
  out=$("${run[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -n "$REQUESTS" -c "$CLIENTS" -t get,set -q \
        2>"$WORK/$label-bench.err" | tr '\r' '\n')
  rc=$?
  check "$label: redis-benchmark exit status 0 (got $rc)" test "$rc" -eq 0
  for t in SET GET; do
    rps=$(awk -v t="$t:" '$1 == t && $3 == "requests" { print $2; exit }' <<<"$out")
    if [[ -n $rps ]] && awk -v r="$rps" 'BEGIN { exit !(r > 0) }'; then
      ok "$label: redis-benchmark $t: $rps requests per second"
    else
      not_ok "$label: redis-benchmark $t rate reported and > 0 (got '${rps}')"
      tail -n 5 <<<"$out"
      cat "$WORK/$label-bench.err"
    fi
  done
  out=$("${run[@]}" redis-cli -h 127.0.0.1 -p "$port" -x SET bigvalue <"$WORK/value.bin" 2>&1)
  same "$label: redis-cli SET of 100 KiB" "OK" "$out"
  "${run[@]}" redis-cli -h 127.0.0.1 -p "$port" --raw GET bigvalue >"$WORK/$label-got.bin" 2>&1
  check "$label: redis-cli GET returns the 100 KiB value byte for byte" \
    cmp -s "$WORK/value.expected" "$WORK/$label-got.bin"
  out=$("${run[@]}" redis-cli -h 127.0.0.1 -p "$port" STRLEN bigvalue 2>&1)
  same "$label: STRLEN" "102400" "$out"
  out=$("${run[@]}" redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE 2>&1)
  rc=0; wait_bg "$pid" 30 || rc=$?
  check "$label: redis-server exits 0 after SHUTDOWN (got $rc)" test "$rc" -eq 0
  check "$label: redis-server stderr empty" test ! -s "$WORK/$label-redis.err"
}

run_redis plain plain "$(free_port)"

dir=$WORK/trace
mkdir -p "$dir"
port=$(free_port)
shim_vars "$dir" "$port"
run_redis shim shim "$port" "${SHIM_VARS[@]}"

trace_py "$dir" "$port" "$CLIENTS" <<'PY'
port, clients = int(ARGS[0]), int(ARGS[1])
lis = events("listen.track")
check(len(lis) == 1 and port_of(lis[0]["local"]) == port, "redis-server: one listen.track on %d" % port)
srv = tracks("server", port)
cli = tracks("client", port)
# The benchmark opens its config connection plus 50 per test; the cli 4 more.
check(len(srv) >= 2 * clients + 4, "server tracked >= %d accepted connections (got %d)" % (2 * clients + 4, len(srv)))
check(all(r["how"] == "accept" and r["pid"] == lis[0]["pid"] for r in srv), "all in the redis-server process, how=accept")
check(len(cli) == len(srv), "every accepted connection also tracked by its client (%d vs %d)" % (len(cli), len(srv)))
check({conn_key(r) for r in srv} == {conn_key(r) for r in cli}, "client and server tracks agree on the 4-tuples")
check(all(decided(r) for r in srv + cli), "all " + DECISION)
closes = [r for r in events("fd.close", role="server") if port_of(r["local"]) == port]
# All but the one that sent SHUTDOWN: redis exits with that one still open.
check(len(closes) >= len(srv) - 1, "redis-server traced fd.close for its connections (%d of %d)" % (len(closes), len(srv)))
PY

finish
