#!/bin/bash
# t_doctor: `rdmashim doctor`, the checklist. On this machine (no RDMA
# device) it must exit non-zero and name the missing device with its fix
# (rdma_rxe, or the VM recipe); a low `ulimit -l` must be named, for a
# program without CAP_IPC_LOCK (this runs as root, which the limit does
# not bind); with a fixture device (RDMASHIM_SYSFS), rings small enough
# for this machine's RLIMIT_MEMLOCK and the rest in order
# nothing FAILs; a port down, no whitelisted port and a bad setting each
# FAIL by name.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TOOL=$ROOT/build/bin/rdmashim
need_built "$TOOL" "$LIB"
need_cmd setpriv
# shellcheck source=integration/health_fixtures.sh
. "$ROOT/integration/health_fixtures.sh"

# doctor NAME [VAR=V...]: runs doctor without CAP_IPC_LOCK (so RLIMIT_MEMLOCK
# binds it as it binds an ordinary user's program) under the current
# ulimit, output in $WORK/NAME.txt, status in RC.
doctor() {
  local name=$1
  shift
  env "$@" timeout 30 setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock "$TOOL" doctor \
    >"$WORK/$name.txt" 2>"$WORK/$name.err"
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

# 6. Bad usage.
timeout 30 "$TOOL" doctor extra >"$WORK/usage.out" 2>"$WORK/usage.err"
rc=$?
check "doctor extra: exit 2 with one line" test "$rc" = 2 -a "$(wc -l <"$WORK/usage.err")" = 1

finish
