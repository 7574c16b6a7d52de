#!/bin/bash
# rdma-vm.sh — what the RDMA transport delivers on Soft-RoCE, inside one QEMU
# VM (integration/vm/rxe-vm.sh, rxe on dummy0, RDMASHIM_TRANSPORTS=rdma so both
# ends on one host still use RDMA). Prints figures; exits 0 unless the VM could
# not run. The guest side is integration/vm/guest-rdma-bench.sh:
#   1. latency: sockperf ping-pong 64 B (median) through the shim, plain TCP,
#      and raw verbs ib_send_lat -s 64 (median t_typical);
#   2. streaming: iperf3 -t 5 and stress through the shim, plain TCP, and raw
#      ib_write_bw -s 65536;
#   3. registration: ibv_reg_mr throughput on 2 MiB huge pages vs 4 KiB pages
#      (mrbench.c, against the pool's own mapping code);
#   4. rsocket (librdmacm's librspreload.so) under sockperf, iperf3 and redis:
#      whether each runs at all.
# RDMA_BENCH_PARTS (comma or space separated, default all four: latency
# streaming registration rsocket) picks sections.
# Under TCG every figure is slow in absolute terms; compare within one run.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
command -v qemu-system-x86_64 >/dev/null || { echo "rdma-vm: qemu-system-x86_64 missing: skipped"; exit 0; }
[[ -e $ROOT/build/lib/librdmashim.so ]] || { echo "rdma-vm: run make first"; exit 1; }
mkdir -p "$ROOT/build/bench"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I"$ROOT/shim/transport/rdma" -o "$ROOT/build/bench/mrbench" \
  "$ROOT/integration/bench/mrbench.c" "$ROOT/build/lib/librdmashim_core.a" -libverbs -lrdmacm -ldl -lpthread ||
  exit 1
parts=${RDMA_BENCH_PARTS:-}
RXEVM_ENV="RDMA_BENCH_PARTS=${parts// /,}" RXEVM_HUGEPAGES=${RXEVM_HUGEPAGES:-96} RXEVM_TIMEOUT=${RXEVM_TIMEOUT:-380} \
  timeout 390 "$ROOT/integration/vm/rxe-vm.sh" "$ROOT/integration/vm/guest-rdma-bench.sh" </dev/null 2>&1 |
  grep -vE '^\[ *[0-9]+\.[0-9]+\] '
