#!/usr/bin/env python3
"""free.py: free-running replays of real programs' traces (README.md,
"Free-running replays").

  free.py check [--reps N] [--seed S] [--par P] [--conns C] [NAME...]
      every kept trace pair of corpus/traces/ (or the NAMEs: nginx_wrk ...)
      replayed N times (default 3) in each mode (plain TCP,
      RDMASHIM_TRANSPORTS=tcp, upgraded shm), rep k with the jitter seed
      S+k (default S=1), P copies of each run at once (default 1), each
      end with C connections in one thread sharing one epoll set (default
      1); TAP lines, a failure per run that breaks an
      invariant or meets an error class plain TCP did not.
  free.py soak --budget SECONDS [--par P] [--conns C]
      the same with fresh seeds until the budget is spent.
  free.py plan NAME     the plan each end runs, as JSON

Unlike diff.py's lock-step replays, the ends do not wait for each other:
each runs its own calls (free_end.py) with seeded random pauses between
them, and a receive waits for its bytes only as the program did, in its own
readiness call. So nothing is compared step by step; each run is checked by
invariants (free_end.py) and by the bytes each end read against what the
other sent. Error classes are compared with what plain TCP gave in any run
of the same trace (TCP's own races may give them there too); a difference
plain TCP itself shows is listed in corpus/known/free.txt with its reason.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import diff  # noqa: E402  (free_port, the shim's library and modes)
import trace2scn  # noqa: E402

END = os.path.join(HERE, "free_end.py")
TIMEOUT = float(os.environ.get("FREE_RUN_TIMEOUT", "30"))
KNOWN = os.path.join(HERE, "corpus", "known", "free.txt")
NEST = os.environ.get("FREE_LOOP_NEST") == "1"


def plan_end(ops):
    """An end's ops as dicts, with what each receive needs: the cumulative
    bytes the program had read live once it returned."""
    out, got = [], 0
    for op in ops:
        d = {"step": op.step, "kind": op.kind, "n": op.n, "args": list(op.args),
             "ready_in": op.ready_in, "eof_after": op.eof_after}
        if op.kind == "recv" and op.n > 0 and not (op.args and op.args[1]):
            got += op.n
        d["need"] = got
        out.append(d)
    for i, d in enumerate(out):
        if d["kind"] in ("wait", "negwait") and d["ready_in"]:
            nxt = next((o for o in out[i + 1:] if o["kind"] == "recv" and o["n"] >= 0), None)
            if nxt is not None:
                d["next_need"] = nxt["need"] if nxt["n"] > 0 else -1
    return out


def plan(base):
    ends = {}
    for end in ("client", "server"):
        ops, _ = trace2scn.end_ops("%s.%s.strace" % (base, end))
        ends[end] = plan_end(ops)
    out = {}
    for end, peer in (("client", "server"), ("server", "client")):
        sends = [o["n"] for o in ends[peer] if o["kind"] == "send"]
        pre = 0
        for o in ends[peer]:
            if o["kind"] == "recv" and o["n"] == 0:
                break  # the peer's sends after it read our EOF
            if o["kind"] == "send":
                pre += o["n"]
        out[end] = {"ops": ends[end], "peer_total": sum(sends), "peer_pre_eof": pre}
    return out


def bases(names):
    all_ = sorted(p[:-len(".client.strace")] for p in glob.glob(os.path.join(HERE, "corpus/traces/*.client.strace")))
    if not names:
        return all_
    return [b for b in all_ if os.path.basename(b) in names]


def run_once(planfile, mode, seed, d, conns=1):
    port = diff.free_port()
    tdir = tempfile.mkdtemp(prefix="%s." % mode, dir=d)
    env = diff.end_env(mode, port, tdir)
    procs, outs = {}, {}
    for name, s in (("server", seed * 2), ("client", seed * 2 + 1)):
        outs[name] = open(os.path.join(tdir, name + ".out"), "w+")
        procs[name] = subprocess.Popen([sys.executable, END, name, str(port), planfile, str(s), str(conns)], env=env,
                                       stdout=subprocess.PIPE if name == "server" else outs[name],
                                       stderr=open(os.path.join(tdir, name + ".err"), "w"),
                                       start_new_session=True)
        if name == "server":
            ln = procs[name].stdout.readline()  # "listening"
            if not ln:
                break

    def server_rest(p, left):
        outs["server"].write(p.communicate(timeout=left)[0].decode(errors="replace"))

    status = diff.reap(procs, time.monotonic() + TIMEOUT, server_rest)
    res = {}
    for name in ("server", "client"):
        if name not in outs:
            continue
        outs[name].seek(0)
        res[name] = [json.loads(ln) for ln in outs[name].read().splitlines() if ln.startswith("{")] or None
        outs[name].close()
    up = diff.upgraded_in(tdir, mode)
    return {"status": status, "res": res, "upgraded": up, "dir": tdir}


def judge(pl, obs, conns=1):
    """What is wrong with one run: a list of reasons (empty: right). Every
    connection of an end runs the same plan, so each must have read all
    that the peer's plan sends and sent all of its own."""
    bad = []
    anyerr = any(c["errs"] for r in obs["res"].values() if r for c in r)
    for name, peer in (("server", "client"), ("client", "server")):
        st = obs["status"].get(name, "not started")
        r = obs["res"].get(name)
        if st != "exit 0" or r is None or len(r) != conns:
            bad.append("%s: %s, %s result(s) of %d" % (name, st, len(r) if r else 0, conns))
            continue
        for j, c in enumerate(r):
            tag = name if conns == 1 else "%s conn %d" % (name, j)
            bad += ["%s: %s" % (tag, v) for v in c["viol"]]
            if anyerr:
                continue
            if c["got"] != pl[name]["peer_total"]:
                bad.append("%s read %d bytes, the peer sent %d" % (tag, c["got"], pl[name]["peer_total"]))
            if c["sent"] != pl[peer]["peer_total"]:
                bad.append("%s sent %d bytes of %d" % (tag, c["sent"], pl[peer]["peer_total"]))
    return bad


