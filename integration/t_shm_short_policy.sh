#!/bin/bash
# t_shm_short_policy: short connections never pay for a handshake. With the
# default RDMASHIM_UPGRADE_AFTER_MS (2), 300 connect-request-answer-close
# connections (close_answer, 100 B answers, both ends under the shim, shm)
# run on TCP and none starts an upgrade; a long connection (echo_client,
# 16 MiB) still upgrades at both ends. With RDMASHIM_UPGRADE_AFTER_MS=0 the
# short ones do start upgrades (so the first check can fail). Slow answers:
# half the answers come 5 ms late (close_answer --delay-us), so those
# connections are past the age, as on a loaded machine; with one turn of
# direction each they must still start none (RDMASHIM_UPGRADE_AFTER_ROUNDS,
# default 1), while with RDMASHIM_UPGRADE_AFTER_ROUNDS=0 (age alone, the
# rule before) they do.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/close_answer" "$PROGS/echo_server" "$PROGS/echo_client"

# short AFTER_MS|default [SERVE-FLAG...] [-- VAR=VALUE...]: runs the 300
# short connections; the number of upgrade.start lines goes to STARTS.
short() {
  local after=$1 port dir vars flags=() extra=()
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do flags+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  extra=("$@")
  port=$(free_port)
  dir=$WORK/short-$after-${#flags[@]}-${#extra[@]}
  mkdir -p "$dir"
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
    RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
  [[ $after != default ]] && vars+=(RDMASHIM_UPGRADE_AFTER_MS="$after")
  # The scenario's own setting: lib.sh's default (0) must not apply here.
  [[ $after == default ]] && vars+=(RDMASHIM_UPGRADE_AFTER_MS=2)
  vars+=("${extra[@]}")
  local name=short-$after-${#flags[@]}-${#extra[@]}
  start_bg "$name" shim "${vars[@]}" "$PROGS/close_answer" serve --port "$port" --conns 300 \
    --answer 100 --workers 2 "${flags[@]}"
  local pid=$BG_PID
  wait_ready "$name" >/dev/null || not_ok "after=$after: server ready"
  local got
  got=$(with_shim "${vars[@]}" "$PROGS/close_answer" fetch --port "$port" --conns 300 --answer 100 --parallel 4 2>&1)
  wait_bg "$pid" 60 >/dev/null
  same "after=$after: every answer whole" "fetch: 300 ok, 0 short, 0 reset, 0 other errors" "$got"
  STARTS=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"upgrade.start"' || true)
}
# A connection here lives well under 2 ms, unless the machine stalls it:
# allow a few (5% of the 600 ends) to reach the age.
short default
check "default policy: 300 short connections started almost no upgrade ($STARTS upgrade.start, < 30)" \
  test "$STARTS" -lt 30
short 0
check "RDMASHIM_UPGRADE_AFTER_MS=0: the short connections do start upgrades ($STARTS upgrade.start)" \
  test "$STARTS" -gt 300
short default --delay-us 5000
check "default policy, half the answers 5 ms late: still almost no upgrade ($STARTS upgrade.start, < 30)" \
  test "$STARTS" -lt 30
short default --delay-us 5000 -- RDMASHIM_UPGRADE_AFTER_ROUNDS=0
check "the same by age alone (RDMASHIM_UPGRADE_AFTER_ROUNDS=0): the late ones start upgrades ($STARTS upgrade.start, > 100)" \
  test "$STARTS" -gt 100

port=$(free_port)
dir=$WORK/long
mkdir -p "$dir"
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl"
  RDMASHIM_UPGRADE_AFTER_MS=2)
start_bg long shim "${vars[@]}" "$PROGS/echo_server" --shape epoll --bind 127.0.0.1 --port "$port" --max-conns 1
pid=$BG_PID
wait_ready long >/dev/null || not_ok "long: server ready"
got=$(with_shim "${vars[@]}" "$PROGS/echo_client" --port "$port" --bytes 16M --seed 2 2>&1)
wait_bg "$pid" 60
check "long connection: every byte echoed ($got)" test "${got%% *}" = OK
n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"upgrade.done"' || true)
check "long connection: upgraded at both ends under the default policy ($n upgrade.done)" test "$n" -eq 2
finish
