#!/usr/bin/env python3
"""promcheck.py FILE: a strict check of Prometheus text exposition (0.0.4).

Exit 0 and say nothing when FILE is well formed; else one line per fault and
exit 1. Checks: every line is a comment, blank-free sample or # HELP/# TYPE;
metric and label names are valid; label values are quoted and escaped;
values parse; each family has exactly one HELP and one TYPE, before its
samples, and its samples are contiguous; no series twice; counters end in
_total; histograms have _bucket with le, cumulative non-decreasing counts,
a +Inf bucket equal to _count, and a _sum.
"""
import math
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*$")
SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)( -?\d+)?$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def labels_of(text, err):
    out = {}
    if not text:
        return out
    body = text[1:-1]
    i = 0
    while i < len(body):
        m = re.match(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"', body[i:])
        if not m:
            err("bad label syntax at %r" % body[i:])
            return out
        if m.group(1) in out:
            err("label %s twice" % m.group(1))
        out[m.group(1)] = m.group(2)
        i += m.end()
        if i < len(body):
            if body[i] != ",":
                err("expected ',' in labels at %r" % body[i:])
                return out
            i += 1
    return out


def family_of(name, types):
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) in ("histogram", "summary"):
            return name[: -len(suffix)]
    return name


def main(path):
    faults = []
    help_, types, seen_series, done, order = {}, {}, set(), set(), []
    hist = {}
    current = None
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")

        def err(msg, n=n):
            faults.append("%s:%d: %s" % (path, n, msg))

        if not line:
            err("empty line")
            continue
        if line.startswith("#"):
            m = re.match(r"# (HELP|TYPE) (\S+) (.*)$", line)
            if not m:
                if line.startswith("# HELP") or line.startswith("# TYPE"):
                    err("malformed %s" % line[:6])
                continue
            kind, name, rest = m.groups()
            if not NAME.match(name):
                err("bad metric name %s" % name)
            if name in done:
                err("%s %s after its samples" % (kind, name))
            table = help_ if kind == "HELP" else types
            if name in table:
                err("second %s for %s" % (kind, name))
            if kind == "TYPE":
                if rest not in TYPES:
                    err("unknown type %s" % rest)
                if rest == "counter" and not name.endswith("_total"):
                    err("counter %s does not end in _total" % name)
            table[name] = rest
            continue
        m = SAMPLE.match(line)
        if not m:
            err("not a sample: %r" % line)
            continue
        name, ltext, value = m.group(1), m.group(2), m.group(3)
        labels = labels_of(ltext, err)
        try:
            v = float(value.replace("+Inf", "inf").replace("-Inf", "-inf"))
        except ValueError:
            err("bad value %s" % value)
            continue
        fam = family_of(name, types)
        if fam not in types:
            err("sample of %s before its TYPE" % fam)
        if fam not in help_:
            err("sample of %s without HELP" % fam)
        if fam != current:
            if fam in done:
                err("samples of %s not contiguous" % fam)
            if current:
                done.add(current)
            current = fam
            order.append(fam)
        key = (name, tuple(sorted(labels.items())))
        if key in seen_series:
            err("series %s%s twice" % (name, ltext or ""))
        seen_series.add(key)
        if types.get(fam) == "counter" and (v < 0 or math.isnan(v)):
            err("counter %s negative" % name)
        if types.get(fam) == "histogram":
            rest = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
            h = hist.setdefault((fam, rest), {"buckets": [], "sum": None, "count": None})
            if name.endswith("_bucket"):
                if "le" not in labels:
                    err("bucket without le")
                    continue
                le = float(labels["le"].replace("+Inf", "inf"))
                h["buckets"].append((le, v, n))
            elif name.endswith("_sum"):
                h["sum"] = v
            elif name.endswith("_count"):
                h["count"] = v
            else:
                err("histogram sample %s" % name)
    for name in types:
        if name not in help_:
            faults.append("%s: %s has TYPE but no HELP" % (path, name))
    for (fam, rest), h in hist.items():
        b = h["buckets"]
        where = "%s%s" % (fam, dict(rest))
        if not b or b[-1][0] != math.inf:
            faults.append("%s: %s has no +Inf bucket last" % (path, where))
        for (le0, v0, _), (le1, v1, n1) in zip(b, b[1:]):
            if le1 <= le0:
                faults.append("%s:%d: %s le not increasing" % (path, n1, where))
            if v1 < v0:
                faults.append("%s:%d: %s buckets not cumulative" % (path, n1, where))
        if h["count"] is None or h["sum"] is None:
            faults.append("%s: %s lacks _sum or _count" % (path, where))
        elif b and b[-1][1] != h["count"]:
            faults.append("%s: %s +Inf bucket != _count" % (path, where))
    for f in faults:
        print(f)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
