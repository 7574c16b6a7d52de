#!/bin/bash
# run-all.sh: run the integration scenarios (integration/t_*.sh).
#
#   integration/run-all.sh [FILTER...]
#
# With FILTERs, only scenarios whose name contains one of them run. Each
# scenario runs under `timeout 300` (a scenario that needs longer says so
# in a header line "# scenario-timeout: SECONDS"), one after the other; its full output goes
# to build/integration-logs/<name>.log ($INTEGRATION_LOGS/<name>.log if set).
# Prints PASS / FAIL / SKIP per scenario (a failing one with its "not ok"
# lines and the tail of its log), then the wall time, and last one line
# "N passed, M failed" (", K skipped" when some were skipped). Exit status 1 if any scenario failed (or none matched).
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_DIR=${INTEGRATION_LOGS:-$ROOT/build/integration-logs}
SCENARIO_TIMEOUT=${SCENARIO_TIMEOUT:-300}
mkdir -p "$LOG_DIR"

scenarios=()
for t in "$ROOT"/integration/t_*.sh; do
  [[ -e $t ]] || continue
  name=$(basename "$t" .sh)
  if (($# > 0)); then
    keep=0
    for f in "$@"; do
      [[ $name == *"$f"* ]] && keep=1
    done
    ((keep)) || continue
  fi
  scenarios+=("$t")
done

if [[ ! -e ${SHIM_LIB:-$ROOT/build/lib/librdmashim.so} ]]; then
  echo "warning: ${SHIM_LIB:-build/lib/librdmashim.so} is missing; run make first"
fi

passed=0 failed=0 skipped=0
failures=()
start=$EPOCHREALTIME
for t in "${scenarios[@]}"; do
  name=$(basename "$t" .sh)
  log=$LOG_DIR/$name.log
  t0=$EPOCHREALTIME
  rc=0
  lim=$SCENARIO_TIMEOUT
  own=$(sed -n 's/^# scenario-timeout: *\([0-9][0-9]*\).*/\1/p' "$t" | head -n 1)
  [[ -n $own ]] && ((own > lim)) && lim=$own
  timeout -k 30 "$lim" bash "$t" </dev/null >"$log" 2>&1 || rc=$?
  secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  case $rc in
    0)
      passed=$((passed + 1))
      printf 'PASS  %-28s %6ss  %s\n' "$name" "$secs" "$(tail -n 1 "$log" | sed 's/^\[[^]]*\] //')"
      ;;
    77)
      skipped=$((skipped + 1))
      printf 'SKIP  %-28s %6ss  %s\n' "$name" "$secs" "$(grep -m1 '^SKIP:' "$log" | sed 's/^SKIP: //')"
      ;;
    *)
      failed=$((failed + 1))
      why="status $rc"
      ((rc == 124 || rc == 137)) && why="timed out after ${lim}s"
      failures+=("$name: $why")
      while IFS= read -r line; do failures+=("  $line"); done \
        < <(grep -E '^(\[[A-Za-z0-9_]+\] )?not ok - ' "$log" | head -n 6 | cut -c1-300)
      printf 'FAIL  %-28s %6ss  %s (log: %s)\n' "$name" "$secs" "$why" "${log#"$ROOT"/}"
      if grep -E -q '^(\[[A-Za-z0-9_]+\] )?not ok - ' "$log"; then
        echo "      failed checks:"
        grep -E -A3 '^(\[[A-Za-z0-9_]+\] )?not ok - ' "$log" | head -n 40 | sed 's/^/      | /'
      fi
      echo "      log tail:"
      tail -n 25 "$log" | sed 's/^/      | /'
      ;;
  esac
done
total=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')

echo "wall time ${total}s for ${#scenarios[@]} scenario(s); logs in ${LOG_DIR#"$ROOT"/}/"
summary="$passed passed, $failed failed"
((skipped > 0)) && summary+=", $skipped skipped"
# Again at the very end, where a reader of only the output's tail (CI's
# summary) sees which scenarios failed and why.
if ((failed > 0)); then
  echo "failed scenarios:"
  printf '  %s\n' "${failures[@]}"
fi
echo "$summary"
((failed == 0 && ${#scenarios[@]} > 0))
