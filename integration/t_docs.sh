#!/bin/bash
# t_docs: the documentation can not go stale where a machine can tell.
# (a) the generated blocks of docs/CONFIG.md and docs/man/rdmashim.7 are
#     exactly what the code's own tables print now (`rdmashim config
#     --markdown` and `--man`, `rdmashim reasons`; tools/gen-config-doc.sh).
# (b) every path of the repository named in README.md and docs/*.md
#     (docs/..., shim/..., integration/..., tools/..., tests/...) exists, and
#     every relative Markdown link points at a file that exists.
# (c) the generated figures blocks of README.md and docs/BENCHMARKS.md, and
#     bench/REPORT.md, are what bench/results/latest.json gives
#     (integration/bench/report.py --check): figures come from a committed
#     run of `make bench`, never typed by hand.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$ROOT/build/bin/rdmashim"
need_cmd python3

check "docs/CONFIG.md and docs/man/rdmashim.7 hold what the code prints (make docs)" \
  "$ROOT/tools/gen-config-doc.sh" --check "$ROOT/build/bin/rdmashim"

missing=$(cd "$ROOT" && python3 - README.md docs/*.md <<'PY'
import os, re, sys

path_re = re.compile(r'(?<![\w/.$-])((?:docs|shim|integration|tools|tests)/[\w./+-]*)')
link_re = re.compile(r'\]\(([^)\s]+)\)')
bad = []
for doc in sys.argv[1:]:
    text = open(doc, encoding='utf-8').read()
    for m in path_re.finditer(text):
        p = m.group(1).rstrip('.,:;')
        if '*' in text[m.end():m.end() + 1] or '<' in text[m.end():m.end() + 1]:
            continue  # a glob or a pattern such as build/<asan|tsan>/
        if not os.path.exists(p):
            bad.append(f'{doc}: {p}')
    for m in link_re.finditer(text):
        target = m.group(1).split('#')[0]
        if not target or re.match(r'^[a-z]+:', target):
            continue  # an anchor in the page itself, or a URL
        p = os.path.normpath(os.path.join(os.path.dirname(doc), target))
        if not os.path.exists(p):
            bad.append(f'{doc}: link {target}')
print('\n'.join(bad))
PY
)
if [[ -z $missing ]]; then
  ok "every path and relative link in README.md and docs/*.md exists"
else
  not_ok "paths or links that do not exist:"
  sed 's/^/    /' <<<"$missing"
fi

check "README.md, docs/BENCHMARKS.md and bench/REPORT.md show bench/results/latest.json (make bench)" \
  python3 "$ROOT/integration/bench/report.py" --check

finish
