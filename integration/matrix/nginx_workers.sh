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
need_cmd nginx wrk
MX_SWITCHED_BY="nginx2 nginx4 wrk-w2-small wrk-w2-64k wrk-w4-small wrk-w4-64k"

mkdir -p "$WORK/www"
printf 'small\n' >"$WORK/www/small.txt"
"$PY3" -c 'import random, sys; open(sys.argv[1], "wb").write(random.Random(64).randbytes(65536))' "$WORK/www/64k.bin"

# nginx_conf DIR PORT WORKERS LISTEN_FLAGS
nginx_conf() {
  mkdir -p "$1/logs"
  cat >"$1/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes $3;
user root;
pid $1/nginx.pid;
error_log stderr warn;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  keepalive_requests 100000;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  server {
    listen 127.0.0.1:$2 $4;
    root $WORK/www;
  }
}
CONF
}

mx_body() {
  local w port pid flags dir
  for w in 2 4; do
    port=$(free_port)
    mx_port "nginx-w$w" "$port"
    flags=
    ((w == 4)) && flags=reuseport
    dir=$WORK/$MODE-nginx$w
    nginx_conf "$dir" "$port" "$w" "$flags"
    mx_bg "nginx$w" nginx -p "$dir" -c "$dir/nginx.conf"
    pid=$BG_PID
    mx_wait_listen "$port" || { stop_bg "$pid"; continue; }
    mx_wrk "wrk-w$w-small" "http://127.0.0.1:$port/small.txt" -t2 -c20 -d5s
    mx_wrk "wrk-w$w-64k" "http://127.0.0.1:$port/64k.bin" -t2 -c20 -d5s
    mx_check "nginx ($w workers) still running" kill -0 "$pid"
    stop_bg "$pid"
    if grep -q '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx$w.err"; then
      not_ok "$MODE: nginx ($w workers) logged no error"
      grep '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx$w.err" | head -n 5
    fi
    mx_result "nginx ($w workers) errors logged: $(grep -c '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx$w.err")"
  done
}

mx_main
