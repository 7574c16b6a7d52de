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
need_cmd nginx wget
MX_SWITCHED_BY="wget nginx@upstream"

mkdir -p "$WORK/www"
"$PY3" - "$WORK/www" <<'PY'
import random, sys
rng = random.Random(82)
for i in range(1, 15):
    n = rng.choice((1, 1000, 65536, 500000, 1500000, rng.randint(1, 1500000)))
    if i > 12:
        # Upstream connections live for one answer: two long ones switch
        # whatever the load.
        n = 8 << 20
    open("%s/g%02d.bin" % (sys.argv[1], i), "wb").write(rng.randbytes(n))
PY
(cd "$WORK/www" && md5sum g*.bin) >"$WORK/want.md5"

mx_body() {
  local fport uport npid upid rc dir urls=() i
  fport=$(free_port)
  uport=$(free_port)
  mx_port front "$fport"
  mx_port upstream "$uport"
  dir=$WORK/$MODE-nginx
  mkdir -p "$dir/logs" "$dir/got"
  cat >"$dir/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes 2;
user root;
pid $dir/nginx.pid;
error_log stderr warn;
events { worker_connections 256; }
http {
  access_log off;
  keepalive_requests 1000;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  server {
    listen 127.0.0.1:$fport;
    location / { proxy_pass http://127.0.0.1:$uport; }
  }
}
CONF
  mx_bg upstream "$PY3" -m http.server "$uport" --bind 127.0.0.1 --directory "$WORK/www"
  upid=$BG_PID
  mx_bg nginx nginx -p "$dir" -c "$dir/nginx.conf"
  npid=$BG_PID
  if ! mx_wait_listen "$uport" || ! mx_wait_listen "$fport"; then
    stop_bg "$npid"
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
  mx_check "nginx still running" kill -0 "$npid"
  stop_bg "$npid"
  stop_bg "$upid"
  if grep -q '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err"; then
    not_ok "$MODE: nginx logged no error"
    grep '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err" | head -n 5
  fi
}

mx_main
