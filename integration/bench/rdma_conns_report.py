#!/usr/bin/env python3
"""The figures of rdma-vm-conns.sh from the raw data its guests recorded.

    rdma_conns_report.py DIR VMS

DIR holds one directory per phase (integration/vm/guest-rdma-conns.sh);
VMS is 1 or 2 (with two VMs the ends' clocks differ, so every time is taken
on one end's clock: the client's). Prints "bench rdma_conns ..." lines.
"""
import collections
import datetime
import glob
import json
import os
import re
import sys


def us(ts):
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return (d - datetime.datetime(1970, 1, 1)).total_seconds() * 1e6


def median(v):
    v = sorted(v)
    if not v:
        return float("nan")
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def events(d):
    """The trace events of a phase, without those of the --warm connection
    (the client's first, on either end)."""
    out = []
    for path in glob.glob(os.path.join(d, "trace.*.jsonl")):
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    tracked = [e for e in out if e.get("event") == "conn.track" and e.get("role") == "client" and "peer" in e]
    if not tracked:
        return out
    w = min(tracked, key=lambda e: e["ts"])
    warm = {(w["local"], w["peer"]), (w["peer"], w["local"])}
    return [e for e in out if (e.get("local"), e.get("peer")) not in warm]


def warmups(d):
    """The rdma.warm times of a phase's processes, ms."""
    v = []
    for path in glob.glob(os.path.join(d, "trace.*.jsonl")):
        for line in read(path).splitlines():
            if '"rdma.warm"' in line:
                try:
                    v.append("%.0f" % json.loads(line)["ms"])
                except (ValueError, KeyError):
                    pass
    return "/".join(v) or "none"


def outcomes(evs):
    """'done' count per role and fail reasons per role."""
    done = collections.Counter()
    fails = collections.Counter()
    for e in evs:
        if e.get("event") == "upgrade.done":
            done[e.get("role", "?")] += 1
        elif e.get("event") == "upgrade.fail":
            fails["%s:%s" % (e.get("role", "?"), e.get("reason", "?"))] += 1
    return done, fails


def warnings(evs):
    c = collections.Counter()
    for e in evs:
        if e.get("level") in ("warn", "error"):
            c["%s%s" % (e.get("event"), (":" + e["reason"]) if "reason" in e else "")] += 1
    return c


def fmt_counter(c):
    return ", ".join("%s %d" % kv for kv in c.most_common()) or "none"


def conn_times(d):
    first, total = [], []
    for line in read(os.path.join(d, "client.log")).splitlines():
        m = re.match(r"CONN \d+ first_us=(\d+) total_us=(\d+)", line)
        if m:
            first.append(int(m.group(1)))
            total.append(int(m.group(2)))
    return first, total


def params(d):
    """(connections, rounds) of a phase."""
    v = read(os.path.join(d, "params"), "0 0").split()
    return int(v[0]), int(v[1])


def status(d):
    """The programs' exit statuses, and their complaints."""
    st = "status client %s server %s" % (read(os.path.join(d, "client.rc"), "?"), read(os.path.join(d, "server.rc"), "?"))
    err = [ln for side in ("client", "server") for ln in read(os.path.join(d, side + ".log")).splitlines()
           if ln.startswith("conn_hold:")]
    return st + ("; " + " | ".join("%s" % e for e in err[:2]) if err else "")


def first_part(root, vms):
    rounds = sorted({int(m.group(1)) for p in os.listdir(root) for m in [re.match(r"fb-\w+-(\d+)$", p)] if m})
    if not rounds:
        return
    modes = ("plain", "shim", "shim-late")
    pooled = {m: ([], []) for m in modes}
    ratios = {m: ([], []) for m in modes}
    for r in rounds:
        med = {}
        for mode in modes:
            d = os.path.join(root, "fb-%s-%d" % (mode, r))
            if not os.path.isdir(d):
                continue
            f, t = conn_times(d)
            pooled[mode][0].extend(f)
            pooled[mode][1].extend(t)
            med[mode] = (median(f), median(t))
            extra = ""
            if mode.startswith("shim"):
                done, fails = outcomes(events(d))
                extra = "; upgrade.done client %d server %d; upgrade.fail: %s; rdma.warm ms %s" % (
                    done["client"], done["server"], fmt_counter(fails), warmups(d))
            print("bench rdma_conns first round %d %s: %d connections (%s): connect to answer median %.0f us, "
                  "to close %.0f us%s" % (r, mode, len(f), status(d), med[mode][0], med[mode][1], extra))
        for mode in modes[1:]:
            if mode in med and med.get("plain", (0, 0))[0] > 0:
                ratios[mode][0].append(med[mode][0] / med["plain"][0])
                ratios[mode][1].append(med[mode][1] / med["plain"][1])
    pf, pt = pooled["plain"]
    for mode, what in (("shim", "shim (default RDMASHIM_UPGRADE_AFTER_MS)"),
                       ("shim-late", "shim with RDMASHIM_UPGRADE_AFTER_MS=60000 (no upgrade starts)")):
        sf, st = pooled[mode]
        if not sf:
            continue
        print("bench rdma_conns first: connect + 1-byte request/answer + close, one after the other (%d VM%s), "
              "%s vs plain TCP: connect to answer median %.0f us (p90 %.0f) vs %.0f us (p90 %.0f), ratio %.2f; "
              "connect to close returned median %.0f us vs %.0f us, ratio %.2f (ratios: median over %d rounds)"
              % (vms, "s" if vms > 1 else "", what, median(sf), pct(sf, 0.9), median(pf), pct(pf, 0.9),
                 median(ratios[mode][0]), median(st), median(pt), median(ratios[mode][1]), len(ratios[mode][0])))


