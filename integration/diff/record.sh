#!/bin/bash
# record.sh: records the socket and readiness calls of real client/server
# pairs with strace and turns them into replay scenarios (README.md, "Real
# programs' traces"). For each program: the server and the client(s) run
# under `strace -ff -yy` (one file a process, every fd named by its
# connection's addresses) inside a private network namespace; trace2scn.py
# keeps the calls of one tested connection in corpus/traces/NAME.*.strace
# and writes corpus/replay_NAME.scn from them (corpus/known/replay_NAME.scn
# if it was classified as a known difference).
#
#   integration/diff/record.sh [NAME...]    record again (default: all)
#   integration/diff/trace2scn.py convert   scenarios from the kept traces
#
# Needs root (unshare -n) and the programs; a program that is missing is
# skipped with a message, its kept trace stays as it was.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -z "${RECORD_IN_NS:-}" ]; then
  exec unshare -n env RECORD_IN_NS=1 bash -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi
TRACES=$HERE/corpus/traces
CONV=$HERE/trace2scn.py
PORT=${RECORD_PORT:-23111}
STRACE=(strace -ff -ttt -T -yy -s 40 -qq -e signal=none
  -e trace=%network,read,write,readv,writev,sendfile,splice,poll,ppoll,select,pselect6,epoll_wait,epoll_pwait,epoll_pwait2,epoll_ctl,close,shutdown,ioctl,fcntl,clone,clone3,fork,vfork,dup,dup2,dup3)
mkdir -p "$TRACES"

wait_listen() {
  for _ in $(seq 100); do
    ss -ltnH "sport = :$1" | grep -q . && return 0
    sleep 0.05
  done
  echo "record: nothing listens on $1" >&2
  return 1
}

# start_server RAW CMD...: the server under strace in the background.
start_server() {
  local raw=$1
  shift
  "${STRACE[@]}" -o "$raw/server" "$@" >"$raw/server.out" 2>&1 &
  SRV=$!
  wait_listen "$PORT"
}

# descendants PID: the processes under PID (strace's tracees), deepest last.
descendants() {
  local c
  for c in $(ps -o pid= --ppid "$1"); do echo "$c"; descendants "$c"; done
}

# A signal to strace would only detach it: the tracees get it, and strace
# ends when they did.
stop_server() {
  local pids
  pids=$(descendants "$SRV")
  [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
  for _ in $(seq 50); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
  pids=$(descendants "$SRV")
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  wait "$SRV" 2>/dev/null
  return 0
}

client() {
  "${STRACE[@]}" -o "$RAW/$1" "${@:2}" && return 0
  echo "record: the client $2 failed" >&2
  return 1
}

have() {
  for c in "$@"; do
    command -v "$c" >/dev/null || { echo "record: $c missing, skipped" >&2; return 1; }
  done
}

rec_redis_bench() {
  have redis-server redis-benchmark || return 1
  start_server "$RAW" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no || return 1
  client client redis-benchmark -h 127.0.0.1 -p "$PORT" -c 1 -n 48 -P 16 -t set,get,lpush -q >"$RAW/client.out"
  stop_server
}

rec_redis_cli() {
  have redis-server redis-cli || return 1
  start_server "$RAW" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no || return 1
  { for i in $(seq 6); do echo "SET k$i $(head -c $((i * 300)) /dev/zero | tr '\0' v)"; echo "GET k$i"; done
    echo "MGET k1 k2 k3 k4 k5 k6"; } | client client redis-cli -h 127.0.0.1 -p "$PORT" >"$RAW/client.out"
  stop_server
}

nginx_setup() {
  local d=$RAW/nginx
  mkdir -p "$d/www" "$d/logs"
  head -c 1000 /dev/urandom >"$d/www/a.bin"
  head -c 20000 /dev/urandom >"$d/www/b.bin"
  echo hello >"$d/www/c.txt"
  cat >"$d/nginx.conf" <<CONF
daemon off;
master_process on;
worker_processes 1;
user root;
pid $d/nginx.pid;
error_log stderr warn;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  keepalive_timeout 30;
  client_body_temp_path $d/body;
  proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi;
  scgi_temp_path $d/scgi;
  server { listen 127.0.0.1:$PORT; root $d/www; }
}
CONF
  start_server "$RAW" nginx -p "$d" -c "$d/nginx.conf"
}

rec_nginx_curl() {
  have nginx curl || return 1
  nginx_setup || return 1
  local u=http://127.0.0.1:$PORT
  client client curl -s -o /dev/null -o /dev/null -o /dev/null -o /dev/null "$u/a.bin" "$u/b.bin" "$u/c.txt" "$u/a.bin" >"$RAW/client.out"
  stop_server
}

