#!/bin/bash
# matrix/apache_prefork: Apache httpd with mpm_prefork (a parent forks
# single-threaded children that take turns at accept; a child holds a
# keep-alive connection with blocking reads between requests), standalone
# from its own configuration (matrix/apache.inc), loaded by wrk (2 threads,
# 20 keep-alive connections, 5 s; an epoll loop per thread) on a 6-byte
# file and on a 64 KiB one. Both under the shim. Result: per wrk run its
# exit status, its socket error counts (connect/read/write/timeout, all 0)
# and non-2xx count (0), never the number of requests (a timing); and no
# line of apache2's error log with "unexpected state", an error or a child
# that exited.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd wrk
. "$(dirname "${BASH_SOURCE[0]}")/apache.inc"
MX_SWITCHED_BY="apache wrk-small wrk-64k"

mx_body() {
  local port
  port=$(free_port)
  mx_port apache "$port"
  apache_start prefork "$port"
  mx_wait_listen "$port" || { stop_bg "$APACHE_PID"; return; }
  mx_wrk wrk-small "http://127.0.0.1:$port/small.txt" -t2 -c20 -d5s
  mx_wrk wrk-64k "http://127.0.0.1:$port/64k.bin" -t2 -c20 -d5s
  apache_stop_check
}

mx_main
