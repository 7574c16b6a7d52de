#!/bin/bash
# matrix/redis_pipeline: redis-server (its own single-threaded event loop)
# and two pipelining clients: redis-benchmark -P 32 (4 connections, each
# with 32 requests in flight) running SET, GET, INCR and LPUSH 20000 times,
# then redis-cli --pipe sending 20000 SETs of 1 B to 2 KB binary values
# (seeded) in one stream. Result: the exit statuses, the tests the benchmark
# reported, the counter and list it left (20000 each), --pipe's "errors: 0,
# replies: 20000", a SHA-1 the server computes over all 20000 values (EVAL,
# which must equal the one computed here) and an MD5 of 2000 of them read
# back with redis-cli --raw MGET.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd redis-benchmark
. "$(dirname "${BASH_SOURCE[0]}")/redis.inc"
N=20000
# The MGET client is one short connection: whether it switches before it
# ends depends on the load (its answer is still checked byte for byte).
MX_SWITCHED_BY="benchmark pipe server"

redis_pipe_file p 77 "$N"

mx_body() {
  local port rc out pid keys
  port=$(free_port)
  mx_port redis "$port"
  redis_start server "$port" "$WORK" --protected-mode yes
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  rc=0
  out=$(mx_fg benchmark redis-benchmark -h 127.0.0.1 -p "$port" -n "$N" -c 4 -P 32 -t set,get,incr,lpush -q \
        2>"$WORK/$MODE-bench.err" | tr '\r' '\n') || rc=$?
  mx_result "redis-benchmark -P 32 exit $rc"
  mx_result "reported: $(grep -oE '^[A-Z]+: [0-9.]+ requests per second' <<<"$out" | cut -d: -f1 | tr '\n' ' ')"
  mx_check "redis-benchmark -P 32 exit status 0 (got $rc)" test "$rc" -eq 0
  mx_result "INCR counter: $(mx_fg cli-counter redis-cli -h 127.0.0.1 -p "$port" GET 'counter:__rand_int__' 2>&1)"
  mx_result "LLEN mylist: $(mx_fg cli-llen redis-cli -h 127.0.0.1 -p "$port" LLEN mylist 2>&1)"

  redis_pipe_check "$port" p "$N"
  mapfile -t keys < <(seq -f 'p:%.0f' 0 1999)
  mx_fg cli-mget redis-cli -h 127.0.0.1 -p "$port" --raw MGET "${keys[@]}" >"$WORK/$MODE.mget" 2>&1
  mx_result "MGET of 2000: md5 $(md5sum <"$WORK/$MODE.mget" | cut -c1-32)"
  mx_check "MGET returns 2000 values byte for byte" cmp -s "$WORK/want.mget" "$WORK/$MODE.mget"

  mx_fg cli-shutdown redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
  rc=0
  wait_bg "$pid" 20 || rc=$?
  mx_result "redis-server exit $rc"
}

mx_main
