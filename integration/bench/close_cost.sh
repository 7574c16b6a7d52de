#!/bin/bash
# close_cost.sh — what closing a tracked connection costs after 10 and after
# 1,000,000 connections were made in the process (shim/LIFETIME.md: a close
# is O(1), whatever came before it).
#
# Unit level, not a million real connections: integration/bench/close_cost.c
# is linked against build/lib/librdmashim_core.a and drives the library's
# own entry points, shim_sock_adopt() (the tracking connect, accept and
# SCM_RIGHTS do: a new shim_sock per connection) and shim_sock_on_close()
# followed by close(), on fresh fds of one loopback connection on a
# whitelisted port (transports=tcp: nothing upgrades). A million real
# handshakes would take minutes here. Then, as a cross-check with real
# connections, build/progs/close_loop under LD_PRELOAD (transports=tcp):
# REAL_N (default 20,000) loopback connections made and closed, each
# client close() timed, without and with the shim. Prints medians of the
# timed closes (ns); a benchmark, not a test: exit 0 unless it failed to run.
#
#   integration/bench/close_cost.sh [N]    (default N=1000000; REAL_N=20000)
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
N=${1:-1000000}
CORE=$ROOT/build/lib/librdmashim_core.a
BIN=$ROOT/build/bench/close_cost

[[ -e $CORE ]] || { echo "close_cost: $CORE missing; run make first"; exit 1; }
mkdir -p "$ROOT/build/bench"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE $(find "$ROOT/shim" -type d -printf "-I%p ") -o "$BIN" \
  "$ROOT/integration/bench/close_cost.c" "$CORE" -libverbs -lrdmacm -ldl -lpthread || exit 1
echo "close_cost: $N connections tracked and closed through the library's entry points"
timeout -k 5 300 "$BIN" "$N" || exit 1

REAL_N=${REAL_N:-20000}
LOOP=$ROOT/build/progs/close_loop
[[ -x $LOOP && -e $ROOT/build/lib/librdmashim.so ]] || { echo "close_cost: $LOOP missing; run make first"; exit 1; }
echo "close_loop: $REAL_N real loopback connections, without the shim"
timeout -k 5 300 env -u LD_PRELOAD "$LOOP" "$REAL_N" || exit 1
# Every port is whitelisted: the program makes no other connection, and the
# kernel picks its listener's.
echo "close_loop: $REAL_N real loopback connections, with the shim (all ports whitelisted, transports=tcp)"
timeout -k 5 300 env LD_PRELOAD="$ROOT/build/lib/librdmashim.so" RDMASHIM_PORTS=1-65535 RDMASHIM_TRANSPORTS=tcp \
  "$LOOP" "$REAL_N" || exit 1
