#!/bin/bash
# smoke-guest.sh — guest script for rxe-vm.sh: Soft-RoCE on dummy0 inside one
# VM, then rping, ib_send_lat and ib_write_bw with server and client in the
# same VM. Exits nonzero if any of them fails.
#
#   integration/vm/rxe-vm.sh /work/main/integration/vm/smoke-guest.sh </dev/null
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=guest-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"

addr=192.168.77.1
failed=()

echo "== guest: $(uname -r), $(nproc) cpu, ulimit -l $(ulimit -l)," \
     "hugepages $(cat /proc/sys/vm/nr_hugepages), up $(cut -d' ' -f1 /proc/uptime)s"
rxe_up dummy0 "$addr/24"
timeout 10 ibv_devices

# run_pair NAME SERVER_TIMEOUT SERVER_CMD... -- CLIENT_CMD...
# Server in the background; the client is retried until the server listens.
# Prints the client's output filtered through $filter.
run_pair() {
  local name=$1 st=$2 server=() client=() spid rc=0 src=0
  shift 2
  while [[ $1 != -- ]]; do server+=("$1"); shift; done
  shift; client=("$@")
  echo "== $name"
  timeout "$st" "${server[@]}" > "/tmp/$name.server" 2>&1 &
  spid=$!
  rxe_retry "$st" timeout "$st" "${client[@]}" > "/tmp/$name.client" 2>&1 || rc=$?
  wait "$spid" || src=$?
  grep -E "$filter" "/tmp/$name.client" || true
  if [[ $rc -ne 0 || $src -ne 0 ]]; then
    echo "!! $name FAILED (client $rc, server $src)"
    echo "-- client:"; cat "/tmp/$name.client"
    echo "-- server:"; cat "/tmp/$name.server"
    failed+=("$name")
  fi
}

filter='^(client DISCONNECT|ping data|rdma_)'
run_pair rping 60 rping -s -a "$addr" -C 3 -v -- rping -c -a "$addr" -C 3 -v

# perftest result lines: the column header and the numbers.
filter='^ *(#bytes|[0-9]+ +[0-9]+ )'
run_pair ib_send_lat 120 ib_send_lat -d rxe0 -s 64 -F -- \
                         ib_send_lat -d rxe0 -s 64 -F "$addr"
run_pair ib_write_bw 180 ib_write_bw -d rxe0 -s 65536 -F -- \
                         ib_write_bw -d rxe0 -s 65536 -F "$addr"

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "== smoke FAILED: ${failed[*]}"
  exit 1
fi
echo "== smoke ok"
