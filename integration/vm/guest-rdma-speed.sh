#!/bin/bash
# guest-rdma-speed.sh — issue 34's latency table in one VM: sockperf
# ping-pong 64 B p50 for plain TCP and, for each shim library named in
# SPEED_LIBS (label=path,...; default: this checkout's), the shim over RDMA
# at its defaults, with RDMASHIM_SPIN_US=0 and with RDMASHIM_SPIN_US=1000000,
# beside ib_send_lat and ib_send_lat -e (t_typical) on the same device
# (SPEED_MODES picks among default, spin0, spin1s and adapt0, the last
# RDMASHIM_SPIN_ADAPT=0: a fixed spin; comma-separated).
# Rounds alternate every figure (SPEED_ROUNDS, default 3; sockperf -t
# SPEED_T, default 3 s), so that compare ratios within the run: emulation
# drifts from minute to minute. Prints "speed:" lines; never fails on a number.
# Run: integration/vm/rxe-vm.sh "$PWD/integration/vm/guest-rdma-speed.sh" </dev/null
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
addr=192.168.77.1
T=/tmp/speed
mkdir -p "$T"
port=7400
rounds=${SPEED_ROUNDS:-3}
secs=${SPEED_T:-3}
libs=${SPEED_LIBS:-new=$LIB}
# Commas or spaces between modes (RXEVM_ENV passes no spaces).
modes=${SPEED_MODES:-default spin0 spin1s}
modes=${modes//,/ }

echo "== guest: $(uname -r), $(nproc) cpu"
rxe_up dummy0 "$addr/24" || exit 1

listening() {
  local i
  for ((i = 0; i < 100; i++)); do ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0; sleep 0.2; done
  return 1
}
strip() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }

# pp LIB|plain [VAR=VAL...] -> sockperf p50 in us, or "failed"
pp() {
  local lib=$1 sp rc=0 p50
  shift
  port=$((port + 1))
  local pre=(env)
  [[ $lib != plain ]] && pre=(env RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=rdma "$@" LD_PRELOAD="$lib")
  "${pre[@]}" timeout 60 sockperf sr --tcp -i "$addr" -p "$port" > "$T/server" 2>&1 &
  sp=$!
  listening "$port" || { kill "$sp" 2>/dev/null; echo failed; return; }
  # --pre-warmup-wait: the first connection of a process runs on TCP while
  # its RDMA warm-up runs; the figure is of the switched stream.
  "${pre[@]}" timeout 60 sockperf ping-pong --tcp -i "$addr" -p "$port" -t "$secs" -m 64 --pre-warmup-wait 2 \
    > "$T/client" 2>&1 || rc=$?
  kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
  p50=$(strip "$T/client" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | head -n 1)
  if [[ $rc -eq 0 && -n $p50 ]]; then echo "$p50"; else echo failed; fi
}

# lat [-e] -> ib_send_lat t_typical in us
lat() {
  timeout 60 ib_send_lat -d rxe0 -s 64 -F -n 2000 "$@" > "$T/lat.server" 2>&1 &
  local sp=$!
  rxe_retry 30 timeout 60 ib_send_lat -d rxe0 -s 64 -F -n 2000 "$@" "$addr" > "$T/lat.client" 2>&1
  wait "$sp"
  awk '$1 == 64 {print $5}' "$T/lat.client" | head -n 1
}

declare -A all
add() { all[$1]="${all[$1]:-} $2"; echo "speed: round $r: $1 $2 us"; }
IFS=, read -ra L <<<"$libs"
# A library the guest can not read would measure plain TCP under its name
# (ld.so only warns): the guest's /tmp is its own tmpfs, not this host's.
for l in "${L[@]}"; do
  [[ -r ${l#*=} ]] || { echo "speed: ${l%%=*}: ${l#*=} is not readable in the guest (its /tmp is its own)"; exit 1; }
done
for ((r = 1; r <= rounds; r++)); do
  add tcp "$(pp plain)"
  add ib_send_lat "$(lat)"
  add ib_send_lat_e "$(lat -e)"
  for l in "${L[@]}"; do
    n=${l%%=*} p=${l#*=}
    for m in $modes; do
      case $m in
        default) add "$n.default" "$(pp "$p")" ;;
        spin0) add "$n.spin0" "$(pp "$p" RDMASHIM_SPIN_US=0)" ;;
        spin1s) add "$n.spin1s" "$(pp "$p" RDMASHIM_SPIN_US=1000000)" ;;
        adapt0) add "$n.adapt0" "$(pp "$p" RDMASHIM_SPIN_ADAPT=0)" ;;
      esac
    done
  done
done
median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "n/a" }'; }
tcp=$(median <<<"${all[tcp]}") ib=$(median <<<"${all[ib_send_lat]}") ibe=$(median <<<"${all[ib_send_lat_e]}")
for k in $(printf '%s\n' "${!all[@]}" | sort); do
  m=$(median <<<"${all[$k]}")
  echo "speed: median of $rounds: $k $m us (rounds:${all[$k]})" \
    "$(awk -v m="$m" -v t="$tcp" -v i="$ib" -v e="$ibe" 'BEGIN { if (m + 0 > 0 && t + 0 > 0 && i + 0 > 0 && e + 0 > 0) printf "tcp/x %.2f, x/ib_send_lat %.2f, x/ib_send_lat_e %.2f", t / m, m / i, m / e }')"
done
