#!/bin/bash
# rdma-vm-conns.sh — short connections and many connections over RDMA on
# Soft-RoCE (QEMU VMs under TCG), the shim (RDMASHIM_TRANSPORTS=rdma) against
# plain TCP. Not part of `make test`. The guest side is
# integration/vm/guest-rdma-conns.sh (it records raw data in a directory on
# this host that the VMs share; the figures are computed here afterwards).
#
#   first  connect, one 1-byte request/answer, close, CONNS_SEQ times one
#          after the other (CONNS_ALT alternated rounds): median time from
#          connect() to the answer read, and to close() returned, shim vs
#          TCP. The first byte always goes over TCP (the upgrade runs beside
#          it).
#   upg    CONNS_UPG connections doing CONNS_UPG_ROUNDS
#          request/answers each: time from connect (the client's conn.track)
#          to the client's upgrade.done, i.e. both directions on RDMA as the
#          client sees them (its own clock; in one VM also to the later of
#          both ends' upgrade.done).
#   many   CONNS_MANY connections (default 1000) between one client and one
#          server process, all open at once, CONNS_MANY_ROUNDS request/answer
#          rounds over each in turn, then idle: how many reached upgrade.done
#          at both ends (the reasons of those that did not), the time from
#          the first connect to the last upgrade.done (client clock), memory
#          per idle connection (smaps_rollup Rss and Pss deltas of both
#          processes / N, the same run without the shim beside it), and the
#          QPs, CQs, MRs, PDs and cm_ids each process holds (rdma res).
#
# Settings (environment):
#   RDMA_CONNS_VMS     2 (default: two-hosts.sh, A servers, B clients) or 1
#                      (one VM, rxe on dummy0, client and server in it)
#   RDMA_CONNS_PARTS   first,upg,many (default all three)
#   RDMA_CONNS_TRACE   the shim's trace level (default info; the figures
#                      need info or more)
#   RDMA_CONNS_SEQ, RDMA_CONNS_ALT, RDMA_CONNS_UPG, RDMA_CONNS_UPG_ROUNDS,
#   RDMA_CONNS_MANY, RDMA_CONNS_MANY_ROUNDS   counts (see the guest script)
#   RDMA_CONNS_SHIM_ENV  comma separated VAR=value words for the shim, e.g.
#                      RDMASHIM_RING_KB=64
#   RDMA_CONNS_KEEP    a directory to keep the raw data in
#   RXEVM_TIMEOUT (default 1080 s), RXEVM_MEM (default: enough for the
#   pinned rings of CONNS_MANY connections per process, see below).
# Prints "bench rdma_conns ...:" lines; exits 0 unless the VM(s) could not run.
# The defaults take 6 to 10 minutes here, with the host's load.
# bench-timeout: 1200
# 1000 connections with bounds long enough that all of them upgrade:
#   RDMA_CONNS_PARTS=many RDMA_CONNS_MANY_ROUNDS=20 \
#   RDMA_CONNS_SHIM_ENV=RDMASHIM_CM_TIMEOUT_MS=300000,RDMASHIM_UPGRADE_TIMEOUT_MS=600000 \
#   integration/bench/rdma-vm-conns.sh
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
command -v qemu-system-x86_64 >/dev/null || { echo "rdma-vm-conns: qemu-system-x86_64 missing: skipped"; exit 0; }
for f in build/lib/librdmashim.so build/progs/conn_hold; do
  [[ -e $ROOT/$f ]] || { echo "rdma-vm-conns: $f missing: run make first"; exit 1; }
done
vms=${RDMA_CONNS_VMS:-2}
many=${RDMA_CONNS_MANY:-1000}
shim_env=${RDMA_CONNS_SHIM_ENV:-}
ring_kb=$(sed -n 's/.*RDMASHIM_RING_KB=\([0-9]*\).*/\1/p' <<< "$shim_env")
ring_kb=${ring_kb:-1024}
# Each upgraded connection pins a pool slot of two rings and a 4 KiB page in
# each process (the pool rounds chunks up to 2 MiB: count 10% more), its QP
# and CQ queues take about 110 KiB more, and the guest needs about 1 GiB
# beside that. One VM holds both processes.
procs=$((vms == 1 ? 2 : 1))
mem=${RXEVM_MEM:-$((1024 + procs * many * (2 * ring_kb + 4 + 128) * 11 / 10 / 1024))}
X=$(mktemp -d "$ROOT/build/rdma-vm-conns.XXXXXX") || exit 1
trap 'rm -rf "$X"' EXIT
envs="CONNS_X=$X CONNS_PARTS=${RDMA_CONNS_PARTS:-first,upg,many} CONNS_SEQ=${RDMA_CONNS_SEQ:-100}"
envs+=" CONNS_ALT=${RDMA_CONNS_ALT:-2} CONNS_UPG=${RDMA_CONNS_UPG:-50} CONNS_UPG_ROUNDS=${RDMA_CONNS_UPG_ROUNDS:-200}"
envs+=" CONNS_MANY=$many CONNS_MANY_ROUNDS=${RDMA_CONNS_MANY_ROUNDS:-10} CONNS_SHIM_ENV=$shim_env"
envs+=" CONNS_TRACE=${RDMA_CONNS_TRACE:-info}"
to=${RXEVM_TIMEOUT:-1080}
echo "rdma-vm-conns: $vms VM(s), ${mem} MiB each, timeout ${to} s, $envs"
rc=0
if [[ $vms == 1 ]]; then
  RXEVM_ENV="$envs" RXEVM_MEM=$mem RXEVM_TIMEOUT=$to timeout $((to + 30)) \
    "$ROOT/integration/vm/rxe-vm.sh" "$ROOT/integration/vm/guest-rdma-conns.sh" </dev/null 2>&1 |
    grep -vE '^\[ *[0-9]+\.[0-9]+\] '
  rc=${PIPESTATUS[0]}
else
  RXEVM_ENV="$envs" RXEVM_MEM=$mem RXEVM_TIMEOUT=$to timeout $((to + 60)) \
    "$ROOT/integration/vm/two-hosts.sh" "$ROOT/integration/vm/guest-rdma-conns.sh" </dev/null 2>&1 |
    grep -vE '^\[[AB]\] \[ *[0-9]+\.[0-9]+\] '
  rc=${PIPESTATUS[0]}
fi
echo "rdma-vm-conns: VM status $rc"
if [[ -n ${RDMA_CONNS_KEEP:-} ]]; then
  rm -rf "$RDMA_CONNS_KEEP" && cp -r "$X" "$RDMA_CONNS_KEEP" && echo "rdma-vm-conns: raw data in $RDMA_CONNS_KEEP"
fi
python3 "$ROOT/integration/bench/rdma_conns_report.py" "$X" "$vms"
# 124: the VM ran out of time, but what it recorded is reported above.
[[ $rc -eq 0 || $rc -eq 124 ]] || exit 1
exit 0
