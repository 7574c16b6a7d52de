#!/bin/bash
# matrix/memcached_pymemcache: memcached (libevent loops on 4 worker
# threads) and pymemcache (Python's pure client: blocking sockets, the text
# protocol). One client stores 2500 binary values of up to 20 KB (seeded)
# with set_many (pipelined: all the sets, then all the answers), reads them
# back with one get_many (a single multi-key get), runs 300 INCRs and a
# gets/cas round; then 4 threads, each with its own client, read and rewrite
# 500 values at once. Result: what each step returned (SHA-256 of values,
# failed keys, counter, cas results), equal to what was stored.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd memcached
"$PY3" -c 'import pymemcache' 2>/dev/null || skip "python3-pymemcache is not installed"
MX_SWITCHED_BY="client"

CLIENT='
import hashlib, random, sys, threading
from pymemcache.client.base import Client
port = int(sys.argv[1])
rng = random.Random(80)
vals = {"k%d" % i: rng.randbytes(rng.randint(1, 20000)) for i in range(2500)}
c = Client(("127.0.0.1", port), timeout=20)
failed = c.set_many(vals, noreply=False)
print("set_many failed keys:", len(failed))
got = c.get_many(list(vals))
print("get_many: %d values, all exact: %s" % (len(got), all(got.get(k) == v for k, v in vals.items())))
print("get_many sha256:", hashlib.sha256(b"".join(got[k] for k in sorted(got))).hexdigest()[:32])
c.set("n", b"0")
for _ in range(300):
    c.incr("n", 1)
print("counter:", c.get("n"))
v, token = c.gets("k1")
print("cas with the right token:", c.cas("k1", b"new", token), "with a stale one:", c.cas("k1", b"newer", token))
out = [None] * 4
def worker(i):
    w = Client(("127.0.0.1", port), timeout=20)
    ks = ["k%d" % j for j in range(500 * i + 500, 500 * i + 1000)]
    good = sum(w.get(k) == vals[k] for k in ks)
    for k in ks:
        w.set(k, vals[k][::-1])
    back = w.get_many(ks)
    out[i] = (good, sum(back[k] == vals[k][::-1] for k in ks))
    w.close()
ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print("threads: values read right, rewritten right:", out)
c.close()
'

mx_body() {
  local port pid
  port=$(free_port)
  mx_port memcached "$port"
  mx_bg memcached memcached -u root -l 127.0.0.1 -p "$port" -U 0 -t 4 -m 256
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  mx_client client "$PY3" -c "$CLIENT" "$port"
  mx_check "get_many returned every value exactly" grep -q 'all exact: True' "$MX_OUT"
  mx_check "4 threads read and rewrote 500 values each" \
    grep -qF '[(500, 500), (500, 500), (500, 500), (500, 500)]' "$MX_OUT"
  stop_bg "$pid"
}

mx_main
