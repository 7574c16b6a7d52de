#!/usr/bin/env python3
# A server that forks a child per connection (the parent only accepts), the
# child an epoll loop over its one non-blocking connection that toggles the
# registration with EPOLL_CTL_MOD: EPOLLIN until a request line is in, MOD
# to EPOLLOUT, write the echo, MOD back to EPOLLIN. Usage: PORT.
# Used by integration/matrix/py_fork_mod.sh and integration/diff/record.sh.
import os, select, signal, socket, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", int(sys.argv[1])))
ls.listen(64)
def serve(c):
    c.setblocking(False)
    ep = select.epoll()
    ep.register(c.fileno(), select.EPOLLIN)
    inbuf, out = b"", b""
    while True:
        for fd, ev in ep.poll():
            if ev & select.EPOLLIN:
                try:
                    d = c.recv(65536)
                except BlockingIOError:
                    continue
                if not d:
                    return
                inbuf += d
                if b"\n" in inbuf:
                    cut = inbuf.rindex(b"\n") + 1
                    out, inbuf = out + inbuf[:cut], inbuf[cut:]
                    ep.modify(c.fileno(), select.EPOLLOUT)
            elif ev & select.EPOLLOUT:
                try:
                    n = c.send(out)
                except BlockingIOError:
                    continue
                out = out[n:]
                if not out:
                    ep.modify(c.fileno(), select.EPOLLIN)
            elif ev & (select.EPOLLHUP | select.EPOLLERR):
                return
while True:
    c, _ = ls.accept()
    if os.fork() == 0:
        ls.close()
        try:
            serve(c)
        finally:
            os._exit(0)
    c.close()
