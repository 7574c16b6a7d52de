#!/bin/bash
# guest-rdma-bench.sh — guest script for integration/bench/rdma-vm.sh: rxe on
# dummy0 (192.168.77.1), then latency, streaming, registration and rsocket
# figures (see rdma-vm.sh). Prints "figure:" lines; never fails on a number.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
RSP=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
addr=192.168.77.1
T=/tmp/bench
mkdir -p "$T"
echo 7300 > "$T/port"
# next_port: a fresh port for each run (the figure functions run in command
# substitutions, so a plain variable would not carry over).
next_port() { port=$(( $(cat "$T/port") + 1 )); echo "$port" > "$T/port"; }

echo "== guest: $(uname -r), $(nproc) cpu, hugepages $(cat /proc/sys/vm/nr_hugepages)"
rxe_up dummy0 "$addr/24" || exit 1

# listening PORT [MODE]: rsocket listens in the rdma_cm port space, where ss
# does not look: give its server a fixed head start instead.
listening() {
  local i
  if [[ ${2:-} == rsocket ]]; then sleep 3; return 0; fi
  for ((i = 0; i < 100; i++)); do ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0; sleep 0.2; done
  return 1
}
# run MODE CMD...: MODE plain | shim | rsocket
run() {
  local mode=$1; shift
  case $mode in
    plain) "$@" ;;
    shim) env RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=rdma RDMASHIM_TRACE=info \
              RDMASHIM_TRACE_FILE="$T/trace.%p.jsonl" LD_PRELOAD="$LIB" "$@" ;;
    rsocket) env LD_PRELOAD="$RSP" "$@" ;;
  esac
}
strip() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }

sockperf_pp() { # MODE -> median usec or "failed"
  local mode=$1 sp rc=0
  next_port
  run "$mode" timeout 60 sockperf sr --tcp -i "$addr" -p "$port" > "$T/sp.$mode.server" 2>&1 &
  sp=$!
  listening "$port" "$mode" || { kill "$sp" 2>/dev/null; echo "failed(no listener)"; return; }
  # --pre-warmup-wait: a process's first RDMA connection runs on TCP while
  # its warm-up (device, pool) runs; the figure is of the switched stream.
  run "$mode" timeout 40 sockperf ping-pong --tcp -i "$addr" -p "$port" -t 5 -m 64 --pre-warmup-wait 3 > "$T/sp.$mode" 2>&1 || rc=$?
  kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
  local p50
  p50=$(strip "$T/sp.$mode" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | head -n 1)
  if [[ $rc -eq 0 && -n $p50 ]]; then echo "$p50"; else echo "failed(status $rc: $(strip "$T/sp.$mode" | grep -iE 'error|fail' | head -n 1))"; fi
}

iperf() { # MODE -> receiver Mbit/s or "failed"
  local mode=$1 sp rc=0
  next_port
  run "$mode" timeout 60 iperf3 -s -B "$addr" -p "$port" -1 > "$T/ip.$mode.server" 2>&1 &
  sp=$!
  listening "$port" "$mode" || { kill "$sp" 2>/dev/null; echo "failed(no listener)"; return; }
  run "$mode" timeout 40 iperf3 -c "$addr" -p "$port" -t 5 > "$T/ip.$mode" 2>&1 || rc=$?
  kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
  local bw
  bw=$(grep receiver "$T/ip.$mode" | awk '{for (i = 1; i < NF; i++) if ($(i+1) ~ /bits\/sec/) print $i, $(i+1)}' | tail -n 1)
  if [[ $rc -eq 0 && -n $bw ]]; then echo "$bw"; else echo "failed(status $rc: $(grep -iE 'error' "$T/ip.$mode" | head -n 1))"; fi
}

redis_run() { # MODE -> "SET x rps, GET y rps" or "failed"
  local mode=$1 sp rc=0
  next_port
  run "$mode" timeout 60 redis-server --bind "$addr" --port "$port" --save '' --appendonly no \
    --protected-mode no > "$T/rd.$mode.server" 2>&1 &
  sp=$!
  listening "$port" "$mode" || { kill "$sp" 2>/dev/null; echo "failed(no listener)"; return; }
  run "$mode" timeout 40 redis-benchmark -h "$addr" -p "$port" -n 5000 -c 10 -t get,set -q > "$T/rd.$mode" 2>&1 || rc=$?
  kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
  local r
  r=$(tr '\r' '\n' < "$T/rd.$mode" | grep -E '^(SET|GET): .*requests per second' | sed 's/ requests per second.*//' |
      tr '\n' ' ')
  if [[ $rc -eq 0 && $r == *SET*GET* ]]; then echo "$r rps"; else echo "failed(status $rc: $(tr '\r' '\n' < "$T/rd.$mode" | grep -iE 'error|refused' | head -n 1))"; fi
}

