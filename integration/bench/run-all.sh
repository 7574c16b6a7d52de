#!/bin/bash
# run-all.sh — run every benchmark script in integration/bench/ one by one
# (`make bench-scripts`; `make bench` is the suite, suite.sh).
#
# Runs each integration/bench/*.sh except this one, in name order, each under
# `timeout` (BENCH_TIMEOUT seconds, default 400; a benchmark keeps its own,
# shorter deadline, and one that needs longer says so in a line
# "# bench-timeout: SECONDS" of its own). Benchmarks print figures; one that
# fails to run (non-zero exit) is reported and the others still run. Exit
# status: 0 if every benchmark ran, 1 otherwise.
set -u
set -o pipefail

DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$(basename "${BASH_SOURCE[0]}")
LIMIT=${BENCH_TIMEOUT:-400}
failed=()
n=0

for b in "$DIR"/*.sh; do
  [[ -e $b ]] || continue
  name=$(basename "$b")
  # suite.sh is `make bench`, a run of its own (it writes bench/results/)
  [[ $name == "$SELF" || $name == suite.sh ]] && continue
  n=$((n + 1))
  echo "=== bench: $name"
  lim=$(sed -n 's/^# bench-timeout: *\([0-9][0-9]*\).*/\1/p' "$b" | head -n 1)
  timeout -k 10 "${lim:-$LIMIT}" bash "$b"
  rc=$?
  if ((rc != 0)); then
    echo "=== bench: $name exited with status $rc"
    failed+=("$name")
  fi
done

echo "=== benchmarks: $n run, ${#failed[@]} failed${failed[*]:+: ${failed[*]}}"
((${#failed[@]} == 0))
