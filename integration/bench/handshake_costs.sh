#!/bin/bash
# handshake_costs.sh: what each kind of kernel call that one shm upgrade
# makes costs on this machine, alone in a loop, in one process (no wake-up
# between processes in these figures). Read with upgrade_time.sh: its span
# holds three one-way wake-ups (HINT, COMMIT, the client's SWITCH frame) and
# a few tens of these calls, about half of them on the critical path.
# Then the floor under any upgrade of the issue's design (one message each
# way, each passing its end's TCP socket, checked against sock_diag; then
# both switch frames), run between two processes with no shim, its waits
# spinning and sleeping: what the kernel alone costs, with no bookkeeping.
# Prints
#   bench handshake_cost NAME  X us
#   bench upgrade_floor SHAPE spinning|sleeping median X us p90 Y us
# A benchmark, not a test: exit 0 unless it failed to run.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=$ROOT/build/bench/handshake_costs
mkdir -p "$ROOT/build/bench"
cc -std=gnu11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$BIN" "$ROOT/integration/bench/handshake_costs.c" || exit 1
timeout -k 5 300 "$BIN"
