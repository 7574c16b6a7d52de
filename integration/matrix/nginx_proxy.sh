#!/bin/bash
# matrix/nginx_proxy: a proxy between two legs. wget (GNU: one keep-alive
# connection, select) fetches 14 files of 1 B to 8 MB (seeded) from nginx
# (prefork, 2 workers), which proxies each request to Python's http.server
# (ThreadingHTTPServer: a thread per connection, HTTP/1.0: it closes after
# each answer) on a new upstream connection. Both ports are whitelisted, so
# both legs upgrade. Result: wget's exit status, each file's MD5 (equal to
# the served file's).
#
# nginx adds an upstream socket to its epoll set (EPOLLET) before it calls
# connect(), when the shim does not track the socket yet: the shim takes
# that registration over at connect (shim/epoll_early.c). Without that, an
# 8 MB upstream answer stalled: the shim's epoll never held the item, nginx
# never learned of the ring's data, and both sides slept.
#
#
# It was a known failure (intermittent, under load: answers truncated, wget
# exit 4). The cause: an upstream connection whose direction towards the
# peer had switched while its receiving direction was still on TCP (the
# server's switch offset 4 MB ahead) asked the kernel for bells only, and
# the shim's EPOLLET took a new edge from new ring bytes alone; nginx,
# having read a full buffer, waited for an edge the TCP bytes never gave
# (epoll_wait.c, shim_io_rx_arrived counts TCP arrivals too).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd wget
. "$(dirname "${BASH_SOURCE[0]}")/nginx.inc"
MX_SWITCHED_BY="wget nginx@upstream"

# Upstream connections live for one answer: two long ones (the last two
# files, 8 MiB) switch whatever the load.
MX_SEEDED_BIG=13:$((8 << 20)) mx_seeded_files "$WORK/www" g 82 14 1500000 1 1000 65536 500000 1500000

mx_body() {
  local fport uport upid rc dir urls=() i
  fport=$(free_port)
  uport=$(free_port)
  mx_port front "$fport"
  mx_port upstream "$uport"
  dir=$WORK/$MODE-nginx
  mkdir -p "$dir/got"
  nginx_conf "$dir" 2 "$fport" "keepalive_requests 1000;" "location / { proxy_pass http://127.0.0.1:$uport; }"
  mx_bg upstream "$PY3" -m http.server "$uport" --bind 127.0.0.1 --directory "$WORK/www"
  upid=$BG_PID
  if ! nginx_start nginx "$dir" "$fport" || ! mx_wait_listen "$uport"; then
    stop_bg "$NGINX_PID"
    stop_bg "$upid"
    return
  fi
  for i in $(seq -w 1 14); do urls+=("http://127.0.0.1:$fport/g$i.bin"); done
  rc=0
  mx_fg wget wget -q -T 10 -t 1 -P "$dir/got" "${urls[@]}" >"$dir/wget.out" 2>&1 || rc=$?
  mx_result "wget exit $rc"
  (cd "$dir/got" && md5sum g*.bin) >"$dir/got.md5" 2>&1
  cat "$dir/got.md5" >>"$RES"
  mx_check "wget exit status 0 (got $rc)" test "$rc" -eq 0
  mx_check "the 14 files byte for byte through the proxy (MD5)" cmp -s "$WORK/want.md5" "$dir/got.md5"
  mx_result "upstream answered $(grep -c '"GET /g[0-9]*.bin HTTP/1.0" 200' "$WORK/$MODE-upstream.err") GETs with 200"
  nginx_stop nginx
  stop_bg "$upid"
}

mx_main