def errs(obs):
    return {"%s %s" % (n, e) for n, r in obs["res"].items() if r for c in r for e in c["errs"]}


def known():
    """corpus/known/free.txt: "NAME: what differs -- why" lines, a
    difference plain TCP has too (or one not yet fixed)."""
    out = {}
    if os.path.exists(KNOWN):
        for ln in open(KNOWN):
            if ln.strip() and not ln.startswith("#"):
                n, _, why = ln.partition(":")
                out.setdefault(n.strip(), []).append(why.strip())
    return out


def check(names, reps, seed, keep=None, par=1, conns=1):
    fails = n = 0
    kn = known()
    tested = {}
    with tempfile.TemporaryDirectory(prefix="free.") as d:
        for base in bases(names):
            name = os.path.basename(base)
            pl = plan(base)
            pf = os.path.join(d, name + ".plan.json")
            json.dump(pl, open(pf, "w"))
            plain_errs = set()
            runs = []
            for k in range(reps):
                for mode in diff.MODES:
                    # par copies of the pair at once, each its own connection
                    # and jitter seed: the shim's connections race each other.
                    with ThreadPoolExecutor(par) as ex:
                        got = list(ex.map(lambda j: run_once(pf, mode, (seed + k) * 100 + j, d, conns), range(par)))
                    for j, obs in enumerate(got):
                        runs.append((k, mode, obs, j))
                        if mode == "plain":
                            plain_errs |= errs(obs)
            for k, mode, obs, j in runs:
                n += 1
                bad = judge(pl, obs, conns)
                extra = errs(obs) - plain_errs
                if extra:
                    bad.append("error classes plain TCP never gave: %s" % ", ".join(sorted(extra)))
                up = "" if obs["upgraded"] is None else " [upgraded]" if obs["upgraded"] else " [NOT upgraded]"
                r = obs["res"]
                for e in r.values():
                    for x in e or []:
                        for c, v in x["n"].items():
                            tested[c] = tested.get(c, 0) + v
                tot = "%d/%d bytes" % (sum(x["got"] for x in r["client"]), sum(x["got"] for x in r["server"])) \
                    if r.get("client") and r.get("server") else "no result"
                label = "free %s %s seed %d%s" % (name, mode, seed + k, " copy %d" % j if par > 1 else "")
                if not bad:
                    print("ok - %s: %s%s" % (label, tot, up))
                    continue
                # A known difference is the shim's: a plain run that fails
                # is never excused. "nest" names the cascaded shape of
                # every trace (FREE_LOOP_NEST=1).
                why = mode != "plain" and (kn.get(name) or (NEST and conns > 1 and kn.get("nest")))
                if why:
                    print("ok - %s: known: %s%s" % (label, "; ".join(why), up))
                else:
                    fails += 1
                    print("not ok - %s: %s%s" % (label, tot, up))
                for b in bad[:8]:
                    print("#   " + b)
                if keep:
                    import shutil
                    shutil.copytree(obs["dir"], os.path.join(keep, "%s.%s.%d" % (name, mode, seed + k)),
                                    dirs_exist_ok=True)
    print("# %d free-running replay run(s), %d failed; %d readable reports, %d reads right after one, "
          "%d reads that found nothing, %d blocking waits" % (n, fails, tested.get("reports", 0),
                                                             tested.get("checked", 0), tested.get("eagain", 0),
                                                             tested.get("waits", 0)))
    return fails


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.stdout.reconfigure(line_buffering=True)
    a = sys.argv[1:]
    if not a:
        print(__doc__)
        return 2
    cmd, a = a[0], a[1:]
    reps, seed, budget, names, par, conns = 3, int(os.environ.get("FREE_SEED", "1")), 3600.0, [], 1, 1
    k = 0
    while k < len(a):
        if a[k] in ("--reps", "--seed", "--budget", "--par", "--conns"):
            v = a[k + 1]
            if a[k] == "--conns":
                conns = int(v)
            elif a[k] == "--par":
                par = int(v)
            elif a[k] == "--reps":
                reps = int(v)
            elif a[k] == "--seed":
                seed = int(v)
            else:
                budget = float(v)
            k += 2
        else:
            names.append(a[k])
            k += 1
    keep = os.environ.get("FREE_KEEP")
    if cmd == "plan":
        for b in bases(names):
            print(json.dumps(plan(b), indent=1))
        return 0
    if cmd == "check":
        return 1 if check(names, reps, seed, keep, par, conns) else 0
    if cmd == "soak":
        seed = int(time.time()) % 1000000
        t_end, fails = time.monotonic() + budget, 0
        print("# free-running soak from seed %d" % seed)
        while time.monotonic() < t_end:
            fails += check(names, 1, seed, keep, par, conns)
            seed += 1
        return 1 if fails else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
