#!/bin/bash
# matrix/asyncio_many: many connections on one asyncio event loop at each
# end (asyncio.sh has 8). A server with asyncio streams answers each line
# "N BYTES" with N bytes derived from the line; a client opens 200
# connections at once (asyncio.open_connection, all alive together: 200
# registrations in each end's epoll) and on each runs 25 requests of 1 B to
# 32 KiB (seeded), one at a time on each (200 in flight over the loop).
# At least 100 of the 200 must switch (each lives for 25 round trips).
# Result: the client's exit status, how many answers came back right
# (5000), how many connections failed, and a SHA-256 over every
# connection's answers.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MX_SWITCHED_BY="client server"
MX_MIN_SWITCHED=100

SERVER='
import asyncio, hashlib, sys
async def serve(r, w):
    while True:
        line = await r.readline()
        if not line:
            break
        tag, n = line.split()
        n = int(n)
        seed = hashlib.sha256(tag).digest()
        w.write((seed * (n // 32 + 1))[:n])
        await w.drain()
    w.close()
async def main():
    srv = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), backlog=512)
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
'
CLIENT='
import asyncio, hashlib, random, sys
port = int(sys.argv[1])
CONNS, REQS = 200, 25
right, failed = [0], []
async def one(i):
    rng = random.Random(7000 + i)
    h = hashlib.sha256()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        for j in range(REQS):
            tag = b"c%d-%d" % (i, j)
            n = rng.choice((1, 100, 4096, 32768, rng.randint(1, 32768)))
            w.write(b"%s %d\n" % (tag, n))
            await w.drain()
            got = await r.readexactly(n)
            seed = hashlib.sha256(tag).digest()
            right[0] += got == (seed * (n // 32 + 1))[:n]
            h.update(got)
        w.close()
        await w.wait_closed()
    except Exception as e:
        failed.append("conn %d: %r" % (i, e))
    return h.hexdigest()
async def main():
    hs = await asyncio.gather(*(one(i) for i in range(CONNS)))
    print("answers right: %d of %d" % (right[0], CONNS * REQS))
    print("connections failed: %d" % len(failed))
    print("sha256 " + hashlib.sha256("".join(hs).encode()).hexdigest())
    for f in failed[:5]:
        print(f, file=sys.stderr)
asyncio.run(main())
'

mx_body() {
  local port pid
  port=$(free_port)
  mx_port asyncio "$port"
  mx_bg server "$PY3" -c "$SERVER" "$port"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  mx_client client "$PY3" -c "$CLIENT" "$port"
  mx_check "all 5000 answers right ($(head -n 1 "$MX_OUT"))" \
    grep -qx 'answers right: 5000 of 5000' "$MX_OUT"
  mx_check "server still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
