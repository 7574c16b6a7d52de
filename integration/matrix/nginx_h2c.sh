#!/bin/bash
# matrix/nginx_h2c: HTTP/2 in the clear (h2c with prior knowledge: nginx
# `listen ... http2` on a plaintext listener, no TLS, so nginx's own
# buffered writes, not OpenSSL's, go to the socket). h2load (nghttp2's load
# generator: one libev loop, 8 connections, 16 streams in flight on each,
# flow-control windows refilled as it reads) makes 4000 requests for a
# 6-byte file, then 4000 for a 64 KiB one. Then 40 seeded files of 1 B to
# 1 MB are fetched by curl --http2-prior-knowledge (nghttp2), one curl per
# file, 4 loops of 10 at once. Both ends under the shim. Result: h2load's
# exit statuses, request counts (all succeeded) and status codes (all 2xx),
# each curl's HTTP version and code, every file's MD5 (equal to the served
# file's), and nginx logged no error.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd curl h2load
. "$(dirname "${BASH_SOURCE[0]}")/nginx.inc"
curl --version | grep -qw HTTP2 || skip "curl has no HTTP/2"
MX_SWITCHED_BY="nginx h2load-small h2load-64k"

mx_seeded_files "$WORK/www" q 97 40 1000000 1 1000 16384 65536 300000 1000000
mx_small_files "$WORK/www"

mx_body() {
  local port rc dir i pids=() f out
  port=$(free_port)
  mx_port nginx-h2c "$port"
  dir=$WORK/$MODE-nginx
  mkdir -p "$dir/seq"
  nginx_conf "$dir" 1 "$port http2" "keepalive_requests 10000; http2_max_concurrent_streams 128;"
  nginx_start nginx "$dir" "$port" || { stop_bg "$NGINX_PID"; return; }
  for f in small.txt 64k.bin; do
    rc=0
    out=$WORK/$MODE-h2load-${f%%.*}.out
    mx_fg "h2load-${f%%.*}" h2load -n 4000 -c 8 -m 16 -t 1 "http://127.0.0.1:$port/$f" >"$out" 2>&1 || rc=$?
    mx_result "h2load $f exit $rc, $(grep -E '^(requests|status codes):' "$out" | sed 's/, [0-9]* timeout//' | tr '\n' ' ')"
    mx_check "h2load $f: exit status 0 (got $rc)" test "$rc" -eq 0
    mx_check "h2load $f: 4000 succeeded, 4000 2xx" \
      grep -qE '^requests: 4000 total, 4000 started, 4000 done, 4000 succeeded, 0 failed, 0 errored' "$out"
    grep -q '^status codes: 4000 2xx' "$out" || not_ok "$MODE: h2load $f: $(grep '^status codes' "$out")"
  done
  # Every file byte for byte: one curl per file (Debian's curl 7.88.1 does
  # not reuse an h2c prior-knowledge connection: a second URL on the same
  # command line fails with "Error in the HTTP2 framing layer", without the
  # shim too); 4 such loops at once.
  for i in 1 2 3 4; do
    mx_bg "curls$i" bash -c 'for ((f = $2; f < $2 + 10; f++)); do
        n=$(printf "q%02d.bin" "$f")
        curl -sS --http2-prior-knowledge -w "%{http_version} %{http_code}\n" -o "$3/$n" "http://127.0.0.1:$1/$n" || echo "curl $n: exit $?"
      done' curls "$port" $(((i - 1) * 10 + 1)) "$dir/seq"
    pids+=("$BG_PID")
  done
  for i in 1 2 3 4; do
    rc=0
    wait_bg "${pids[i - 1]}" 90 || rc=$?
    mx_result "curl loop $i exit $rc, HTTP versions and codes: $(sort "$WORK/$MODE-curls$i.out" | uniq -c | tr -s ' ' | tr '\n' ';')"
    mx_check "curl loop $i: exit status 0, 10 answers HTTP/2 200" \
      test "$rc:$(grep -cx '2 200' "$WORK/$MODE-curls$i.out")" = 0:10
  done
  (cd "$dir/seq" && md5sum q*.bin) >"$dir/seq.md5" 2>&1
  cat "$dir/seq.md5" >>"$RES"
  mx_check "curl: the 40 files byte for byte (MD5)" cmp -s "$WORK/want.md5" "$dir/seq.md5"
  nginx_stop nginx
}

mx_main
