#!/bin/bash
# t_shm_unpaid: a connection on shm whose every message has to wake its
# sleeping receiver with a bell costs more than TCP (shim/conn/transport.h,
# bell_bound_costs), and goes back to TCP by itself (io_tx.c,
# RDMASHIM_UNPAID_PERCENT); one whose receivers find the bytes by spinning
# stays on shm. conn_hold ping-pongs, one connection of 600 one-byte rounds,
# each round's letter checked where it comes back (a byte lost, doubled or
# moved at the hand-back fails the round), each end waiting 300 us before
# each of its writes (--think: requests far apart, a slow server), so that
# the receiver has gone to sleep when the bytes come. Without the wait a
# 1-byte ping-pong here turns around in about 12 us, mostly before the
# receiver arms, and 13-16 of 64 exchanges needed bells.
#
#  (a) RDMASHIM_SPIN_US=0 and RDMASHIM_SHM_BELL_LINE=0 at both ends:
#      every exchange is woken by bells on TCP both ways. One end traces io.unpaid and failover.unpaid, both ends
#      end on TCP (failover.rx_tcp), and every byte came back.
#  (b) the same with RDMASHIM_UNPAID_PERCENT=0: no hand-back, both
#      directions switched (rx.switch at both ends) and stay so.
#  (c) every wait spins for up to 2 ms (RDMASHIM_SPIN_ADAPT=0,
#      RDMASHIM_SPIN_US=2000): the bytes are found by spinning, no bell is
#      needed, no hand-back.
#  (d) after (a)'s hand-back both ends leave the connection to the kernel
#      (failover.kernel): its later calls cost what a connection that never
#      moved costs.
#  (e) RDMASHIM_SPIN_US=0 with the bell line (the default): every exchange
#      is woken by a bell on the line, both ends say the peer rings them
#      there (upgrade.done bell_line), and such exchanges are unpaid as
#      with bells on TCP (shim/PROTOCOL.md, "Bell line": where a system
#      call costs 1 us, they cost more than TCP's): one end hands the
#      connection back, both read TCP again, every byte came back. Before,
#      line bells were not counted, and pgbench -S with the line stayed on
#      shm at 0.78-0.89x TCP.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/conn_hold"
HOLD_FLAGS=(--think 300)

# run_case NAME VAR=VALUE...: one connection of 600 rounds; traces in $dir
run_case() {
  local name=$1
  shift
  port=$(free_port)
  dir=$WORK/$name
  mkdir -p "$dir"
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=0 RDMASHIM_TRACE=debug
    RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl" "$@")
  hold_seq "$name" 1 600
}

count() { cat "$dir"/trace.*.jsonl | grep -c "\"event\":\"$1\"" || true; }

run_case bells RDMASHIM_SPIN_US=0 RDMASHIM_SHM_BELL_LINE=0
check "(a) no spinning: one end handed the connection back as unpaid (io.unpaid $(count io.unpaid))" \
  test "$(count io.unpaid)" -ge 1
check "(a) its failover was the one on purpose (failover.unpaid $(count failover.unpaid))" \
  test "$(count failover.unpaid)" -ge 1
check "(a) both ends read TCP again (failover.rx_tcp $(count failover.rx_tcp) of 2)" \
  test "$(count failover.rx_tcp)" -eq 2
check "(a) the process stats count it" grep -q '"process.stats".*"unpaid":1' <(cat "$dir"/trace.*.jsonl)
check "(d) both ends left the connection to the kernel (failover.kernel $(count failover.kernel) of 2)" \
  test "$(count failover.kernel)" -eq 2
check "(a) windows of 64 exchanges were judged (io.exchanges $(count io.exchanges))" \
  test "$(count io.exchanges)" -ge 2

run_case bells_on_line RDMASHIM_SPIN_US=0
check "(e) both ends are rung on the bell line ($(cat "$dir"/trace.*.jsonl | grep -c '"bell_line":true') of 2)" \
  test "$(cat "$dir"/trace.*.jsonl | grep -c '"event":"upgrade.done".*"bell_line":true')" -eq 2
check "(e) windows of 64 exchanges were judged (io.exchanges $(count io.exchanges))" \
  test "$(count io.exchanges)" -ge 2
check "(e) line bells are unpaid too: one end handed the connection back (io.unpaid $(count io.unpaid))" \
  test "$(count io.unpaid)" -ge 1
check "(e) both ends read TCP again (failover.rx_tcp $(count failover.rx_tcp) of 2)" \
  test "$(count failover.rx_tcp)" -eq 2

run_case bells_kept RDMASHIM_SPIN_US=0 RDMASHIM_UNPAID_PERCENT=0
check "(b) RDMASHIM_UNPAID_PERCENT=0: both ends switched (rx.switch $(count rx.switch) of 2)" \
  test "$(count rx.switch)" -eq 2
check "(b) and no hand-back (failover.start $(count failover.start))" test "$(count failover.start)" -eq 0

run_case spinning RDMASHIM_SPIN_ADAPT=0 RDMASHIM_SPIN_US=2000
check "(c) spinning: both ends switched (rx.switch $(count rx.switch) of 2)" test "$(count rx.switch)" -eq 2
check "(c) and no hand-back (io.unpaid $(count io.unpaid), failover.start $(count failover.start))" \
  test "$(count io.unpaid)" -eq 0 -a "$(count failover.start)" -eq 0
finish