# wrk: one thread, one keep-alive connection, for a second (the
# scenario is cut after its first requests).
rec_nginx_wrk() {
  have nginx wrk || return 1
  nginx_setup || return 1
  client client wrk -t1 -c1 -d1s "http://127.0.0.1:$PORT/b.bin" >"$RAW/client.out" ||
    { stop_server; return 1; }
  stop_server
}

# memcached's text protocol over one blocking socket, as the simple clients
# speak it (set, get, multi-get, incr, delete; a pipelined pair).
MEMCACHED_CLIENT='
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
f = s.makefile("rb")
def line():
    return f.readline()
for i, n in enumerate((1, 100, 1000, 5000, 20000, 64, 3)):
    s.sendall(b"set k%d 0 0 %d\r\n" % (i, n) + b"v" * n + b"\r\n")
    assert line() == b"STORED\r\n"
    s.sendall(b"get k%d\r\n" % i)
    assert line().startswith(b"VALUE")
    assert len(f.read(n + 2)) == n + 2 and line() == b"END\r\n"
s.sendall(b"get " + b" ".join(b"k%d" % i for i in range(7)) + b"\r\n")
while line() != b"END\r\n":
    pass
s.sendall(b"set n 0 0 1\r\n1\r\nincr n 5\r\n")
assert line() == b"STORED\r\n" and line() == b"6\r\n"
s.sendall(b"delete k0\r\n")
assert line() == b"DELETED\r\n"
s.close()
'
rec_memcached() {
  have memcached python3 || return 1
  start_server "$RAW" memcached -u root -l 127.0.0.1 -p "$PORT" -U 0 -t 2 -m 64 || return 1
  client client python3 -c "$MEMCACHED_CLIENT" "$PORT" || { stop_server; return 1; }
  stop_server
}

# apache2 mpm_event (the issue's "event_loop: unexpected state"), ab -k:
# 20 requests on one keep-alive connection.
rec_apache_event_ab() {
  have apache2 ab || return 1
  local d=$RAW/apache mods=/usr/lib/apache2/modules
  [ -e $mods/mod_mpm_event.so ] || { echo "record: no Apache modules in $mods, skipped" >&2; return 1; }
  mkdir -p "$d/www"
  chmod 711 "$RAW"
  head -c 3000 /dev/urandom >"$d/www/a.bin"
  chmod -R a+rX "$d"
  cat >"$d/httpd.conf" <<CONF
ServerRoot "$d"
ServerName 127.0.0.1
DefaultRuntimeDir "$d"
Mutex file:$d default
PidFile "$d/httpd.pid"
ErrorLog "$d/error.log"
LogLevel warn
LoadModule mpm_event_module $mods/mod_mpm_event.so
LoadModule authz_core_module $mods/mod_authz_core.so
User www-data
Group www-data
Listen 127.0.0.1:$PORT
StartServers 1
ServerLimit 1
ThreadsPerChild 4
MinSpareThreads 1
MaxSpareThreads 4
MaxRequestWorkers 4
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 30
DocumentRoot "$d/www"
<Directory "$d/www">
  Require all granted
</Directory>
CONF
  start_server "$RAW" apache2 -DFOREGROUND -f "$d/httpd.conf" || return 1
  client client ab -q -k -n 20 -c 1 "http://127.0.0.1:$PORT/a.bin" >"$RAW/client.out" ||
    { stop_server; return 1; }
  stop_server
}

# haproxy in HTTP mode with splice-auto in front of nginx (not traced); the
# tested connection is curl's to haproxy: two files on one connection, the
# larger one spliced.
rec_haproxy_http() {
  have haproxy nginx curl || return 1
  local d=$RAW/haproxy back=$((PORT + 1)) ngx
  mkdir -p "$d/www" "$d/logs"
  head -c 1000 /dev/urandom >"$d/www/a.bin"
  head -c 300000 /dev/urandom >"$d/www/big.bin"
  cat >"$d/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
user root;
pid $d/nginx.pid;
error_log stderr warn;
events { worker_connections 64; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path $d/body;
  proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi;
  scgi_temp_path $d/scgi;
  server { listen 127.0.0.1:$back; root $d/www; }
}
CONF
  cat >"$d/haproxy.cfg" <<CONF
global
  maxconn 64
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option splice-auto
frontend fe
  bind 127.0.0.1:$PORT
  default_backend be
backend be
  server s1 127.0.0.1:$back
CONF
  nginx -p "$d" -c "$d/nginx.conf" >"$RAW/nginx.out" 2>&1 &
  ngx=$!
  wait_listen "$back" || { kill "$ngx"; return 1; }
  start_server "$RAW" haproxy -db -f "$d/haproxy.cfg" || { kill "$ngx"; return 1; }
  local u=http://127.0.0.1:$PORT
  client client curl -s -o /dev/null -o /dev/null -o /dev/null "$u/a.bin" "$u/big.bin" "$u/a.bin" >"$RAW/client.out"
  local rc=$?
  stop_server
  kill "$ngx"
  wait "$ngx" 2>/dev/null
  return $rc
}

