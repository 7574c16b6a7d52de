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
need_cmd curl openssl
. "$(dirname "${BASH_SOURCE[0]}")/nginx.inc"
MX_SWITCHED_BY="curl-h2 curl-h1 nginx"

mx_seeded_files "$WORK/www" t 87 16 1000000 1 1000 65536 300000 1000000
timeout 30 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
  -days 2 -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 || skip "openssl could not make a certificate"

mx_body() {
  local port how dir
  port=$(free_port)
  mx_port nginx-tls "$port"
  dir=$WORK/$MODE-nginx
  nginx_conf "$dir" 1 "$port ssl http2" "keepalive_requests 1000;" \
    "ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem; ssl_protocols TLSv1.3; root $WORK/www;"
  nginx_start nginx "$dir" "$port" || { stop_bg "$NGINX_PID"; return; }
  for how in h2 h1; do
    local opts=(--http2 -Z --parallel-max 8)
    [[ $how == h1 ]] && opts=(--http1.1)
    mx_curl_files "curl-$how" "curl ($how)" "$dir/$how" "https://127.0.0.1:$port" t 16 -k "${opts[@]}"
  done
  nginx_stop nginx
}

mx_main