# RDMA_BENCH_PARTS picks sections (default all): latency streaming registration rsocket
parts=" ${RDMA_BENCH_PARTS:-latency,streaming,registration,rsocket} "; parts=${parts//,/ }
want() { [[ $parts == *" $1 "* ]]; }

if want latency; then
echo "== 1. latency, 64 B"
echo "figure: sockperf ping-pong median, plain TCP: $(sockperf_pp plain) us"
echo "figure: sockperf ping-pong median, shim over rdma, default RDMASHIM_SPIN_US=50: $(sockperf_pp shim) us"
# ib_send_lat busy-polls without a bound; under TCG a round trip takes tens
# of microseconds, so the shim is given a spin bound to match (1 ms).
send_lat() {
  timeout 60 ib_send_lat -d rxe0 -s 64 -F -n 5000 > "$T/lat.server" 2>&1 &
  local sp=$!
  rxe_retry 30 timeout 60 ib_send_lat -d rxe0 -s 64 -F -n 5000 "$addr" > "$T/lat.client" 2>&1
  wait "$sp"
  awk '$1 == 64 {print $5}' "$T/lat.client"
}
# Alternated rounds: times under emulation drift (ib_send_lat alone moves
# between 12 and 24 us from run to run here), so each round is printed and
# the figure is the ratio of the two medians over the rounds.
shims="" raws=""
for round in 1 2 3 4 5; do
  a=$(RDMASHIM_SPIN_US=1000 sockperf_pp shim) b=$(send_lat)
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }')
  echo "figure: round $round: sockperf ping-pong median through the shim (spin 1 ms) $a us, ib_send_lat -s 64 t_typical $b us: ratio $r"
  shims="$shims $a" raws="$raws $b"
done
median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "n/a" }'; }
ms=$(median <<< "$shims") mr=$(median <<< "$raws")
echo "figure: latency over 5 rounds: median shim $ms us, median ib_send_lat $mr us: ratio" \
  "$(awk -v a="$ms" -v b="$mr" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }') (goal <= 1.5)"
fi

if want streaming; then
echo "== 2. streaming"
echo "figure: iperf3 -t 5, plain TCP: $(iperf plain)"
echo "figure: iperf3 -t 5, shim over rdma: $(iperf shim)"
# stress_run HUGE -> MiB/s of one connection, 128M both ways, ring pools on
# 2 MiB pages (HUGE=1) or 4 KiB pages (0); its upgrade.done says which it got.
# --warm-up: one short connection first, so both processes' RDMA warm-up is
# done before the measured one starts.
stress_run() {
  local sp
  next_port
  rm -f "$T"/trace.*.jsonl
  RDMASHIM_HUGE_PAGES=$1 run shim timeout 120 "$PROGS/stress" server --bind "$addr" --port "$port" --exit-after 2 \
    --timeout 60 > "$T/st.server" 2>&1 &
  sp=$!
  listening "$port"
  RDMASHIM_HUGE_PAGES=$1 run shim timeout 120 "$PROGS/stress" client --host "$addr" --port "$port" --conns 1 \
    --bytes 128M --mode blocking --warm-up 60 --timeout 100 > "$T/st.client" 2>&1
  wait "$sp"
  echo "$(grep -o 'MiB/s=[0-9.]*' "$T/st.client" || tail -n 1 "$T/st.client")" \
    "(huge rings: $(cat "$T"/trace.*.jsonl | grep '"upgrade.done"' | grep -c '"huge":true') of" \
    "$(cat "$T"/trace.*.jsonl | grep -c '"upgrade.done"'))"
}
# Alternated, twice each: the page-size effect is a ratio within this run.
for round in 1 2; do
  echo "figure: stress 1 conn 128M both ways, shim over rdma, 2 MiB pages (round $round): $(stress_run 1)"
  echo "figure: stress 1 conn 128M both ways, shim over rdma, 4 KiB pages (round $round): $(stress_run 0)"
done
timeout 90 ib_write_bw -d rxe0 -s 65536 -F -n 2000 > "$T/bw.server" 2>&1 &
sp=$!
rxe_retry 30 timeout 90 ib_write_bw -d rxe0 -s 65536 -F -n 2000 "$addr" > "$T/bw.client" 2>&1
wait "$sp"
echo "figure: ib_write_bw -s 65536 BW average: $(awk '$1 == 65536 {print $4}' "$T/bw.client") MB/s"
fi

if want registration; then
echo "== 3. registration"
"$ROOT/build/bench/mrbench" 64 5 | sed 's/^/figure: /'
fi

if want rsocket; then
echo "== 4. rsocket preload ($RSP)"
echo "figure: rsocket sockperf ping-pong: $(sockperf_pp rsocket)"
echo "figure: rsocket iperf3: $(iperf rsocket)"
echo "figure: rsocket redis-benchmark: $(redis_run rsocket)"
echo "figure: shim redis-benchmark (same settings): $(redis_run shim)"
echo "figure: plain redis-benchmark (same settings): $(redis_run plain)"
fi
echo "== bench done"
