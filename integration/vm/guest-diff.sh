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
# DIFF_VM_CORPUS   which corpus scenarios: "vm" (the default: VM_SET below),
#                  "all" (corpus/*.scn and known/*.scn), or shell globs (comma
#                  separated) over paths relative to integration/diff/corpus
#                  (e.g. 'known/*,exec_*')
# DIFF_VM_BUDGET_S random scenarios afterwards, for that many seconds
#                  (default 60; 0 for none)
# DIFF_SEED        repeats a random run; DIFF_RUN_TIMEOUT per run (default 30)
# DIFF_VM_END      (date +%s) when it must be done: the random part shrinks
#                  to what is left (guest-rdma-one.sh sets it)
#
# Under TCG a scenario's three runs take about 10 s (a fresh process per
# end, each with its own RDMA warm-up), so the whole corpus takes 12 minutes
# (measured with the host's load at 8): make test runs VM_SET, eleven that
# upgrade to RDMA and between them cover readiness, recv flags, half-close,
# close with unread bytes, RDHUP, EPOLLONESHOT, SO_RCVLOWAT, kill -9,
# SIGPIPE, splice and the program's own SO_LINGER 0 (its reset must reach
# the peer's program: no clean end goes on the channel before it). "all" adds the 8 MiB transfers, the moment of the
# switch and the cases marked "# known-rdma:" (differences of the RDMA
# transport, reported as known).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
CORPUS=$ROOT/integration/diff/corpus
addr=${DIFF_ADDR:-192.168.77.1}

if ! timeout 10 rdma link show rxe0/1 >/dev/null 2>&1; then
  rxe_up dummy0 "$addr/24" || { echo "not ok - rdma: rxe up"; exit 1; }
fi

VM_SET="readiness recv_flags shutdown_wr close_unread close_rdhup epoll_oneshot rcvlowat kill9_idle sigpipe
        splice_after_switch linger0"
files=()
sel=${DIFF_VM_CORPUS:-vm}
if [[ $sel == vm ]]; then
  for n in $VM_SET; do files+=("$CORPUS/$n.scn"); done
else
  IFS=, read -ra pats <<<"$sel"
  for f in "$CORPUS"/*.scn "$CORPUS"/known/*.scn; do
    for pat in "${pats[@]}"; do
      # shellcheck disable=SC2053 # a glob on purpose
      if [[ $pat == all || ${f#"$CORPUS"/} == $pat ]]; then
        files+=("$f")
        break
      fi
    done
  done
fi

export DIFF_MODES=plain,tcp,rdma DIFF_ADDR=$addr
# As on the host (t_diff.sh): random scenarios from seed 1, one verdict per commit.
export DIFF_SEED=${DIFF_SEED:-1}
# Each end is a fresh process: its RDMA warm-up (about 1 s here, more under
# load) runs beside the first steps, so awaitup may wait longer than on shm.
export DIFF_AWAITUP_MS=${DIFF_AWAITUP_MS:-10000} DIFF_RUN_TIMEOUT=${DIFF_RUN_TIMEOUT:-30}
export DIFF_SHRINK_S=${DIFF_SHRINK_S:-30}
budget=${DIFF_VM_BUDGET_S:-30}
end=${DIFF_VM_END:-0}
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
if [[ $end -gt 0 && $budget -gt 0 ]]; then
  # What a random run may need beyond its budget: a last scenario, a shrink.
  left=$(( end - $(date +%s) - DIFF_SHRINK_S - 3 * DIFF_RUN_TIMEOUT - 10 ))
  if (( left < budget )); then
    echo "# rdma: random part cut to $(( left > 0 ? left : 0 )) s (of $budget): the VM's budget"
    budget=$(( left > 0 ? left : 0 ))
  fi
fi
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
