#!/bin/bash
# t_rdma_faults: each RDMA kind of RDMASHIM_TEST_FAULTS (shim/core/faults.h:
# cm_timeout, cm_reject, reg_fail, qp_error, cq_lost, link_qp_lost,
# cq_stall; cq_stall_gap: the same with the stall watch off) in one
# Soft-RoCE VM, under the stress tool's checksummed streams
# (integration/vm/guest-rdma-faults.sh, the "faults" part of
# guest-rdma-one.sh): every byte right at both ends, the strike traced
# (fault.injected) and counted, and the outcome the kind must have (the
# breaker open after three CM timeouts, TCP kept after a reject or a failed
# registration, both ends failing over after a QP error, a lost CQ or a
# link's QP lost under several connections, the stall watch breaking a link
# whose CQ stopped delivering; with the watch off, a reset at both ends
# and never a wrong byte). It prints the failover times
# ("# failover time" lines; docs/BENCHMARKS.md). FAULTS_KINDS and
# FAULTS_ROUNDS go to the guest. Skips (77) only when qemu or a kernel with
# rdma_rxe is missing.
# scenario-timeout: 900
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built

need_rxe_vm

rc=0
vm_limit=${RXEVM_TIMEOUT:-840}
# FAULTS_KINDS comma separated (RXEVM_ENV splits on blanks).
kinds=${FAULTS_KINDS:-}
export RXEVM_ENV="${RXEVM_ENV:-} RDMA_ONLY=faults FAULTS_ROUNDS=${FAULTS_ROUNDS:-1}${kinds:+ FAULTS_KINDS=${kinds// /,}}"
RXEVM_TIMEOUT=$vm_limit timeout $((vm_limit + 10)) "$ROOT/integration/vm/rxe-vm.sh" \
  "$ROOT/integration/vm/guest-rdma-one.sh" </dev/null >"$WORK/vm.out" 2>&1 || rc=$?
grep -vE '^\[ *[0-9]+\.[0-9]+\] ' "$WORK/vm.out"
n=$(grep -c '^ok - ' "$WORK/vm.out" || true); N_OK=$((N_OK + n))
n=$(grep -c '^not ok - ' "$WORK/vm.out" || true); N_FAIL=$((N_FAIL + n))
check "the VM ran the guest script to the end (status $rc)" grep -q '^== [0-9]* ok, [0-9]* failed' "$WORK/vm.out"
finish
