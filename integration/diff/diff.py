#!/usr/bin/env python3
"""diff.py: the differential harness of rdmashim (see README.md here).

  diff.py run FILE...            run scenarios, print both ends' records per mode
  diff.py check [FILE|DIR...]    run the corpus (default: corpus/ and corpus/known/);
                                 with DIFF_HANDBACK_SENDS="1 2 3", each scenario's
                                 upgraded run again per N with every connection
                                 handed back at its Nth send, against the same
                                 plain run
  diff.py random --budget S [--seed N] [--avoid-known]
                                 random scenarios for S seconds; a difference
                                 is shrunk and saved to corpus/new/ (with
                                 --avoid-known, no shapes of corpus/known/)
  diff.py soak --budget S        the same, for the soak target
  diff.py shrink FILE...         shrink differing scenarios, print the result

Every scenario runs three ways: plain TCP, under the shim tracked but never
upgraded (RDMASHIM_TRANSPORTS=tcp), and upgraded (RDMASHIM_TRANSPORTS=shm,
upgrade.done checked in the trace). The records must be identical. Output
lines are "ok - ..." / "not ok - ..." (TAP-like) plus "# ..." details.

DIFF_MODES=plain,tcp,rdma makes the upgraded run RDMASHIM_TRANSPORTS=rdma
(Soft-RoCE VM: integration/vm/guest-diff.sh), with DIFF_ADDR the address the
tested connection uses (default 127.0.0.1; rdma_cm needs the rxe address);
every TAP line then starts with "rdma: ".
"""
import glob
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DRIVER = os.path.join(ROOT, "build/progs/diff_driver")
LIB = os.environ.get("SHIM_LIB", os.path.join(ROOT, "build/lib/librdmashim.so"))
CORPUS = os.path.join(HERE, "corpus")
MODES = tuple(os.environ.get("DIFF_MODES", "plain,tcp,shm").split(","))
UP = MODES[-1]  # the upgrading run: shm on the host, rdma in the Soft-RoCE VM
# RDMASHIM_TEST_HANDBACK_AFTER for the shim's runs (t_diff.sh): every shm
# connection goes back to TCP at that send; "# known-handback:" marks a
# difference seen only then.
HANDBACK = os.environ.get("DIFF_SHIM_RDMASHIM_TEST_HANDBACK_AFTER", "0") not in ("", "0")
# DIFF_HANDBACK_SENDS="1 2 3" (check only): after a scenario's three runs,
# its upgraded run once more per N with RDMASHIM_TEST_HANDBACK_AFTER=N,
# each compared with the same plain run. The plain and tcp runs would be
# the same runs again (RDMASHIM_TRANSPORTS=tcp upgrades nothing to hand
# back), so one pass of the corpus does what a pass per N did, in half
# the runs.
HANDBACK_SENDS = [n for n in os.environ.get("DIFF_HANDBACK_SENDS", "").split() if n != "0"]
if MODES[:2] != ("plain", "tcp") or len(MODES) != 3 or UP not in ("shm", "rdma"):
    sys.exit("DIFF_MODES must be plain,tcp,shm or plain,tcp,rdma")
ADDR = os.environ.get("DIFF_ADDR", "127.0.0.1")  # read by the driver too
TAP = "" if UP == "shm" else UP + ": "
TAP_OK, TAP_NOK = "ok - " + TAP, "not ok - " + TAP
RUN_TIMEOUT = float(os.environ.get("DIFF_RUN_TIMEOUT", "10"))
_used_ports = set()


def free_port():
    lo, hi = 20000, 32000
    try:
        hi = min(hi, int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0]) - 1)
    except OSError:
        pass
    for _ in range(500):
        p = random.randint(lo, hi)
        if p in _used_ports:
            continue
        s = socket.socket()
        try:
            s.bind((ADDR, p))
        except OSError:
            continue
        finally:
            s.close()
        _used_ports.add(p)
        if len(_used_ports) > 5000:
            _used_ports.clear()
        return p
    raise RuntimeError("no free port")


def parse(text):
    """A scenario: (meta dict, [line]) where a line is 'c STEP', 's STEP' or
    'sync' (both ends)."""
    meta, lines = {}, []
    for raw in text.splitlines():
        ln = raw.strip()
        if not ln:
            continue
        if ln.startswith("#"):
            k, _, v = ln[1:].partition(":")
            if v:
                meta.setdefault(k.strip(), v.strip())
            continue
        lines.append(ln)
    return meta, lines


