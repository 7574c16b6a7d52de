#!/bin/bash
# t_manpages: the man pages (docs/man/) can not fall behind the code.
# (a) rdmashim.7's generated blocks (variables, reason codes) are what the
#     code prints now (tools/gen-config-doc.sh --check).
# (b) rdmashim.7 has an entry for every variable `rdmashim config` knows
#     (ENVIRONMENT), every reason `rdmashim reasons` lists (REASON CODES) and
#     every event name of a SHIM_TRACE call in shim/ ("Trace events"), and
#     no entry for an event nothing emits any more.
# (c) rdmashim.1 has, for every command `rdmashim help` lists, a subsection
#     ".SS rdmashim CMD ..." under COMMANDS, an entry under EXIT STATUS, and
#     every option `rdmashim help CMD` shows; `rdmashim help CMD` works;
#     and every option the whole usage (`rdmashim help`) shows.
# (d) groff -man -ww finds nothing to warn about in either page.
# A command, variable, reason or event added to the code fails here until
# the page says what it is; each failure names what to add and where.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BIN=$ROOT/build/bin/rdmashim
MAN1=$ROOT/docs/man/rdmashim.1
MAN7=$ROOT/docs/man/rdmashim.7
need_built "$BIN"
need_cmd groff python3

# section FILE NAME: the page's lines from ".SH NAME" (or ".SS NAME") up
# to the next .SH.
section() {
  awk -v name="$2" '
    /^\.SH / { on = 0 }
    $0 == ".SH " name || $0 == ".SH \"" name "\"" || $0 == ".SS " name { on = 1; next }
    on' "$1"
}

# entries FILE SECTION: the section's entries: the word of each ".B word"
# line that tags a paragraph (right after .TP).
entries() { section "$1" "$2" | awk 'tp && /^\.B [^ ]+$/ { print $2 } { tp = $0 == ".TP" }' | sort -u; }

# (a)
check "rdmashim.7's generated blocks are what the code prints (make docs)" \
  "$ROOT/tools/gen-config-doc.sh" --check "$BIN"

# (b) variables
man_vars=$(entries "$MAN7" ENVIRONMENT)
vars=$(env -i PATH="$PATH" "$BIN" config | sed -n 's/^\(RDMASHIM_[A-Z0-9_]*\) *= .*/\1/p')
[[ -n $vars ]] || not_ok "rdmashim config listed no variable"
missing=0
for v in $vars; do
  if ! grep -qxF "$v" <<<"$man_vars"; then
    not_ok "rdmashim.7 ENVIRONMENT has no entry for $v (rdmashim config knows it): run make docs"
    missing=1
  fi
done
((missing)) || ok "rdmashim.7 ENVIRONMENT: all $(wc -w <<<"$vars") variables of rdmashim config"

# (b) reasons
man_reasons=$(entries "$MAN7" "REASON CODES")
reasons=$("$BIN" reasons | awk 'NR > 1 { print $2 }')
[[ -n $reasons ]] || not_ok "rdmashim reasons listed no reason"
missing=0
for r in $reasons; do
  if ! grep -qxF "$r" <<<"$man_reasons"; then
    not_ok "rdmashim.7 REASON CODES has no entry for reason '$r' (rdmashim reasons lists it): run make docs"
    missing=1
  fi
done
((missing)) || ok "rdmashim.7 REASON CODES: all $(wc -w <<<"$reasons") reasons of rdmashim reasons"

