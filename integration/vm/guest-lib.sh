#!/bin/bash
# guest-lib.sh — helpers for guest scripts run by rxe-vm.sh. Source it:
#
#   . "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
#
#   rxe_up IFACE ADDR/PREFIX [RXEDEV]  address IFACE (a dummy device is created
#                                      if IFACE is dummy*), bind Soft-RoCE device
#                                      RXEDEV (default rxe0) to it, wait until
#                                      the device is listed and its port ACTIVE
#   rxe_check [ADDR] [RXEDEV]          rping server+client on ADDR (default: the
#                                      IPv4 address of RXEDEV's netdev)
#   rxe_retry SECONDS CMD [ARG...]     run CMD until it succeeds, for at most
#                                      SECONDS; status of the last attempt
#
# It also sets ROOT (the checkout, seen at the same path in the guest), LIB
# (the shim: SHIM_LIB if set, else build/lib/librdmashim.so) and PROGS (the
# test programs: SHIM_PROGS if set, else build/progs); a host script passes
# those two in RXEVM_ENV to test another build (not under /tmp).
#
# Every command that could block runs under `timeout`. Tunables (seconds):
# RXE_UP_WAIT (default 30) for rxe_up, RXE_CHECK_WAIT (default 60) for rxe_check.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIB=${SHIM_LIB:-$ROOT/build/lib/librdmashim.so}
PROGS=${SHIM_PROGS:-$ROOT/build/progs}

rxe_log() { echo "[guest-lib] $*" >&2; }

# rxe_retry SECONDS CMD [ARG...]
rxe_retry() {
  local limit=$1 deadline rc; shift
  deadline=$((SECONDS + limit))
  while :; do
    rc=0; "$@" || rc=$?
    [[ $rc -eq 0 ]] && return 0
    if (( SECONDS >= deadline )); then
      rxe_log "gave up after ${limit}s: $* (status $rc)"
      return "$rc"
    fi
    sleep 0.5
  done
}

# rxe_up IFACE ADDR/PREFIX [RXEDEV]
rxe_up() {
  local ifc=${1:?rxe_up IFACE ADDR/PREFIX [RXEDEV]} addr=${2:?rxe_up IFACE ADDR/PREFIX [RXEDEV]}
  local dev=${3:-rxe0} wait=${RXE_UP_WAIT:-30} deadline
  timeout 10 ip link set lo up
  if ! ip link show dev "$ifc" >/dev/null 2>&1; then
    case $ifc in
      dummy*) timeout 10 ip link add "$ifc" type dummy ;;
      *) rxe_log "no network device $ifc"; return 1 ;;
    esac
  fi
  timeout 10 ip addr replace "$addr" dev "$ifc"
  timeout 10 ip link set "$ifc" up
  if ! timeout 10 rdma link show "$dev/1" >/dev/null 2>&1; then
    timeout 10 rdma link add "$dev" type rxe netdev "$ifc"
  fi
  deadline=$((SECONDS + wait))
  until timeout 10 ibv_devices 2>/dev/null | awk '{print $1}' | grep -qx "$dev" &&
        timeout 10 ibv_devinfo -d "$dev" 2>/dev/null | grep -q 'PORT_ACTIVE'; do
    if (( SECONDS >= deadline )); then
      rxe_log "$dev on $ifc not ACTIVE after ${wait}s"
      timeout 10 rdma link show || true
      timeout 10 ibv_devinfo -d "$dev" || true
      return 1
    fi
    sleep 0.2
  done
  rxe_log "$dev up on $ifc $addr: $(timeout 10 rdma link show "$dev/1" 2>&1)"
}

# rxe_check [ADDR] [RXEDEV]
rxe_check() {
  local addr=${1:-} dev=${2:-rxe0} wait=${RXE_CHECK_WAIT:-60} ifc spid rc=0 src=0
  if [[ -z $addr ]]; then
    ifc=$(timeout 10 rdma link show "$dev/1" | sed -n 's/.* netdev \([^ ]*\).*/\1/p')
    addr=$(timeout 10 ip -4 -o addr show dev "$ifc" | awk '{split($4, a, "/"); print a[1]; exit}')
  fi
  [[ -n $addr ]] || { rxe_log "rxe_check: no address for $dev"; return 1; }
  timeout "$wait" rping -s -a "$addr" -C 3 >/dev/null 2>&1 &
  spid=$!
  rxe_retry "$wait" timeout 20 rping -c -a "$addr" -C 3 >/dev/null 2>&1 || rc=$?
  wait "$spid" || src=$?
  [[ $rc -ne 0 ]] || rc=$src
  if [[ $rc -eq 0 ]]; then rxe_log "rxe_check: rping over $dev to $addr ok"
  else rxe_log "rxe_check: rping over $dev to $addr FAILED ($rc)"; fi
  return "$rc"
}
