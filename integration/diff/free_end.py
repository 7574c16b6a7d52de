#!/usr/bin/env python3
"""free_end.py: one end of a free-running replay (free.py, README.md "Free-
running replays"). Not run by hand: free.py starts it, under the shim or not.

  free_end.py server|client PORT PLAN.json SEED

The end runs its own calls of a real program's trace without waiting for
the other end: only the waits the program itself had (a receive that needs
bytes not yet here waits in the program's readiness call: its epoll set,
else poll). Every byte it sends is its stream's pattern at that offset;
every byte it reads is checked against the peer's. It prints one JSON line
on stdout: bytes sent and read, whether it saw EOF, the error classes it
met, and the violations of what a program may rely on:
  - every byte exactly once and in order;
  - a readiness report of readable means the next read gives data or 0,
    never EAGAIN (this end is the connection's single reader);
  - one registration never twice in one epoll_wait;
  - EOF only after every byte the peer sends;
  - a readiness wait the bytes are on their way to ends (a stall is a lost
    wake-up).
"""
import errno
import fcntl
import json
import os
import random
import select
import socket
import struct
import sys
import termios
import time

P = 65521  # the pattern's period: a prime, so a reordered block shows
STALL_S = float(os.environ.get("FREE_STALL_S", "8"))
# Loop: the shared epoll set's fd inside a poll (a cascaded set), or not.
NEST = os.environ.get("FREE_LOOP_NEST") == "1"
EV = {"in": select.EPOLLIN, "out": select.EPOLLOUT, "rdhup": select.EPOLLRDHUP, "pri": select.EPOLLPRI,
      "et": select.EPOLLET, "oneshot": select.EPOLLONESHOT, "excl": getattr(select, "EPOLLEXCLUSIVE", 1 << 28),
      "io": select.EPOLLIN | select.EPOLLOUT}
READ_EV = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
_tables = {}


def pattern(end, off, n):
    t = _tables.get(end)
    if t is None:
        r = random.Random(1000 + (end == "server"))
        t = _tables[end] = bytes(r.getrandbits(8) for _ in range(P)) * 2
    out = bytearray()
    while n > 0:
        o = off % P
        k = min(n, P)
        out += t[o:o + k]
        off, n = off + k, n - k
    return bytes(out)


def ep_mask(ev):
    m = 0
    for w in ev.split("+"):
        m |= EV.get(w, 0)
    return m


