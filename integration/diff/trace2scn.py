#!/usr/bin/env python3
"""trace2scn.py: real programs' strace recordings as differential scenarios
(README.md, "Real programs' traces"; record.sh makes the recordings).

  trace2scn.py trim RAWDIR NAME --port P [--client PREFIX] --out DIR
      keeps, of `strace -ff -ttt -T -yy` files RAWDIR/PREFIX.<pid> and
      RAWDIR/server.<pid>, the calls of one connection to port P (the
      client's connection with the most calls): DIR/NAME.client.strace and
      DIR/NAME.server.strace, each line "PID TIME CALL(...) = RET <DUR>"
      (up to the time of the client's --max-lines-th call, default 500).
  trace2scn.py verify
      TAP lines: every corpus/replay_*.scn is what convert makes of its
      kept traces (t_diff.sh runs it).
  trace2scn.py convert TRACES/NAME [--out FILE.scn] [--max-steps N]
      the scenario of a kept pair of traces (all kept pairs: `convert` with
      no name writes corpus/replay_NAME.scn for every corpus/traces/NAME).

The scenario keeps each end's own order of calls: sends and receives with
the program's sizes (the driver's pattern stands for the content), the
readiness calls that reported the tested connection (epoll with the
program's flags and EPOLL_CTL_MOD, poll, select), O_NONBLOCK, shutdown,
close and fork. The two ends are merged by time (a send counts from its
start, a receive or a wait from its end) where the bytes allow it: a
receive that got R bytes comes after the peer's sends of them, a wait that
reported readable after the sends its next receive got. Where the acting
end changes, a `sync` stops both, so that every receive and readiness call
of the replay runs with the peer at rest and is the same on every run; a
wait therefore runs with timeout 0. A blocking receive that would find
nothing in the replay (the program's earlier receives took more than they
did live) is left out, as it would hang.
"""
import argparse
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Queued bytes beyond this are a bulk transfer (replay()).
BULK = 32 * 1024
# More unread sends than this may wait for the reader's delayed ACK (a
# congestion window of ten segments at the start of a connection).
SEGS = 8
LINE = re.compile(r"^(\d+\.\d+) (\w+)\((.*)\) += (.*?)(?: <([\d.]+)>)?$")
# recvfrom/sendto's last four arguments: length, flags, address, its length
TAIL = re.compile(r", (\d+), ([A-Z_|]+|0), (?:NULL|0x[0-9a-f]+|\{[^}]*\}), (?:NULL|\[[^\]]*\]|0x[0-9a-f]+|\d+)$")
CONN = re.compile(r"TCP:\[127\.0\.0\.1:(\d+)->127\.0\.0\.1:(\d+)\]")


def parse_line(ln):
    m = LINE.match(ln)
    if not m:
        return None
    ts, call, args, ret, dur = m.groups()
    return float(ts), call, args, ret, float(dur or 0)


# ---------------------------------------------------------------- trim

def trim_side(files, deco):
    """The lines of every process in files that concern the connection named
    deco ("127.0.0.1:a->127.0.0.1:b"): its fd's calls from the socket's
    creation to its close, the epoll_waits that reported it, the forks made
    while it was open."""
    out = []
    epdata = {}  # epfd number -> data u64 of the connection's registration
    for path in files:
        pid = path.rsplit(".", 1)[1]
        mine = set()  # fd numbers that are the connection in this process
        young = {}  # fd -> lines since socket() while not yet connected
        for ln in open(path, errors="replace"):
            ln = ln.rstrip("\n")
            p = parse_line(ln)
            if not p:
                continue
            ts, call, args, ret, dur = p
            keep = False
            if deco in ln:
                m = re.search(r"(\d+)<TCP:\[" + re.escape(deco), ln)
                if m:
                    fd = m.group(1)
                    if fd not in mine:
                        mine.add(fd)
                        out.extend((ts, pid, y) for y in young.pop(fd, []))
                keep = True
            elif call == "socket" and re.match(r"-?\d+<TCP", ret):
                young[ret.split("<")[0]] = [ln]
                continue
            else:
                m = re.match(r"(\d+)<", args)
                fd = m.group(1) if m else None
                if fd in young and call != "close":
                    young[fd].append(ln)
                    continue
                if fd in young:
                    del young[fd]
                if fd in mine or any(re.search(r"\b%s<TCP:\[" % f, args) for f in mine):
                    keep = True
                if call in ("epoll_wait", "epoll_pwait", "epoll_pwait2") and fd in epdata and mine:
                    keep = ("u64=%s}" % epdata[fd]) in args
                if call in ("clone", "clone3", "fork", "vfork") and mine:
                    keep = "CLONE_THREAD" not in args
            if not keep:
                continue
            if call == "epoll_ctl":
                m = re.match(r"(\d+)<.*?u64=(\d+)\}", args)
                if m:
                    epdata[m.group(1)] = m.group(2)
            out.append((ts, pid, ln))
            if call == "close" and re.match(r"(\d+)<", args) and args.split("<")[0] in mine:
                mine.discard(args.split("<")[0])
    out.sort(key=lambda t: t[0])
    return ["%s %s" % (pid, ln) for _, pid, ln in out]


