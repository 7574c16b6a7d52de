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
need_cmd nginx curl
# --http1.0 connections are short (one file each): whether the handshake
# beats nginx's close depends on the load, so they need not switch (their
# bytes must be exact all the same).
MX_SWITCHED_BY="curl-keepalive curl-parallel nginx"

mkdir -p "$WORK/www"
"$PY3" - "$WORK/www" <<'PY'
import random, sys
rng = random.Random(81)
for i in range(1, 17):
    n = rng.choice((1, 1000, 65536, 500000, 1500000, rng.randint(1, 1500000)))
    open("%s/f%02d.bin" % (sys.argv[1], i), "wb").write(rng.randbytes(n))
PY
(cd "$WORK/www" && md5sum f*.bin) >"$WORK/want.md5"

mx_body() {
  local port pid rc how dir n
  port=$(free_port)
  mx_port nginx "$port"
  dir=$WORK/$MODE-nginx
  mkdir -p "$dir/logs"
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
  sendfile on;
  keepalive_requests 1000;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  server {
    listen 127.0.0.1:$port;
    root $WORK/www;
  }
}
CONF
  mx_bg nginx nginx -p "$dir" -c "$dir/nginx.conf"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  for how in keepalive http10 parallel; do
    local opts=()
    [[ $how == http10 ]] && opts=(--http1.0)
    [[ $how == parallel ]] && opts=(-Z --parallel-max 4)
    mkdir -p "$dir/$how"
    rc=0
    mx_fg "curl-$how" curl -sS "${opts[@]}" -w '%{http_code} %{num_connects}\n' -o "$dir/$how/f#1.bin" \
      "http://127.0.0.1:$port/f[01-16].bin" >"$dir/$how.codes" 2>"$dir/$how.err" || rc=$?
    mx_result "curl ($how) exit $rc, HTTP codes: $(awk '{ print $1 }' "$dir/$how.codes" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
    (cd "$dir/$how" && md5sum f*.bin) >"$dir/$how.md5" 2>&1
    cat "$dir/$how.md5" >>"$RES"
    mx_check "curl ($how): exit status 0 (got $rc)" test "$rc" -eq 0
    mx_check "curl ($how): the 16 files byte for byte (MD5)" cmp -s "$WORK/want.md5" "$dir/$how.md5"
    n=$(awk '{ s += $2 } END { print s }' "$dir/$how.codes")
    log "curl ($how): $n connections"
  done
  # Over one connection the first file opens it; with --http1.0 each one does.
  mx_result "connections opened by curl (keepalive): $(awk '{ s += $2 } END { print s }' "$dir/keepalive.codes")," \
    "(http10): $(awk '{ s += $2 } END { print s }' "$dir/http10.codes")"
  mx_check "nginx still running" kill -0 "$pid"
  stop_bg "$pid"
  if grep -q '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err"; then
    not_ok "$MODE: nginx logged no error"
    grep '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err" | head -n 5
  fi
}

mx_main
