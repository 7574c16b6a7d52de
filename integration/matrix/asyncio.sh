#!/bin/bash
# matrix/asyncio: Python's asyncio (an epoll event loop, one thread) at both
# ends: an echo server (asyncio.start_server) and a client that runs 8
# connections at once, each sending 150 messages of 1 B to 64 KiB (seeded)
# and reading each echo back with readexactly before the next. Result: every
# connection's SHA-256 of what came back (which must be what went out), the
# byte count, the client's exit status.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SERVER='
import asyncio, sys
async def echo(r, w):
    while True:
        d = await r.read(65536)
        if not d:
            break
        w.write(d)
        await w.drain()
    w.close()
    await w.wait_closed()
async def main():
    srv = await asyncio.start_server(echo, "127.0.0.1", int(sys.argv[1]))
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
'
CLIENT='
import asyncio, hashlib, random, sys
port = int(sys.argv[1])
async def one(i):
    rng = random.Random(1000 + i)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    h_out, h_in, n = hashlib.sha256(), hashlib.sha256(), 0
    for _ in range(150):
        msg = rng.randbytes(rng.choice((1, 7, 512, 4096, 65536, rng.randint(1, 65536))))
        w.write(msg)
        await w.drain()
        back = await r.readexactly(len(msg))
        h_out.update(msg)
        h_in.update(back)
        n += len(msg)
    w.close()
    await w.wait_closed()
    return "conn %d: %d bytes, sha256 %s, echo %s" % (i, n, h_in.hexdigest()[:16],
        "exact" if h_in.digest() == h_out.digest() else "DIFFERS")
async def main():
    for line in await asyncio.gather(*(one(i) for i in range(8))):
        print(line)
asyncio.run(main())
'

mx_body() {
  local port
  port=$(free_port)
  mx_port echo "$port"
  mx_bg server "$PY3" -c "$SERVER" "$port"
  mx_wait_listen "$port" || return
  mx_client client "$PY3" -c "$CLIENT" "$port"
  mx_check "every echo exact (8 connections)" test "$(grep -c 'echo exact' "$MX_OUT")" -eq 8
  mx_check "server still running" kill -0 "$BG_PID"
  stop_bg "$BG_PID"
}

mx_main