def cmd_trim(a):
    port = str(a.port)
    cfiles = sorted(glob.glob(os.path.join(a.raw, a.client + ".[0-9]*")))
    sfiles = sorted(glob.glob(os.path.join(a.raw, "server.[0-9]*")))
    count = {}
    for path in cfiles:
        for ln in open(path, errors="replace"):
            for m in CONN.finditer(ln):
                if m.group(2) == port:
                    count[m.group(1)] = count.get(m.group(1), 0) + 1
    if not count:
        sys.exit("trim: no connection to port %s in %s/%s.*" % (port, a.raw, a.client))
    lport = max(count, key=lambda k: count[k])
    cdeco = "127.0.0.1:%s->127.0.0.1:%s" % (lport, port)
    sdeco = "127.0.0.1:%s->127.0.0.1:%s" % (port, lport)
    os.makedirs(a.out, exist_ok=True)
    sides = {end: trim_side(files, deco) for end, files, deco in
             (("client", cfiles, cdeco), ("server", sfiles, sdeco))}
    cut = ""
    if len(sides["client"]) > a.max_lines:
        # A long run (wrk) is kept up to the time of the client's
        # max_lines-th call, on both ends: convert cuts far earlier anyway.
        t = float(sides["client"][a.max_lines - 1].split()[1])
        sides = {e: [ln for ln in v if float(ln.split()[1]) <= t] for e, v in sides.items()}
        cut = ", cut after the client's first %d calls" % a.max_lines
    for end, deco in (("client", cdeco), ("server", sdeco)):
        lines = sides[end]
        path = os.path.join(a.out, "%s.%s.strace" % (a.name, end))
        with open(path, "w") as f:
            f.write("# %s, %s end of the connection %s (record.sh, trace2scn.py trim%s)\n"
                    % (a.name, end, deco, cut))
            f.write("\n".join(lines) + "\n")
        print("trim: %s: %d lines" % (path, len(lines)))


# ---------------------------------------------------------------- convert

def iov_total(args):
    return sum(int(x) for x in re.findall(r"iov_len=(\d+)", args)), max(1, len(re.findall(r"iov_len=", args)))


def retval(ret):
    m = re.match(r"(-?\d+)", ret)
    return int(m.group(1)) if m else None


def poll_ev(flags, out_word="out"):
    ev = []
    rd = "POLLIN" in flags or "POLLRDNORM" in flags
    wr = "POLLOUT" in flags or "POLLWRNORM" in flags
    ev.append("io" if rd and wr else "in" if rd else out_word if wr else "")
    if "POLLRDHUP" in flags:
        ev.append("rdhup")
    if "POLLPRI" in flags:
        ev.append("pri")
    return "+".join(e for e in ev if e) or "in"


