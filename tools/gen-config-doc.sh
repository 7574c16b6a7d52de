#!/bin/bash
# gen-config-doc.sh: write the environment variables' table into
# docs/CONFIG.md, between its BEGIN and END markers, from the code's own table
# (shim/core/config.c shim_config_vars, printed by `rdmashim config
# --markdown`). Everything outside the markers is left as it is.
#
#   tools/gen-config-doc.sh [--check] [RDMASHIM_BIN]
#
# --check: change nothing; exit 1 (with a diff) when the file's block is not
# what the code prints now. RDMASHIM_BIN defaults to build/bin/rdmashim.
set -eu

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DOC=$ROOT/docs/CONFIG.md
BEGIN='<!-- BEGIN GENERATED: rdmashim config --markdown (tools/gen-config-doc.sh) -->'
END='<!-- END GENERATED -->'

check=0
if [[ ${1:-} == --check ]]; then
  check=1
  shift
fi
bin=${1:-$ROOT/build/bin/rdmashim}
[[ -x $bin ]] || { echo "gen-config-doc: $bin is missing; run make first" >&2; exit 2; }

table=$("$bin" config --markdown)
# The file with its block replaced by the table the code prints.
new=$(awk -v begin="$BEGIN" -v end="$END" -v table="$table" '
  $0 == begin { print; print table; skip = 1; seen++; next }
  $0 == end { skip = 0; closed++ }
  !skip { print }
  END { if (seen != 1 || closed != 1) exit 3 }
' "$DOC") || { echo "gen-config-doc: $DOC needs exactly one BEGIN and one END marker" >&2; exit 2; }

if ((check)); then
  if ! diff -u "$DOC" <(printf '%s\n' "$new"); then
    echo "gen-config-doc: docs/CONFIG.md is stale; run tools/gen-config-doc.sh" >&2
    exit 1
  fi
  exit 0
fi
printf '%s\n' "$new" >"$DOC"
