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
#
# Lanes: a scenario with a header line "# scenario-lane: vm" (the Soft-RoCE
# VM scenarios) runs in a lane of its own, started first, beside the other
# scenarios, which run one after the other as before. A VM scenario's
# programs run in the guest's kernel (its own ports, /tmp, /dev/shm and
# processes), so it shares only the CPU with a host scenario: its guest
# mostly waits on its vCPUs while a host scenario mostly waits on sleeps
# and timers. Two host scenarios never run at once (fixed ports, shared
# /dev/shm names, `rdmashim stat` over every process). The vm lane's
# report is printed after the others', and counts in the last line.
#   RUN_ALL_LANE=main|vm  only that lane's scenarios
#   RUN_ALL_SERIAL=1      every scenario one after the other, as before
#   RUN_ALL_BUSY_MAX=N    lanes only when other processes keep at most N
#                         cores busy (default 0.5, sampled over 2 s at the
#                         start); otherwise lane vm runs after the others
#   RUN_ALL_THEN=CMD      a command (bash -c) run after the other lane's
#                         scenarios, beside lane vm if it still runs (make
#                         test: the sanitizer runs); its failure counts as a
#                         failed scenario
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_DIR=${INTEGRATION_LOGS:-$ROOT/build/integration-logs}
SCENARIO_TIMEOUT=${SCENARIO_TIMEOUT:-300}
mkdir -p "$LOG_DIR"

scenarios=() side=()
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
  lane=$(sed -n 's/^# scenario-lane: *\([a-z]*\).*/\1/p' "$t" | head -n 1)
  if [[ -n ${RUN_ALL_LANE:-} ]]; then
    [[ ${lane:-main} == "$RUN_ALL_LANE" ]] || continue
  elif [[ -n $lane && ${RUN_ALL_SERIAL:-0} != 1 ]]; then
    side+=("$name")
    continue
  fi
  scenarios+=("$t")
done

if [[ ! -e ${SHIM_LIB:-$ROOT/build/lib/librdmashim.so} ]]; then
  echo "warning: ${SHIM_LIB:-build/lib/librdmashim.so} is missing; run make first"
fi

passed=0 failed=0 skipped=0
failures=()
start=$EPOCHREALTIME
# The vm lane: this script again on those scenarios alone, in the
# background, its output kept for the end.
# On a host that others keep busy, the lanes would share what is left of
# the cores: beside two CPU hogs, t_rdma_two_hosts ran out of its time
# with the host lane beside it. Then the vm lane's scenarios run after the
# others, one after the other, as without lanes.
# busy_cores: how many cores other processes kept busy over 2 s.
busy_cores() {
  local a b
  a=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  sleep 2
  b=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)
  awk -v a="$a" -v b="$b" -v n="$(nproc)" 'BEGIN { split(a, x, " "); split(b, y, " ");
    u = y[1] - x[1]; i = y[2] - x[2]; printf "%.2f", (u + i > 0) ? n * u / (u + i) : 0 }'
}
side_pid= side_out=$LOG_DIR/lane-vm.out
if ((${#side[@]} > 0)); then
  serial=0
  ((${#scenarios[@]} == 0)) && serial=1
  if ((!serial)); then
    busy=$(busy_cores)
    if awk -v b="$busy" -v m="${RUN_ALL_BUSY_MAX:-0.5}" 'BEGIN { exit !(b > m) }'; then
      echo "host busy ($busy cores taken by others): lane vm runs after the others: ${side[*]}"
      serial=1
    fi
  fi
  if ((serial)); then
    side=("${side[@]/#/$ROOT/integration/}")
    scenarios+=("${side[@]/%/.sh}") side=()
  else
    RUN_ALL_THEN= RUN_ALL_LANE=vm "${BASH_SOURCE[0]}" "${side[@]}" </dev/null >"$side_out" 2>&1 &
    side_pid=$!
    echo "lane vm, beside the others (its report follows theirs): ${side[*]}"
  fi
fi
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
n_run=${#scenarios[@]}
if [[ -n ${RUN_ALL_THEN:-} ]]; then
  echo "then: $RUN_ALL_THEN"
  then_rc=0
  RUN_ALL_THEN= bash -c "$RUN_ALL_THEN" </dev/null || then_rc=$?
  if ((then_rc != 0)); then
    failed=$((failed + 1))
    failures+=("then: $RUN_ALL_THEN: status $then_rc")
  fi
fi
if [[ -n $side_pid ]]; then
  main_secs=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  echo "the host lane done in ${main_secs}s; waiting for lane vm"
  side_rc=0
  wait "$side_pid" || side_rc=$?
  echo "lane vm (${side_out#"$ROOT"/}):"
  sed '/^failed scenarios:$/,$d; s/^wall time/lane vm: wall time/' "$side_out" | grep -v '^[0-9]* passed, [0-9]* failed'
  last=$(tail -n 1 "$side_out")
  if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed(,\ ([0-9]+)\ skipped)?$ ]]; then
    passed=$((passed + BASH_REMATCH[1])) failed=$((failed + BASH_REMATCH[2]))
    skipped=$((skipped + ${BASH_REMATCH[4]:-0}))
    while IFS= read -r line; do failures+=("${line#  }"); done \
      < <(sed -n '/^failed scenarios:$/,$p' "$side_out" | sed '1d;$d')
  else
    failed=$((failed + 1))
    failures+=("lane vm: no summary line (status $side_rc)")
  fi
  n_run=$((n_run + ${#side[@]}))
fi
total=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')

echo "wall time ${total}s for ${n_run} scenario(s); logs in ${LOG_DIR#"$ROOT"/}/"
summary="$passed passed, $failed failed"
((skipped > 0)) && summary+=", $skipped skipped"
# Again at the very end, where a reader of only the output's tail (CI's
# summary) sees which scenarios failed and why.
if ((failed > 0)); then
  echo "failed scenarios:"
  printf '  %s\n' "${failures[@]}"
fi
echo "$summary"
((failed == 0 && n_run > 0))
