#!/bin/bash
# matrix/curl_parallel: curl's parallel transfers (curl -Z --parallel-max
# 20: one multi handle, up to 20 HTTP/1.1 connections open at once, driven
# by one poll loop) against nginx (2 workers, sendfile). 60 seeded files of
# 1 B to 2 MB, fetched twice: once with 20 in parallel, once with
# --parallel-max 20 and --no-keepalive (a connection per file). Both under
# the shim. Result: curl's exit status and HTTP codes, the MD5 of every file
# (equal to the served file's), and nginx logged no error.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd curl
. "$(dirname "${BASH_SOURCE[0]}")/nginx.inc"
MX_SWITCHED_BY="nginx curl-keepalive"

mx_seeded_files "$WORK/www" p 95 60 2000000 1 1000 16384 65536 300000 2000000

mx_body() {
  local port how dir opts
  port=$(free_port)
  mx_port nginx "$port"
  dir=$WORK/$MODE-nginx
  nginx_conf "$dir" 2 "$port" "sendfile on; keepalive_requests 10000;"
  nginx_start nginx "$dir" "$port" || { stop_bg "$NGINX_PID"; return; }
  for how in keepalive close; do
    opts=(-Z --parallel-max 20 --parallel-immediate)
    [[ $how == close ]] && opts+=(--no-keepalive -H 'Connection: close')
    mx_curl_files "curl-$how" "curl -Z ($how)" "$dir/$how" "http://127.0.0.1:$port" p 60 --http1.1 "${opts[@]}"
  done
  nginx_stop nginx
}

mx_main
