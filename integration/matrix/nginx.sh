#!/bin/bash
# matrix/nginx: nginx (prefork: a master opens the listening socket and forks
# 2 workers that accept from it, each an epoll loop; files go out with
# sendfile) serving static files to curl (libcurl: non-blocking sockets,
# poll, the answer read to Content-Length): 16 files of 1 B to 1.5 MB
# (seeded) fetched in one curl run over one keep-alive connection, again with
# --http1.0 (a connection per file, nginx closes after each answer), and
# again 4 at a time (curl -Z, the multi interface). Result: exit statuses,
# each file's MD5 (equal to the served file's), HTTP codes.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd curl
. "$(dirname "${BASH_SOURCE[0]}")/nginx.inc"
# --http1.0 connections are short (one file each): whether the handshake
# beats nginx's close depends on the load, so they need not switch (their
# bytes must be exact all the same).
MX_SWITCHED_BY="curl-keepalive curl-parallel nginx"

mx_seeded_files "$WORK/www" f 81 16 1500000 1 1000 65536 500000 1500000

mx_body() {
  local port how dir n
  port=$(free_port)
  mx_port nginx "$port"
  dir=$WORK/$MODE-nginx
  nginx_conf "$dir" 2 "$port" "sendfile on; keepalive_requests 1000;"
  nginx_start nginx "$dir" "$port" || { stop_bg "$NGINX_PID"; return; }
  for how in keepalive http10 parallel; do
    local opts=()
    [[ $how == http10 ]] && opts=(--http1.0)
    [[ $how == parallel ]] && opts=(-Z --parallel-max 4)
    mx_curl_files "curl-$how" "curl ($how)" "$dir/$how" "http://127.0.0.1:$port" f 16 "${opts[@]}"
    n=$(awk '{ s += $3 } END { print s }' "$dir/$how.codes")
    log "curl ($how): $n connections"
  done
  # Over one connection the first file opens it; with --http1.0 each one does.
  mx_result "connections opened by curl (keepalive): $(awk '{ s += $3 } END { print s }' "$dir/keepalive.codes")," \
    "(http10): $(awk '{ s += $3 } END { print s }' "$dir/http10.codes")"
  nginx_stop nginx
}

mx_main
