#!/bin/bash
# guest-rdma-profile.sh — where a message's time goes on the RDMA path: perf
# (software clock, the only event under TCG) samples the whole VM while
# sockperf ping-pong 64 B runs through the shim over RDMA at its defaults,
# then while plain TCP and ib_send_lat run, and prints for each the share of
# samples by program and by symbol (the shim's own functions, libibverbs and
# rxe's provider, the kernel's rxe and network paths, sockperf). PROFILE_T
# (default 4) seconds each; PROFILE_MODES picks among shim, tcp, ib (default
# all three); PROFILE_ENV adds shim settings (comma separated VAR=VAL).
# Prints "profile:" lines; never fails on a number.
# Run: integration/vm/rxe-vm.sh "$PWD/integration/vm/guest-rdma-profile.sh" </dev/null
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
addr=192.168.77.1
T=/tmp/profile
mkdir -p "$T"
port=7600
secs=${PROFILE_T:-4}
modes=${PROFILE_MODES:-shim,tcp,ib}
modes=${modes//,/ }
IFS=, read -ra extra <<<"${PROFILE_ENV:-}"

echo "== guest: $(uname -r), $(nproc) cpu"
command -v perf >/dev/null || { echo "profile: perf is not installed (linux-perf)"; exit 0; }
rxe_up dummy0 "$addr/24" || exit 1
sysctl -qw kernel.perf_event_paranoid=-1 kernel.kptr_restrict=0 2>/dev/null

listening() {
  local i
  for ((i = 0; i < 100; i++)); do ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0; sleep 0.2; done
  return 1
}
strip() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }

# report NAME: the samples of perf.NAME by program, then by symbol.
report() {
  local f=$T/perf.$1
  echo "profile: $1: samples by program"
  perf report -i "$f" --stdio --sort comm --percent-limit 1 2>/dev/null | grep -E '^ +[0-9]' | head -n 12 | sed "s/^/profile: $1:   /"
  echo "profile: $1: samples by program and symbol (over 0.7%)"
  perf report -i "$f" --stdio --sort comm,dso,sym --percent-limit 0.7 2>/dev/null | grep -E '^ +[0-9]' | head -n 45 |
    sed "s/^/profile: $1:   /"
}

# pingpong NAME plain|shim: sockperf ping-pong under a system-wide perf.
pingpong() {
  local name=$1 how=$2 sp pre=(env)
  port=$((port + 1))
  [[ $how == shim ]] && pre=(env RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=rdma ${extra[@]+"${extra[@]}"} LD_PRELOAD="$LIB")
  "${pre[@]}" timeout 120 sockperf sr --tcp -i "$addr" -p "$port" > "$T/$name.server" 2>&1 &
  sp=$!
  listening "$port" || { kill "$sp" 2>/dev/null; echo "profile: $name: no server"; return; }
  # The first seconds hold the warm-up and the switch; the profile is of
  # the switched stream: perf starts after the pre-warm-up wait.
  # perf itself starts slowly under emulation: the run outlasts it, and
  # is stopped (SIGINT: sockperf prints its figures) once perf is done.
  "${pre[@]}" timeout 180 sockperf ping-pong --tcp -i "$addr" -p "$port" -t $((secs + 60)) -m 64 --pre-warmup-wait 2 \
    > "$T/$name.client" 2>&1 &
  local cp=$!
  sleep 4
  timeout 90 perf record -a -F 1000 -e cpu-clock -o "$T/perf.$name" -- sleep "$secs" > /dev/null 2>&1
  pkill -INT -f "sockperf ping-pong --tcp -i $addr -p $port"
  wait "$cp"
  kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null
  echo "profile: $name: sockperf $(strip "$T/$name.client" | grep -E 'percentile 50.000|observations' | tr -s ' \n' ' ')"
  report "$name"
}

for m in $modes; do
  case $m in
    shim) pingpong shim shim ;;
    tcp) pingpong tcp plain ;;
    ib)
      timeout 120 ib_send_lat -d rxe0 -s 64 -F -D $((secs + 30)) > "$T/lat.server" 2>&1 &
      sp=$!
      sleep 1
      rxe_retry 30 timeout 120 ib_send_lat -d rxe0 -s 64 -F -D $((secs + 30)) "$addr" > "$T/lat.client" 2>&1 &
      cp=$!
      sleep 4
      timeout 60 perf record -a -F 1000 -e cpu-clock -o "$T/perf.ib" -- sleep "$secs" > /dev/null 2>&1
      wait "$cp" "$sp"
      echo "profile: ib: ib_send_lat $(awk '$1 == 64' "$T/lat.client" | head -n 1)"
      report ib
      ;;
  esac
done
