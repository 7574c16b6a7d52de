#!/bin/bash
# guest-diff.sh — the differential harness (integration/diff/README.md) over
# RDMA on Soft-RoCE: every scenario runs plain, under the shim tracked only
# (RDMASHIM_TRANSPORTS=tcp) and upgraded to RDMA (RDMASHIM_TRANSPORTS=rdma,
# upgrade.done with transport rdma checked in the trace), the tested
# connection on the rxe address, and the records of the three runs must be
# identical. Every TAP line starts with "rdma: ".
#
# Run by guest-rdma-one.sh (step "diff", the last one, in the same VM boot
# as t_rdma_vm), or by hand:
#   integration/vm/rxe-vm.sh "$PWD/integration/vm/guest-diff.sh" </dev/null
# It brings rxe up on dummy0 itself when no rxe0 exists yet.
#
# DIFF_VM_CORPUS   scenarios of the corpus to run, a shell glob over
#                  integration/diff/corpus/*.scn and known/*.scn; "all" for
#                  every one (default: "vm", the subset below)
# DIFF_VM_BUDGET_S random scenarios afterwards, for that many seconds
#                  (default 60; 0 for none)
# DIFF_SEED        repeats a random run; DIFF_RUN_TIMEOUT per run (default 30)
#
# The default subset leaves out the scenarios that move 3 MiB or more (the
# 8 MiB ones take seconds per run under TCG and add nothing the smaller
# ones do not test over RDMA); "all" runs them.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
ROOT=$(cd "$here/../.." && pwd)
CORPUS=$ROOT/integration/diff/corpus
addr=${DIFF_ADDR:-192.168.77.1}

if ! timeout 10 rdma link show rxe0/1 >/dev/null 2>&1; then
  rxe_up dummy0 "$addr/24" || { echo "not ok - rdma: rxe up"; exit 1; }
fi

# big FILE: a step of FILE moves 3 MB or more (sizes in bytes or with a k/m suffix).
big() {
  awk '!/^#/ && $1 != "env" && $2 !~ /^(rcvtimeo|sndtimeo|sleep|alarm|poll|ppoll|poll2|select|pselect|epwait)$/ {
         for (i = 3; i <= NF; i++) { v = tolower($i); m = 1
           if (v ~ /^[0-9]+k$/) m = 1024; else if (v ~ /^[0-9]+m$/) m = 1048576
           if (v ~ /^[0-9]+[km]?$/ && v * m >= 3000000) found = 1 } }
       END { exit !found }' "$1"
}

files=()
sel=${DIFF_VM_CORPUS:-vm}
for f in "$CORPUS"/*.scn "$CORPUS"/known/*.scn; do
  case $sel in
    all) ;;
    vm) big "$f" && continue ;;
    *) [[ ${f#"$CORPUS"/} == $sel ]] || continue ;;
  esac
  files+=("$f")
done

export DIFF_MODES=plain,tcp,rdma DIFF_ADDR=$addr
# Each end is a fresh process: its RDMA warm-up (about 1 s here, more under
# load) runs beside the first steps, so awaitup may wait longer than on shm.
export DIFF_AWAITUP_MS=${DIFF_AWAITUP_MS:-10000} DIFF_RUN_TIMEOUT=${DIFF_RUN_TIMEOUT:-30}
export DIFF_SHRINK_S=${DIFF_SHRINK_S:-30}
budget=${DIFF_VM_BUDGET_S:-60}
rc=0
t0=$SECONDS
echo "# rdma: ${#files[@]} corpus scenario(s) ($sel) on $addr"
if [[ ${#files[@]} -gt 0 ]]; then
  st=0
  timeout $((${#files[@]} * 3 * DIFF_RUN_TIMEOUT + 60)) python3 "$ROOT/integration/diff/diff.py" check "${files[@]}" || st=$?
  [[ $st -ne 124 ]] || echo "not ok - rdma: the corpus run timed out"
  [[ $st -eq 0 ]] || rc=1
fi
echo "# rdma: corpus took $((SECONDS - t0)) s"
if [[ $budget -gt 0 ]]; then
  t1=$SECONDS
  st=0
  timeout $((budget + DIFF_SHRINK_S + 3 * DIFF_RUN_TIMEOUT + 60)) python3 "$ROOT/integration/diff/diff.py" \
    random --budget "$budget" --avoid-known || st=$?
  [[ $st -ne 124 ]] || echo "not ok - rdma: the random run timed out"
  [[ $st -eq 0 ]] || rc=1
  echo "# rdma: random scenarios took $((SECONDS - t1)) s"
fi
exit $rc
