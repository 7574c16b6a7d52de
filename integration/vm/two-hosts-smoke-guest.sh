#!/bin/bash
# two-hosts-smoke-guest.sh — guest script for two-hosts.sh: Soft-RoCE on eth0
# of both VMs, then rping, ib_send_lat and ib_write_bw from B (client) to A
# (server). B retries each client until A's server answers (bounded), so no
# fixed sleeps are needed to order the two VMs.
#
#   integration/vm/two-hosts.sh /work/main/integration/vm/two-hosts-smoke-guest.sh </dev/null
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=guest-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"

: "${ROLE:?} ${IFACE:?} ${ADDR:?} ${PREFIX:?} ${PEER:?}"
wait_peer=${WAIT_PEER:-240}   # how long B keeps retrying / A keeps serving
failed=()

rxe_up "$IFACE" "$ADDR/$PREFIX"

# step NAME SERVER_CMD... -- CLIENT_CMD...   (A runs the server, B the client)
step() {
  local name=$1 side=() rc=0; shift
  if [[ $ROLE == a ]]; then
    while [[ $1 != -- ]]; do side+=("$1"); shift; done
    echo "== $name (server)"
    timeout "$wait_peer" "${side[@]}" > "/tmp/$name.out" 2>&1 || rc=$?
  else
    while [[ $1 != -- ]]; do shift; done; shift; side=("$@")
    echo "== $name (client)"
    rxe_retry "$wait_peer" timeout 120 "${side[@]}" > "/tmp/$name.out" 2>&1 || rc=$?
  fi
  grep -E '^(ping data|rdma-ping|server DISCONNECT|client DISCONNECT)|^ *(#bytes|[0-9]+ +[0-9]+ )' \
    "/tmp/$name.out" || true
  if [[ $rc -ne 0 ]]; then
    echo "!! $name FAILED ($rc)"; cat "/tmp/$name.out"
    failed+=("$name")
  fi
}

step rping      rping -s -a "$ADDR" -C 3 -v -- rping -c -a "$PEER" -C 3 -v
step ib_send_lat ib_send_lat -d rxe0 -s 64 -F -- ib_send_lat -d rxe0 -s 64 -F "$PEER"
step ib_write_bw ib_write_bw -d rxe0 -s 65536 -n 2000 -F -- \
                 ib_write_bw -d rxe0 -s 65536 -n 2000 -F "$PEER"

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "== host $ROLE FAILED: ${failed[*]}"
  exit 1
fi
echo "== host $ROLE ok"