def upg_part(root, vms):
    d = os.path.join(root, "upg")
    if not os.path.isdir(d):
        return
    evs = events(d)
    track, cdone, sdone = {}, {}, {}
    for e in evs:
        ev = e.get("event")
        if "local" not in e or "peer" not in e:
            continue
        key = (e["local"], e["peer"])
        if ev == "conn.track" and e.get("role") == "client":
            track.setdefault(key, us(e["ts"]))
        elif ev == "upgrade.done" and e.get("role") == "client":
            cdone.setdefault(key, us(e["ts"]))
        elif ev == "upgrade.done" and e.get("role") == "server":
            sdone.setdefault((e["peer"], e["local"]), us(e["ts"]))
    to_client = [cdone[k] - t for k, t in track.items() if k in cdone]
    both = [max(cdone[k], sdone[k]) - t for k, t in track.items() if k in cdone and k in sdone]
    f, t = conn_times(d)
    done, fails = outcomes(evs)
    n, rounds = params(d)
    line = ("bench rdma_conns to_rdma: %d connections one after the other (%d made; %s), %d 1-byte request/answers "
            "each: on RDMA (client's upgrade.done) %d of %d made, connect to the client's upgrade.done median "
            "%.1f ms p90 %.1f ms (min %.1f max %.1f)"
            % (n, len(track), status(d), rounds, len(to_client), len(track), median(to_client) / 1e3,
               pct(to_client, 0.9) / 1e3, min(to_client, default=float("nan")) / 1e3,
               max(to_client, default=float("nan")) / 1e3))
    if vms == 1 and both:
        line += ", to both ends' upgrade.done median %.1f ms p90 %.1f ms" % (median(both) / 1e3,
                                                                          pct(both, 0.9) / 1e3)
    pf, pt = conn_times(os.path.join(root, "upg-plain"))
    if pt:
        line += ("; connect to close returned (%d request/answers) median %.1f ms vs %.1f ms over plain TCP "
                 "(%d connections)" % (rounds, median(t) / 1e3, median(pt) / 1e3, len(pt)))
    line += ("; connect to first answer (over TCP) median %.0f us; upgrade.done client %d server %d; "
             "upgrade.fail: %s; rdma.warm ms %s" % (median(f), done["client"], done["server"], fmt_counter(fails),
                                                    warmups(d)))
    print(line)


def res_counts(path, pid):
    """Per kind, the objects of PID in `rdma res show KIND` dumps. An object
    made through a user context names its ctxn (or its pdn) rather than a
    pid; the ctx list says whose the context is."""
    lines = []
    kind = None
    for line in read(path).splitlines():
        m = re.match(r"== (\w+)$", line)
        if m:
            kind = m.group(1)
        elif kind:
            lines.append((kind, line))

    def field(line, name):
        m = re.search(r"\b%s (\d+)\b" % name, line)
        return m.group(1) if m else None

    ctxs = {field(ln, "ctxn") for k, ln in lines if k == "ctx" and field(ln, "pid") == pid}
    pds = {field(ln, "pdn") for k, ln in lines if k == "pd" and (field(ln, "ctxn") in ctxs or field(ln, "pid") == pid)}
    counts = collections.Counter()
    for k, ln in lines:
        if k == "ctx":
            continue
        if field(ln, "pid") == pid or (field(ln, "ctxn") in ctxs and k != "pd") or \
                (k == "pd" and field(ln, "pdn") in pds) or (k != "pd" and field(ln, "pdn") in pds):
            counts[k] += 1
    return counts


