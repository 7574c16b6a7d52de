#!/bin/bash
# matrix/memcached: memcached (libevent loops on a pool of 4 worker threads,
# connections handed out by a listener thread) and the libmemcached client
# tools (non-blocking sockets, poll, the binary protocol): memccp stores 24
# files of 1 B to 900 KB (seeded) in one connection, memccat reads them back
# in another, memcslap runs 4 concurrent connections. Result: the exit
# statuses and the MD5 of what memccat printed (equal to the files').
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd memcached memccp memccat memcslap
MX_SWITCHED_BY="memccp memccat memcslap"

mkdir -p "$WORK/files"
"$PY3" - "$WORK/files" <<'PY'
import random, sys
rng = random.Random(79)
for i in range(24):
    n = rng.choice((1, 100, 4096, 65536, 300000, 900000, rng.randint(1, 900000)))
    open("%s/f%02d" % (sys.argv[1], i), "wb").write(rng.randbytes(n))
PY
keys=()
for f in "$WORK"/files/f*; do keys+=("$(basename "$f")"); done
# memccat ends each value with a newline.
want=$(for f in "$WORK"/files/f*; do cat "$f"; echo; done | md5sum | cut -c1-32)

mx_body() {
  local port pid rc got
  port=$(free_port)
  mx_port memcached "$port"
  mx_bg memcached memcached -u root -l 127.0.0.1 -p "$port" -U 0 -t 4 -I 2m -m 256
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  rc=0
  mx_fg memccp memccp -s "127.0.0.1:$port" -n -b "$WORK"/files/f* >"$WORK/$MODE-memccp.out" 2>&1 || rc=$?
  mx_result "memccp exit $rc"
  mx_check "memccp exit status 0 (got $rc)" test "$rc" -eq 0
  rc=0
  mx_fg memccat memccat -s "127.0.0.1:$port" -n -b "${keys[@]}" >"$WORK/$MODE-memccat.out" 2>"$WORK/$MODE-memccat.err" || rc=$?
  got=$(md5sum <"$WORK/$MODE-memccat.out" | cut -c1-32)
  mx_result "memccat exit $rc, md5 $got"
  mx_same "memccat returns the 24 files byte for byte (MD5)" "$want" "$got"
  rc=0
  mx_fg memcslap memcslap -s "127.0.0.1:$port" -n --concurrency=4 --execute-number=500 --initial-load=500 \
    >"$WORK/$MODE-memcslap.out" 2>&1 || rc=$?
  mx_result "memcslap exit $rc"
  mx_check "memcslap exit status 0 (got $rc)" test "$rc" -eq 0
  mx_check "memcached still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
