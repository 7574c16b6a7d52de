#!/usr/bin/env python3
"""Assemble the benchmark suite's raw lines into its results JSON.

    suite_json.py RAW.jsonl KEY=VALUE... > results.json

RAW.jsonl holds one object per run (integration/bench/suite.sh writes it);
the KEY=VALUE words are the run's settings and load. This adds the machine
(CPU model, cores, kernel), the versions of the programs used, the git
commit, then per transport and size the median, lowest and highest of the
rounds, with every run kept, and the speed-up against loopback TCP taken
round by round (the rounds alternate the transports, so a ratio within a
round compares runs made in the same seconds).
"""
import json
import os
import platform
import socket
import statistics
import subprocess
import sys

SCHEMA = 1
TRANSPORTS = ["tcp", "unix", "shm", "shm_spin0", "passthrough"]
TCP_TRANSPORTS = ["tcp", "shm", "shm_spin0", "passthrough"]
REDIS_TESTS = ["get", "set", "k0"]
GIB = float(1 << 30)


def sh(cmd):
    try:
        out = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20)
        return (out.stdout or out.stderr).strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def first_line(cmd):
    text = sh(cmd)
    return text.splitlines()[0].strip() if text else None


def deb(pkg):
    return first_line("dpkg-query -W -f='${Version}' %s 2>/dev/null" % pkg) or None


def stat(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals),
            "runs": vals}


def ratio_stat(num, den):
    """Median of per-round ratios num[r] / den[r] over rounds both have."""
    rs = [num[r] / den[r] for r in num if r in den and den[r]]
    return stat(rs)


def machine():
    model, cores = None, os.cpu_count()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1])
    except OSError:
        pass
    osname = None
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    vuln = None
    try:
        vuln = open("/sys/devices/system/cpu/vulnerabilities/meltdown").read().strip()
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "cpu_model": model, "cores": cores,
            "mem_kib": mem, "kernel": platform.release(), "os": osname, "meltdown": vuln}


def versions():
    return {
        "gcc": first_line("cc --version"),
        "glibc": first_line("ldd --version"),
        "rdma-core": deb("rdma-core"),
        "libibverbs1": deb("libibverbs1"),
        "sockperf": first_line("sockperf --version 2>&1"),
        "redis": first_line("redis-server --version"),
        "qperf": deb("qperf"),
        "ucx": deb("ucx-utils"),
        "python3": platform.python_version(),
    }


def git(root):
    commit = first_line("git -C '%s' rev-parse HEAD" % root)
    dirty = sh("git -C '%s' status --porcelain --untracked-files=no -- shim integration Makefile" % root)
    return {"commit": commit, "branch": first_line("git -C '%s' rev-parse --abbrev-ref HEAD" % root),
            "subject": first_line("git -C '%s' log -1 --format=%%s" % root), "dirty": bool(dirty)}


UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}
BW_UNITS = {"bytes/sec": 1, "KB/sec": 1e3, "MB/sec": 1e6, "GB/sec": 1e9}


def qperf_lat_us(text):
    v, unit = text.split()
    return float(v) * UNITS[unit]


def qperf_bw(text):
    v, unit = text.split()
    return float(v) * BW_UNITS[unit]