class End:
    def __init__(self, name, port, plan, seed):
        self.name, self.peer = name, "server" if name == "client" else "client"
        self.port, self.plan = port, plan
        self.rnd = random.Random(seed)
        self.sent = self.got = 0
        self.eof = False
        self.viol, self.errs = [], []
        self.nb = False
        self.ep, self.reg, self.armed = None, None, False
        self.ready = False  # a level report of readable not yet followed by a read
        self.drained = False  # a read ended in EAGAIN since the last data
        self.closed = False
        self.sock = None
        self.shared_ep = None  # Loop's epoll set, shared by its connections
        # How often the invariants were put to the test: readable reports,
        # reads right after one, reads that found nothing, blocking waits.
        self.n = {"reports": 0, "checked": 0, "eagain": 0, "waits": 0}
        self.shift = int(os.environ.get("FREE_TEST_SHIFT", "0"))  # self-test: misread the stream

    # ------------------------------------------------------------ helpers
    def v(self, what):
        if len(self.viol) < 20:
            self.viol.append(what)

    def err(self, where, e):
        self.errs.append("%s:%s" % (where, errno.errorcode.get(e, str(e))))

    def jitter(self):
        x = self.rnd.random()
        if x < 0.25:
            time.sleep(self.rnd.random() * 2e-4)
        elif x < 0.28:
            time.sleep(0.001 + self.rnd.random() * 0.002)
        elif x < 0.45:
            os.sched_yield()

    def set_nb(self, on):
        fl = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        fcntl.fcntl(self.fd, fcntl.F_SETFL, fl | os.O_NONBLOCK if on else fl & ~os.O_NONBLOCK)
        self.nb = on

    def account(self, data, peek=False):
        want = pattern(self.peer, self.got + self.shift, len(data))
        if data != want:
            k = next(i for i in range(len(data)) if data[i] != want[i])
            self.v("byte at stream offset %d differs from the peer's pattern%s" %
                   (self.got + k, " (peek)" if peek else ""))
        if not peek:
            self.got += len(data)
            if self.got > self.peer_total:
                self.v("read %d bytes, the peer sends %d" % (self.got, self.peer_total))
        self.ready = False
        self.drained = False

    def saw_eof(self):
        if not self.eof and self.got < self.peer_total_eof:
            self.v("EOF after %d bytes of %d" % (self.got, self.peer_total_eof))
        self.eof = True
        self.ready = False

    # ------------------------------------------------------------ waits
    # An end's calls run as a generator: where the program would block in
    # its readiness call, it yields what it waits for ("in" with the call:
    # "ep", "poll" or "select"; "out"; "tick", the trace's own epoll_wait
    # with timeout 0; "sleep"), and a driver does the waiting: drive_one()
    # for one connection in its own process, Loop for several connections
    # sharing one thread and one epoll set.

    def wait_in(self, why, how=None):
        """Until the program's readiness call reports readable (its epoll
        set if it watches IN there and is armed, else poll)."""
        t_end = time.monotonic() + STALL_S
        self.n["waits"] += 1
        while not self.ready:
            if time.monotonic() > t_end:
                self.v("stall: %s: no readable report in %.0f s with %d of %d bytes read" %
                       (why, STALL_S, self.got, self.peer_total))
                return False
            yield ("in", how or self.in_how())
        return True

    def in_how(self):
        if self.ep is not None and self.reg is not None and self.reg & select.EPOLLIN and self.armed:
            return "ep"
        return "poll"

    def on_ep(self, ev):
        """One event of an epoll_wait for this connection."""
        if self.reg & select.EPOLLONESHOT:
            self.armed = False
        if ev & READ_EV and self.reg & select.EPOLLIN:
            self.ready = True
            self.n["reports"] += 1
            return True
        return False

    def epwait(self, ms):
        try:
            evs = self.ep.poll(ms / 1000.0, 8)
        except InterruptedError:
            return False
        mine = [e for fd, e in evs if fd == self.fd]
        if len(mine) > 1:
            self.v("one registration reported %d times in one epoll_wait" % len(mine))
        hit = False
        for e in mine[:1]:
            hit = self.on_ep(e)
        return hit

    def pollwait(self, ev, ms):
        p = select.poll()
        p.register(self.fd, ev)
        r = p.poll(ms)
        hit = bool(r and r[0][1] & (select.POLLIN | select.POLLHUP | select.POLLERR | select.POLLRDHUP))
        if hit and ev & select.POLLIN:
            self.ready = True
            self.n["reports"] += 1
        return hit

    def selwait(self, rd, wr, ms):
        r, w, _ = select.select([self.fd] if rd else [], [self.fd] if wr else [], [], ms / 1000.0)
        if r:
            self.ready = True
            self.n["reports"] += 1
        return bool(r)

    def block(self, req, ms):
        """drive_one's wait: the call req names, for at most ms."""
        if req[0] == "in":
            if req[1] == "ep":
                self.epwait(ms)
            elif req[1] == "select":
                self.selwait(True, False, ms)
            else:
                self.pollwait(select.POLLIN | select.POLLRDHUP, ms)
        elif req[0] == "out":
            p = select.poll()
            p.register(self.fd, select.POLLOUT)
            p.poll(ms)
        elif req[0] == "tick":
            self.epwait(0)
        elif req[0] == "sleep":
            time.sleep(req[1])

    def wait_out(self):
        t_end = time.monotonic() + STALL_S
        while True:
            p = select.poll()
            p.register(self.fd, select.POLLOUT)
            if p.poll(0):
                return True
            if time.monotonic() > t_end:
                self.v("stall: a send waited %.0f s for POLLOUT" % STALL_S)
                return False
            yield ("out",)

    # ------------------------------------------------------------ data
    def recv_call(self, step, n):
        w = step.split()
        flags = 0
        if "dontwait" in w:
            flags |= socket.MSG_DONTWAIT
        if "peek" in w:
            flags |= socket.MSG_PEEK
        if "waitall" in w:
            flags |= socket.MSG_WAITALL
        if w[0] == "read":
            return os.read(self.fd, n)
        if w[0] == "readv":
            k = max(1, int(w[2]))
            bufs = [bytearray(max(1, n // k)) for _ in range(k)]
            got = os.readv(self.fd, bufs)
            return b"".join(bytes(b) for b in bufs)[:got]
        if w[0] == "recvmsg":
            return self.sock.recvmsg(n, 0, flags)[0]
        return self.sock.recv(n, flags)

    def one_read(self, step, n, where):
        """One receive call; returns the bytes, b"" at EOF, None on EAGAIN
        or an error."""
        was_ready = self.ready
        self.n["checked"] += was_ready
        try:
            data = self.recv_call(step, n)
        except BlockingIOError:
            self.n["eagain"] += 1
            if was_ready:
                self.v("%s: EAGAIN right after a readable report (%d of %d bytes read)" %
                       (where, self.got, self.peer_total))
            self.ready, self.drained = False, True
            return None
        except InterruptedError:
            return None
        except OSError as e:
            self.err(step.split()[0], e.errno)
            self.ready = False
            return b""
        if data:
            self.account(data, peek="peek" in step)
        else:
            self.saw_eof()
        return data

    def read_until(self, step, n, target, where, eof=False):
        """Reads with the program's call until `target` bytes came in all
        (or EOF), waiting in the program's readiness call when none are
        here."""
        while (self.got < target or eof) and not self.eof:
            data = self.one_read(step, n, where)
            if data is None:
                if not (yield from self.wait_in(where)):
                    return
            elif not data:
                return
            elif "peek" in step:
                return

    def send_all(self, step, n):
        w = step.split()
        data = pattern(self.name, self.sent, n)
        flags = 0
        if "dontwait" in w:
            flags |= socket.MSG_DONTWAIT
        if "nosignal" in w:
            flags |= socket.MSG_NOSIGNAL
        pos = 0
        while pos < n:
            chunk = data[pos:]
            try:
                if w[0] == "write":
                    k = os.write(self.fd, chunk)
                elif w[0] in ("writev", "sendmsg"):
                    parts = max(1, int(w[2]) if len(w) > 2 else 1)
                    size = max(1, -(-len(chunk) // parts))
                    iov = [chunk[i:i + size] for i in range(0, len(chunk), size)]
                    k = os.writev(self.fd, iov) if w[0] == "writev" else self.sock.sendmsg(iov, [], flags)
                elif w[0] == "sendfile":
                    mfd = os.memfd_create("free", 0)
                    try:
                        os.write(mfd, chunk)
                        k = os.sendfile(self.fd, mfd, 0, len(chunk))
                    finally:
                        os.close(mfd)
                else:
                    k = self.sock.send(chunk, flags)
            except BlockingIOError:
                if not (yield from self.wait_out()):
                    return
                continue
            except InterruptedError:
                continue
            except OSError as e:
                self.err(w[0], e.errno)
                return
            pos += k
            self.sent += k

    # ------------------------------------------------------------ steps
    def step(self, i, op):
        s, kind, w = op["step"], op["kind"], op["step"].split()
        if kind == "recv":
            n = op["args"][0] or 1
            live = op["n"]
            if self.eof:
                return
            if live > 0 or ("peek" in w and live >= 0):
                target = min(op["need"], self.peer_total)
                if self.got >= target:
                    if self.nb or "dontwait" in w:
                        self.one_read(s, n, "step %d %s" % (i, s))
                    return
                if "waitall" in w and not self.nb:
                    n = min(n, self.peer_total - self.got)
                yield from self.read_until(s, n, target if "peek" not in w else self.got + 1, "step %d %s" % (i, s))
            elif live == 0:
                yield from self.read_until(s, n, self.peer_total_eof, "step %d %s (EOF live)" % (i, s), eof=True)
            elif self.nb or "dontwait" in w:
                self.one_read(s, n, "step %d %s" % (i, s))
            return
        if kind == "send":
            yield from self.send_all(s, op["n"])
            return
        if kind in ("wait", "negwait"):
            nxt = op.get("next_need")
            need = nxt is not None and not self.eof and (self.got < min(nxt, self.peer_total) or nxt < 0)
            block = op.get("ready_in") and need
            if w[0] == "epwait":
                if self.ep is None or self.reg is None:
                    return
                if block and not (self.reg & select.EPOLLIN and self.armed):
                    block = False
                if block and self.reg & select.EPOLLET and not self.drained:
                    block = False  # an edge needs an empty buffer first
                if block:
                    yield ("tick",)
                    yield from self.wait_in("step %d %s" % (i, s), "ep")
                else:
                    yield ("tick",)
                return
            ev = w[1]
            rd = "in" in ev or "io" in ev
            wr = "out" in ev or "io" in ev
            if w[0] in ("poll", "ppoll"):
                m = (select.POLLIN if rd else 0) | (select.POLLOUT if wr else 0) | \
                    (select.POLLRDHUP if "rdhup" in ev else 0)
                if block and rd:
                    if not self.pollwait(m & ~select.POLLOUT, 0):
                        yield from self.wait_in("step %d %s" % (i, s), "poll")
                else:
                    self.pollwait(m, 0)
            else:
                if block and rd:
                    if not self.selwait(True, False, 0):
                        yield from self.wait_in("step %d %s" % (i, s), "select")
                else:
                    self.selwait(rd, wr, 0)
            return
        if w[0] == "nonblock":
            self.set_nb(w[1] == "1")
        elif w[0] == "nodelay":
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, int(w[1]))
        elif w[0] == "cork":
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, int(w[1]))
        elif w[0] == "rcvlowat":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, int(w[1]))
        elif w[0] == "linger0":
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif w[0] == "soerror":
            e = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if e:
                self.err("soerror", e)
        elif w[0] == "fionread":
            k = struct.unpack("i", fcntl.ioctl(self.fd, termios.FIONREAD, b"\0" * 4))[0]
            if k > self.peer_total - self.got:
                self.v("FIONREAD %d with %d bytes still to come" % (k, self.peer_total - self.got))
        elif w[0] in ("epadd", "epmod", "epdel"):
            if self.ep is None:
                self.ep = self.shared_ep or select.epoll()
            try:
                if w[0] == "epadd":
                    self.ep.register(self.fd, ep_mask(w[1]))
                elif w[0] == "epmod":
                    self.ep.modify(self.fd, ep_mask(w[1]))
                else:
                    self.ep.unregister(self.fd)
            except OSError as e:
                self.err(w[0], e.errno)
                return
            self.reg = None if w[0] == "epdel" else ep_mask(w[1])
            self.armed = self.reg is not None
        elif w[0] == "shutdown":
            how = {"rd": socket.SHUT_RD, "wr": socket.SHUT_WR, "rdwr": socket.SHUT_RDWR}[w[1]]
            try:
                self.sock.shutdown(how)
            except OSError as e:
                self.err("shutdown", e.errno)
        elif w[0] == "close":
            if op.get("eof_after"):
                # A program closes once it has what it waits for: the bytes
                # the peer sends before it needs our EOF.
                if self.got < self.peer_pre_eof and not self.eof:
                    yield from self.read_until("read 65536", 65536, self.peer_pre_eof, "before close")
            self.sock.close()
            self.closed = True

    def run(self, ops):
        i = 0
        while i < len(ops):
            op = ops[i]
            if self.closed and op["step"] not in ("fork", "exit"):
                i += 1
                continue
            self.jitter()
            if op["step"] == "fork":
                j, depth = i + 1, 1
                while j < len(ops):
                    depth += {"fork": 1, "exit": -1}.get(ops[j]["step"], 0)
                    if depth == 0:
                        break
                    j += 1
                yield from self.fork(ops[i + 1:j])
                i = j + 1
                continue
            yield from self.step(i, op)
            i += 1

    def fork(self, block):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            if self.reg is None:
                self.ep = self.shared_ep = None  # the child's own set, as in the trace
            drive_one(self, self.run(block))
            os.write(w, json.dumps(self.state()).encode())
            os._exit(0)
        os.close(w)
        while True:
            wp, st = os.waitpid(pid, os.WNOHANG)
            if wp:
                break
            yield ("sleep", 0.002)
        if st:
            self.v("forked child ended with status %d" % st)
        out = b""
        while True:
            b = os.read(r, 65536)
            if not b:
                break
            out += b
        os.close(r)
        if not out:
            self.v("a forked child ended without its report")
        if out:
            c = json.loads(out)
            self.sent, self.got, self.eof = c["sent"], c["got"], c["eof"]
            self.viol += c["viol"]
            self.errs += c["errs"]
            for k in self.n:
                self.n[k] += c["n"][k]
            self.drained = False

    def state(self):
        return {"sent": self.sent, "got": self.got, "eof": self.eof, "viol": self.viol, "errs": self.errs,
                "n": self.n}

    def finish(self):
        """The trace ended (or was cut) with the connection open: stop
        sending, read to the end, close."""
        if self.closed:
            return
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError as e:
            self.err("shutdown", e.errno)
        if not self.eof:
            yield from self.read_until("read 65536", 65536, self.peer_total, "drain to EOF", eof=True)
        self.sock.close()
        self.closed = True

    def body(self, ops):
        yield from self.run(ops)
        yield from self.finish()


def drive_one(end, gen):
    """One connection in its own thread: each wait is the program's own
    readiness call, repeated in slices of 100 ms (the generator checks its
    stall bound between them)."""
    try:
        req = next(gen)
        while True:
            end.block(req, 100)
            req = gen.send(None)
    except StopIteration:
        pass


class Loop:
    """Several connections of one end in one thread, as an event-driven
    server or client runs them: their registrations share one epoll set,
    whose epoll_wait runs once per round (nested in a poll beside the fds
    of connections that wait with poll or select, or for POLLOUT) and
    whose events go to the connection they name."""

    def __init__(self, ends):
        self.ep = select.epoll()
        self.ends = ends
        for e in ends:
            e.shared_ep = self.ep

    def ep_round(self, ms=0):
        evs = self.ep.poll(ms / 1000.0, 64)
        count = {}
        for fd, ev in evs:
            count[fd] = count.get(fd, 0) + 1
        by_fd = {e.fd: e for e in self.ends if not e.closed}
        for fd, ev in evs:
            e = by_fd.get(fd)
            if e is None or e.reg is None:
                continue
            if count[fd] > 1:
                e.v("one registration reported %d times in one epoll_wait" % count[fd])
                count[fd] = 1
            e.on_ep(ev)

    def run(self, gens):
        req = {}
        for e, g in gens.items():
            req[e] = ("go",)
        while req:
            # Resume every connection that can go on.
            for e in list(req):
                r = req[e]
                if r[0] == "in" and not e.ready and r[2] > time.monotonic():
                    continue
                if r[0] in ("out", "sleep") and r[2] > time.monotonic() and not r[3]:
                    continue
                try:
                    while True:
                        nxt = gens[e].send(None) if r[0] != "go" else next(gens[e])
                        r = ("x",)
                        if nxt[0] == "tick":
                            self.ep_round()
                            continue
                        break
                except StopIteration:
                    del req[e]
                    continue
                now = time.monotonic()
                if nxt[0] == "in":
                    req[e] = ("in", nxt[1], now + 0.1)
                elif nxt[0] == "out":
                    req[e] = ("out", None, now + 0.1, False)
                else:
                    req[e] = ("sleep", None, now + nxt[1], False)
            if not req:
                break
            # One round of waiting: the shared set's epoll_wait, then a
            # poll of the fds that wait another way (in slices of 1 ms
            # while there are such); with FREE_LOOP_NEST=1 the set's fd
            # inside that poll instead (a cascaded set).
            fds = {}
            p = select.poll()
            for e, r in req.items():
                if r[0] == "in" and r[1] != "ep" and not e.ready:
                    p.register(e.fd, select.POLLIN | select.POLLRDHUP)
                    fds[e.fd] = (e, r)
                elif r[0] == "out":
                    p.register(e.fd, select.POLLOUT)
                    fds[e.fd] = (e, r)
            if any(e.ready for e, r in req.items() if r[0] == "in"):
                ms = 0
            else:
                ms = max(0, int(1000 * (min(r[2] for r in req.values()) - time.monotonic())))
            if NEST:
                p.register(self.ep.fileno(), select.POLLIN)
                got = p.poll(ms)
            else:
                self.ep_round(min(ms, 1) if fds else ms)
                got = p.poll(0) if fds else []
            for fd, ev in got:
                if fd == self.ep.fileno():
                    self.ep_round()
                    continue
                e, r = fds[fd]
                if r[0] == "out":
                    req[e] = r[:3] + (True,)
                elif r[1] == "select":
                    e.selwait(True, False, 0)
                else:
                    e.pollwait(select.POLLIN | select.POLLRDHUP, 0)


def connect(name, port, plan, count):
    """The end's connections: accepted from one listener, or connected
    (nonblocking where the trace's connect was)."""
    addr = os.environ.get("DIFF_ADDR", "127.0.0.1")
    out = []
    if name == "server":
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(max(8, count))
        sys.stdout.write("listening\n")
        sys.stdout.flush()
        for _ in range(count):
            out.append(ls.accept()[0])
        ls.close()
        return out, plan["ops"]
    ops = plan["ops"]
    nbc = bool(ops) and ops[0]["step"] == "nbconnect"
    for _ in range(count):
        sk = socket.socket()
        if nbc:
            fcntl.fcntl(sk.fileno(), fcntl.F_SETFL, fcntl.fcntl(sk.fileno(), fcntl.F_GETFL) | os.O_NONBLOCK)
            try:
                sk.connect((addr, port))
            except BlockingIOError:
                pass
        else:
            sk.connect((addr, port))
        out.append(sk)
    return out, ops[1:] if nbc else ops


def main():
    name, port, planf, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    count = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    plan = json.load(open(planf))[name]
    socks, ops = connect(name, port, plan, count)
    ends = []
    for j, sk in enumerate(socks):
        e = End(name, port, plan, seed * 1000 + j)
        e.sock, e.fd = sk, sk.fileno()
        e.nb = bool(fcntl.fcntl(e.fd, fcntl.F_GETFL) & os.O_NONBLOCK)
        e.peer_total = e.peer_total_eof = plan["peer_total"]
        e.peer_pre_eof = plan["peer_pre_eof"]
        ends.append(e)
    if count == 1:
        drive_one(ends[0], ends[0].body(ops))
    else:
        Loop(ends).run({e: e.body(ops) for e in ends})
    for e in ends:
        st = e.state()
        st["ops"] = len(ops)
        sys.stdout.write(json.dumps(st) + "\n")


if __name__ == "__main__":
    main()