def ep_ev(flags):
    names = [("EPOLLIN", "in"), ("EPOLLOUT", "out"), ("EPOLLRDHUP", "rdhup"), ("EPOLLPRI", "pri"),
             ("EPOLLET", "et"), ("EPOLLONESHOT", "oneshot"), ("EPOLLEXCLUSIVE", "excl")]
    got = [w for f, w in names if re.search(r"\b%s\b" % f, flags)]
    if "in" in got and "out" in got:
        got.remove("out")
        got[got.index("in")] = "io"
    return "+".join(got) or "none"


def fd_sets(args):
    """select's read, write and except sets as lists of fd numbers (strace
    writes them "[3<UNIX...> 5<TCP:[a->b]>]", brackets inside brackets)."""
    sets, depth, cur = [], 0, None
    for k, ch in enumerate(args):
        if ch == "[":
            depth += 1
            if depth == 1:
                cur = k + 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                sets.append(re.findall(r"(?:^|\s)(\d+)<", args[cur:k]))
        elif ch == "N" and depth == 0 and args.startswith("NULL", k):
            sets.append([])
        if len(sets) == 3:
            break
    return sets


class Op:
    """One step of one end: its text, the time it sorts by, what it gives the
    peer (sent bytes, EOF) and what it needs from it."""

    def __init__(self, step, t, kind="other", n=0, nonblock=False):
        self.step, self.t, self.kind, self.n = step, t, kind, n
        self.nonblock = nonblock
        self.need_sent, self.need_eof = 0, False
        self.ready_in = False  # a wait that reported readable
        self.eof_after = False  # the end's last reference is gone after it
        self.args = ()


