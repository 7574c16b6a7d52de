#!/bin/bash
# t_rdma_vm: the RDMA transport for real, on Soft-RoCE (rdma_rxe) inside one
# QEMU VM (integration/vm/rxe-vm.sh). With RDMASHIM_TRANSPORTS=rdma both ends
# under the shim use RDMA although they share the host. The guest script
# (integration/vm/guest-rdma-one.sh) runs stress (64M, 4 conns, mixed modes,
# half-close), the stale-memory trap with zero copy forced on
# (integration/progs/zc_trap.c, every byte checked, zero-copy sends and
# cache invalidations counted) and a failover under zero-copy sends,
# redis-server + redis-benchmark, iperf3 (and `rdmashim qp` over a live
# one: both ends' queue pairs in RTS with their pid and program) and
# sockperf ping-pong, checks their results and that both ends traced upgrade.done with
# transport rdma; the speed guard (part speed: the shim over RDMA at its
# defaults, its best of alternated rounds at least 1.5x lower p50 than plain
# TCP's median; judged only when this host's load leaves the VM its cores,
# RDMA_HOSTLOAD, and otherwise printed and skipped with the load); checks that the RDMA warm-up does not block a process's
# first connection, that a child forked after it stays on TCP and that
# fork-per-connection workers upgrade by themselves; then a plain client
# against a shim server (must stay on TCP, byte exact); then the faults
# part (integration/vm/guest-rdma-faults.sh): each RDMA kind of
# RDMASHIM_TEST_FAULTS (shim/core/faults.h: cm_timeout, cm_reject,
# reg_fail, qp_error, cq_lost, link_qp_lost, cq_stall; cq_stall_gap: the
# same with the stall watch off, a reset and never a wrong byte; devloss:
# the device deleted under live streams) under the stress tool's
# checksummed streams: every byte right at both ends, the strike traced
# (fault.injected) and counted, and the outcome the kind must have (the
# breaker open after three CM timeouts, TCP kept after a reject or a
# failed registration, both ends failing over after a QP error, a lost CQ
# or a link's QP lost under several connections, the stall watch breaking
# a link whose CQ stopped delivering), with the failover times
# ("# failover time" lines; docs/BENCHMARKS.md; FAULTS_KINDS and
# FAULTS_ROUNDS go to the guest); then a hostile RDMA
# peer (integration/progs/hostile_rdma.c) lying in what it writes into a
# shim echo server's memory, and a squatter on a client's rendezvous
# (integration/vm/guest-rdma-hostile.sh); last, in the same boot, the
# differential harness with its upgraded run on RDMA (integration/vm/
# guest-diff.sh: plain, RDMASHIM_TRANSPORTS=tcp and =rdma on the rxe
# address; ten corpus scenarios and DIFF_VM_BUDGET_S, default 15, seconds
# of random ones from seed 1; its lines start "rdma: "; about 3 minutes
# more under load, so the VM gets RXEVM_TIMEOUT 960 s and run-all.sh
# 1020 s; on a host so loaded that the earlier steps leave it less than
# 90 s, it does not run, and says so). Each part's time is printed
# ("# time PART: N s").
# That step alone, by hand: RXEVM_ENV=RDMA_ONLY=diff integration/vm/rxe-vm.sh
# "$PWD/integration/vm/guest-rdma-one.sh" </dev/null; or any parts through
# this scenario: RXEVM_ENV="RDMA_ONLY=faults FAULTS_ROUNDS=3"
# integration/run-all.sh t_rdma_vm. Skips (77) only when qemu or a
# kernel with rdma_rxe is missing.
# scenario-timeout: 1020
# scenario-lane: vm
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built

need_rxe_vm

# tally_vm FILE: counts the guest's "ok - "/"not ok - " lines as ours.
tally_vm() {
  local n
  n=$(grep -c '^ok - ' "$1" || true); N_OK=$((N_OK + n))
  n=$(grep -c '^not ok - ' "$1" || true); N_FAIL=$((N_FAIL + n))
}

rc=0
# The differential step's random part (guest-diff.sh) takes its budget from here.
# RDMA_DEADLINE_S: the guest script's share of RXEVM_TIMEOUT (less the
# boot), so that the differential step, the last, fits in what is left.
vm_limit=${RXEVM_TIMEOUT:-960}
# This host's load, for the guest's speed part (which judges a ratio only
# where the host leaves its vCPUs their cores): "CORES LOAD1", rewritten
# every 2 s, in a file the guest sees at the same path (not under /tmp,
# which the guest has of its own).
hostload=$ROOT/build/vm-hostload.$$
( while :; do echo "$(nproc) $(cut -d' ' -f1 /proc/loadavg)" >"$hostload.new" && mv -f "$hostload.new" "$hostload"; sleep 2; done ) &
sampler=$!
# FAULTS_KINDS comma separated (RXEVM_ENV splits on blanks).
kinds=${FAULTS_KINDS:-}
faults_env="FAULTS_ROUNDS=${FAULTS_ROUNDS:-1}${kinds:+ FAULTS_KINDS=${kinds// /,}}"
export RXEVM_ENV="${RXEVM_ENV:-} $faults_env DIFF_VM_BUDGET_S=${DIFF_VM_BUDGET_S:-15} RDMA_DEADLINE_S=$((vm_limit - 30)) RDMA_HOSTLOAD=$hostload"
RXEVM_TIMEOUT=$vm_limit timeout $((vm_limit + 10)) "$ROOT/integration/vm/rxe-vm.sh" \
  "$ROOT/integration/vm/guest-rdma-one.sh" </dev/null >"$WORK/vm.out" 2>&1 || rc=$?
kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
rm -f "$hostload" "$hostload.new"
grep -vE '^\[ *[0-9]+\.[0-9]+\] ' "$WORK/vm.out"
tally_vm "$WORK/vm.out"
check "the VM ran the guest script to the end (status $rc)" grep -q '^== [0-9]* ok, [0-9]* failed' "$WORK/vm.out"
finish