def main():
    raw_path, kv = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
    rows = [json.loads(l) for l in open(raw_path) if l.strip()]
    sizes = [int(s) for s in kv.get("sizes", "").split()]
    errors = [{"part": r["part"], "error": r["error"]} for r in rows if r.get("error")]
    ok = [r for r in rows if not r.get("error")]

    def by(part, **match):
        return [r for r in ok if r["part"] == part and all(r.get(k) == v for k, v in match.items())]

    out = {
        "schema": SCHEMA,
        "quick": kv.get("quick") == "1",
        "started": kv.get("started"),
        "duration_s": float(kv.get("secs", 0)),
        "host": machine(),
        "load": {"loadavg_start": [float(x) for x in kv.get("load_start", "").split()],
                 "loadavg_end": [float(x) for x in kv.get("load_end", "").split()],
                 "machine_busy_fraction": float(kv.get("busy", "nan")),
                 "note": "busy fraction: all CPUs, all processes (this suite's included), over the run"},
        "versions": versions(),
        "git": git(kv.get("root", ".")),
        "settings": {k: v for k, v in kv.items()
                     if k not in ("root", "started", "secs", "load_start", "load_end", "busy", "quick")},
        "sizes": sizes,
        "transports": {
            "tcp": "loopback TCP, no LD_PRELOAD",
            "unix": "Unix-domain stream socket, no LD_PRELOAD",
            "shm": "both ends under the shim, port whitelisted, defaults (busy polling)",
            "shm_spin0": "the same with RDMASHIM_SPIN_US=0",
            "passthrough": "both ends under the shim, port not whitelisted",
        },
        "errors": errors,
        "timing_s": {r["name"]: r["secs"] for r in by("timing")},
    }

    # xfer: latency and throughput per transport and size
    lat, thr = {}, {}
    per = {}  # (op, metric, transport, size) -> {round: value}
    for r in by("xfer"):
        t, s, rnd = r["transport"], r["size"], r["round"]
        cpu = (r["cpu_client_us"] + r["cpu_server_us"])
        if r["op"] == "pp":
            vals = {"p50": r["p50_us"], "p99": r["p99_us"], "cpu_us_per_req": cpu / max(r["msgs"], 1)}
        else:
            vals = {"bytes_per_sec": r["bytes_per_sec"],
                    "cpu_s_per_gib": cpu / 1e6 / (r["bytes"] / GIB) if r["bytes"] else None}
        for m, v in vals.items():
            per.setdefault((r["op"], m, t, s), {})[rnd] = v
    for (op, m, t, s), d in per.items():
        (lat if op == "pp" else thr).setdefault(t, {}).setdefault(str(s), {})[m] = stat(d.values())
    speed = {"p50": {}, "p99": {}, "throughput": {}, "cpu_per_gib": {}}
    for t in TRANSPORTS[1:]:
        for s in sizes:
            for key, op, m, inv in (("p50", "pp", "p50", True), ("p99", "pp", "p99", True),
                                    ("throughput", "bw", "bytes_per_sec", False),
                                    ("cpu_per_gib", "bw", "cpu_s_per_gib", True)):
                a, b = per.get((op, m, t, s)), per.get((op, m, "tcp", s))
                if a and b:
                    st = ratio_stat(b, a) if inv else ratio_stat(a, b)
                    speed[key].setdefault(t, {})[str(s)] = st
    upgraded = {r["transport"]: {"upgraded": r["upgraded"], "connections": r["connections"]}
                for r in by("upgraded")}
    out["xfer"] = {
        "what": "integration/bench/xfer.c: ping-pong half round trip (us) and one-way throughput, "
                "CPU time of both ends (getrusage) per request and per GiB",
        "latency_us": lat, "throughput": thr,
        "speedup_vs_tcp": speed,
        "speedup_note": "per-round ratio, median over rounds; above 1 is better than tcp "
                        "(latency: tcp/x; throughput: x/tcp; cpu_per_gib: tcp/x)",
        "upgraded": upgraded,
    }

    # sockperf
    sp = {}
    spr = {}
    for r in by("sockperf"):
        for m in ("p50", "p99"):
            spr.setdefault((m, r["transport"], r["size"]), {})[r["round"]] = r[m + "_us"]
    for (m, t, s), d in spr.items():
        sp.setdefault(t, {}).setdefault(str(s), {})[m] = stat(d.values())
    sps = {}
    for (m, t, s), d in spr.items():
        if m == "p50" and t != "tcp" and ("p50", "tcp", s) in spr:
            sps.setdefault(t, {})[str(s)] = ratio_stat(spr[("p50", "tcp", s)], d)
    out["sockperf"] = {"latency_us": sp, "speedup_p50_vs_tcp": sps}

    # qperf
    qp, qpr = {}, {}
    for r in by("qperf"):
        qpr.setdefault(("lat", r["transport"]), {})[r["round"]] = qperf_lat_us(r["tcp_lat"])
        qpr.setdefault(("bw", r["transport"]), {})[r["round"]] = qperf_bw(r["tcp_bw"])
    for t in TCP_TRANSPORTS:
        if ("lat", t) in qpr:
            qp[t] = {"tcp_lat_us": stat(qpr[("lat", t)].values()),
                     "tcp_bw_bytes_per_sec": stat(qpr[("bw", t)].values())}
            if t != "tcp" and ("lat", "tcp") in qpr:
                qp[t]["speedup_lat_vs_tcp"] = ratio_stat(qpr[("lat", "tcp")], qpr[("lat", t)])
                qp[t]["speedup_bw_vs_tcp"] = ratio_stat(qpr[("bw", t)], qpr[("bw", "tcp")])
    out["qperf"] = {"what": "qperf tcp_lat -m 64, tcp_bw -m 65536", "results": qp}

    # ucx
    ux = {"tag_lat": {}, "tag_bw": {}}
    ur = {}
    for r in by("ucx"):
        cpu = r["cpu_client_us"] + r["cpu_server_us"]
        if r["test"] == "tag_lat":
            vals = {"p50_us": r["p50_us"], "mean_us": r["mean_us"], "cpu_us_per_req": cpu / max(r["iters"], 1)}
        else:
            b = r["iters"] * r["size"]
            vals = {"bytes_per_sec": r["mib_per_sec"] * (1 << 20), "cpu_s_per_gib": cpu / 1e6 / (b / GIB)}
        for m, v in vals.items():
            ur.setdefault((r["test"], m, r["size"]), []).append(v)
    for (test, m, s), v in ur.items():
        ux[test].setdefault(str(s), {})[m] = stat(v)
    ucx_err = [e["error"] for e in errors if e["part"] == "ucx"]
    out["ucx"] = {"what": "ucx_perftest over UCX_TLS=posix,self; CPU includes each process's start",
                  "error": ucx_err[0] if ucx_err else None, **ux}

    # the machine's own limits
    cl = by("cacheline")
    mc = by("memcpy")
    out["limits"] = {
        "cacheline_ns": {"p50": stat([r["p50_ns"] for r in cl]), "p99": stat([r["p99_ns"] for r in cl]),
                         "round_trips": sum(r["round_trips"] for r in cl),
                         "what": "half round trip of a cache line between two spinning processes"},
        "memcpy_bytes_per_sec": {s: stat([r["bytes_per_sec"][s] for r in mc if s in r["bytes_per_sec"]])
                                 for s in [str(x) for x in sizes]},
        "memcpy_large_bytes_per_sec": stat([r["large_bytes_per_sec"] for r in mc]),
    }

    # redis
    rd, rr = {}, {}
    for r in by("redis"):
        cpu = (r["cpu_client_us"] + r["cpu_server_us"]) / r["requests"]
        rr.setdefault(("rps", r["test"], r["transport"]), {})[r["round"]] = r["rps"]
        rr.setdefault(("cpu", r["test"], r["transport"]), {})[r["round"]] = cpu
    for (m, test, t), d in rr.items():
        e = rd.setdefault(test, {}).setdefault(t, {})
        e["rps" if m == "rps" else "cpu_us_per_req"] = stat(d.values())
        if m == "rps" and t != "tcp" and ("rps", test, "tcp") in rr:
            e["speedup_vs_tcp"] = ratio_stat(d, rr[("rps", test, "tcp")])
    out["redis"] = {"what": "redis-benchmark: get/set -c 50; k0: -k 0 -t ping_mbulk -c 10 (a connection "
                            "per request); CPU of server (INFO cpu) and client (rusage) per request",
                    "results": rd}

    out["vm"] = {"see": "the VM part (BENCH_VM=1) writes rdma-latest.json beside this file (suite_vm_json.py)"}
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
