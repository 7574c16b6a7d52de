#!/usr/bin/env python3
"""The tables of integration/bench/msg_breakdown.sh, from the shim's
per-message stamps (RDMASHIM_TEST_MSGSTAMPS=1, shim/core/msgstamps.h).

    msg_breakdown_report.py LABEL DIR [DIR...]

Each DIR holds the trace files of one sockperf ping-pong run: client.* for
the client's processes, server.* for the server's. Several DIRs (rounds) of
one LABEL are merged: counts add, means are weighted by count, a p50 is the
count-weighted mean of the rounds' p50s.

Each process writes two "msg.stamps" lines per transport and direction
("part": "spans" and "phases"); each gives, per figure, [messages that had it, mean ns
over them, p50 ns]. The phases of a message add up to its total; "to",
"after", "wake" and "app" are spans beside them (msgstamps.h).
Exit status 1 when a run has no stamps for either side.
"""
import glob
import json
import os
import sys

PHASES = ["shim", "reap", "copy", "post", "publish", "credit", "completion", "bell", "frames",
          "spin", "yield", "arm", "sleep", "disarm", "drain", "return"]
SPANS = ["total", "to", "after", "wake", "app"]


def load(dirs, side):
    """{(transport, dir): merged record} for one side over the rounds."""
    out = {}
    for d in dirs:
        for path in glob.glob(os.path.join(d, side + ".*")):
            for line in open(path, errors="replace"):
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("event") != "msg.stamps":
                    continue
                key = (e["transport"], e["dir"])
                rec = out.setdefault(key, {"msgs": 0, "found": {}, "ns": {}, "clock_ns": [], "marks": []})
                # Two lines per process: "spans" (with the counts of the
                # whole) and "phases".
                if e.get("part", "spans") == "spans":
                    rec["msgs"] += e["msgs"]
                    rec["clock_ns"].append(e.get("clock_ns", 0))
                    rec["marks"].append((e["msgs"], e.get("marks", 0.0)))
                for k, v in e.get("found", {}).items():
                    rec["found"][k] = rec["found"].get(k, 0) + v
                for k, (n, mean, p50) in e["ns"].items():
                    a = rec["ns"].setdefault(k, [0, 0.0, 0.0])
                    a[0] += n
                    a[1] += n * mean
                    a[2] += n * p50
    for rec in out.values():
        for k, a in rec["ns"].items():
            rec["ns"][k] = (a[0], a[1] / a[0], a[2] / a[0]) if a[0] else (0, 0.0, 0.0)
        m = sum(n for n, _ in rec["marks"])
        rec["marks"] = sum(n * x for n, x in rec["marks"]) / m if m else 0.0
    return out


def per_msg(rec, k):
    """A figure's share of each message, in us: its sum over all messages."""
    n, mean, _ = rec["ns"].get(k, (0, 0.0, 0.0))
    return n * mean / rec["msgs"] / 1000.0 if rec["msgs"] else 0.0


def mean_us(rec, k):
    return rec["ns"].get(k, (0, 0.0, 0.0))[1] / 1000.0


def table(label, side, d, rec):
    print(f"\n{label}: {side} {d}, {rec['msgs']} messages, {rec['marks']:.1f} marks each"
          f" (a clock read costs {min(rec['clock_ns'])}-{max(rec['clock_ns'])} ns)")
    if d == "rx" and rec["found"]:
        tot = sum(rec["found"].values()) or 1
        print("  data found: " + ", ".join(f"{k} {100.0 * v / tot:.1f}%" for k, v in rec["found"].items()))
    print(f"  {'figure':<11} {'msgs %':>7} {'p50 us':>9} {'mean us':>9} {'per msg us':>11}")
    for k in SPANS + PHASES:
        if k not in rec["ns"]:
            continue
        n, mean, p50 = rec["ns"][k]
        if k == "total" or k in SPANS:
            tag = k if k != "to" else ("to_post" if d == "tx" else "to_data")
            tag = tag if k != "after" else ("after_post" if d == "tx" else "after_data")
        else:
            tag = "  " + k
        print(f"  {tag:<11} {100.0 * n / rec['msgs']:>6.1f}% {p50 / 1000:>9.3f} {mean / 1000:>9.3f}"
              f" {per_msg(rec, k):>11.3f}")
    s = sum(per_msg(rec, k) for k in PHASES)
    t = per_msg(rec, "total")
    print(f"  (phases add up to {s:.3f} us of the total's {t:.3f} us per message)")


