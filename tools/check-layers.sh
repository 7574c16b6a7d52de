#!/usr/bin/env bash
# check-layers: shim/ is in layers (docs/ARCHITECTURE.md); this proves
# that nothing runs the wrong way between them.
#
#   tools/check-layers.sh [--list] [--report] [OBJDIR]
#
# Rules, from the bottom up (a layer may use its own folder and the ones
# listed; everything else is wrong-way):
#   core              -> core
#   conn              -> core
#   transport         -> core, conn                 (the ring: shared by transports)
#   transport/X       -> core, conn, transport      (never another transport/Y)
#   io                -> core, conn                 (never a transport)
#   interpose         -> everything
# Checked on:
#   - every #include "..." of every shim file (file:line and the rule broken);
#   - with OBJDIR (build/obj/shim): every undefined symbol of an object must
#     be defined by an object of the same or an allowed layer (nm);
#   - no circle of files: neither between folders (the folder graph of
#     includes and calls is the rule table above, which has none) nor
#     between two files of one folder (calls from nm, and includes);
#   - no global symbol in librdmacm's or libibverbs' namespaces (rdma_, ibv_)
#     and no two different static functions of the same name in two files.
# --report prints what is wrong and exits 0; without it, any finding fails.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
exec python3 - "$ROOT" "$@" <<'EOF'
import os, re, subprocess, sys
from collections import defaultdict

root = sys.argv[1]
args = sys.argv[2:]
listing = '--list' in args
report = '--report' in args
rest = [a for a in args if not a.startswith('--')]
objdir = rest[0] if rest else None

ALLOWED = {
    'core': {'core'},
    'conn': {'core', 'conn'},
    'transport': {'core', 'conn', 'transport'},
    'io': {'core', 'conn', 'io'},
    'interpose': None,  # everything
}

def layer_of(rel):
    """'shim/transport/shm/shm.c' -> 'transport/shm'."""
    d = os.path.dirname(rel)[len('shim/'):]
    return d

def allowed(frm, to):
    if frm == to:
        return True
    top = frm.split('/')[0]
    rule = ALLOWED.get(top)
    if rule is None:
        return top == 'interpose'
    if frm.startswith('transport/'):
        # A transport reaches the shared transport folder, not a sibling.
        return to in ('core', 'conn', 'transport')
    return to in rule

def rule_text(frm):
    top = frm.split('/')[0]
    if frm.startswith('transport/'):
        return '%s may include core, conn, transport (the ring) and itself only' % frm
    if top == 'interpose':
        return 'interpose may include everything'
    return '%s may include %s only' % (frm, ', '.join(sorted(ALLOWED[top])))

files = []
for d, _, fs in os.walk(os.path.join(root, 'shim')):
    for f in fs:
        if f.endswith(('.c', '.h')):
            files.append(os.path.relpath(os.path.join(d, f), root))
files.sort()
by_base = {}
problems = []
for f in files:
    b = os.path.basename(f)
    if b in by_base:
        problems.append('%s: same name as %s: the include path can not tell them apart' % (f, by_base[b]))
    by_base[b] = f

inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
edges = defaultdict(set)  # file -> files it includes
for f in files:
    with open(os.path.join(root, f)) as fh:
        for n, line in enumerate(fh, 1):
            m = inc_re.match(line)
            if not m:
                continue
            target = by_base.get(os.path.basename(m.group(1)))
            if not target:
                problems.append('%s:%d: includes "%s", which is no shim file' % (f, n, m.group(1)))
                continue
            edges[f].add(target)
            a, b = layer_of(f), layer_of(target)
            if not allowed(a, b):
                problems.append('%s:%d: includes %s (%s): wrong way: %s' %
                                (f, n, target, b, rule_text(a)))

# Static functions: two different ones with the same name in two .c files.
static_re = re.compile(r'^static\s+(?:inline\s+)?(?:const\s+)?(?:(?:struct|enum|union)\s+)?\w+[\s\*]+(\w+)\s*\(')
statics = defaultdict(list)
for f in files:
    if not f.endswith('.c'):
        continue
    with open(os.path.join(root, f)) as fh:
        for n, line in enumerate(fh, 1):
            m = static_re.match(line)
            if m and not line.rstrip().endswith(';'):
                statics[m.group(1)].append('%s:%d' % (f, n))
for name, where in sorted(statics.items()):
    # A prototype and its definition in one file are one function.
    if len({w.rsplit(':', 1)[0] for w in where}) > 1:
        problems.append('%s: static function %s is defined again in %s' %
                        (where[0], name, ', '.join(where[1:])))

calls = defaultdict(set)  # object's source -> sources it calls
if objdir:
    src_of = {}
    for f in files:
        if f.endswith('.c'):
            src_of[os.path.basename(f)[:-2]] = f
    defined = {}
    undefined = defaultdict(set)
    for o in sorted(os.listdir(objdir)):
        if not o.endswith('.o'):
            continue
        src = src_of.get(o[:-2])
        if not src:
            continue  # an object of a module since removed
        out = subprocess.run(['nm', os.path.join(objdir, o)], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) == 2 and p[0] == 'U':
                undefined[src].add(p[1])
            elif len(p) == 3 and p[1] in 'TDBRVWGS':
                defined[p[2]] = src
                if re.match(r'(rdma|ibv)_', p[2]):
                    problems.append('%s: global symbol %s is inside librdmacm/libibverbs\'s namespace' %
                                    (src, p[2]))
    for src in sorted(undefined):
        for sym in sorted(undefined[src]):
            to = defined.get(sym)
            if not to or to == src:
                continue
            calls[src].add(to)
            a, b = layer_of(src), layer_of(to)
            if not allowed(a, b):
                problems.append('%s: uses %s from %s (%s): wrong way: %s' %
                                (src, sym, to, b, rule_text(a).replace('include', 'use')))

def sccs(graph, nodes):
    """Tarjan: groups of nodes that reach each other."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out

# Folder-level circle: must be none (the rules above forbid one; this proves it).
fgraph = defaultdict(set)
for g in (edges, calls):
    for a, tos in g.items():
        for b in tos:
            if layer_of(a) != layer_of(b):
                fgraph[layer_of(a)].add(layer_of(b))
for comp in sccs(fgraph, sorted(fgraph)):
    problems.append('folders in a circle: %s' % ' -> '.join(comp))

# File-level circles: no two files may call each other, even in one folder
# (each file must be readable knowing only the ones below it).
for comp in sccs(calls, sorted(calls)):
    problems.append('files in a circle of calls: %s' % ' '.join(comp))
for comp in sccs(edges, sorted(edges)):
    problems.append('files in a circle of includes: %s' % ' '.join(comp))

if listing:
    layers = defaultdict(list)
    for f in files:
        layers[layer_of(f)].append(os.path.basename(f))
    order = ['core', 'conn', 'transport', 'transport/shm', 'transport/rdma', 'io', 'interpose']
    for l in order + sorted(set(layers) - set(order)):
        if l in layers:
            print('%-15s %s' % (l + '/', ' '.join(sorted(layers[l]))))

for p in problems:
    print('check-layers: ' + p)
if problems and not report:
    print('check-layers: %d finding(s)' % len(problems))
    sys.exit(1)
if not problems:
    print('check-layers: ok (%d files%s)' % (len(files), ', %d objects' % len(calls) if objdir else ''))
EOF
