#!/bin/bash
# t_rdma_two_hosts: two QEMU VMs as two RoCE hosts (integration/vm/two-hosts.sh,
# Soft-RoCE on eth0 of each). With the default transports the shim picks RDMA
# by itself for a peer on another host: stress and sockperf over RDMA. Then
# host B loses its rxe device: B's shim fails fast (no_rdma_device), A's CM
# attempts time out, A's breaker for B opens after 3 of them (breaker_open on
# later connections), and every byte still arrives over TCP. The checks run
# in the guests (integration/vm/guest-rdma-two.sh); their "ok"/"not ok" lines
# are counted here. Skips (77) only when qemu or a kernel with rdma_rxe is
# missing.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built

need_rxe_vm

rc=0
RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-280} timeout 295 "$ROOT/integration/vm/two-hosts.sh" \
  "$ROOT/integration/vm/guest-rdma-two.sh" </dev/null >"$WORK/vms.out" 2>&1 || rc=$?
grep -vE '^\[[AB]\] \[ *[0-9]+\.[0-9]+\] ' "$WORK/vms.out"
n=$(grep -cE '^\[[AB]\] ok - ' "$WORK/vms.out" || true); N_OK=$((N_OK + n))
n=$(grep -cE '^\[[AB]\] not ok - ' "$WORK/vms.out" || true); N_FAIL=$((N_FAIL + n))
check "host A ran its checks to the end" grep -q '^\[A\] == host a: ' "$WORK/vms.out"
check "host B ran its checks to the end" grep -q '^\[B\] == host b: ' "$WORK/vms.out"
check "both VMs exited 0 (status $rc)" test "$rc" -eq 0
finish
