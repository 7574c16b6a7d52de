#!/bin/bash
# t_shm_short_policy: short connections never pay for a handshake. With the
# default RDMASHIM_UPGRADE_AFTER_MS (2), 300 connect-request-answer-close
# connections (close_answer, 100 B answers, both ends under the shim, shm)
# run on TCP and none starts an upgrade; a long connection (echo_client,
# 16 MiB) still upgrades at both ends. With RDMASHIM_UPGRADE_AFTER_MS=0 the
# short ones do start upgrades (so the first check can fail).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/close_answer" "$PROGS/echo_server" "$PROGS/echo_client"

# short AFTER_MS|default: runs the 300 short connections; the number of
# upgrade.start lines goes to STARTS.
short() {
  local after=$1 port dir vars
  port=$(free_port)
  dir=$WORK/short-$after
  mkdir -p "$dir"
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
    RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
  [[ $after != default ]] && vars+=(RDMASHIM_UPGRADE_AFTER_MS="$after")
  # The scenario's own setting: lib.sh's default (0) must not apply here.
  [[ $after == default ]] && vars+=(RDMASHIM_UPGRADE_AFTER_MS=2)
  start_bg "short-$after" shim "${vars[@]}" "$PROGS/close_answer" serve --port "$port" --conns 300 \
    --answer 100 --workers 2
  local pid=$BG_PID
  wait_ready "short-$after" >/dev/null || not_ok "after=$after: server ready"
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
