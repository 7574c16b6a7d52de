#!/bin/bash
# matrix/nginx_tls_h2: TLS 1.3 and HTTP/2 (many streams multiplexed on one
# connection): nginx (one worker, OpenSSL reading and writing the socket
# itself) and curl (OpenSSL, nghttp2): 16 files of 1 B to 1 MB (seeded),
# first 8 at a time as streams of one HTTP/2 connection (curl -Z), then one
# after the other over one HTTP/1.1 TLS connection. A byte lost or changed
# under TLS fails the record's authentication, so an exact MD5 is a strong
# check. Result: exit statuses, HTTP versions and codes, each file's MD5
# (equal to the served file's).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd nginx curl openssl
MX_SWITCHED_BY="curl-h2 curl-h1 nginx"

mkdir -p "$WORK/www"
"$PY3" - "$WORK/www" <<'PY'
import random, sys
rng = random.Random(87)
for i in range(1, 17):
    n = rng.choice((1, 1000, 65536, 300000, 1000000, rng.randint(1, 1000000)))
    open("%s/t%02d.bin" % (sys.argv[1], i), "wb").write(rng.randbytes(n))
PY
(cd "$WORK/www" && md5sum t*.bin) >"$WORK/want.md5"
timeout 30 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
  -days 2 -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 || skip "openssl could not make a certificate"

mx_body() {
  local port pid rc how dir
  port=$(free_port)
  mx_port nginx-tls "$port"
  dir=$WORK/$MODE-nginx
  mkdir -p "$dir/logs"
  cat >"$dir/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes 1;
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
    listen 127.0.0.1:$port ssl http2;
    ssl_certificate $WORK/cert.pem;
    ssl_certificate_key $WORK/key.pem;
    ssl_protocols TLSv1.3;
    root $WORK/www;
  }
}
CONF
  mx_bg nginx nginx -p "$dir" -c "$dir/nginx.conf"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  for how in h2 h1; do
    local opts=(--http2 -Z --parallel-max 8)
    [[ $how == h1 ]] && opts=(--http1.1)
    mkdir -p "$dir/$how"
    rc=0
    mx_fg "curl-$how" curl -sS -k "${opts[@]}" -w '%{http_version} %{http_code}\n' -o "$dir/$how/t#1.bin" \
      "https://127.0.0.1:$port/t[01-16].bin" >"$dir/$how.codes" 2>"$dir/$how.err" || rc=$?
    mx_result "curl ($how) exit $rc, HTTP versions and codes: $(sort "$dir/$how.codes" | uniq -c | tr -s ' ' | tr '\n' ';')"
    (cd "$dir/$how" && md5sum t*.bin) >"$dir/$how.md5" 2>&1
    cat "$dir/$how.md5" >>"$RES"
    mx_check "curl ($how): exit status 0 (got $rc)" test "$rc" -eq 0
    mx_check "curl ($how): the 16 files byte for byte (MD5)" cmp -s "$WORK/want.md5" "$dir/$how.md5"
    ((rc != 0)) && head -n 3 "$dir/$how.err"
  done
  mx_check "nginx still running" kill -0 "$pid"
  stop_bg "$pid"
  if grep -q '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err"; then
    not_ok "$MODE: nginx logged no error"
    grep '\[\(alert\|crit\|emerg\|error\)\]' "$WORK/$MODE-nginx.err" | head -n 5
  fi
}

mx_main