def scripts(lines):
    c, s = [], []
    for ln in lines:
        if ln in ("sync", "barrier", "awaitup"):
            c.append(ln)
            s.append(ln)
        elif ln.startswith("c "):
            c.append(ln[2:])
        elif ln.startswith("s "):
            s.append(ln[2:])
    return c, s


def end_env(mode, port, tdir, env_extra=(), shim_env=None):
    """The environment of one end: no shim in mode "plain"; otherwise the
    shim on port, tracing into tdir in mode UP. A connection starts its
    upgrade at its first data call however young (as in lib.sh): the
    scenarios test the switch and what runs over it. Then env_extra
    ("K=V" strings, a scenario's own "env" lines), DIFF_SHIM_RDMASHIM_*
    (extra shim settings, e.g. RING_KB) and shim_env (a dict), each
    winning over what came before."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RDMASHIM_") and k != "LD_PRELOAD"}
    if mode == "plain":
        return env
    env.update(LD_PRELOAD=LIB, RDMASHIM_PORTS=str(port), RDMASHIM_TRANSPORTS=mode, RDMASHIM_UPGRADE_AFTER_MS="0")
    if mode == UP:
        env.update(RDMASHIM_TRACE="info", RDMASHIM_TRACE_FILE=os.path.join(tdir, "trace.%p.jsonl"))
    for kv in env_extra:
        k, _, v = kv.partition("=")
        env[k] = v
    for k, v in os.environ.items():
        if k.startswith("DIFF_SHIM_RDMASHIM_"):
            env[k[len("DIFF_SHIM_"):]] = v
    env.update(shim_env or {})
    return env


def reap(procs, deadline, on_server=None):
    """Waits for each end (a dict name -> Popen) until deadline, then kills
    what is left: each end leads its own process group, with any child it
    forked. on_server(p), if given, is how the server is waited for (it
    reads the server's pipe). Returns name -> "exit N" | "signal N" |
    "TIMEOUT"."""
    status = {}
    try:
        for name, p in procs.items():
            try:
                if name == "server" and on_server:
                    on_server(p, max(0.1, deadline - time.monotonic()))
                rc = p.wait(max(0.1, deadline - time.monotonic()))
                status[name] = "exit %d" % rc if rc >= 0 else "signal %d" % -rc
            except subprocess.TimeoutExpired:
                status[name] = "TIMEOUT"
    finally:
        for p in procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
    return status


def upgraded_in(tdir, mode):
    """In mode UP: whether a trace in tdir says a connection upgraded over
    mode; None in the other modes (they do not trace)."""
    if mode != UP:
        return None
    return any('"upgrade.done"' in ln and '"transport":"%s"' % mode in ln
               for tf in glob.glob(os.path.join(tdir, "trace.*.jsonl")) for ln in open(tf, errors="replace"))


def run_once(lines, mode, timeout=None, shim_env=None):
    """Runs both ends in one mode; returns the observation (a dict). A line
    "env RDMASHIM_X=V" sets a shim variable for the shim's runs, and so
    does shim_env (a dict, after every other setting)."""
    env_extra = [ln.split(None, 1)[1] for ln in lines if ln.startswith("env ") and "=" in ln]
    lines = [ln for ln in lines if not ln.startswith("env ")]
    cs, ss = scripts(lines)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="diff.") as d:
        paths = {}
        for name, sc in (("client", cs), ("server", ss)):
            paths[name] = os.path.join(d, name + ".txt")
            with open(paths[name], "w") as f:
                f.write("\n".join(sc) + "\n")
        env = end_env(mode, port, d, env_extra, shim_env)
        a, b = socket.socketpair()
        procs = {}
        outs = {}
        for name, sock in (("server", a), ("client", b)):
            outs[name] = open(os.path.join(d, name + ".out"), "w+")
            procs[name] = subprocess.Popen(
                [DRIVER, name, str(port), str(sock.fileno()), paths[name]], env=env,
                pass_fds=(sock.fileno(),), stdout=outs[name], stderr=subprocess.DEVNULL,
                start_new_session=True)
        a.close()
        b.close()
        status = reap(procs, time.monotonic() + (timeout or RUN_TIMEOUT))
        obs = {"status": status}
        for name, f in outs.items():
            f.seek(0)
            obs[name] = f.read().splitlines()
            f.close()
        obs["upgraded"] = upgraded_in(d, mode)
        if os.environ.get("DIFF_KEEP"):  # keep the scripts, outputs and traces
            import shutil
            shutil.copytree(d, os.path.join(os.environ["DIFF_KEEP"], "%s.%d" % (mode, port)))
        return obs


def key(obs):
    return (tuple(obs["server"]), tuple(obs["client"]), obs["status"]["server"], obs["status"]["client"])


def sane(obs):
    """A baseline that itself went wrong (a hang, a bad step) tests nothing."""
    txt = "\n".join(obs["server"] + obs["client"])
    return ("TIMEOUT" not in obs["status"].values() and "FATAL" not in txt and "unknown step" not in txt)


def show_diff(base, other, label):
    out = []
    for end in ("server", "client"):
        a, b = base[end], other[end]
        for k in range(max(len(a), len(b))):
            x = a[k] if k < len(a) else "<none>"
            y = b[k] if k < len(b) else "<none>"
            if x != y:
                out.append("#   %s %s: plain: %s" % (label, end, x))
                out.append("#   %s %s: %-5s %s" % (label, end, label + ":", y))
                break
    for end in ("server", "client"):
        if base["status"][end] != other["status"][end]:
            out.append("#   %s %s status: plain %s, %s %s" % (label, end, base["status"][end], label,
                                                               other["status"][end]))
    return out


def slow_marks(obs):
    return sum(ln.endswith(" SLOW") for ln in obs["server"] + obs["client"])


def verdict(lines, modes=MODES, timeout=None):
    """Runs a scenario all ways. Returns (same, observations, detail lines)."""
    obs = {m: run_once(lines, m, timeout) for m in modes}
    # A SLOW mark (a step over 3 s) in the plain run is the host's doing:
    # plain TCP is the reference, and the mark is there to catch the shim's
    # runs stalling where plain TCP does not. Seen on a busy host: plain's
    # 8 MiB send marked, the tcp and shm runs not. Such a reference runs
    # again, twice at most, and the sane run with the fewest marks is kept;
    # a mark in a shim run against an unmarked reference still differs.
    for _ in range(2):
        if not slow_marks(obs["plain"]):
            break
        again = run_once(lines, "plain", timeout)
        if sane(again) and slow_marks(again) < slow_marks(obs["plain"]):
            obs["plain"] = again
    detail = []
    same = True
    for m in modes[1:]:
        if key(obs[m]) != key(obs["plain"]):
            same = False
            detail += show_diff(obs["plain"], obs[m], m)
    return same, obs, detail


def signature(base, other):
    """Where two runs part: per end, the text of the first step whose record
    differs (without its index and result), or the exit status."""
    sig = set()
    for end in ("server", "client"):
        a, b = base[end], other[end]
        for k in range(max(len(a), len(b))):
            x = a[k] if k < len(a) else ""
            y = b[k] if k < len(b) else ""
            if x != y:
                step = (x or y).split(" = ")[0].split(" ", 1)[-1]
                kind = step.split()[0] if step else ""
                if kind == "sync" and x and y:
                    # Which part of the snapshot: poll=, rev= or nread=.
                    for tx, ty in zip(x.split(), y.split()):
                        if tx != ty:
                            kind = "sync:" + tx.split("=")[0]
                            break
                sig.add((end, kind))
                break
        else:
            if base["status"][end] != other["status"][end]:
                sig.add((end, "status"))
    return sig


def differs(lines, mode, want=None):
    """For the shrinker: the plain run is sane and `mode` differs from it at
    a step of the same kind as the original difference (so that shrinking
    does not wander off to another difference)."""
    base = run_once(lines, "plain")
    if not sane(base) or key(run_once(lines, "plain")) != key(base):
        return False  # a candidate whose plain runs disagree races with itself
    for _ in range(2):
        got = run_once(lines, mode)
        if key(got) != key(base):
            sig = signature(base, got)
            if not want or sig & want:
                return True
    return False


def shrink(lines, mode, budget_s, want=None):
    """Greedy: drop phases (sync to sync), then single lines, then halve sizes,
    as long as the difference stays."""
    t_end = time.monotonic() + budget_s
    cur = list(lines)

    def phases(ls):
        out, ph = [], []
        for ln in ls:
            ph.append(ln)
            if ln == "sync":
                out.append(ph)
                ph = []
        if ph:
            out.append(ph)
        return out

    def attempt(cand):
        return bool(cand) and time.monotonic() < t_end and differs(cand, mode, want)

    # Whole phases first (a phase ends at a barrier), then chunks of lines
    # halving in size (ddmin-like), then halved sizes.
    ph = phases(cur)
    k = 0
    while k < len(ph) and time.monotonic() < t_end:
        cand = [ln for j, p in enumerate(ph) if j != k for ln in p]
        if attempt(cand):
            ph = ph[:k] + ph[k + 1:]
            cur = cand
        else:
            k += 1
    chunk = max(1, len(cur) // 2)
    while chunk >= 1 and time.monotonic() < t_end:
        k = 0
        while k < len(cur) and time.monotonic() < t_end:
            cand = cur[:k] + cur[k + chunk:]
            if attempt(cand):
                cur = cand
            else:
                k += chunk
        chunk //= 2
    for k in range(len(cur)):
        toks = cur[k].split()
        for t in range(2, len(toks)):
            while toks[t].isdigit() and int(toks[t]) > 1 and time.monotonic() < t_end:
                toks2 = list(toks)
                toks2[t] = str(int(toks[t]) // 2)
                cand = cur[:k] + [" ".join(toks2)] + cur[k + 1:]
                if not attempt(cand):
                    break
                cur, toks = cand, toks2
    return cur


def corpus_files(args):
    files = []
    for a in args or [CORPUS, os.path.join(CORPUS, "known")]:
        if os.path.isdir(a):
            files += sorted(glob.glob(os.path.join(a, "*.scn")))
        else:
            files.append(a)
    return files


def report(name, meta, handback, same, up, detail, runs="all three runs"):
    """One scenario's TAP line (and its details); returns 1 for a failure.
    handback: the variant's forced hand-back, or False."""
    # "# known-rdma:" marks a difference of the RDMA transport alone.
    known = (handback and meta.get("known-handback")) or meta.get("known-" + UP) or meta.get("known")
    upt = "upgraded" if up else "NOT upgraded"
    if meta.get("upgrade") == "yes" and not up and not known:
        print(TAP_NOK + "%s: the %s run never upgraded (the case tests nothing)" % (name, UP))
        return 1
    if same and known:
        print(TAP_OK + "%s: known difference did not show this time (%s) [%s]" % (name, known, upt))
    elif same:
        print(TAP_OK + "%s: same records in %s [%s]" % (name, runs, upt))
    elif known:
        print(TAP_OK + "%s: known difference: %s [%s]" % (name, known, upt))
        print("\n".join(detail))
    else:
        print(TAP_NOK + "%s: records differ [%s]" % (name, upt))
        print("\n".join(detail))
        return 1
    return 0


def cmd_check(args):
    fails = 0
    n = 0
    for f in corpus_files(args):
        meta, lines = parse(open(f).read())
        name = os.path.relpath(f, HERE)
        t = float(meta.get("timeout", 0)) or None
        if t and UP == "rdma":
            t = max(t, RUN_TIMEOUT)  # a scenario's own bound is for shm, without an RDMA warm-up
        # A forced hand-back moves shm connections only: the tcp run, which
        # never upgrades, is the first pass's again, and is left out.
        same, obs, detail = verdict(lines, modes=(MODES[0], UP) if HANDBACK else MODES, timeout=t)
        n += 1
        if not sane(obs["plain"]):
            fails += 1
            print(TAP_NOK + "%s: the plain TCP run itself failed (%s)" % (name, obs["plain"]["status"]))
            continue
        fails += report(name, meta, HANDBACK, same, obs[UP]["upgraded"], detail)
        for after in HANDBACK_SENDS:
            hb = run_once(lines, UP, t, {"RDMASHIM_TEST_HANDBACK_AFTER": after})
            same = key(hb) == key(obs["plain"])
            detail = [] if same else show_diff(obs["plain"], hb, UP)
            fails += report("%s (handed back at send %s)" % (name, after), meta, True, same, hb["upgraded"], detail,
                            "the plain and the %s run" % UP)
        sys.stdout.flush()
    print("# %d corpus scenario(s) ran%s" % (n, ", each also handed back at send " + ", ".join(HANDBACK_SENDS)
                                             if HANDBACK_SENDS else ""))
    return fails


def save_case(lines, mode, seed, detail):
    d = os.path.join(CORPUS, "new")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "seed%d-%s.scn" % (seed, mode))
    with open(path, "w") as f:
        f.write("# found by diff.py random, seed %d, differs in mode %s\n" % (seed, mode))
        f.write("# known: (unclassified) found by the random generator\n")
        for ln in detail:
            f.write("# %s\n" % ln.lstrip("# "))
        f.write("\n".join(lines) + "\n")
    return path