def end_ops(path):
    """The ops of one end, in the end's own order (a forked child's ops in
    a fork ... exit block where the fork was)."""
    rows = []
    for ln in open(path):
        if ln.startswith("#") or not ln.strip():
            continue
        pid, rest = ln.rstrip("\n").split(" ", 1)
        p = parse_line(rest)
        if p:
            rows.append((pid,) + p)
    if not rows:
        return [], []
    main = rows[0][0]
    children = {}
    for pid, ts, call, args, ret, dur in rows:
        if pid == main and call in ("clone", "clone3", "fork", "vfork") and retval(ret):
            children[str(retval(ret))] = ts
    notes = []
    ops = []
    st = {"nonblock": False, "epfd": None, "connected": False, "holders": 1, "data": None}
    m = re.search(r"connection (\S+) \(", open(path).readline())
    deco = m.group(1) if m else None

    def our_fd(args):
        """The connection's fd number in a call on several fds."""
        m = deco and re.search(r"(\d+)<TCP:\[%s\]>" % re.escape(deco), args)
        if m:
            st["fd"] = m.group(1)
            return m.group(1)
        m = re.search(r"(\d+)<TCP", args)
        return st.get("fd") or (m.group(1) if m else None)

    def emit(step, t, **kw):
        op = Op(step, t, nonblock=st["nonblock"], **kw)
        ops.append(op)
        return op

    def row_ops(pid, ts, call, args, ret, dur, in_child):
        done = ts + dur
        r = retval(ret)
        err = re.search(r"-1 (E[A-Z]+)", ret)
        err = err.group(1) if err else None
        if call == "socket":
            st["nonblock"] = "SOCK_NONBLOCK" in args
            return
        if call in ("accept", "accept4"):
            if "SOCK_NONBLOCK" in args:
                st["nonblock"] = True
                emit("nonblock 1", done)
            return
        if call == "connect" and st["connected"]:
            return  # a nonblocking connect's completion asked again
        if call == "connect":
            # What the program did to its socket before connecting runs
            # after the driver's connect: nbconnect must be the first step.
            pre = [o for o in ops if not o.step.startswith("nonblock")]
            del ops[:]
            if err == "EINPROGRESS":
                emit("nbconnect", ts)
            elif st["nonblock"]:
                emit("nonblock 1", ts)
            ops.extend(pre)
            st["connected"] = True
            return
        if call == "fcntl" and "F_SETFL" in args:
            nb = "O_NONBLOCK" in args.split("F_SETFL", 1)[1]
            if nb != st["nonblock"] and (st["connected"] or in_child or "->" in args):
                st["nonblock"] = nb
                emit("nonblock %d" % nb, ts)
            else:
                st["nonblock"] = nb
            return
        if call == "ioctl":
            if "FIONBIO" in args:
                nb = "[1]" in args
                if nb != st["nonblock"]:
                    st["nonblock"] = nb
                    emit("nonblock %d" % nb, ts)
            elif "FIONREAD" in args:
                emit("fionread", done)
            return
        if call == "setsockopt":
            m = re.search(r"(?:SOL_TCP|SOL_SOCKET|IPPROTO_TCP), \w+, \[(\d+)\]", args)
            v = m.group(1) if m else "1"
            if "TCP_NODELAY" in args:
                emit("nodelay %s" % v, ts)
            elif "TCP_CORK" in args:
                emit("cork %s" % v, ts)
            elif "SO_RCVLOWAT" in args:
                emit("rcvlowat %s" % v, ts)
            elif "SO_LINGER" in args and "l_onoff=1" in args and "l_linger=0" in args:
                emit("linger0", ts)
            return
        if call == "getsockopt" and "SO_ERROR" in args:
            emit("soerror", done)
            return
        if call in ("read", "recvfrom", "recvmsg", "readv"):
            if call == "read":
                n = int(re.search(r",\s*(\d+)$", args).group(1))
                step = "read %d" % n
            elif call == "recvfrom":
                m = TAIL.search(args)
                n = int(m.group(1))
                fl = [w for f, w in (("MSG_DONTWAIT", "dontwait"), ("MSG_PEEK", "peek"), ("MSG_WAITALL", "waitall"))
                      if f in m.group(2)]
                step = " ".join(["recv %d" % n] + fl)
            elif call == "readv":
                n, k = iov_total(args)
                step = "readv %d %d" % (n, k)
            else:
                n, k = iov_total(args)
                step = "recvmsg %d" % n
            op = emit(step, done, kind="recv", n=r if r is not None and r >= 0 else -1)
            op.args = (n, "peek" in step, "waitall" in step, "dontwait" in step)
            return
        if call in ("write", "sendto", "sendmsg", "writev", "sendfile"):
            if r is None or r <= 0:
                notes.append("left out: %s = %s" % (call, ret))
                return
            if call == "write":
                step = "write %d" % r
            elif call == "sendto":
                m = TAIL.search(args)
                # MSG_MORE is left out: plain TCP holds such bytes (as
                # Nagle would), so what a barrier sees after them is timing.
                fl = [w for f, w in (("MSG_NOSIGNAL", "nosignal"), ("MSG_DONTWAIT", "dontwait"))
                      if m and f in m.group(2)]
                if m and "MSG_MORE" in m.group(2):
                    notes.append("MSG_MORE left out of sends")
                step = " ".join(["send %d" % r] + fl)
            elif call == "writev":
                step = "writev %d %d" % (r, iov_total(args)[1])
            elif call == "sendmsg":
                step = "sendmsg %d %d" % (r, iov_total(args)[1])
            else:
                step = "sendfile %d" % r
            emit(step, ts, kind="send", n=r)
            return
        if call == "shutdown":
            how = {"SHUT_WR": "wr", "SHUT_RD": "rd", "SHUT_RDWR": "rdwr"}
            w = next((v for k, v in how.items() if k in args), "rdwr")
            emit("shutdown " + w, ts, kind="eof" if w != "rd" else "other")
            return
        if call == "close":
            emit("close", ts, kind="close")
            return
        if call == "epoll_ctl":
            epfd = args.split("<", 1)[0]
            if st["epfd"] is None:
                st["epfd"] = epfd
            if epfd != st["epfd"]:
                notes.append("left out: a second epoll set %s" % epfd)
                return
            op = re.search(r"EPOLL_CTL_(ADD|MOD|DEL)", args).group(1)
            m = re.search(r"u64=(\d+)\}", args)
            if m:
                st["data"] = m.group(1)
            m = re.search(r"events=([A-Z|]+)", args)
            ev = ep_ev(m.group(1)) if m else "none"
            emit({"ADD": "epadd " + ev, "MOD": "epmod " + ev, "DEL": "epdel"}[op], ts)
            return
        if call in ("epoll_wait", "epoll_pwait", "epoll_pwait2"):
            if args.split("<", 1)[0] != st["epfd"]:
                return
            m = re.search(r"events=([A-Z|]+), data=\{u32=\d+, u64=%s\}" % st["data"], args)
            op = emit("epwait 0", done, kind="wait")
            op.ready_in = bool(m and re.search(r"EPOLLIN|EPOLLRDHUP|EPOLLHUP", m.group(1)))
            return
        if call in ("poll", "ppoll"):
            fd = our_fd(args)
            if not fd:
                return
            m = re.search(r"\{fd=%s<[^}]*?events=([A-Z|]+)\}" % fd, args)
            ev = poll_ev(m.group(1) if m else "POLLIN")
            rv = re.search(r"\{fd=%s, revents=([A-Z|]+)\}" % fd, ret)
            op = emit("%s %s 0" % (call, ev), done, kind="wait" if rv else "negwait")
            op.ready_in = bool(rv and re.search(r"POLLIN|POLLRDNORM|POLLHUP|POLLRDHUP", rv.group(1)))
            return
        if call in ("select", "pselect6"):
            sets = fd_sets(args)
            fd = our_fd(args)
            if not fd:
                return
            inr = len(sets) > 0 and fd in sets[0]
            inw = len(sets) > 1 and fd in sets[1]
            ev = "io" if inr and inw else "in" if inr else "out"
            got_in = re.search(r"in \[([^\]]*)\]", ret)
            got_out = re.search(r"out \[([^\]]*)\]", ret)
            hit = (got_in and fd in got_in.group(1).split()) or (got_out and fd in got_out.group(1).split())
            name = "select" if call == "select" else "pselect"
            op = emit("%s %s 0" % (name, ev), done, kind="wait" if hit else "negwait")
            op.ready_in = bool(got_in and fd in got_in.group(1).split())
            return

    parent_rest = []
    for row in rows:
        pid = row[0]
        if pid == main:
            if row[2] in ("clone", "clone3", "fork", "vfork") and str(retval(row[4])) in children:
                child = str(retval(row[4]))
                emit("fork", row[1])
                st["holders"] += 1
                for crow in rows:
                    if crow[0] == child:
                        row_ops(*crow, in_child=True)
                emit("exit", max([o.t for o in ops] + [row[1]]), kind="exit")
                continue
            row_ops(*row, in_child=False)
        elif pid not in children:
            row_ops(*row, in_child=False)
    del parent_rest
    # Who holds the connection: a close inside a fork block, or the block's
    # exit, drops one reference; EOF reaches the peer when none is left.
    holders, in_child, child_closed = 1, False, False
    for op in ops:
        if op.step == "fork":
            holders, in_child, child_closed = holders + 1, True, False
        elif op.kind == "close":
            holders -= 1
            child_closed = child_closed or in_child
            op.eof_after = holders == 0
        elif op.kind == "exit":
            if not child_closed:
                holders -= 1
                op.eof_after = holders == 0
            in_child = False
        elif op.kind == "eof":
            op.eof_after = True
    # What each op needs from the peer.
    got = 0
    for i, op in enumerate(ops):
        if op.kind == "recv" and op.n > 0:
            op.need_sent = got + op.n
            got += op.n
        elif op.kind == "recv" and op.n == 0:
            op.need_eof = True
        elif op.kind == "wait" and op.ready_in:
            nxt = next((o for o in ops[i + 1:] if o.kind == "recv" and o.n >= 0), None)
            if nxt is not None and nxt.n > 0:
                op.need_sent = got + 1
            elif nxt is not None:
                op.need_eof = True
    # Keys must not go back within one end (a parent's close after the block).
    t = 0.0
    for op in ops:
        t = op.t = max(t, op.t)
    return ops, notes


