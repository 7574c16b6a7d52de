#!/bin/bash
# matrix/py_threading_http: Python's http.server.ThreadingHTTPServer (a
# thread per connection; HTTP/1.0: it answers and closes) and python3-requests
# from a pool of 8 client threads (concurrent.futures), 64 GETs of 1 B to
# 500 KB and 16 POSTs of up to 8 MB (answered with the body's SHA-256),
# every request on its own short connection. Result: the client's exit
# status, how many answers were right, a digest over all answers in order.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
"$PY3" -c 'import requests' 2>/dev/null || skip "python3-requests is not installed"
MX_SWITCHED_BY="client server"

mkdir -p "$WORK/www"
"$PY3" - "$WORK/www" <<'PY'
import random, sys
rng = random.Random(88)
for i in range(16):
    n = rng.choice((1, 1000, 65536, 500000, rng.randint(1, 500000)))
    open("%s/w%02d.bin" % (sys.argv[1], i), "wb").write(rng.randbytes(n))
PY

SERVER='
import functools, hashlib, sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
class H(SimpleHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        out = hashlib.sha256(body).hexdigest().encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), functools.partial(H, directory=sys.argv[2])).serve_forever()
'
CLIENT='
import hashlib, random, sys, requests
from concurrent.futures import ThreadPoolExecutor
port, www = int(sys.argv[1]), sys.argv[2]
base = "http://127.0.0.1:%d/" % port
rng = random.Random(89)
jobs = []
for i in range(80):
    if i in (9, 49):
        # Every connection lives for one answer: two long uploads switch
        # whatever the load.
        jobs.append(("POST", rng.randbytes(8 << 20)))
    elif i % 5 == 4:
        jobs.append(("POST", rng.randbytes(rng.randint(1, 500000))))
    else:
        jobs.append(("GET", "w%02d.bin" % rng.randrange(16)))
def run(job):
    kind, arg = job
    if kind == "GET":
        r = requests.get(base + arg, timeout=30)
        return r.status_code, r.content, open(www + "/" + arg, "rb").read()
    r = requests.post(base + "post", data=arg, timeout=30)
    return r.status_code, r.content, hashlib.sha256(arg).hexdigest().encode()
h, right = hashlib.sha256(), 0
with ThreadPoolExecutor(8) as ex:
    for code, got, want in ex.map(run, jobs):
        h.update(got)
        right += code == 200 and got == want
print("right answers: %d of %d" % (right, len(jobs)))
print("digest of the answers: %s" % h.hexdigest()[:32])
'

mx_body() {
  local port pid
  port=$(free_port)
  mx_port http "$port"
  mx_bg server "$PY3" -c "$SERVER" "$port" "$WORK/www"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  mx_client client "$PY3" -c "$CLIENT" "$port" "$WORK/www"
  mx_check "80 answers right" grep -q '^right answers: 80 of 80$' "$MX_OUT"
  mx_check "server still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