def cmd_random(budget, seed, shrink_s, avoid):
    import gen
    t_end = time.monotonic() + budget
    n = found = unstable = upgraded = 0
    fails = 0
    seen = set()
    while time.monotonic() < t_end:
        s = seed + n
        n += 1
        lines = gen.scenario(s, avoid, UP)
        same, obs, detail = verdict(lines)
        if obs[UP]["upgraded"]:
            upgraded += 1
        if same:
            continue
        # A scenario whose plain runs disagree tests the generator, not the shim.
        again = run_once(lines, "plain")
        if key(again) != key(obs["plain"]) or not sane(again):
            unstable += 1
            print("# seed %d: plain TCP itself varies; skipped" % s)
            continue
        mode = "tcp" if key(obs["tcp"]) != key(obs["plain"]) else UP
        sig = (mode, tuple(detail[:1]))
        found += 1
        print("# seed %d differs (%s):" % (s, mode))
        print("\n".join(detail))
        if sig in seen or time.monotonic() > t_end:
            continue
        seen.add(sig)
        want = signature(obs["plain"], obs[mode])
        nonsync = {w for w in want if not w[1].startswith("sync")}
        small = shrink(lines, mode, shrink_s, nonsync or want)
        same2, obs2, detail2 = verdict(small)
        if same2:  # an intermittent difference the shrunk form lost: keep the original
            same2, obs2, detail2 = verdict(small)
        if same2:
            small, detail2 = lines, detail
        path = save_case(small, mode, s, detail2 or detail)
        fails += 1
        print(TAP_NOK + "random seed %d: records differ (%s), shrunk to %d lines: %s" %
              (s, mode, len(small), os.path.relpath(path, ROOT)))
        print("\n".join(detail2))
    print(TAP_OK + "%d random scenario(s) ran (seeds %d..%d), %d upgraded in the %s run, "
          "%d differed, %d skipped as unstable on plain TCP" % (n, seed, seed + n - 1, upgraded, UP, found, unstable))
    return fails


