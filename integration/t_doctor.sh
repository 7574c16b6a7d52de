#!/bin/bash
# t_doctor: `rdmashim doctor`, the checklist. On this machine (no RDMA
# device) it must exit non-zero and name the missing device with its fix
# (rdma_rxe, or the VM recipe); a low `ulimit -l` must be named, for a
# program without CAP_IPC_LOCK (this runs as root, which the limit does
# not bind); with a fixture device (RDMASHIM_SYSFS), rings small enough
# for this machine's RLIMIT_MEMLOCK and the rest in order
# nothing FAILs; a port down, no whitelisted port and a bad setting each
# FAIL by name; huge pages short of a pool chunk WARN with the count; a
# library not found FAILs. With PEER: a name that does not resolve is one FAIL line
# (in a network namespace made here, so no query leaves); 127.0.0.1 and
# localhost go over lo, which carries no RoCE (FAIL gid by name); in a
# namespace with a veth pair (192.168.77.1/24 on v0), the fixture's RoCE
# v2 GID for that address PASSes, on a port DOWN it FAILs, a RoCE v1 GID
# alone WARNs, none FAILs naming v0; rdma_cm then FAILs plainly on this
# machine (no /dev/infiniband/rdma_cm) with its fix. The VM
# (integration/vm/guest-rdma-one.sh, part doctor) shows it passing.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TOOL=$ROOT/build/bin/rdmashim
need_built "$TOOL" "$LIB"
need_cmd setpriv
# shellcheck source=integration/health_fixtures.sh
. "$ROOT/integration/health_fixtures.sh"

