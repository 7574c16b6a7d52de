#!/bin/bash
# matrix/curl_parallel: curl's parallel transfers (curl -Z --parallel-max
# 20: one multi handle, up to 20 HTTP/1.1 connections open at once, driven
# by one poll loop) against nginx (2 workers, sendfile). 60 seeded files of
# 1 B to 2 MB, fetched twice: once with 20 in parallel, once with
# --parallel-max 20 and --no-keepalive (a connection per file). Both under
# the shim. Result: curl's exit status and HTTP codes, the MD5 of every file
# (equal to the served file's), and nginx logged no error.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd nginx curl
MX_SWITCHED_BY="nginx curl-keepalive"

mkdir -p "$WORK/www"
"$PY3" - "$WORK/www" <<'PY'
import random, sys
rng = random.Random(95)
for i in range(1, 61):
    n = rng.choice((1, 1000, 16384, 65536, 300000, 2000000, rng.randint(1, 2000000)))
    open("%s/p%02d.bin" % (sys.argv[1], i), "wb").write(rng.randbytes(n))
PY
(cd "$WORK/www" && md5sum p*.bin) >"$WORK/want.md5"

mx_body() {
  local port pid rc how dir opts
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
  keepalive_requests 10000;
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
  for how in keepalive close; do
    opts=(-Z --parallel-max 20 --parallel-immediate)
    [[ $how == close ]] && opts+=(--no-keepalive -H 'Connection: close')
    mkdir -p "$dir/$how"
    rc=0
    mx_fg "curl-$how" curl -sS --http1.1 "${opts[@]}" -w '%{http_code}\n' -o "$dir/$how/p#1.bin" \
      "http://127.0.0.1:$port/p[01-60].bin" >"$dir/$how.codes" 2>"$dir/$how.err" || rc=$?
    mx_result "curl -Z ($how) exit $rc, HTTP codes: $(sort "$dir/$how.codes" | uniq -c | tr -s ' ' | tr '\n' ';')"
    (cd "$dir/$how" && md5sum p*.bin) >"$dir/$how.md5" 2>&1
    cat "$dir/$how.md5" >>"$RES"
    mx_check "curl -Z ($how): exit status 0 (got $rc)" test "$rc" -eq 0
    mx_check "curl -Z ($how): the 60 files byte for byte (MD5)" cmp -s "$WORK/want.md5" "$dir/$how.md5"
    ((rc != 0)) && head -n 3 "$dir/$how.err"
  done
  mx_check "nginx still running" kill -0 "$pid"
  stop_bg "$pid"
  if grep -q '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err"; then
    not_ok "$MODE: nginx logged no error"
    grep '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err" | head -n 5
  fi
  mx_result "nginx errors logged: $(grep -c '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err")"
}

mx_main
