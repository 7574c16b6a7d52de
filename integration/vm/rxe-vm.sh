#!/bin/bash
# rxe-vm.sh — run one script as root inside a throw-away QEMU VM whose kernel
# has Soft-RoCE (rdma_rxe), so that verbs / rdma_cm code can be tested on a
# machine with no RDMA hardware and no InfiniBand support in its own kernel.
#
#   integration/vm/rxe-vm.sh GUEST_SCRIPT [ARG...]  </dev/null
#
# GUEST_SCRIPT must be an absolute path on this machine and must not be under
# /tmp: the guest sees this machine's whole root filesystem (9p, read-write, at
# the same paths) but mounts a fresh tmpfs on /tmp. It runs as root with bash,
# chrooted into the shared root, with /proc /sys /dev /dev/pts /dev/shm /tmp /run
# and /dev/hugepages mounted, cwd /, stdin /dev/null, `ulimit -l unlimited`.
# Its stdout+stderr is the serial console, i.e. this script's stdout.
# The VM powers off when the script returns.
#
# Exit status: the guest script's exit status; 124 if RXEVM_TIMEOUT expired;
# 125 if the VM ended without reporting one (kernel panic, qemu error, ...);
# 2 for a usage error.
#
# Environment:
#   RXEVM_TIMEOUT   overall limit in seconds for the VM (default 900)
#   RXEVM_MEM       guest memory in MB (default 2048)
#   RXEVM_SMP       guest vCPUs (default 2)
#   RXEVM_ENV       "VAR=value VAR2=value2 ...": exported to the guest script
#                   (split on whitespace; values cannot contain whitespace)
#   RXEVM_LINK      give the guest an eth0 wired to another VM's eth0 through a
#                   QEMU socket netdev on 127.0.0.1 (nothing else is on the wire).
#                   Without it the guest has no NIC at all (use a dummy device).
#                   listen:PORT | connect:PORT  TCP stream; start the listener
#                       first. Measured: ~22 ms ib_send_lat (TCP delays).
#                   udp:MYPORT:PEERPORT  UDP datagrams, bind 127.0.0.1:MYPORT,
#                       send to 127.0.0.1:PEERPORT; no start order. Measured:
#                       ~0.25 ms ib_send_lat. Preferred (two-hosts.sh uses it).
#   RXEVM_MAC       MAC for eth0 (default 52:54:00:79:00:01 for listen,
#                   52:54:00:79:00:02 for connect, 52:54:00:79:xx:xx from
#                   MYPORT for udp)
#   RXEVM_HOSTNAME  guest hostname (default rxevm)
#   RXEVM_HUGEPAGES number of 2 MiB huge pages to reserve in the guest (default 0;
#                   hugetlbfs is mounted on /dev/hugepages either way)
#   RXEVM_KVER      kernel version to boot (default: newest in /lib/modules
#                   that has rdma_rxe and a /boot/vmlinuz-*)
#
# Needs (Debian 12): qemu-system-x86 linux-image-amd64 busybox-static kmod
# cpio; in the shared root for the guest: rdma-core ibverbs-providers
# ibverbs-utils rdmacm-utils perftest iproute2.
# KVM is not used (nested KVM hangs at boot here); this is TCG emulation.
set -euo pipefail

prog=rxe-vm
die() { echo "$prog: $*" >&2; exit 2; }

