#!/bin/bash
# matrix/nginx_workers: nginx with several workers under a steady load, the
# shape that failed in the field. Two servers: worker_processes 2 on one
# shared listening socket (the workers race for each accept), and
# worker_processes 4 with `listen ... reuseport` (one listening socket per
# worker, the kernel spreads the connections). Each is loaded by wrk (2
# threads, 20 keep-alive connections, 5 s; an epoll loop per thread) on a
# 6-byte file and on a 64 KiB file (sendfile). Both nginx and wrk run under
# the shim. Result: per wrk run, its exit status, its socket error counts
# (connect/read/write/timeout, all 0) and its non-2xx count (0); never the
# number of requests, which is a timing. And nginx logged no error.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd wrk
. "$(dirname "${BASH_SOURCE[0]}")/nginx.inc"
MX_SWITCHED_BY="nginx2 nginx4 wrk-w2-small wrk-w2-64k wrk-w4-small wrk-w4-64k"

mx_small_files "$WORK/www"

mx_body() {
  local w port flags dir
  for w in 2 4; do
    port=$(free_port)
    mx_port "nginx-w$w" "$port"
    flags=
    ((w == 4)) && flags=reuseport
    dir=$WORK/$MODE-nginx$w
    nginx_conf "$dir" "$w" "$port $flags" "sendfile on; keepalive_requests 100000;"
    nginx_start "nginx$w" "$dir" "$port" || { stop_bg "$NGINX_PID"; continue; }
    mx_wrk "wrk-w$w-small" "http://127.0.0.1:$port/small.txt" -t2 -c20 -d5s
    mx_wrk "wrk-w$w-64k" "http://127.0.0.1:$port/64k.bin" -t2 -c20 -d5s
    nginx_stop "nginx$w" "nginx ($w workers)"
  done
}

mx_main