def cmd_run(files):
    for f in files:
        meta, lines = parse(open(f).read())
        for m in MODES:
            obs = run_once(lines, m)
            print("== %s %s status=%s upgraded=%s" % (f, m, obs["status"], obs["upgraded"]))
            for end in ("server", "client"):
                for ln in obs[end]:
                    print("  %s: %s" % (end[0], ln))


def main():
    sys.path.insert(0, HERE)
    # A timeout's SIGTERM unwinds like an exception: the ends and the
    # scratch directory go with us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.stdout.reconfigure(line_buffering=True)  # progress shows in a log file as it comes
    if not os.path.exists(DRIVER) or not os.path.exists(LIB):
        print(TAP_NOK + "not built: %s / %s (run make)" % (DRIVER, LIB))
        return 1
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    cmd, args = args[0], args[1:]
    budget = 90.0
    seed = int(os.environ.get("DIFF_SEED", "0")) or int(time.time()) % 1000000
    shrink_s = float(os.environ.get("DIFF_SHRINK_S", "60"))
    rest = []
    k = 0
    while k < len(args):
        if args[k] == "--budget":
            budget = float(args[k + 1])
            k += 2
        elif args[k] == "--seed":
            seed = int(args[k + 1])
            k += 2
        else:
            rest.append(args[k])
            k += 1
    if cmd == "run":
        cmd_run(rest)
        return 0
    if cmd == "shrink":
        for f in rest:
            meta, lines = parse(open(f).read())
            same, obs, detail = verdict(lines)
            if same:
                print("# %s: no difference to shrink" % f)
                continue
            mode = "tcp" if key(obs["tcp"]) != key(obs["plain"]) else UP
            want = signature(obs["plain"], obs[mode])
            small = shrink(lines, mode, shrink_s, {w for w in want if not w[1].startswith("sync")} or want)
            print("# %s (%s), differing at %s:" % (f, mode, sorted(want)))
            print("\n".join(small))
            print("\n".join(verdict(small)[2]))
        return 0
    if cmd == "check":
        return 1 if cmd_check(rest) else 0
    if cmd in ("random", "soak"):
        print("# random seed %d (DIFF_SEED=%d repeats this run)" % (seed, seed))
        return 1 if cmd_random(budget, seed, shrink_s, "--avoid-known" in rest) else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
