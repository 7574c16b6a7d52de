#!/bin/bash
# matrix/lighttpd_ab: lighttpd (one process, one event loop; files sent
# with sendfile when they are big enough) loaded by ab (ApacheBench: one
# poll loop, non-blocking sockets) with keep-alive: ab -k -n 20000 -c 20,
# once on a 6-byte file and once on a 64 KiB one, then without -k (a
# connection per request, -n 2000). Both under the shim. Result: per ab run
# its exit status, "Complete requests", "Failed requests" (0) and
# "Non-2xx responses" (0); and lighttpd's error log has no error line
# beside its start and stop notices.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd lighttpd ab
MX_SWITCHED_BY="lighttpd ab-small ab-64k"

mx_small_files "$WORK/www"

mx_body() {
  local port pid dir bad
  port=$(free_port)
  mx_port lighttpd "$port"
  dir=$WORK/$MODE-lighttpd
  mkdir -p "$dir"
  cat >"$dir/lighttpd.conf" <<CONF
server.document-root = "$WORK/www"
server.bind = "127.0.0.1"
server.port = $port
server.errorlog = "$dir/error.log"
server.max-keep-alive-requests = 100000
server.max-keep-alive-idle = 30
server.max-connections = 256
CONF
  mx_bg lighttpd lighttpd -D -f "$dir/lighttpd.conf"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; cat "$dir/error.log"; return; }
  AB_N=20000
  mx_ab ab-small "http://127.0.0.1:$port/small.txt" -k -n "$AB_N" -c 20
  mx_ab ab-64k "http://127.0.0.1:$port/64k.bin" -k -n "$AB_N" -c 20
  AB_N=2000
  mx_ab ab-close "http://127.0.0.1:$port/small.txt" -n "$AB_N" -c 20
  mx_check "lighttpd still running" kill -0 "$pid"
  stop_bg "$pid"
  bad=$(grep -vE 'server started|server stopped|terminated by signal|graceful shutdown' "$dir/error.log")
  mx_result "lighttpd error log: $(grep -c . <<<"$bad") other lines"
  mx_check "lighttpd logged no error ($(head -n 2 <<<"$bad"))" test -z "$bad"
}

mx_main
