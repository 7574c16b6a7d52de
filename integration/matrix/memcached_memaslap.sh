#!/bin/bash
# matrix/memcached_memaslap: memcached (libevent loops on 4 worker threads)
# under memaslap (Debian's memcaslap, libmemcached-tools: its own libevent
# loop per thread, many non-blocking connections each with a window of
# requests in flight): 2 threads, 32 concurrent connections, 20000
# operations (about 90% get, 10% set of 1000-byte values), 10% of the gets
# verified against what was set; once on the text protocol and once on the
# binary one (-B). Then a get/set correctness pass: 16 Python threads, each
# its own connection on the text protocol, set 200 seeded values of 1 B to
# 200 KB each, then read them all back in multi-gets of 20 keys. Result:
# memaslap's exit statuses, the gets and sets it sent and its
# verify_failed count (0; misses are a timing, logged only), and the
# SHA-256 of every value the correctness pass read back (equal to what it
# set), its counts of values right, missing and wrong.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd memcached memcaslap
MX_SWITCHED_BY="memcached memaslap-text memaslap-binary getset"

GETSET='
import hashlib, random, socket, sys, threading
port = int(sys.argv[1])
lock = threading.Lock()
right, missing, wrong, errors = [0], [0], [0], []
digests = {}
def readline(s, buf):
    while b"\r\n" not in buf[0]:
        d = s.recv(262144)
        if not d:
            raise EOFError("EOF")
        buf[0] += d
    line, buf[0] = buf[0].split(b"\r\n", 1)
    return line
def readn(s, buf, n):
    while len(buf[0]) < n:
        d = s.recv(262144)
        if not d:
            raise EOFError("EOF")
        buf[0] += d
    out, buf[0] = buf[0][:n], buf[0][n:]
    return out
def worker(t):
    rng = random.Random(5100 + t)
    vals = {b"k%02d-%03d" % (t, i): rng.randbytes(rng.choice((1, 100, 4096, 65536, rng.randint(1, 200000))))
            for i in range(200)}
    try:
        s = socket.create_connection(("127.0.0.1", port))
        buf = [b""]
        for k, v in vals.items():
            s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
            line = readline(s, buf)
            if line != b"STORED":
                raise RuntimeError("set %r: %r" % (k, line))
        keys = list(vals)
        h = hashlib.sha256()
        for i in range(0, len(keys), 20):
            part = keys[i:i + 20]
            s.sendall(b"get " + b" ".join(part) + b"\r\n")
            got = {}
            while True:
                line = readline(s, buf)
                if line == b"END":
                    break
                _, k, _, n = line.split()
                got[k] = readn(s, buf, int(n) + 2)[:-2]
            for k in part:
                if k not in got:
                    with lock: missing[0] += 1
                elif got[k] != vals[k]:
                    with lock: wrong[0] += 1
                else:
                    with lock: right[0] += 1
                h.update(got.get(k, b"-"))
        s.close()
        with lock:
            digests[t] = h.hexdigest()[:16]
    except Exception as e:
        with lock:
            errors.append("thread %d: %r" % (t, e))
ts = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
[t.start() for t in ts]
[t.join() for t in ts]
print("right %d of 3200, missing %d, wrong %d, errors %d" % (right[0], missing[0], wrong[0], len(errors)))
print("sha256 " + hashlib.sha256(" ".join(digests.get(t, "-") for t in range(16)).encode()).hexdigest())
for e in errors[:5]:
    print(e, file=sys.stderr)
'

mx_body() {
  local port pid rc how flags out
  port=$(free_port)
  mx_port memcached "$port"
  mx_bg memcached memcached -u root -l 127.0.0.1 -p "$port" -U 0 -t 4 -c 512 -m 256
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  for how in text binary; do
    flags=()
    [[ $how == binary ]] && flags=(-B)
    rc=0
    out=$WORK/$MODE-memaslap-$how.out
    mx_fg "memaslap-$how" memcaslap -s "127.0.0.1:$port" -T 2 -c 32 -x 20000 -X 1000 -v 0.1 "${flags[@]}" \
      >"$out" 2>&1 || rc=$?
    mx_result "memaslap $how: exit $rc, $(grep -E '^(cmd_get|cmd_set|verify_failed):' "$out" | tr '\n' ' ')"
    mx_check "memaslap $how: exit status 0 (got $rc)" test "$rc" -eq 0
    mx_check "memaslap $how: its 20000 operations sent (gets + sets)" \
      awk '/^cmd_(get|set):/ { n += $2 } END { exit n != 20000 }' "$out"
    mx_check "memaslap $how: no verify failure" grep -qx 'verify_failed: 0' "$out"
    log "memaslap $how: $(grep -E '^(get_misses|verify_misses):|^Run time' "$out" | tr '\n' ' ')"
  done
  mx_client getset "$PY3" -c "$GETSET" "$port"
  mx_check "get/set pass: all 3200 values right ($(head -n 1 "$MX_OUT"))" \
    grep -qx 'right 3200 of 3200, missing 0, wrong 0, errors 0' "$MX_OUT"
  mx_check "memcached still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