def res_totals(path):
    """The device totals line of a dump: {kind: count}."""
    for ln in read(path).splitlines():
        if re.match(r"\d+: \w+: pd", ln):
            return {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", ln.split(":", 2)[2])}
    return {}


def mem_pair(d, side):
    a = read(os.path.join(d, side + ".mem0")).split()
    b = read(os.path.join(d, side + ".mem1")).split()
    if len(a) != 2 or len(b) != 2:
        return None
    return int(b[0]) - int(a[0]), int(b[1]) - int(a[1])


def many_part(root, vms):
    got = {}
    for mode in ("plain", "shim"):
        d = os.path.join(root, "many-" + mode)
        if not os.path.isdir(d):
            continue
        log = read(os.path.join(d, "client.log"))
        m = re.search(r"^UP ms=([0-9.]+)", log, re.M)
        up = float(m.group(1)) if m else float("nan")
        cm, sm = mem_pair(d, "client"), mem_pair(d, "server")
        got[mode] = dict(d=d, up=up, cm=cm, sm=sm)
    if not got:
        return
    nconns = params(got[next(iter(got))]["d"])[0]
    for mode, g in got.items():
        n = nconns or 1
        per = ""
        if g["cm"] and g["sm"]:
            per = ("per connection: client rss %.1f pss %.1f KiB, server rss %.1f pss %.1f KiB, "
                   "client+server rss %.1f pss %.1f KiB" % (
                       g["cm"][0] / n, g["cm"][1] / n, g["sm"][0] / n, g["sm"][1] / n,
                       (g["cm"][0] + g["sm"][0]) / n, (g["cm"][1] + g["sm"][1]) / n))
        line = "bench rdma_conns many %s: %d connections (%s): connects + rounds %.0f ms; %s" % (
            mode, n, status(g["d"]), g["up"], per or "memory not measured")
        print(line)
    g = got.get("shim")
    if not g:
        return
    d = g["d"]
    evs = events(d)
    done, fails = outcomes(evs)
    first = min((us(e["ts"]) for e in evs if e.get("event") == "conn.track" and e.get("role") == "client"),
                default=None)
    last_c = max((us(e["ts"]) for e in evs if e.get("event") == "upgrade.done" and e.get("role") == "client"),
                 default=None)
    last_any = max((us(e["ts"]) for e in evs if e.get("event") == "upgrade.done"), default=None)
    setup = "n/a"
    if first is not None and last_c is not None:
        setup = "%.0f ms to the client's last upgrade.done" % ((last_c - first) / 1e3)
        if vms == 1 and last_any is not None:
            setup += " (%.0f ms to either end's last)" % ((last_any - first) / 1e3)
    objs = []
    for side in ("client", "server"):
        pid = read(os.path.join(d, side + ".pid"))
        c = res_counts(os.path.join(d, side + ".res"), pid)
        objs.append("%s %s" % (side, " ".join("%s %d" % (k, c[k]) for k in ("qp", "cq", "mr", "pd", "cm_id"))))
    print("bench rdma_conns many shim: %d of %d upgraded at the client, %d at the server (upgrade.done); "
          "setup %s; rdma objects held: %s; upgrade.fail: %s; warnings: %s" % (
              done["client"], nconns or 0, done["server"], setup, "; ".join(objs), fmt_counter(fails),
              fmt_counter(warnings(evs))))
    deltas = []
    for side in ("client", "server") if vms > 1 else ("server",):
        a, b = res_totals(os.path.join(d, side + ".res0")), res_totals(os.path.join(d, side + ".res"))
        if a and b:
            deltas.append("%s: %s" % ("host " + side if vms > 1 else "the VM",
                                      " ".join("%s +%d" % (k, b[k] - a.get(k, 0)) for k in b if k != "srq")))
    if deltas:
        print("bench rdma_conns many shim: rxe0 objects with all held, against before the phase: %s; rdma.warm ms %s"
              % ("; ".join(deltas), warmups(d)))


def limits(root):
    for path in sorted(glob.glob(os.path.join(root, "devinfo.*"))):
        vals = dict(re.findall(r"^\s*(max_(?:qp|cq|mr|pd|cqe|qp_wr|mr_size)):\s*(\S+)", read(path), re.M))
        if vals:
            print("bench rdma_conns device limits (%s): %s" % (
                path.rsplit(".", 1)[1], ", ".join("%s %s" % kv for kv in sorted(vals.items()))))
            return


def aborts(root):
    """Resets the kernels sent during each phase (TCPAbortOnClose: closed
    with unread bytes; TCPAbortOnData: bytes after close or SO_LINGER 0),
    per host: the counts since boot after each phase, differenced."""
    phases = sorted((d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "params"))),
                    key=lambda d: os.path.getmtime(os.path.join(root, d, "params")))
    last = {}
    out = []
    for ph in phases:
        parts = []
        for side in ("client", "server"):
            v = dict(re.findall(r"TcpExtTCPAbortOn(\w+) (\d+)", read(os.path.join(root, ph, side + ".aborts"))))
            if not v:
                continue
            prev = last.get(side, {})
            delta = {k: int(n) - int(prev.get(k, 0)) for k, n in v.items()}
            last[side] = v
            if any(delta.values()):
                parts.append("%s host %s" % (side, " ".join("on_%s +%d" % kv for kv in sorted(delta.items()))))
        if parts:
            out.append("%s: %s" % (ph, ", ".join(parts)))
    if last:
        print("bench rdma_conns resets sent by the kernels (TCPAbortOnClose/OnData), per phase: %s"
              % ("; ".join(out) or "none"))


def main():
    root, vms = sys.argv[1], int(sys.argv[2])
    limits(root)
    first_part(root, vms)
    upg_part(root, vms)
    many_part(root, vms)
    aborts(root)


if __name__ == "__main__":
    main()
