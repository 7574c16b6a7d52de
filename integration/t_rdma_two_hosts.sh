#!/bin/bash
# t_rdma_two_hosts: two QEMU VMs as two RoCE hosts (integration/vm/two-hosts.sh,
# Soft-RoCE on eth0 of each). First the links part
# (integration/vm/guest-rdma-links.sh): one client process with 32
# connections to one server process, verified request/answer rounds; every
# connection upgrades, each process holds at most 2 QPs (the kernel's count)
# where RDMASHIM_RDMA_LINKS=0 holds one per connection, and when the shared
# QP breaks (RDMASHIM_TEST_FAIL_LINK_KB) every connection fails over at both
# ends and every stream stays byte-exact; a burst of connections whose
# handshakes all start at once (no warm link) shares a few links instead of
# making one each (at most N/8 + 3 QPs at a cap of 8, and the server's
# connections wait for the links being made). Then RDMASHIM_MODE=shadow
# across the hosts (integration/vm/guest-rdma-shadow.sh): redis in shadow at
# both ends, every connection negotiated over rdma_cm to its cut, no byte on
# RDMA, each counted as one that would have moved. Then, with the default transports
# the shim picks RDMA by itself for a peer on another host: stress and
# sockperf over RDMA. Then host B loses its rxe device: B's shim fails fast
# (no_rdma_device), A's CM attempts time out, A's breaker for B opens after 3
# of them (breaker_open on later connections), and every byte still arrives
# over TCP. The checks run in the guests (integration/vm/guest-rdma-two.sh);
# their "ok"/"not ok" lines are counted here. Skips (77) only when qemu or a
# kernel with rdma_rxe is missing.
#
# RDMA_TWO_ONLY=links runs the links part alone (in VMs of its own: 186 s on
# an idle 2-core machine with the burst part, 34 s of it),
# RDMA_TWO_ONLY=base everything else, RDMA_TWO_ONLY=shadow the shadow part
# alone (integration/vm/guest-rdma-shadow.sh: redis in RDMASHIM_MODE=shadow
# across the hosts, no byte on RDMA, every connection traced as one that
# would have moved to it).
# LINKS_* variables (see guest-rdma-links.sh) reach the guests. The VMs run
# SHIM_LIB and SHIM_PROGS (integration/lib.sh) when set: another build, not
# under /tmp, which the VMs do not see.
# scenario-timeout: 600
# scenario-lane: vm
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/conn_hold" "$PROGS/stress"

need_rxe_vm

only=${RDMA_TWO_ONLY:-}
guest=$ROOT/integration/vm/guest-rdma-two.sh
[[ $only == links ]] && guest=$ROOT/integration/vm/guest-rdma-links.sh
# The two hosts meet in (and leave the links part's outputs in) a directory
# on this machine that both see: the guests mount a /tmp of their own, and
# bind back only the top directory of a checkout under /tmp (rxe-vm.sh).
env="SHIM_LIB=$LIB SHIM_PROGS=$PROGS"
tmp_top() { [[ $1 == /tmp/* ]] && { local r=${1#/tmp/}; echo "${r%%/*}"; }; }
[[ $only == shadow ]] && env+=" TWO_ONLY=shadow"
if [[ $only != base && $only != shadow ]]; then
  if [[ $WORK == /tmp/* && $(tmp_top "$WORK") != $(tmp_top "$ROOT") ]]; then
    not_ok "links: the scratch directory $WORK is under /tmp outside this checkout, which the VMs do not see (set INTEGRATION_LOGS)"
  else
    mkdir -p "$WORK/links" && env+=" LINKS_X=$WORK/links"
  fi
fi
for v in $(compgen -e | grep '^LINKS_' | grep -vx LINKS_X); do env+=" $v=${!v}"; done

rc=0
t0=$SECONDS
RXEVM_ENV="$env ${RXEVM_ENV:-}" RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-560} timeout 580 \
  "$ROOT/integration/vm/two-hosts.sh" "$guest" </dev/null >"$WORK/vms.out" 2>&1 || rc=$?
log "the VMs took $((SECONDS - t0)) s"
grep -vE '^\[[AB]\] \[ *[0-9]+\.[0-9]+\] ' "$WORK/vms.out"
n=$(grep -cE '^\[[AB]\] ok - ' "$WORK/vms.out" || true); N_OK=$((N_OK + n))
n=$(grep -cE '^\[[AB]\] not ok - ' "$WORK/vms.out" || true); N_FAIL=$((N_FAIL + n))
end='== host'
[[ $only == links ]] && end='== host [ab] links:'
check "host A ran its checks to the end" grep -qE "^\[A\] $end" "$WORK/vms.out"
check "host B ran its checks to the end" grep -qE "^\[B\] $end" "$WORK/vms.out"
check "both VMs exited 0 (status $rc)" test "$rc" -eq 0
finish