# (b) trace events: "EVENT FILE:LINE" for every SHIM_TRACE (and direct
# shim_trace_emit) call in shim/. Where a call passes its event name in a
# parameter of the function around it (failover.c's leave()), the names are
# the literals that function's callers pass in that place. A name that can
# not be found is an error of its own.
events=$(cd "$ROOT" && python3 - shim <<'PY'
import os, re, sys

srcs = {}
for top, _, files in os.walk(sys.argv[1]):
    for f in files:
        if f.endswith(('.c', '.h')):
            p = os.path.join(top, f)
            text = open(p, encoding='utf-8').read()
            # Comments out, and #define lines (the macro itself): same length,
            # so that offsets still give line numbers.
            blank = lambda m: re.sub(r'[^\n]', ' ', m.group(0))
            text = re.sub(r'/\*.*?\*/|//[^\n]*', blank, text, flags=re.S)
            text = re.sub(r'^[ \t]*#[ \t]*define(?:[^\n]*\\\n)*[^\n]*', blank, text, flags=re.M)
            srcs[p] = text

def args_at(text, pos):
    """The top-level arguments of the call whose '(' is at pos."""
    out, cur, depth, i = [], '', 0, pos + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            cur += text[i:j + 1]
            i = j + 1
            continue
        if c in '([{':
            depth += 1
        elif c in ')]}':
            if depth == 0:
                out.append(cur.strip())
                return out
            depth -= 1
        elif c == ',' and depth == 0:
            out.append(cur.strip())
            cur = ''
            i += 1
            continue
        cur += c
        i += 1
    return out

def line_of(text, pos):
    return text.count('\n', 0, pos) + 1

literal = re.compile(r'^"([^"\\]*)"$')
events, bad = [], []
fn_def = re.compile(r'\n[A-Za-z_][\w \t\*]*?\b(\w+)\s*\(([^;{}()]*)\)\s*\{')
for path, text in sorted(srcs.items()):
    for m in re.finditer(r'\b(SHIM_TRACE|shim_trace_emit)\s*\(', text):
        if re.search(r'\b(void|int)\s*$', text[:m.start()]):
            continue  # the function's own definition or declaration
        a = args_at(text, m.end() - 1)
        where = f'{path}:{line_of(text, m.start())}'
        ev = a[1] if len(a) > 1 else ''
        lit = literal.match(ev)
        if lit:
            events.append((lit.group(1), where))
            continue
        # A parameter of the enclosing function: its callers' literals.
        defs = [d for d in fn_def.finditer(text, 0, m.start())]
        found = False
        if defs and re.fullmatch(r'\w+', ev):
            d = defs[-1]
            params = [p.strip() for p in d.group(2).split(',')]
            idx = next((k for k, p in enumerate(params) if re.search(r'\b%s$' % ev, p)), None)
            if idx is not None:
                for cpath, ctext in srcs.items():
                    for c in re.finditer(r'\b%s\s*\(' % d.group(1), ctext):
                        if c.start() == d.start(1):
                            continue
                        ca = args_at(ctext, c.end() - 1)
                        cl = literal.match(ca[idx]) if idx < len(ca) else None
                        if cl:
                            events.append((cl.group(1), f'{cpath}:{line_of(ctext, c.start())}'))
                            found = True
        if not found:
            bad.append(where)
for ev, where in events:
    print(ev, where)
for where in bad:
    print('?', where)
PY
)
[[ -n $events ]] || not_ok "found no SHIM_TRACE call in shim/"
man_events=$(entries "$MAN7" "Trace events")
missing=0
while read -r ev where; do
  [[ -n $ev ]] || continue
  if [[ $ev == '?' ]]; then
    not_ok "$where: a SHIM_TRACE whose event name this test can not find; pass a literal, or a parameter whose callers pass literals"
    missing=1
  elif ! grep -qxF "$ev" <<<"$man_events"; then
    not_ok "rdmashim.7 has no entry for trace event '$ev' ($where): add '.TP', '.B $ev' and a line on its level and when it is written under 'Trace events'"
    missing=1
  fi
done <<<"$events"
code_events=$(awk '$1 != "?" { print $1 }' <<<"$events" | sort -u)
for ev in $man_events; do
  if ! grep -qxF "$ev" <<<"$code_events"; then
    not_ok "rdmashim.7 'Trace events' lists '$ev', which no SHIM_TRACE in shim/ writes: remove or rename it"
    missing=1
  fi
done
((missing)) || ok "rdmashim.7 'Trace events': exactly the $(wc -l <<<"$code_events") events the code writes"

# (c) commands: the names `rdmashim help` lists under "commands:".
commands=$("$BIN" help | awk '/^commands:/ { on = 1; next } on && /^$/ { exit } on && /^  [a-z]/ { print $1 }')
[[ -n $commands ]] || not_ok "rdmashim help listed no command"
# The page as text, on one long line per paragraph: option names whole.
page=$(groff -man -Tascii -P-cbou -rLL=2000n "$MAN1" 2>/dev/null)
exit_status=$(section "$MAN1" "EXIT STATUS")
missing=0
for c in $commands; do
  if ! grep -qE "^\.SS \"?rdmashim $c( |\"|$)" "$MAN1"; then
    not_ok "rdmashim.1 has no section for command '$c' (rdmashim help lists it): add '.SS \"rdmashim $c ...\"' under COMMANDS with its options and its output's columns and units"
    missing=1
  fi
  if ! grep -qE "^\.BR? (.* )?\"?$c\"?(,| |$)" <<<"$exit_status"; then
    not_ok "rdmashim.1 EXIT STATUS has no entry for '$c': add '.TP', '.B $c' and its exit statuses"
    missing=1
  fi
  help=$("$BIN" help "$c" 2>&1)
  rc=$?
  if ((rc != 0)) || [[ -z $help ]]; then
    not_ok "rdmashim help $c: exit $rc, ${help:-no text}: give '$c' a short help (-h, --help)"
    missing=1
    continue
  fi
  [[ $c != help ]] || continue # its help is the whole usage: below
  for opt in $(grep -oE -- '--[a-z][a-z-]*' <<<"$help" | sort -u); do
    if ! grep -qE -- "(^|[^a-z-])$opt([^a-z-]|$)" <<<"$page"; then
      not_ok "rdmashim.1 does not mention option $opt of '$c' (rdmashim help $c shows it): describe it in the section of '$c'"
      missing=1
    fi
  done
done
# And whatever option the whole usage shows.
for opt in $("$BIN" help | grep -oE -- '--[a-z][a-z-]*' | sort -u); do
  if ! grep -qE -- "(^|[^a-z-])$opt([^a-z-]|$)" <<<"$page"; then
    not_ok "rdmashim.1 does not mention option $opt (rdmashim help shows it): describe it in its command's section"
    missing=1
  fi
done
((missing)) || ok "rdmashim.1: a section, an exit status and every option for each of: ${commands//$'\n'/ }"

# (d)
for page_file in "$MAN1" "$MAN7"; do
  warnings=$(groff -man -ww -z "$page_file" 2>&1)
  if [[ -z $warnings ]]; then
    ok "groff -man -ww: ${page_file#"$ROOT"/} is clean"
  else
    not_ok "groff -man -ww: ${page_file#"$ROOT"/}:"
    sed 's/^/    /' <<<"$warnings"
  fi
done

finish
