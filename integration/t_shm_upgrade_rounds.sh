#!/bin/bash
# t_shm_upgrade_rounds: an upgrade finishes within the first few exchanges,
# whichever end makes its first call first. 50 connections one after the
# other (conn_hold --seq), each 3 one-byte ping-pong rounds, both ends under
# the shim with RDMASHIM_UPGRADE_AFTER_MS=0: every connection must switch
# both directions at both ends (rx.switch in both traces) before it closes.
# The server's first call often comes before the client opened its
# rendezvous; its back-off retry came 1 ms later, after these connections
# had ended (then 30 of 50 switched here). Bytes arriving since the miss
# now bring one retry at once. The count of exchanges, not a time, decides.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/conn_hold"

port=$(free_port)
dir=$WORK/rounds
mkdir -p "$dir"
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_TRACE=info
  RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
hold_seq server 50 3
n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"rx.switch"' || true)
check "50 connections of 3 rounds: both directions switched at both ends in each (rx.switch $n of 100)" \
  test "$n" -eq 100
finish
