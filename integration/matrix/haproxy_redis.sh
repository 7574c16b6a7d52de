#!/bin/bash
# matrix/haproxy_redis: haproxy in TCP mode (its own event loop per thread;
# each client connection relayed as it comes to a connection of its own to
# the backend; no splice, so every byte passes through its buffers) in
# front of redis-server. `insecure-setuid-wanted`, as in
# matrix/haproxy.inc: without it haproxy sets no_new_privs and the shim
# leaves it (every connection on TCP, by design). Through haproxy:
# redis-benchmark (20 connections, 10000 each of SET, GET, INCR and LPUSH,
# then again with -P 16 pipelining on 8), redis-cli --pipe with 20000 SETs of 1 B
# to 2 KB binary values (seeded) in one stream, and EVAL computing a SHA-1
# over all of them on the server. All of haproxy, redis-server and the
# clients under the shim; haproxy's port and redis's are both whitelisted,
# so both legs can switch. Result: exit statuses, the tests the benchmarks
# reported, the counter and list lengths they left, --pipe's "errors: 0,
# replies: 20000" and the SHA-1 (equal to the one computed here).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd haproxy redis-benchmark
. "$(dirname "${BASH_SOURCE[0]}")/redis.inc"
N=20000
BN=10000
MX_SWITCHED_BY="haproxy@haproxy haproxy@redis redis bench bench-P16 pipe"

redis_pipe_file h 88 "$N"

mx_body() {
  local front back rpid hpid rc out how dir=$WORK/$MODE-haproxy
  front=$(free_port)
  back=$(free_port)
  mx_port haproxy "$front"
  mx_port redis "$back"
  mkdir -p "$dir"
  cat >"$dir/haproxy.cfg" <<CONF
global
  maxconn 512
  insecure-setuid-wanted
  pidfile $dir/haproxy.pid
defaults
  mode tcp
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$front
  default_backend be
backend be
  server r1 127.0.0.1:$back
CONF
  redis_start redis "$back" "$WORK"
  rpid=$BG_PID
  mx_wait_listen "$back" || { stop_bg "$rpid"; return; }
  mx_bg haproxy haproxy -db -f "$dir/haproxy.cfg"
  hpid=$BG_PID
  mx_wait_listen "$front" || { stop_bg "$hpid"; stop_bg "$rpid"; return; }
  for how in bench bench-P16; do
    local opts=(-c 20)
    [[ $how == bench-P16 ]] && opts=(-c 8 -P 16)
    rc=0
    out=$(mx_fg "$how" redis-benchmark -h 127.0.0.1 -p "$front" -n "$BN" "${opts[@]}" -t set,get,incr,lpush -q \
          2>"$WORK/$MODE-$how.err" | tr '\r' '\n') || rc=$?
    mx_result "redis-benchmark ${opts[*]} exit $rc, reported:" \
      "$(grep -oE '^[A-Z]+: [0-9.]+ requests per second' <<<"$out" | cut -d: -f1 | tr '\n' ' ')"
    mx_check "redis-benchmark ${opts[*]}: exit status 0 (got $rc)" test "$rc" -eq 0
    mx_check "redis-benchmark ${opts[*]}: its 4 tests reported" \
      test "$(grep -cE '^[A-Z]+: [0-9.]+ requests per second' <<<"$out")" -eq 4
  done
  out=$(mx_fg cli-counter redis-cli -h 127.0.0.1 -p "$front" GET 'counter:__rand_int__' 2>&1)
  mx_result "INCR counter: $out"
  mx_same "the INCRs of both runs all counted" "$((2 * BN))" "$out"
  out=$(mx_fg cli-llen redis-cli -h 127.0.0.1 -p "$front" LLEN mylist 2>&1)
  mx_result "LLEN mylist: $out"
  mx_same "the LPUSHes of both runs all counted" "$((2 * BN))" "$out"
  redis_pipe_check "$front" h "$N"
  mx_check "haproxy still running" kill -0 "$hpid"
  mx_check "redis-server still running" kill -0 "$rpid"
  stop_bg "$hpid"
  stop_bg "$rpid"
}

mx_main
