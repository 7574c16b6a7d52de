#!/bin/bash
# matrix/py_forking: Python's socketserver.ForkingTCPServer (the parent
# accepts, a child forked per connection serves it; the parent never reads)
# with a line protocol: "GET n seed" answers n seeded bytes, "PUT n" then n
# bytes answers their SHA-256. The client runs 6 threads, each with its own
# blocking socket, 40 requests of 1 B to 256 KB each. Result: the client's
# exit status and each thread's digest over what it got (every answer
# checked against what it should be).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MX_SWITCHED_BY="client server"

SERVER='
import hashlib, random, socketserver, sys
class H(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            line = self.rfile.readline()
            if not line:
                return
            op, *a = line.split()
            if op == b"GET":
                self.wfile.write(random.Random(int(a[1])).randbytes(int(a[0])))
            elif op == b"PUT":
                self.wfile.write(hashlib.sha256(self.rfile.read(int(a[0]))).hexdigest().encode() + b"\n")
            self.wfile.flush()
socketserver.ForkingTCPServer.allow_reuse_address = True
with socketserver.ForkingTCPServer(("127.0.0.1", int(sys.argv[1])), H) as s:
    s.serve_forever()
'
CLIENT='
import hashlib, random, socket, sys, threading
port = int(sys.argv[1])
out = {}
def recvn(s, n):
    b = bytearray()
    while len(b) < n:
        x = s.recv(min(n - len(b), 1 << 20))
        if not x:
            raise EOFError("short read: %d of %d" % (len(b), n))
        b += x
    return bytes(b)
def recvline(s):
    b = bytearray()
    while not b.endswith(b"\n"):
        x = s.recv(1)
        if not x:
            raise EOFError("no line")
        b += x
    return bytes(b)
def worker(i):
    rng = random.Random(2000 + i)
    s = socket.create_connection(("127.0.0.1", port))
    h, good = hashlib.sha256(), 0
    for j in range(40):
        n = rng.choice((1, 100, 4096, 65536, 262144, rng.randint(1, 262144)))
        if j % 2:
            seed = rng.randint(0, 1 << 30)
            s.sendall(b"GET %d %d\n" % (n, seed))
            got = recvn(s, n)
            good += got == random.Random(seed).randbytes(n)
        else:
            body = rng.randbytes(n)
            s.sendall(b"PUT %d\n" % n + body)
            got = recvline(s)
            good += got == hashlib.sha256(body).hexdigest().encode() + b"\n"
        h.update(got)
    s.close()
    out[i] = "thread %d: %d of 40 answers right, digest %s" % (i, good, h.hexdigest()[:16])
ts = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
[t.start() for t in ts]
[t.join() for t in ts]
for i in range(6):
    print(out.get(i, "thread %d: failed" % i))
'

mx_body() {
  local port pid
  port=$(free_port)
  mx_port forking "$port"
  mx_bg server "$PY3" -c "$SERVER" "$port"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  mx_client client "$PY3" -c "$CLIENT" "$port"
  mx_check "6 threads, every answer right" test "$(grep -c ': 40 of 40 answers right' "$MX_OUT")" -eq 6
  mx_check "server still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
