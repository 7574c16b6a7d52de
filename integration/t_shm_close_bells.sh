#!/bin/bash
# t_shm_close_bells: a client that waits in poll for each answer on a
# switched connection, then closes it while the server sits idle (the
# keep-alive shape of wget, requests, pymemcache). The wait drained the
# server's bell before its disarm learned that the server had taken the arm;
# the close then waited its full 2 s (close.frames_late) for that bell a
# second time. Checks: the connection switched, no close.frames_late, and
# the close returns at once (well under the 2 s wait).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
need_cmd python3

PROG='
import select, socket, sys, time
port = int(sys.argv[1])
if sys.argv[2] == "server":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(8)
    print("READY", port, flush=True)
    for _ in range(3):
        c, _ = ls.accept()
        while True:
            d = c.recv(65536)
            if not d:
                break
            time.sleep(0.01)  # answer once the client sleeps in its wait
            c.sendall(d)
        c.close()
    sys.exit(0)
for how in ("poll", "select", "epoll"):
    s = socket.create_connection(("127.0.0.1", port))
    for i in range(5):
        s.sendall(b"x" * 100)
        if how == "poll":
            p = select.poll()
            p.register(s, select.POLLIN)
            p.poll(10000)
        elif how == "epoll":
            e = select.epoll()
            e.register(s.fileno(), select.EPOLLIN)
            e.poll(10)
            e.close()
        else:
            select.select([s], [], [], 10)
        assert s.recv(65536) == b"x" * 100
    t = time.monotonic()
    s.close()
    print("%s: close took %.3f s" % (how, time.monotonic() - t))
'
port=$(free_port)
dir=$WORK/trace
mkdir -p "$dir"
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
start_bg server shim "${vars[@]}" "$PYTHON" -c "$PROG" "$port" server
pid=$BG_PID
wait_ready server >/dev/null || not_ok "server ready"
out=$(with_shim "${vars[@]}" "$PYTHON" -c "$PROG" "$port" client 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
check "client exit status 0 (got $rc)" test "$rc" -eq 0
rc=0
wait_bg "$pid" 20 || rc=$?
check "server exit status 0 (got $rc)" test "$rc" -eq 0
for how in poll select epoll; do
  t=$(sed -n "s/^$how: close took \([0-9.]*\) s$/\1/p" <<<"$out")
  check "$how: the close returned at once, not after the 2 s wait (${t:-?} s)" \
    awk -v t="${t:-9}" 'BEGIN { exit !(t < 1.5) }'
done
trace_py "$dir" "$port" <<'PY'
done = [r for r in events("upgrade.done", reason="upgraded", transport="shm") if r.get("role") == "client"]
check(len(done) == 3, "the 3 connections upgraded at the client (%d)" % len(done))
check(len(events("rx.switch")) >= 3, "bytes crossed the ring (%d rx.switch)" % len(events("rx.switch")))
late = events("close.frames_late")
check(not late, "no close.frames_late (%d)" % len(late))
PY
finish