def merge(cops, sops):
    """Both ends' ops in one order that the bytes allow, as (end, op)."""
    out = []
    i = j = 0
    prog = {"c": [0, False], "s": [0, False]}  # bytes sent, EOF given

    def ok(end, op):
        peer = prog["s" if end == "c" else "c"]
        return peer[0] >= op.need_sent and (peer[1] or not op.need_eof)

    while i < len(cops) or j < len(sops):
        cand = []
        if i < len(cops):
            cand.append(("c", cops[i]))
        if j < len(sops):
            cand.append(("s", sops[j]))
        ready = [c for c in cand if ok(*c)] or cand
        end, op = min(ready, key=lambda c: c[1].t)
        out.append((end, op))
        if op.kind == "send":
            prog[end][0] += op.n
        if op.eof_after:
            prog[end][1] = True
        if end == "c":
            i += 1
        else:
            j += 1
    return out


def replay(merged, max_steps):
    """The scenario's lines: a sync where the acting end changes; blocking
    receives that would hang in the replay left out; truncated after
    max_steps ops with both ends reading what is left and closing."""
    lines, last = [], None
    avail = {"c": 0, "s": 0}
    eof = {"c": False, "s": False}  # EOF reached this end
    closed = {"c": False, "s": False}
    nb = {"c": False, "s": False}
    depth = {"c": 0, "s": 0}
    segs = {"c": 0, "s": 0}  # sends queued for this end since it last read
    dropped = 0
    steps = 0
    for end, op in merged:
        peer = "s" if end == "c" else "c"
        step = op.step
        if steps >= max_steps and depth[end] == 0 and not closed[end]:
            break
        if op.kind == "recv":
            n, peek, waitall, dontwait = op.args
            if avail[end] == 0 and not eof[end] and not (op.nonblock or dontwait):
                dropped += 1
                continue
            if waitall and avail[end] < n and not eof[end]:
                dropped += 1
                continue
            if not peek:
                avail[end] -= min(n, avail[end])
        elif op.kind == "negwait":
            # A wait that saw nothing live: replayed only where the replay
            # too has nothing to read, so that it is not a different question.
            if avail[end] or eof[end] or "out" in step or "io" in step:
                continue
        if op.kind == "send" and avail[peer] + op.n > BULK:
            # More than the buffers may hold at rest: how much a nonblocking
            # send takes, and what a barrier sees queued, would depend on
            # buffer sizes. So the send blocks and the peer reads everything
            # meanwhile (drain), as a program's event loop would.
            if last is not None:
                lines.append("sync")
            step = step.replace(" dontwait", "")
            for who, what in ((end, step), (peer, "drain %d" % (avail[peer] + op.n))):
                lines.extend(["%s nonblock 0" % who] if nb[who] else [])
                lines.append("%s %s" % (who, what))
                lines.extend(["%s nonblock 1" % who] if nb[who] else [])
            lines.append("sync")
            last, avail[peer] = None, 0
            steps += 2
            continue
        if last is not None and last != end:
            if segs[end] > SEGS:
                # Many small sends the reader has not acknowledged: plain
                # TCP holds the last ones behind its congestion window until
                # the reader's delayed ACK, so what a snapshot right after
                # them sees is timing; the reader waits that out first.
                lines.extend(["barrier", "%s sleep 60" % end])
            lines.append("sync")
        last = end
        lines.append("%s %s" % (end, step))
        steps += 1
        if op.kind == "send":
            segs[peer] += 1
        elif op.kind == "recv":
            segs[end] = 0
        if step == "fork":
            depth[end] += 1
        elif step == "exit":
            depth[end] -= 1
        if step.startswith("nonblock") or step == "nbconnect":
            nb[end] = step != "nonblock 0"
        if op.kind == "send":
            avail[peer] += op.n
        if op.eof_after:
            eof[peer] = True
        if op.kind == "close" and op.eof_after:
            closed[end] = True
    else:
        return lines, dropped, False
    # Truncated: each end reads what is queued for it; the client closes,
    # the server reads to the end and closes.
    lines.append("sync")
    for end in ("c", "s"):
        if closed[end]:
            continue
        if nb[end]:
            lines.append("%s nonblock 0" % end)
        if avail[end]:
            lines.append("%s drain %d" % (end, avail[end]))
    if not closed["c"]:
        lines.append("c close")
    if not closed["s"]:
        lines.append("s drain")
        lines.append("s close")
    return lines, dropped, True


