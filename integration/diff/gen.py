"""gen.py: the seeded random scenario generator of the differential harness.

scenario(seed, avoid_known=False) returns a scenario as lines ("c STEP",
"s STEP", "sync"). It keeps a model of the bytes each end has not read yet,
so that every step whose result the kernel fixes (a recv of n with P bytes
queued returns min(n, P)) runs where that holds: blocking reads only when
data is queued, bulk transfers with the reader draining at the same time,
probes only after a barrier. Everything else (how a read splits while the
peer still writes) goes through the drain step, whose record is split-free.

avoid_known leaves out the shapes of the known differences listed in
corpus/known/ (so that make test's random part finds only new ones); the
soak run keeps them. With transport "rdma" it also leaves out the shapes
of the RDMA transport's known differences (the "# known-rdma:" cases of
the corpus): a child or a new image using a switched connection (fork,
exec, SCM_RIGHTS to a child), and a kill -9 right after the read that
emptied the ring (kill9_idle: a wait of 50 ms on the socket goes before
the kill, whose arm carries the consumer's exact head).
"""
import random

E = ("c", "s")


def other(e):
    return "s" if e == "c" else "c"


class Gen:
    def __init__(self, seed, avoid_known, transport="shm"):
        self.r = random.Random(seed)
        self.avoid = avoid_known
        self.no_handover = avoid_known and transport == "rdma"
        self.L = []
        self.pending = {"c": 0, "s": 0}  # bytes queued for that end to read
        self.ep = {"c": None, "s": None}  # epoll registration flags
        self.open = {"c": True, "s": True}
        self.wr = {"c": True, "s": True}  # may still send
        self.rd = {"c": True, "s": True}  # peer may still send to it
        self.warm = False

    def add(self, e, step):
        self.L.append("%s %s" % (e, step))

    def sync(self):
        self.L.append("sync")

    def size(self, lo=0, hi=23):
        return int(2 ** self.r.uniform(lo, hi))

    def small(self):
        return self.r.choice([1, 2, 7, 100, 1000, 1448, 4096, 4097, 10000, 16384])

    # ---- phases -------------------------------------------------------
    def warmup(self):
        # awaitup's round trips must not meet unread bytes: drain them first.
        for e in E:
            if self.pending[e]:
                self.add(e, "drain %d" % self.pending[e])
                self.pending[e] = 0
        if self.L:
            self.sync()
        for k in range(2):
            self.add("c", "send 64")
            self.add("s", "drain 64")
            self.add("s", "send 64")
            self.add("c", "drain 64")
            if k == 0:  # wait for the upgrade, then a round trip over it
                self.L.append("awaitup")
            self.sync()
        self.warm = True

    def send_step(self, n, big):
        r = self.r
        m = r.choice(["send", "write", "writev", "sendmsg", "sendfile", "sendfile_null", "send_nosig", "splicein"])
        if m == "writev":
            return "writev %d %d" % (n, r.randint(1, 8))
        if m == "sendmsg":
            return "sendmsg %d %d" % (n, r.randint(1, 4))
        if m == "sendfile_null":
            return "sendfile %d null" % n
        if m == "send_nosig":
            return "send %d nosignal" % n
        if m == "splicein" and n == 0:
            return "send 0"
        return "%s %d" % (m, n)

    def xfer(self):
        """A bulk transfer, 0 B to 8 MiB, read while it is written."""
        e = self.r.choice([x for x in E if self.wr[x] and self.rd[other(x)]] or ["c"])
        if not (self.wr[e] and self.rd[other(e)]):
            return
        o = other(e)
        n = self.size(0, 23)
        self.add(e, self.send_step(n, True))
        total = self.pending[o] + n
        how = self.r.random()
        if total == 0:
            pass
        elif how < 0.6:
            self.add(o, "drain %d" % total)
        elif how < 0.75:
            self.add(o, "spliceout %d" % total)
        elif how < 0.9:
            self.add(o, "recv %d waitall" % total)
        else:
            self.add(o, "threads2 %d" % total)
        self.pending[o] = 0
        self.sync()

    def probe(self):
        """Small sends, a barrier, then exact reads and readiness checks."""
        e = self.r.choice(E)
        o = other(e)
        if self.wr[e] and self.rd[o] and self.pending[o] < 60000 and self.r.random() < 0.8:
            for _ in range(self.r.randint(1, 2)):
                n = self.small()
                self.add(e, self.send_step(n, False))
                self.pending[o] += n
        if self.ep[o] is None and self.r.random() < 0.3:
            fl = self.r.choice(["in", "in+et", "in+oneshot", "in+rdhup", "io", "io+et", "in+excl"])
            self.L.insert(len(self.L) - 1 if self.L and self.L[-1].startswith(e) else len(self.L),
                          "%s epadd %s" % (o, fl))
            self.ep[o] = fl
        self.sync()
        for _ in range(self.r.randint(1, 6)):
            self.probe_step(o)
        self.sync()

    def probe_step(self, o):
        r = self.r
        P = self.pending[o]
        k = r.random()
        n = r.choice([1, 3, 100, 1000, 4096, 65536, max(1, P), max(1, P // 2), P + 1])
        if k < 0.35:
            shapes = ["recv %d dontwait", "recvmsg %d dontwait", "recv %d peek dontwait"]
            if P > 0:
                shapes += ["recv %d", "read %d", "readv %d 3", "recvmsg %d", "recv %d peek",
                           "recvmsg %d peek", "recv %d trunc"]
                if n <= P:
                    shapes.append("recv %d waitall")
            s = r.choice(shapes) % n
            self.add(o, s)
            if "peek" not in s and P > 0:
                self.pending[o] -= min(n, P)
        elif k < 0.5:
            self.add(o, r.choice(["poll in 0", "poll io 0", "ppoll io 0", "select io 0", "pselect in 0",
                                  "poll2 in 0", "poll io+rdhup 0", "select in 0"]))
        elif k < 0.6 and P == 0:
            self.add(o, r.choice(["poll in 60", "ppoll in 60", "select in 60", "pselect in 60"]))
        elif k < 0.7:
            self.add(o, r.choice(["fionread", "soerror", "fionread"]))
        elif k < 0.8 and self.ep[o] is not None:
            self.add(o, "epwait 0")
            if r.random() < 0.3:
                fl = r.choice(["in", "in+et", "in+oneshot", "io", "in+rdhup", "out"])
                self.add(o, "epmod %s" % fl)
                self.ep[o] = fl
        elif k < 0.87 and P == 0:
            self.add(o, "rcvtimeo 70")
            self.add(o, r.choice(["recv 10", "read 10", "recvmsg 10"]))
            self.add(o, "rcvtimeo 0")
        elif k < 0.94:
            lw = r.choice([1, 2, 100, 5000])
            self.add(o, "rcvlowat %d" % lw)
            self.add(o, r.choice(["poll in 0", "select in 0", "fionread"]))
            if self.ep[o] is not None:
                self.add(o, "epwait 0")
            self.add(o, "rcvlowat 1")
        elif k < 0.97 or self.avoid:
            self.add(o, r.choice(["nodelay 1", "cork 1", "cork 0", "dupclose"]))
            if self.L[-1].endswith("cork 1"):
                self.add(o, "cork 0")
        else:  # shapes of known differences (soak only)
            self.add(o, r.choice(["errqueue", "sendmsgc 10 rights", "sendmsgc 10 ip", "oob", "atmark",
                                  "recv 1 oob dontwait"]))
            if self.L[-1].startswith(o + " send"):
                self.pending[other(o)] += 10

    def forked(self):
        """fork or exec with the child using the fd, then a transfer."""
        e = self.r.choice(E)
        o = other(e)
        if not (self.wr[e] and self.rd[o]):
            return
        n = self.size(0, 17)
        kind = self.r.choice(["fork", "exec"])
        if kind == "fork":
            self.add(e, "fork")
            self.add(e, self.send_step(n, True))
            self.add(e, "exit")
        else:
            self.add(e, "exec")
            self.add(e, self.send_step(n, True))
            self.ep[e] = None
        tot = self.pending[o] + n
        if tot:
            self.add(o, "drain %d" % tot)
        self.pending[o] = 0
        self.sync()

    # ---- the end --------------------------------------------------------
    def finish(self):
        r = self.r
        e = r.choice(E)
        o = other(e)
        k = r.random()
        if self.avoid:  # SCM_RIGHTS after the warm-up
            # (over RDMA: not the resets, not SHUT_RD, not SCM_RIGHTS,
            # whose shapes it has known differences in)
            k = r.choice([0.1, 0.5, 0.5, 0.7] if self.no_handover else [0.1, 0.3, 0.4, 0.5, 0.5, 0.7, 0.8, 0.9])
        if k < 0.2:  # half-close, the peer drains to EOF, then answers
            self.add(e, "shutdown wr")
            self.add(o, "drain")
            self.sync()
            self.add(o, r.choice(["poll io+rdhup 0", "recv 10 dontwait", "fionread"]))
            n = self.small()
            self.add(o, self.send_step(n, False))
            self.add(e, "drain %d" % (self.pending[e] + n))
            self.sync()
            self.add(o, "close")
            self.add(e, "drain")
            self.add(e, "close")
        elif k < 0.35:  # close with unread data: the peer sees a reset
            if self.pending[e] == 0:
                self.add(o, "send %d" % self.small())
            self.sync()
            self.add(e, "close")
            self.sync()
            self.add(o, r.choice(["poll io+rdhup 0", "soerror", "recv 10 dontwait"]))
            self.add(o, "drain")
            self.add(o, "send 10")
            self.add(o, "soerror")
            self.add(o, "close")
        elif k < 0.45:  # abortive close
            self.add(e, "linger0")
            self.add(e, "close")
            self.sync()
            self.add(o, "poll io+rdhup 0")
            self.add(o, "recv 10 dontwait")
            self.add(o, "soerror")
            self.add(o, "send 10")
            self.add(o, "close")
        elif k < 0.65:  # a request, a reply written, close at once
            if self.avoid and not self.warm:
                self.warmup()
            req = self.small()
            self.add(o, "send %d" % req)
            self.add(e, "drain %d" % (self.pending[e] + req))
            self.pending[e] = 0
            self.add(e, self.send_step(self.size(0, 20), True))
            self.add(e, "close")
            self.add(o, "drain")
            self.add(o, "close")
        elif k < 0.75:  # kill -9, with or without bytes left unread (the peer: reset)
            if self.pending[e] and (self.no_handover or r.random() < 0.5):
                self.add(e, "drain %d" % self.pending[e])
            if self.no_handover:  # corpus/kill9_idle.scn: a call on the socket carries the exact head
                self.add(e, "poll in 50")
            self.sync()
            self.add(e, "die")
            self.add(o, "drain")
            self.add(o, "send 10")
            self.add(o, "close")
        elif k < 0.85:  # shutdown rd / rdwr
            how = r.choice(["rd", "rdwr"])
            self.add(e, "shutdown %s" % how)
            self.sync()
            self.add(e, "poll io+rdhup 0")
            self.add(e, "recv 10 dontwait")
            self.add(o, "poll io+rdhup 0")
            self.sync()  # o's look comes before e's close
            self.add(o, "drain")
            self.add(e, "close")
            self.add(o, "close")
        else:  # forkpass: a child gets the fd with SCM_RIGHTS and finishes
            n = self.small()
            self.add(e, "forkpass")
            self.add(e, "send %d" % n)
            self.add(e, "shutdown wr")
            self.add(e, "drain")
            self.add(e, "close")
            self.add(e, "exit")
            self.add(o, "drain")
            self.add(o, "close")

    def build(self):
        r = self.r
        if r.random() < 0.12:
            self.add("c", "nbconnect")
            self.add("c", "poll out 2000")
            self.add("c", "soerror")
            self.add("c", "nonblock 0")
        # Without a warm-up the first phases meet the switch; make test's
        # random part (avoid_known) always warms up, as the switch moment
        # has known differences (corpus/known/fionread_switch_*.scn).
        if self.avoid or r.random() < 0.75:
            self.warmup()
        for _ in range(r.randint(1, 6)):
            k = r.random()
            if k < 0.35:
                self.xfer()
            elif k < 0.85:
                self.probe()
            elif self.no_handover:
                self.probe()
            else:
                self.forked()
        self.finish()
        return self.L


def scenario(seed, avoid_known=False, transport="shm"):
    return Gen(seed, avoid_known, transport).build()


if __name__ == "__main__":
    import sys
    print("\n".join(scenario(int(sys.argv[1]), len(sys.argv) > 2)))