# doctor NAME [NS] [VAR=V...] [-- PEER]: runs doctor (with PEER if given)
# without CAP_IPC_LOCK (so RLIMIT_MEMLOCK binds it as it binds an ordinary
# user's program) under the current ulimit, output in $WORK/NAME.txt,
# status in RC; NS: inside "${NS[@]}" (a network namespace).
doctor() {
  local name=$1 vars=() peer=() ns=()
  shift
  if [[ ${1:-} == NS ]]; then ns=("${NS[@]}"); shift; fi
  while (($#)); do
    if [[ $1 == -- ]]; then peer=("${@:2}"); break; fi
    vars+=("$1"); shift
  done
  env "${vars[@]}" timeout 30 "${ns[@]}" setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock "$TOOL" doctor \
    "${peer[@]}" >"$WORK/$name.txt" 2>"$WORK/$name.err"
  RC=$?
}

# has NAME REGEX: a line of NAME's output matches (shown when not).
has() {
  if grep -qE -- "$2" "$WORK/$1.txt"; then ok "$1: /$2/"; else
    not_ok "$1: /$2/"; sed 's/^/    /' "$WORK/$1.txt"
  fi
}
hasnt() {
  if ! grep -qE -- "$2" "$WORK/$1.txt"; then ok "$1: no /$2/"; else
    not_ok "$1: no /$2/"; sed 's/^/    /' "$WORK/$1.txt"
  fi
}

F=$WORK/fixtures
rxe_tree "$F/rxe"

# 1. This machine, as it is.
if [[ -d /sys/class/infiniband ]] && [[ -n $(ls /sys/class/infiniband) ]]; then
  log "this machine has RDMA devices; the no-device case runs on an empty fixture instead"
  mkdir -p "$F/none"
  nodev=(RDMASHIM_SYSFS="$F/none")
else
  nodev=()
fi
# RDMASHIM_RING_KB=64 keeps what the pool pins under this machine's
# RLIMIT_MEMLOCK (8 MiB here, and no raising it without root's
# CAP_SYS_RESOURCE), so that only the device FAILs.
doctor nodev "${nodev[@]}" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64
echo "$RC" >"$WORK/nodev.rc"
same "no device: exit" 1 "$(cat "$WORK/nodev.rc")"
has nodev '^FAIL  device .*no RDMA device'
has nodev '^FAIL  device .*rdma_rxe'
has nodev '^FAIL  device .*integration/vm/README.md'
has nodev '^PASS  rdma-core  libibverbs'
has nodev '^PASS  library '
has nodev '^doctor: 1 fail'

# 2. A low ulimit -l: named, with the fix.
(ulimit -l 64; doctor lowlock RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000; echo "$RC" >"$WORK/lowlock.rc")
same "ulimit -l 64: exit" 1 "$(cat "$WORK/lowlock.rc")"
has lowlock '^FAIL  memlock +RLIMIT_MEMLOCK 64 KiB is below .*ulimit -l'
# A smaller ring needs less: the message follows RDMASHIM_RING_KB.
(ulimit -l 64; doctor lowlock-ring RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64)
has lowlock-ring 'RDMASHIM_RING_KB=64'

# 3. A fixture device, rings that fit the limit, a whitelist: nothing FAILs.
doctor good RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_TRANSPORTS=rdma RDMASHIM_RING_KB=64
same "fixture device, all set: exit" 0 "$RC"
has good '^PASS  port +rxe0 port 1 is ACTIVE'
has good '^PASS  memlock +RLIMIT_MEMLOCK .* holds at least [0-9]+ connections at RDMASHIM_RING_KB=64'
has good '^PASS  ports +RDMASHIM_PORTS=5000'
hasnt good '^FAIL'

# 4. Its port down: no ACTIVE port is a FAIL, and the port is named.
rxe_tree "$F/down"
put "$F/down/class/infiniband/rxe0/ports/1/state" "1: DOWN"
doctor down RDMASHIM_SYSFS="$F/down" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64
same "port down: exit" 1 "$RC"
has down '^WARN  port +rxe0 port 1: port is DOWN, not ACTIVE'
has down '^FAIL  device +no ACTIVE port among 1'

# 5. Nothing whitelisted, and a bad value.
doctor noports RDMASHIM_SYSFS="$F/rxe" RDMASHIM_RING_KB=64
same "no RDMASHIM_PORTS: exit" 1 "$RC"
has noports '^FAIL  ports +RDMASHIM_PORTS is not set'
doctor badcfg RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=3
has badcfg '^FAIL  config .*RDMASHIM_RING_KB'
has badcfg '^PASS  library '
doctor shmonly RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_TRANSPORTS=shm RDMASHIM_RING_KB=64
has shmonly '^WARN  transports'

# 5b. Huge pages (under RDMASHIM_SYSFS, as the kernel shows them): none
# free, fewer than a pool chunk takes, enough, and the pool's off; the
# library not found.
HP=kernel/mm/hugepages/hugepages-2048kB/free_hugepages
for hp in 0:none 1:few 64:enough; do
  rxe_tree "$F/hp-${hp#*:}"
  put "$F/hp-${hp#*:}/$HP" "${hp%%:*}"
  doctor "hp-${hp#*:}" RDMASHIM_SYSFS="$F/hp-${hp#*:}" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=1024
done
has hp-none '^WARN  hugepages +0 free 2 MiB page\(s\), short of the 9 a pool chunk takes \(8 connections at RDMASHIM_RING_KB=1024\).*vm.nr_hugepages'
has hp-few '^WARN  hugepages +1 free 2 MiB page\(s\), short of the 9'
has hp-enough '^PASS  hugepages +64 free 2 MiB pages: 7 pool chunk\(s\) of 8 connections'
doctor hp-off RDMASHIM_SYSFS="$F/hp-enough" RDMASHIM_PORTS=5000 RDMASHIM_HUGE_PAGES=0
has hp-off '^PASS  hugepages +off \(RDMASHIM_HUGE_PAGES=0\)'
doctor hp-missing RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000
has hp-missing '^WARN  hugepages +no 2 MiB huge pages here'
doctor nolib RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 RDMASHIM_LIB=/nonexistent/librdmashim.so
same "library not found: exit" 1 "$RC"
has nolib '^FAIL  library .*/nonexistent/librdmashim.so'

# 6. Bad usage: two peers, an unknown option.
for bad in "a b" "--bogus" "-x peer"; do
  # shellcheck disable=SC2086
  timeout 30 "$TOOL" doctor $bad >"$WORK/usage.out" 2>"$WORK/usage.err"
  rc=$?
  check "doctor $bad: exit 2 with one line" test "$rc" = 2 -a "$(wc -l <"$WORK/usage.err")" = 1
done

# 7. PEER. Over lo (127.0.0.1, localhost): resolved, routed, and the GID
# FAILs by name (lo carries no RoCE); rdma_cm FAILs plainly here.
doctor lo RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- 127.0.0.1
same "doctor 127.0.0.1: exit" 1 "$RC"
has lo '^PASS  peer +127\.0\.0\.1$'
has lo '^PASS  route +127\.0\.0\.1 leaves from 127\.0\.0\.1 \(lo\)'
has lo '^FAIL  gid +127\.0\.0\.1 is on lo, which carries no RoCE'
if [[ ! -e /dev/infiniband/rdma_cm ]]; then
  has lo '^FAIL  rdma_cm +no rdma_cm .*modprobe rdma_ucm rdma_rxe.*integration/vm/README.md'
fi
has lo '^doctor: [0-9]+ fail, [0-9]+ warn: this host can not carry connections to the peer'
doctor localhost RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- localhost
has localhost '^PASS  peer +localhost is (127\.0\.0\.1|::1)$'
# No device at all: the device line and the peer's lines say so.
doctor lo-nodev "${nodev[@]}" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- 127.0.0.1
same "doctor 127.0.0.1 without a device: exit" 1 "$RC"
has lo-nodev '^FAIL  device .*no RDMA device'

# In a network namespace of the test's own (no query leaves it): a name
# that does not resolve, and a veth address's GID in the fixture.
if unshare -n true 2>/dev/null && unshare -n ip link add v0 type veth peer name v1 2>/dev/null; then
  NS=(unshare -n sh -c 'ip link set lo up && ip link add v0 type veth peer name v1 &&
    ip addr add 192.168.77.1/24 dev v0 && ip link set v0 up && ip link set v1 up && exec "$@"' ns)
  doctor noname NS RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- no-such-host.invalid
  same "doctor of a name that does not resolve: exit" 1 "$RC"
  has noname "^FAIL  peer +'no-such-host.invalid' does not resolve \(.*\): give its address"
  hasnt noname '^(PASS|FAIL)  (route|gid|rdma_cm)'
  has noname '^doctor: '
  # gid_tree ROOT TYPE [STATE]: the rxe fixture with GID 1 192.168.77.1's on v0.
  gid_tree() {
    rxe_tree "$1"
    local p=$1/class/infiniband/rxe0/ports/1
    put "$p/gids/1" "0000:0000:0000:0000:0000:ffff:c0a8:4d01"
    put "$p/gid_attrs/types/1" "$2"
    put "$p/gid_attrs/ndevs/1" v0
    put "$1/class/net/v0/mtu" 1500
    [[ -z ${3:-} ]] || put "$p/state" "$3"
  }
  gid_tree "$F/v2" "RoCE v2"
  doctor v2 NS RDMASHIM_SYSFS="$F/v2" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- 192.168.77.2
  has v2 '^PASS  route +192\.168\.77\.2 leaves from 192\.168\.77\.1 \(v0\)'
  has v2 "^PASS  gid +rxe0 port 1 GID 1 is 192\.168\.77\.1's RoCE v2 GID \(v0\)"
  has v2 '^WARN  mtu +rxe0 port 1: active MTU unknown, v0 MTU known'
  if [[ ! -e /dev/infiniband/rdma_cm ]]; then
    same "doctor 192.168.77.2 with its GID, no rdma_cm: exit" 1 "$RC"
    has v2 '^FAIL  rdma_cm +no rdma_cm'
  fi
  gid_tree "$F/v2down" "RoCE v2" "1: DOWN"
  doctor v2down NS RDMASHIM_SYSFS="$F/v2down" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- 192.168.77.2
  has v2down "^FAIL  gid +192\.168\.77\.1's RoCE v2 GID is on rxe0 port 1 \(GID 1\), which is DOWN: bring v0's link up"
  gid_tree "$F/v1" "IB/RoCE v1"
  doctor v1 NS RDMASHIM_SYSFS="$F/v1" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- 192.168.77.2
  has v1 '^WARN  gid +192\.168\.77\.1 has only a IB/RoCE v1 GID .*cma_roce_mode -d rxe0 -p 1 -m 2'
  doctor nogid NS RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- 192.168.77.2
  has nogid '^FAIL  gid +no port has a RoCE v2 GID for 192\.168\.77\.1: v0 has no RDMA device over it'
  doctor noroute NS RDMASHIM_SYSFS="$F/rxe" RDMASHIM_PORTS=5000 RDMASHIM_RING_KB=64 -- 10.99.0.1
  same "doctor of an address with no route: exit" 1 "$RC"
  has noroute '^FAIL  route +no route to 10\.99\.0\.1 \(Network is unreachable\)'
else
  log "skipped the namespace cases: unshare -n or a veth pair is not available here"
fi

finish