# mosquitto QoS 1: one subscriber, one publisher of 20 lines; the
# subscriber's connection and the publisher's are two scenarios.
rec_mosquitto() {
  have mosquitto mosquitto_pub mosquitto_sub || return 1
  printf '%s\n' "listener $PORT 127.0.0.1" "allow_anonymous true" "persistence false" >"$RAW/mosq.conf"
  start_server "$RAW" mosquitto -c "$RAW/mosq.conf" || return 1
  client client-sub mosquitto_sub -h 127.0.0.1 -p "$PORT" -q 1 -t replay/t -C 20 -i replay-sub >"$RAW/sub.out" &
  local sub=$!
  sleep 0.5
  for i in $(seq 20); do printf 'message %d %s\n' "$i" "$(head -c $((i * 40)) /dev/zero | tr '\0' m)"; done |
    client client-pub mosquitto_pub -h 127.0.0.1 -p "$PORT" -q 1 -t replay/t -l -i replay-pub
  wait "$sub"
  stop_server
}

PY_ASYNCIO_SERVER='
import asyncio, sys
async def echo(r, w):
    while True:
        line = await r.readline()
        if not line:
            break
        w.write(line)
        await w.drain()
    w.close()
    await w.wait_closed()
async def main():
    srv = await asyncio.start_server(echo, "127.0.0.1", int(sys.argv[1]))
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
'
PY_ASYNCIO_CLIENT='
import asyncio, sys
async def main():
    r, w = await asyncio.open_connection("127.0.0.1", int(sys.argv[1]))
    for n in (1, 100, 1000, 4096, 16384, 50, 30000, 7):
        w.write(b"x" * (n - 1) + b"\n")
        await w.drain()
        assert len(await r.readline()) == n
    w.close()
    await w.wait_closed()
asyncio.run(main())
'
rec_py_asyncio() {
  have python3 || return 1
  start_server "$RAW" python3 -c "$PY_ASYNCIO_SERVER" "$PORT" || return 1
  client client python3 -c "$PY_ASYNCIO_CLIENT" "$PORT" || { stop_server; return 1; }
  stop_server
}

# The server of integration/matrix/py_fork_mod.sh: a child per connection,
# epoll over its one non-blocking socket, EPOLL_CTL_MOD between IN and OUT.
PY_FORK_SERVER="$HERE/../progs/py_fork_mod_server.py"
PY_FORK_CLIENT='
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for n in (1, 100, 1000, 4096, 16384, 3000, 1, 12000):
    s.sendall(b"y" * (n - 1) + b"\n")
    got = 0
    while got < n:
        x = s.recv(n - got)
        assert x, "EOF before the echo"
        got += len(x)
s.close()
'
rec_py_fork_mod() {
  have python3 || return 1
  start_server "$RAW" python3 "$PY_FORK_SERVER" "$PORT" || return 1
  client client python3 -c "$PY_FORK_CLIENT" "$PORT" || { stop_server; return 1; }
  sleep 0.3 # the child sees the EOF and exits
  stop_server
}

# name -> recorder function, client trace prefix
ALL="redis_bench redis_cli nginx_curl nginx_wrk memcached apache_event_ab haproxy_http mosquitto_sub_qos1 mosquitto_pub_qos1 py_asyncio_echo py_fork_mod"
rc=0
for name in ${*:-$ALL}; do
  case $name in
  redis_bench) fn=rec_redis_bench cl=client ;;
  redis_cli) fn=rec_redis_cli cl=client ;;
  nginx_curl) fn=rec_nginx_curl cl=client ;;
  nginx_wrk) fn=rec_nginx_wrk cl=client ;;
  memcached) fn=rec_memcached cl=client ;;
  apache_event_ab) fn=rec_apache_event_ab cl=client ;;
  haproxy_http) fn=rec_haproxy_http cl=client ;;
  mosquitto_sub_qos1) fn=rec_mosquitto cl=client-sub ;;
  mosquitto_pub_qos1) fn=rec_mosquitto cl=client-pub ;;
  py_asyncio_echo) fn=rec_py_asyncio cl=client ;;
  py_fork_mod) fn=rec_py_fork_mod cl=client ;;
  *) echo "record: unknown $name (one of: $ALL)" >&2; rc=1; continue ;;
  esac
  RAW=$(mktemp -d /tmp/record.XXXXXX)
  echo "record: $name"
  if $fn; then
    python3 "$CONV" trim "$RAW" "$name" --port "$PORT" --client "$cl" --out "$TRACES" &&
      python3 "$CONV" convert "$TRACES/$name" || rc=1
  else
    rc=1
  fi
  [ -n "${RECORD_KEEP:-}" ] || rm -rf "$RAW"
done
exit $rc
