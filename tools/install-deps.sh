#!/bin/bash
# Installs the Debian packages the build and the tests need, if any is missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail
packages=(build-essential pkg-config check uthash-dev libibverbs-dev librdmacm-dev
	rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
	redis-server redis-tools iperf3 sockperf iproute2 python3
	qemu-system-x86 linux-image-amd64 busybox-static kmod cpio zstd xz-utils
	curl wget socat nginx-light lighttpd memcached libmemcached-tools postgresql
	python3-requests python3-pymemcache mosquitto mosquitto-clients time
	apache2 apache2-utils haproxy wrk
	openssh-server openssh-client rsync)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
	echo "make deps: missing packages; run as root:" >&2
	echo "  apt-get update && $cmd" >&2
	exit 1
fi
echo "make deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The postinst of redis-server, nginx-light, lighttpd, memcached,
# postgresql, mosquitto and apache2 may start a system instance (6379, 80,
# 11211, 5432, 1883; apache2 also wants 80); the tests start their own
# servers on other ports, so those instances are harmless. haproxy's
# Debian configuration listens nowhere; wrk is a command only.
# integration/bench/pgbench.sh starts its own PostgreSQL cluster in a
# temporary directory and never touches the system one.
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
