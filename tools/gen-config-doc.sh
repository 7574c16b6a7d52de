#!/bin/bash
# gen-config-doc.sh: write the generated blocks of the documentation from
# the code's own tables. Everything outside a block's BEGIN and END markers
# is left as it is.
#
#   docs/CONFIG.md       the variables' table (shim/core/config.c
#                        shim_config_vars, `rdmashim config --markdown`)
#   docs/man/rdmashim.7  ENVIRONMENT: the same table as man(7) paragraphs
#                        (`rdmashim config --man`); REASON CODES: every
#                        reason of shim/core/reason.h (`rdmashim reasons`)
#
#   tools/gen-config-doc.sh [--check] [RDMASHIM_BIN]
#
# --check: change nothing; exit 1 (with a diff) when a file's block is not
# what the code prints now. RDMASHIM_BIN defaults to build/bin/rdmashim.
# `make docs` runs it; integration/t_docs.sh and t_manpages.sh run --check.
set -eu

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MD_BEGIN='<!-- BEGIN GENERATED: rdmashim config --markdown (tools/gen-config-doc.sh) -->'
MD_END='<!-- END GENERATED -->'
MAN_VARS='.\" BEGIN GENERATED: rdmashim config --man (tools/gen-config-doc.sh)'
MAN_REASONS='.\" BEGIN GENERATED: rdmashim reasons (tools/gen-config-doc.sh)'
MAN_END='.\" END GENERATED'

check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi
bin=${1:-$ROOT/build/bin/rdmashim}
[[ -x $bin ]] || { echo "gen-config-doc: $bin is missing; run make first" >&2; exit 2; }

# replace TEXT BEGIN END BLOCK: TEXT with the lines between the one BEGIN
# line and the END line after it replaced by BLOCK.
# (Through the environment: awk -v would read the backslashes of roff.)
replace() {
  BEGIN_LINE=$2 END_LINE=$3 BLOCK=$4 awk '
    $0 == ENVIRON["BEGIN_LINE"] { print; print ENVIRON["BLOCK"]; skip = 1; seen++; next }
    skip && $0 == ENVIRON["END_LINE"] { skip = 0; closed++ }
    !skip { print }
    END { if (seen != 1 || closed != 1) exit 3 }
  ' <<<"$1"
}

# The reasons as man(7) paragraphs: name, then "(code) meaning".
reasons_man() {
  "$bin" reasons | awk '
    NR == 1 { next } # the header
    {
      code = $1; name = $2
      text = $0
      sub(/^ *[0-9]+ +[^ ]+ +/, "", text)
      gsub(/\\/, "\\e", text)
      printf ".TP\n.B %s\n(%s) %s.\n", name, code, text
    }'
}

# write FILE NEW: write or, with --check, compare.
stale=0
write() {
  if ((check)); then
    if ! diff -u "$1" <(printf '%s\n' "$2"); then
      echo "gen-config-doc: ${1#"$ROOT"/} is stale; run tools/gen-config-doc.sh (or make docs)" >&2
      stale=1
    fi
  else
    printf '%s\n' "$2" >"$1"
  fi
}

doc=$ROOT/docs/CONFIG.md
new=$(replace "$(cat "$doc")" "$MD_BEGIN" "$MD_END" "$("$bin" config --markdown)") ||
  { echo "gen-config-doc: $doc needs exactly one BEGIN and one END marker" >&2; exit 2; }
write "$doc" "$new"

man=$ROOT/docs/man/rdmashim.7
new=$(replace "$(cat "$man")" "$MAN_VARS" "$MAN_END" "$("$bin" config --man)") ||
  { echo "gen-config-doc: $man needs exactly one '$MAN_VARS' block" >&2; exit 2; }
new=$(replace "$new" "$MAN_REASONS" "$MAN_END" "$(reasons_man)") ||
  { echo "gen-config-doc: $man needs exactly one '$MAN_REASONS' block" >&2; exit 2; }
write "$man" "$new"

exit "$stale"
