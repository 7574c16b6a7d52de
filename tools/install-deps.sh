#!/bin/bash
# Installs the Debian packages the build and the tests need, if any is missing.
# As root it runs apt-get; otherwise it prints the exact command and fails.
set -euo pipefail
packages=(build-essential pkg-config check uthash-dev zlib1g-dev libibverbs-dev librdmacm-dev
	rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
	redis-server redis-tools iperf3 sockperf qperf ucx-utils gnuplot-nox iproute2 python3
	qemu-system-x86 linux-image-amd64 busybox-static kmod cpio zstd xz-utils
	curl wget socat nginx-light lighttpd memcached libmemcached-tools postgresql
	python3-requests python3-pymemcache mosquitto mosquitto-clients time
	apache2 apache2-utils haproxy wrk strace
	openssh-server openssh-client rsync groff-base man-db
	mariadb-server mariadb-client nodejs nghttp2-client python3-grpcio)
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
# postgresql, mosquitto, apache2 and mariadb-server would start a system
# instance (6379, 80, 11211, 5432, 1883, 3306; apache2 and nginx both want
# 80, and the second one's failed start fails its install): no service starts while we
# install (policy-rc.d, only if the host has none of its own). The tests
# start their own servers on other ports.
# integration/bench/pgbench.sh starts its own PostgreSQL cluster in a
# temporary directory and never touches the system one.
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 755 /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