def convert(base, out, max_steps):
    name = os.path.basename(base)
    cops, cnotes = end_ops(base + ".client.strace")
    sops, snotes = end_ops(base + ".server.strace")
    lines, dropped, cut = replay(merge(cops, sops), max_steps)
    head = ["# replay of %s: the calls of one real connection, recorded with strace by" % name,
            "# record.sh (traces/%s.*.strace), converted by trace2scn.py; regenerate" % name,
            "# with `make diff-replays` (traces only: `trace2scn.py convert`)."]
    if dropped:
        head.append("# %d blocking receive(s) left out: the replay's earlier receives took their bytes" % dropped)
    if cut:
        head.append("# cut after %d steps: both ends then read what is left and close" % max_steps)
    for n in sorted(set(cnotes)):
        head.append("# client: " + n)
    for n in sorted(set(snotes)):
        head.append("# server: " + n)
    # A known difference's classification ("# known:", "# cause:" ...)
    # survives a new conversion.
    keep = []
    if os.path.exists(out):
        keep = [ln.rstrip("\n") for ln in open(out)
                if re.match(r"# (known|cause|upgrade|timeout)[\w-]*:", ln)]
    with open(out, "w") as f:
        f.write("\n".join(keep + head + lines) + "\n")
    print("convert: %s: %d lines%s" % (out, len(lines), ", cut" if cut else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trim")
    t.add_argument("raw")
    t.add_argument("name")
    t.add_argument("--port", type=int, required=True)
    t.add_argument("--client", default="client")
    t.add_argument("--max-lines", type=int, default=500)
    t.add_argument("--out", required=True)
    c = sub.add_parser("convert")
    c.add_argument("base", nargs="*")
    c.add_argument("--out")
    c.add_argument("--max-steps", type=int, default=400)
    sub.add_parser("verify")
    a = ap.parse_args()
    if a.cmd == "trim":
        return cmd_trim(a)
    if a.cmd == "verify":
        return cmd_verify()
    bases = a.base or sorted({p[:-len(".client.strace")] for p in
                              glob.glob(os.path.join(HERE, "corpus/traces/*.client.strace"))})
    for b in bases:
        out = a.out if a.out and len(bases) == 1 else default_out(b)
        convert(b, out, a.max_steps)


def cmd_verify():
    """TAP lines: is every replay scenario what convert makes of its kept
    traces (a converter changed without `make diff-replays-convert`)?"""
    import tempfile
    bases = sorted({p[:-len(".client.strace")] for p in
                    glob.glob(os.path.join(HERE, "corpus/traces/*.client.strace"))})
    bad = 0
    with tempfile.TemporaryDirectory(prefix="trace2scn.") as d:
        for b in bases:
            want = default_out(b)
            got = os.path.join(d, os.path.basename(want))
            if os.path.exists(want):
                # the classification lines of corpus/known/ come along
                with open(got, "w") as f:
                    f.write(open(want).read())
            with open(os.devnull, "w") as null:
                old, sys.stdout = sys.stdout, null
                try:
                    convert(b, got, 400)
                finally:
                    sys.stdout = old
            name = os.path.relpath(want, HERE)
            if os.path.exists(want) and open(want).read() == open(got).read():
                print("ok - %s is what trace2scn.py makes of its traces" % name)
            else:
                bad += 1
                print("not ok - %s differs from what trace2scn.py makes of its traces "
                      "(make diff-replays-convert)" % name)
    return 1 if bad else 0


def default_out(base):
    """corpus/replay_NAME.scn, or corpus/known/replay_NAME.scn where the
    scenario was classified as a known difference."""
    name = "replay_%s.scn" % os.path.basename(base)
    known = os.path.join(HERE, "corpus", "known", name)
    return known if os.path.exists(known) else os.path.join(HERE, "corpus", name)


if __name__ == "__main__":
    sys.exit(main())
