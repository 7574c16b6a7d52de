#!/bin/bash
# matrix/py_fork_mod: a Python server that forks a child per connection
# (the parent only accepts), the child an epoll loop over its one
# non-blocking connection toggling the registration with EPOLL_CTL_MOD:
# EPOLLIN until a request line is in, MOD to EPOLLOUT, write the echo, MOD
# back to EPOLLIN. 30 client threads at once, each its own blocking
# connection, 20 lines of 1 B to 16 KiB each, every echo read back in full
# before the next line. Result: the client's exit status, how many echoes
# came back right (600), how many connections saw EOF before their echo's
# data (0) and how many other errors (0).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MX_SWITCHED_BY="client server"

SERVER="$ROOT/integration/progs/py_fork_mod_server.py"
CLIENT='
import random, socket, sys, threading
port = int(sys.argv[1])
right, eof, other = [0], [0], []
lock = threading.Lock()
def worker(i):
    rng = random.Random(3000 + i)
    try:
        s = socket.create_connection(("127.0.0.1", port))
        for j in range(20):
            n = rng.choice((1, 100, 1000, 4096, 16384, rng.randint(1, 16384)))
            msg = bytes(rng.choice(b"abcdefghij") for _ in range(n - 1)) + b"\n"
            s.sendall(msg)
            got = bytearray()
            while len(got) < n:
                x = s.recv(n - len(got))
                if not x:
                    with lock:
                        eof[0] += 1
                    return
                got += x
            with lock:
                right[0] += bytes(got) == msg
        s.close()
    except OSError as e:
        with lock:
            other.append("thread %d: %r" % (i, e))
ts = [threading.Thread(target=worker, args=(i,)) for i in range(30)]
[t.start() for t in ts]
[t.join() for t in ts]
print("echoes right: %d of 600" % right[0])
print("EOF before data: %d" % eof[0])
print("other errors: %d" % len(other))
for o in other[:5]:
    print(o, file=sys.stderr)
'

mx_body() {
  local port pid
  port=$(free_port)
  mx_port forkmod "$port"
  mx_bg server "$PY3" "$SERVER" "$port"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  mx_client client "$PY3" -c "$CLIENT" "$port"
  mx_check "all 600 echoes right ($(head -n 1 "$MX_OUT"))" grep -qx 'echoes right: 600 of 600' "$MX_OUT"
  mx_check "no EOF before data" grep -qx 'EOF before data: 0' "$MX_OUT"
  mx_check "server still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