[[ $# -ge 1 ]] || die "usage: rxe-vm.sh GUEST_SCRIPT [ARG...]"
guest=$1; shift
# The guest mounts a fresh tmpfs on /tmp. A guest script under /tmp (a
# checkout there, as a CI clone may be) keeps its top directory: the guest
# binds it back into the new /tmp.
keep_tmp=
case $guest in
  /tmp) die "guest script must be a file: $guest" ;;
  /tmp/*) keep_tmp=${guest#/tmp/}; keep_tmp=${keep_tmp%%/*} ;;
  /*) ;;
  *) die "guest script must be an absolute path: $guest" ;;
esac
[[ -f $guest && -r $guest ]] || die "no such readable file: $guest"

limit=${RXEVM_TIMEOUT:-900}
mem=${RXEVM_MEM:-2048}
smp=${RXEVM_SMP:-2}
hugepages=${RXEVM_HUGEPAGES:-0}
hostname=${RXEVM_HOSTNAME:-rxevm}
link=${RXEVM_LINK:-}
for v in limit mem smp hugepages; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number: ${!v}"
done
[[ $hostname =~ ^[A-Za-z0-9.-]+$ ]] || die "bad RXEVM_HOSTNAME: $hostname"

# --- kernel -----------------------------------------------------------------
kver=${RXEVM_KVER:-}
if [[ -z $kver ]]; then
  while read -r d; do
    if [[ -f /boot/vmlinuz-$d ]] &&
       compgen -G "/lib/modules/$d/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*" >/dev/null; then
      kver=$d
    fi
  done < <(find /lib/modules -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V)
fi
[[ -n $kver && -f /boot/vmlinuz-$kver ]] || die "no kernel with rdma_rxe found (install linux-image-amd64)"

# --- network ----------------------------------------------------------------
nic=(-nic none)
case $link in
  "") ;;
  listen:[0-9]*)
    nic=(-netdev "socket,id=wire,listen=127.0.0.1:${link#listen:}"
         -device "virtio-net-pci,netdev=wire,mac=${RXEVM_MAC:-52:54:00:79:00:01}") ;;
  connect:[0-9]*)
    nic=(-netdev "socket,id=wire,connect=127.0.0.1:${link#connect:}"
         -device "virtio-net-pci,netdev=wire,mac=${RXEVM_MAC:-52:54:00:79:00:02}") ;;
  udp:[0-9]*:[0-9]*)
    IFS=: read -r _ myport peerport <<< "$link"
    nic=(-netdev "socket,id=wire,udp=127.0.0.1:$peerport,localaddr=127.0.0.1:$myport"
         -device "virtio-net-pci,netdev=wire,mac=${RXEVM_MAC:-$(printf '52:54:00:79:%02x:%02x' $((myport >> 8 & 255)) $((myport & 255)))}") ;;
  *) die "RXEVM_LINK must be listen:PORT, connect:PORT or udp:MYPORT:PEERPORT: $link" ;;
esac

work=$(mktemp -d -t rxevm.XXXXXX)
qpid=
# shellcheck disable=SC2317  # invoked by trap
cleanup() {
  if [[ -n $qpid ]]; then kill "$qpid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- initramfs: busybox, the modules, /init and the guest's parameters -------
ir=$work/initramfs
mkdir -p "$ir"/{bin,proc,sys,dev,host,mods,rxevm}
cp /bin/busybox "$ir/bin/busybox"
for a in sh mount umount mkdir insmod cat cp chroot hostname ln rm sync poweroff; do
  ln -s busybox "$ir/bin/$a"
done
: > "$ir/mods/order"
# crc32_generic before rdma_rxe: rxe asks the crypto API for "crc32" and there
# is no modprobe in the initramfs to load it on demand.
for m in virtio_pci virtio_net 9pnet_virtio 9p crc32_generic rdma_rxe rdma_ucm dummy veth; do
  while read -r f; do
    b=$(basename "$f"); b=${b%.xz}; b=${b%.zst}; b=${b%.gz}
    grep -qxF "$b" "$ir/mods/order" && continue
    case $f in
      *.xz)  xz -dc "$f" > "$ir/mods/$b" ;;
      *.zst) zstd -qdc "$f" > "$ir/mods/$b" ;;
      *.gz)  gzip -dc "$f" > "$ir/mods/$b" ;;
      *)     cp "$f" "$ir/mods/$b" ;;
    esac
    echo "$b" >> "$ir/mods/order"
  done < <(modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }')
done

# Parameters for the guest script, sourced by run.sh inside the guest.
{
  read -ra words <<< "${RXEVM_ENV:-}"
  for w in "${words[@]}"; do
    [[ $w =~ ^([A-Za-z_][A-Za-z0-9_]*)=(.*)$ ]] || die "RXEVM_ENV: not VAR=value: $w"
    printf 'export %s=%q\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  done
  printf 'rxevm_guest=%q\n' "$guest"
  printf 'rxevm_args=('; [[ $# -gt 0 ]] && printf ' %q' "$@"; printf ' )\n'
} > "$ir/rxevm/env"
printf '%s\n' "$keep_tmp" > "$ir/rxevm/keep_tmp"
echo "$hostname" > "$ir/rxevm/hostname"
echo "$hugepages" > "$ir/rxevm/hugepages"

# Runs inside the chroot (bash from the shared root).
cat > "$ir/rxevm/run.sh" <<'EOF'
#!/bin/bash
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LC_ALL=C.UTF-8
ulimit -l unlimited
ulimit -n 65536 2>/dev/null || true
ip link set lo up
# shellcheck disable=SC1091
. /tmp/.rxevm/env
cd /
bash "$rxevm_guest" "${rxevm_args[@]}" </dev/null 2>&1
rc=$?
printf '\nRXEVM-EXIT=%d\n' "$rc"
EOF

# PID 1 (busybox sh).
cat > "$ir/init" <<'EOF'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /mods/order); do insmod "/mods/$m" || echo "rxevm: insmod $m failed"; done
hostname "$(cat /rxevm/hostname)"
echo "$(cat /rxevm/hugepages)" > /proc/sys/vm/nr_hugepages
H=/host
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 hostroot $H; then
  mount -t proc proc $H/proc
  mount -t sysfs sysfs $H/sys
  mount -t devtmpfs devtmpfs $H/dev
  mkdir -p $H/dev/pts $H/dev/shm $H/dev/hugepages
  mount -t devpts -o newinstance,ptmxmode=0666 devpts $H/dev/pts
  rm -f $H/dev/ptmx; ln -s pts/ptmx $H/dev/ptmx
  mount -t tmpfs -o mode=1777 shm $H/dev/shm
  mount -t hugetlbfs hugetlbfs $H/dev/hugepages
  # A /run of its own, as on a booted host: the shim's stats area there
  # needs shared mappings, which the 9p root does not give.
  mount -t tmpfs -o mode=0755 run $H/run
  keep=$(cat /rxevm/keep_tmp)
  if [ -n "$keep" ]; then mkdir -p /keep && mount -o bind "$H/tmp/$keep" /keep; fi
  mount -t tmpfs -o mode=1777 tmp $H/tmp
  if [ -n "$keep" ]; then mkdir -p "$H/tmp/$keep" && mount -o bind /keep "$H/tmp/$keep"; fi
  mkdir -p $H/tmp/.rxevm
  cp /rxevm/env /rxevm/run.sh $H/tmp/.rxevm/
  chroot $H /bin/bash /tmp/.rxevm/run.sh
else
  echo "rxevm: cannot mount the host root over 9p"
fi
sync
poweroff -f
EOF
chmod +x "$ir/init" "$ir/rxevm/run.sh"
(cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"

# --- boot -------------------------------------------------------------------
# The console goes to a file (no tty, no stdin needed); tail streams it.
console=$work/console.log
: > "$console"
timeout -k 10 "$limit" qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -smp "$smp" -m "$mem" \
  -display none -monitor none -parallel none -no-user-config \
  -chardev "file,id=con,path=$console,append=on" -serial chardev:con \
  -no-reboot "${nic[@]}" \
  -kernel "/boot/vmlinuz-$kver" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 panic=-1 loglevel=3 rdinit=/init" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=passthrough,id=hostroot,multidevs=remap \
  </dev/null &
qpid=$!
# In the background too, so that INT/TERM are handled while we wait.
tail -n +1 -f --pid="$qpid" "$console" | sed -u 's/\r$//' &
tpid=$!
rc=0
wait "$qpid" || rc=$?
qpid=
wait "$tpid" || true

if [[ $rc -eq 124 || $rc -eq 137 ]]; then
  echo "$prog: timed out after ${limit}s (RXEVM_TIMEOUT)" >&2
  exit 124
fi
marker=$(tr -d '\r' < "$console" | sed -n 's/^RXEVM-EXIT=\([0-9][0-9]*\)$/\1/p' | tail -n 1)
if [[ -z $marker ]]; then
  echo "$prog: the VM ended without an exit status (qemu status $rc)" >&2
  exit 125
fi
exit "$marker"
