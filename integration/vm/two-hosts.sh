#!/bin/bash
# two-hosts.sh — two VMs as two RoCE hosts on one virtual wire.
#
#   integration/vm/two-hosts.sh GUEST_SCRIPT [GUEST_SCRIPT_B]  </dev/null
#
# The wire is a QEMU socket netdev on 127.0.0.1 (nothing but the two VMs is on
# it): by default UDP between two free local ports (rxe-vm.sh RXEVM_LINK=udp:..,
# ~0.25 ms ib_send_lat); with RXEVM_WIRE=tcp, host A listens and host B
# connects on a free port (~22 ms ib_send_lat: avoid). Each runs its guest
# script (B runs GUEST_SCRIPT_B if given, else the same one) through rxe-vm.sh
# with these variables in its environment:
#   ROLE=a|b  IFACE=eth0  ADDR=192.168.79.1|192.168.79.2  PREFIX=24
#   PEER=<the other host's address>
# plus whatever RXEVM_ENV holds. The guest brings the link up itself
# (rxe_up "$IFACE" "$ADDR/$PREFIX" from guest-lib.sh).
# Waits for both, prints both outputs prefixed with [A] / [B], and exits 0 only
# if both guests exited 0 (else the first nonzero status, A's first). If one VM
# fails to start, the other is stopped. RXEVM_TIMEOUT etc. apply to each VM.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: two-hosts.sh GUEST_SCRIPT [GUEST_SCRIPT_B]" >&2; exit 2; }
script_a=$1
script_b=${2:-$1}
addr_a=192.168.79.1
addr_b=192.168.79.2
# Two TCG VMs share this machine's cores: default to one vCPU each.
export RXEVM_SMP=${RXEVM_SMP:-1}

wire=${RXEVM_WIRE:-udp}
case $wire in udp|tcp) ;; *) echo "two-hosts: RXEVM_WIRE must be udp or tcp" >&2; exit 2 ;; esac

listening() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
port_busy() { ss -Htuan "sport = :$1" 2>/dev/null | grep -q .; }

# Free ports on 127.0.0.1: PORT (and PORT+1 for udp).
port=''
for _ in $(seq 50); do
  p=$((20000 + RANDOM % 40000))
  if ! port_busy "$p" && ! port_busy $((p + 1)); then port=$p; break; fi
done
[[ -n $port ]] || { echo "two-hosts: no free port found" >&2; exit 2; }
if [[ $wire == udp ]]; then
  link_a=udp:$port:$((port + 1)) link_b=udp:$((port + 1)):$port
else
  link_a=listen:$port link_b=connect:$port
fi

logs=$(mktemp -d -t rxevm-two.XXXXXX)
pid_a='' pid_b=''
# shellcheck disable=SC2317  # invoked by trap
cleanup() {
  local p
  for p in $pid_a $pid_b; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

RXEVM_LINK=$link_a RXEVM_MAC=52:54:00:79:00:01 RXEVM_HOSTNAME=host-a \
RXEVM_ENV="ROLE=a IFACE=eth0 ADDR=$addr_a PREFIX=24 PEER=$addr_b ${RXEVM_ENV:-}" \
  "$here/rxe-vm.sh" "$script_a" > "$logs/a" 2>&1 </dev/null &
pid_a=$!

# Over tcp, B can only connect once A's qemu listens.
deadline=$((SECONDS + 60))
until [[ $wire == udp ]] || listening "$port"; do
  if ! kill -0 "$pid_a" 2>/dev/null || (( SECONDS >= deadline )); then
    echo "two-hosts: VM A did not start listening on 127.0.0.1:$port" >&2
    sed 's/^/[A] /' "$logs/a"
    exit 1
  fi
  sleep 0.2
done

RXEVM_LINK=$link_b RXEVM_MAC=52:54:00:79:00:02 RXEVM_HOSTNAME=host-b \
RXEVM_ENV="ROLE=b IFACE=eth0 ADDR=$addr_b PREFIX=24 PEER=$addr_a ${RXEVM_ENV:-}" \
  "$here/rxe-vm.sh" "$script_b" > "$logs/b" 2>&1 </dev/null &
pid_b=$!

rc_a='' rc_b=''
while [[ -z $rc_a || -z $rc_b ]]; do
  done_pid='' rc=0
  # shellcheck disable=SC2086  # the pids still running, one word each
  wait -n -p done_pid $pid_a $pid_b || rc=$?
  if [[ $done_pid == "$pid_a" ]]; then rc_a=$rc; pid_a=; who=A
  elif [[ $done_pid == "$pid_b" ]]; then rc_b=$rc; pid_b=; who=B
  else continue
  fi
  echo "two-hosts: VM $who exited with status $rc after ${SECONDS}s" >&2
  # A VM that failed without a guest status (125: qemu or boot failure) leaves
  # its peer waiting on a dead wire: stop the peer.
  if [[ $rc -eq 125 ]]; then
    for p in $pid_a $pid_b; do kill "$p" 2>/dev/null || true; done
  fi
done

sed 's/^/[A] /' "$logs/a"
sed 's/^/[B] /' "$logs/b"
echo "two-hosts: A=$rc_a B=$rc_b"
[[ $rc_a -ne 0 ]] && exit "$rc_a"
exit "$rc_b"