def one_way(label, c, s):
    """Where a one-way trip goes, in means (us), from both ends' stamps.

    The client's round trip, send() entry to recv() return:
      RTT = C.tx.total + C.rx.app + C.rx.total
    and along the way, one post and one data-seen per direction:
      RTT = C.tx.to + F + S.rx.after + S.tx.app + S.tx.to + F + C.rx.after
    where F is the time from a post to the peer seeing the data (the
    device, the wire, and the consumer's detection: a spin's look or a
    wake-up). F is what is left over.
    """
    ctx, crx, stx, srx = c.get("tx"), c.get("rx"), s.get("tx"), s.get("rx")
    if not all((ctx, crx, stx, srx)):
        return
    rtt = mean_us(ctx, "total") + mean_us(crx, "app") + mean_us(crx, "total")
    known = (mean_us(ctx, "to") + mean_us(srx, "after") + mean_us(stx, "app") + mean_us(stx, "to") +
             mean_us(crx, "after"))
    flight = (rtt - known) / 2
    send_to = (mean_us(ctx, "to") + mean_us(stx, "to")) / 2
    recv_after = (mean_us(srx, "after") + mean_us(crx, "after")) / 2
    app = (mean_us(stx, "app") + mean_us(crx, "app")) / 2
    print(f"\n{label}: one way, means over both directions (us); round trip from the client's stamps {rtt:.3f},"
          f" half {rtt / 2:.3f}")
    print(f"  sender: send() entry to post done        {send_to:9.3f}")
    rest = send_to
    for k in ("reap", "copy", "post"):
        v = (per_msg(ctx, k) + per_msg(stx, k)) / 2
        rest -= v
        if v:
            print(f"    {k:<38}{v:9.3f}")
    print(f"    {'the shim path around them':<38}{rest:9.3f}")
    print(f"  post done to data seen by the receiver   {flight:9.3f}")
    for side, rx in (("server", srx), ("client", crx)):
        found = rx["found"]
        tot = sum(found.values()) or 1
        wake = rx["ns"].get("wake")
        print(f"    ({side} rx: found " + ", ".join(f"{k} {100.0 * v / tot:.0f}%" for k, v in found.items()) +
              (f"; after a sleep, wake-up to data {wake[1] / 1000:.3f} mean" if wake else "") + ")")
    print(f"  receiver: data seen to recv() return     {recv_after:9.3f}")
    rest = recv_after
    for k in ("copy", "publish", "credit"):
        v = (per_msg(srx, k) + per_msg(crx, k)) / 2
        rest -= v
        if v:
            print(f"    {k:<38}{v:9.3f}")
    print(f"    {'the shim path around them, the return':<38}{rest:9.3f}")
    print(f"  the program, recv() return to send()     {app:9.3f}")
    # Each mark is one clock read, inside the figures it measures.
    cost = sum(r["marks"] * max(r["clock_ns"]) for r in (ctx, srx)) / 1000.0
    print(f"  (the stamps' own clock reads, sender's send and receiver's recv: about {cost:.3f} us of it)")
    print(f"  (the sender's work after its post, in parallel with the flight: bell "
          f"{(per_msg(ctx, 'bell') + per_msg(stx, 'bell')) / 2:.3f}, completion "
          f"{(per_msg(ctx, 'completion') + per_msg(stx, 'completion')) / 2:.3f}, frames "
          f"{(per_msg(ctx, 'frames') + per_msg(stx, 'frames')) / 2:.3f}, return "
          f"{(per_msg(ctx, 'return') + per_msg(stx, 'return')) / 2:.3f})")


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: msg_breakdown_report.py LABEL DIR [DIR...]")
    label, dirs = sys.argv[1], sys.argv[2:]
    sides = {side: load(dirs, side) for side in ("client", "server")}
    if not sides["client"] or not sides["server"]:
        print(f"{label}: no msg.stamps lines for " +
              " and ".join(s for s in sides if not sides[s]) + " in " + " ".join(dirs))
        sys.exit(1)
    by_t = {}
    for side, recs in sides.items():
        for (t, d), rec in sorted(recs.items()):
            table(f"{label} [{t}]", side, d, rec)
            by_t.setdefault(t, {}).setdefault(side, {})[d] = rec
    for t, both in sorted(by_t.items()):
        one_way(f"{label} [{t}]", both.get("client", {}), both.get("server", {}))


if __name__ == "__main__":
    main()
