#!/bin/bash
# t_matrix: the real-program matrix. Each integration/matrix/NAME.sh (all but
# common.sh) runs one unmodified Debian program pair twice, over plain TCP
# and with both ends under the shim (shm upgrades), and checks the same
# result, switched connections in the trace and no refused, aborted or bad
# frame (see matrix/common.sh). Here every program is one line: "ok - NAME"
# when all its checks pass, "not ok - NAME" with its failed checks otherwise,
# "ok - NAME # SKIP why" when its program is missing, "ok - NAME # TODO
# known: why" for a known failure (its failed checks are shown). Each
# program gets MATRIX_TIMEOUT seconds (default 100). MATRIX_ONLY="a b"
# runs only those programs.
#
# Self-test: the asyncio entry once more with the shim told to stay on TCP
# (MX_TRANSPORTS=tcp) must fail its upgrade check, and only that check.
#
# With 40 entries the whole matrix took 270 s in one run on the loaded
# 2-core machine and passed run-all's default limit of 300 s in another:
# it gets 1200.
# scenario-timeout: 1200
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
MATRIX_TIMEOUT=${MATRIX_TIMEOUT:-100}
MLOGS=$LOG_DIR/matrix
mkdir -p "$MLOGS"

# run_entry SCRIPT NAME [VAR=V...]: runs one entry, its output in MLOGS/NAME.log;
# sets E_RC, E_SECS.
run_entry() {
  local script=$1 name=$2 t0
  shift 2
  t0=$EPOCHREALTIME
  E_RC=0
  # Scratch beside the logs, not in this scenario's WORK (mode 0700), which
  # servers running as another user could not reach.
  env "$@" SCENARIO_NAME="$name" INTEGRATION_LOGS="$MLOGS" \
    timeout -k 10 "$MATRIX_TIMEOUT" bash "$script" </dev/null >"$MLOGS/$name.log" 2>&1 || E_RC=$?
  E_SECS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
}

for script in "$ROOT"/integration/matrix/*.sh; do
  name=$(basename "$script" .sh)
  [[ $name == common ]] && continue
  if [[ -n ${MATRIX_ONLY:-} && " $MATRIX_ONLY " != *" $name "* ]]; then
    continue
  fi
  run_entry "$script" "$name"
  log="$MLOGS/$name.log"
  # A failed entry keeps its scratch: its log goes there too, so that the
  # next run's log does not hide it.
  kept=$(sed -n 's/^\[[^]]*\] scratch files kept in //p' "$log" | tail -n 1)
  [[ -n $kept && -d $kept ]] && cp "$log" "$kept/entry.log"
  n_ok=$(grep -c '^ok - ' "$log")
  n_bad=$(grep -c '^not ok - ' "$log")
  known=$(sed -n 's/^# known failure: //p' "$log" | head -n 1)
  if ((E_RC == 77)); then
    ok "$name # SKIP $(sed -n 's/^SKIP: //p' "$log" | head -n 1)"
  elif ((E_RC == 0 && n_bad == 0 && n_ok > 0)); then
    ok "$name: $n_ok checks (${E_SECS}s)"
    [[ -n $known ]] && echo "    $name passes although marked known ($known): drop the mark"
  else
    why="$n_bad of $((n_ok + n_bad)) checks failed"
    ((E_RC == 124 || E_RC == 137)) && why="timed out after ${MATRIX_TIMEOUT}s; $why"
    ((E_RC != 0 && n_bad == 0)) && why="exit status $E_RC; $why"
    if [[ -n $known ]]; then
      ok "$name # TODO known: $known ($why)"
    else
      not_ok "$name: $why (${E_SECS}s; log ${log#"$ROOT"/})"
    fi
    grep -A3 '^not ok - ' "$log" | head -n 24 | sed 's/^/    | /'
    ((n_bad == 0)) && tail -n 8 "$log" | sed 's/^/    | /'
  fi
done

if [[ -z ${MATRIX_ONLY:-} || " $MATRIX_ONLY " == *" asyncio "* ]]; then
  run_entry "$ROOT/integration/matrix/asyncio.sh" selftest-asyncio-tcp MX_TRANSPORTS=tcp
  log="$MLOGS/selftest-asyncio-tcp.log"
  bad=$(grep '^not ok - ' "$log")
  if ((E_RC != 0)) && [[ $(grep -c . <<<"$bad") -eq 1 && $bad == *"upgraded to shm at both ends"* ]]; then
    ok "self-test: with RDMASHIM_TRANSPORTS=tcp the asyncio entry fails its upgrade check only (${E_SECS}s)"
  else
    not_ok "self-test: with RDMASHIM_TRANSPORTS=tcp the asyncio entry fails its upgrade check only (status $E_RC)"
    sed 's/^/    | /' <<<"$bad" | head -n 10
  fi
fi

finish
