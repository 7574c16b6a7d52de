#!/usr/bin/env python3
"""Assemble the benchmark suite's VM part into its results JSON.

    suite_vm_json.py RAW-VM.jsonl KEY=VALUE... > rdma-results.json

RAW-VM.jsonl holds the "rec:" lines of integration/vm/guest-bench-suite.sh
(one object per run); the KEY=VALUE words are the run's settings and load.
Per transport and size: the median, lowest and highest over the rounds,
every run kept; the ratios within the run, taken round by round: the shim
over RDMA against guest TCP and against the device's own figures
(ib_send_lat, ib_write_bw).
"""
import json
import sys

from suite_json import GIB, git, machine, ratio_stat, stat, versions

SCHEMA = 1
MIB = float(1 << 20)
TRANSPORTS = {
    "tcp": "xfer over the guest's TCP, no LD_PRELOAD",
    "rdma": "xfer with the shim at both ends, RDMASHIM_TRANSPORTS=rdma, defaults (busy polling)",
    "rdma_spin0": "the same with RDMASHIM_SPIN_US=0 (ping-pong only)",
    "verbs": "perftest: ib_send_lat (t_typical, 99%) and ib_write_bw -D 1 (BW average): the device's limit",
    "ucx": "ucx_perftest tag_lat and tag_bw over UCX_TLS=rc_verbs,self",
}


def main():
    raw_path, kv = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
    rows, garbled = [], 0
    for line in open(raw_path, errors="replace"):
        try:
            rows.append(json.loads(line)) if line.strip() else None
        except ValueError:  # a console line that a kernel message cut into
            garbled += 1
    errors = [{"part": r["part"], "error": r["error"]} for r in rows if r.get("error")]
    if garbled:
        errors.append({"part": "vm", "error": "%d result lines from the VM's console were garbled" % garbled})
    ok = [r for r in rows if not r.get("error")]
    sizes = [int(s) for s in kv.get("sizes", "").split()]
    guest = next((r for r in ok if r["part"] == "vm_guest"), {})

    per = {}  # (op, metric, transport, size) -> {round: value}

    def put(op, m, t, s, rnd, v):
        if v is not None:
            per.setdefault((op, m, t, int(s)), {})[rnd] = v

    for r in ok:
        p, rnd = r["part"], r.get("round")
        if p == "vm_xfer":
            t, s = r["transport"], r["size"]
            cpu = r["cpu_client_us"] + r["cpu_server_us"]
            if r["op"] == "pp":
                put("pp", "p50", t, s, rnd, r["p50_us"])
                put("pp", "p99", t, s, rnd, r["p99_us"])
                put("pp", "cpu_us_per_req", t, s, rnd, cpu / max(r["msgs"], 1))
            else:
                put("bw", "bytes_per_sec", t, s, rnd, r["bytes_per_sec"])
                put("bw", "cpu_s_per_gib", t, s, rnd, cpu / 1e6 / (r["bytes"] / GIB) if r["bytes"] else None)
        elif p == "vm_verbs":
            if r["op"] == "pp":
                put("pp", "p50", "verbs", r["size"], rnd, r["p50_us"])
                put("pp", "p99", "verbs", r["size"], rnd, r["p99_us"])
            else:  # perftest's MB is 2^20 bytes
                put("bw", "bytes_per_sec", "verbs", r["size"], rnd, r["mb_per_sec"] * MIB)
        elif p == "vm_ucx":
            if r["op"] == "pp":
                put("pp", "p50", "ucx", r["size"], rnd, r["p50_us"])
            else:
                put("bw", "bytes_per_sec", "ucx", r["size"], rnd, r["mib_per_sec"] * MIB)

    lat, thr = {}, {}
    for (op, m, t, s), d in per.items():
        (lat if op == "pp" else thr).setdefault(t, {}).setdefault(str(s), {})[m] = stat(d.values())
    # Ratios above 1 favour the shim: latency other/rdma, throughput rdma/other.
    ratios = {}
    for other in ("tcp", "verbs"):
        for key, op, m, inv in (("p50", "pp", "p50", True), ("p99", "pp", "p99", True),
                                ("throughput", "bw", "bytes_per_sec", False)):
            for t in ("rdma", "rdma_spin0"):
                for s in sizes:
                    a, b = per.get((op, m, t, s)), per.get((op, m, other, s))
                    if a and b:
                        st = ratio_stat(b, a) if inv else ratio_stat(a, b)
                        ratios.setdefault("vs_" + other, {}).setdefault(key, {}).setdefault(t, {})[str(s)] = st
    up = next((r for r in ok if r["part"] == "vm_upgraded"), None)
    out = {
        "schema": SCHEMA,
        "what": "the benchmark suite's VM part: integration/vm/guest-bench-suite.sh in one QEMU TCG VM, "
                "Soft-RoCE (rxe) on dummy0, server and client in the VM; only ratios within the run mean anything",
        "quick": kv.get("quick") == "1",
        "started": kv.get("started"),
        "duration_s": float(kv.get("secs", 0)),
        "host": machine(),
        "guest": {"kernel": guest.get("kernel"), "cpus": guest.get("cpus"), "rdma_core": guest.get("rdma_core"),
                  "emulation": "QEMU TCG"},
        "load": {"loadavg_start": [float(x) for x in kv.get("load_start", "").split()],
                 "loadavg_end": [float(x) for x in kv.get("load_end", "").split()],
                 "machine_busy_fraction": float(kv.get("busy", "nan")),
                 "note": "the host's: busy fraction of all CPUs, all processes (the VM's included), over the run"},
        "versions": versions(),
        "git": git(kv.get("root", ".")),
        "settings": {k: v for k, v in kv.items()
                     if k not in ("root", "started", "secs", "load_start", "load_end", "busy", "quick")},
        "sizes": sizes,
        "transports": TRANSPORTS,
        "errors": errors,
        "timing_s": {r["name"]: r["secs"] for r in ok if r["part"] == "timing"},
        "latency_us": lat,
        "throughput": thr,
        "ratios": ratios,
        "ratios_note": "per-round ratio, median over rounds; above 1 favours the shim (latency: other/rdma; "
                       "throughput: rdma/other)",
        "upgraded": {"rdma": {"upgraded": up["upgraded"], "connections": up["connections"]}} if up else {},
    }
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
