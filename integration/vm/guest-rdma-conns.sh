#!/bin/bash
# guest-rdma-conns.sh — guest script for integration/bench/rdma-vm-conns.sh:
# short and many connections over RDMA (build/progs/conn_hold, the shim with
# RDMASHIM_TRANSPORTS=rdma, trace at CONNS_TRACE, default info), against
# plain TCP.
#
# Two hosts (two-hosts.sh: ROLE=a runs the servers on ADDR, ROLE=b the
# clients against PEER) or one VM (ROLE unset: both on dummy0,
# 192.168.77.1). It only runs the programs and records raw data in CONNS_X,
# a directory on the host both VMs see (9p); the host script computes the
# figures from it after the VMs ended. Per phase, CONNS_X/NAME/ holds the
# programs' output, their traces and, for the "many" phases, memory and
# rdma-resource snapshots. The phases, in this order (each on a fresh port,
# which both hosts count alike):
#   first   CONNS_ALT rounds (default 2), alternated: CONNS_SEQ (default 100)
#           connections one after the other, each connect, one 1-byte
#           request/answer, close; plain TCP, the shim, and the shim with
#           RDMASHIM_UPGRADE_AFTER_MS=60000 (no upgrade starts: tracking
#           alone) (fb-plain-R, fb-shim-R, fb-shim-late-R);
#   upg     CONNS_UPG (default 50) such connections doing CONNS_UPG_ROUNDS
#           (default 200) request/answers each, under the shim (upg): how
#           long until a connection is on RDMA, and its whole life against
#           the same over plain TCP (upg-plain);
#   many    CONNS_MANY (default 1000) connections from one client process to
#           one server process, all open at once, CONNS_MANY_ROUNDS (default
#           10) request/answer rounds over each in turn, then held idle:
#           plain TCP (many-plain), then the shim (many-shim).
# CONNS_PARTS (comma separated, default first,upg,many) picks parts;
# CONNS_TRACE is the shim's trace level (default info);
# CONNS_SHIM_ENV (comma separated VAR=value words) is added to the shim's
# environment. Each program pair first runs one connection for CONNS_WARM_MS
# (default 3000; conn_hold --warm): the processes' RDMA warm-up is not what
# is measured (its time is in the traces, rdma.warm). Every wait is
# bounded; a phase that fails leaves its status in NAME/*.rc and the script
# goes on.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=guest-lib.sh
. "$here/guest-lib.sh"
: "${CONNS_X:?}"
X=$CONNS_X
if [[ -z ${ROLE:-} ]]; then
  ROLE=one IFACE=dummy0 ADDR=192.168.77.1 PREFIX=24 PEER=192.168.77.1
fi
SRV=$ADDR
[[ $ROLE == b ]] && SRV=$PEER
T=/tmp/conns
mkdir -p "$T"
SEQ=${CONNS_SEQ:-100} ALT=${CONNS_ALT:-2}
UPG=${CONNS_UPG:-50} UPG_ROUNDS=${CONNS_UPG_ROUNDS:-200}
MANY=${CONNS_MANY:-1000} MANY_ROUNDS=${CONNS_MANY_ROUNDS:-10}
LIMIT=${CONNS_PHASE_S:-600} # bound on one phase's programs, seconds
WARM=${CONNS_WARM_MS:-3000}
parts=" ${CONNS_PARTS:-first,upg,many} "; parts=${parts//,/ }
want() { [[ $parts == *" $1 "* ]]; }
extra=()
IFS=, read -ra extra <<< "${CONNS_SHIM_ENV:-}"

echo "== guest $ROLE: $(uname -r), $(nproc) cpu, $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) MiB," \
  "fds $(ulimit -n), memlock $(ulimit -l)"
rxe_up "$IFACE" "$ADDR/$PREFIX" || exit 1
timeout 10 ibv_devinfo -v -d rxe0 > "$X/devinfo.$ROLE" 2>&1

# wait_for FILE SECONDS [PID]: until FILE exists (1 if not in time, or if
# PID ended first).
wait_for() {
  local d=$((SECONDS + $2))
  until [[ -e $1 ]]; do
    if ((SECONDS >= d)) || { [[ -n ${3:-} ]] && ! kill -0 "$3" 2>/dev/null; }; then return 1; fi
    sleep 0.1
  done
}
# penv MODE PORT TRACEDIR: the env words of one side. shim-late: the shim with
# RDMASHIM_UPGRADE_AFTER_MS=60000, so that no connection here starts an
# upgrade (what tracking alone costs).
penv() {
  [[ $1 == shim* ]] || return 0
  echo LD_PRELOAD="$LIB" RDMASHIM_PORTS="$2" RDMASHIM_TRANSPORTS=rdma RDMASHIM_TRACE="${CONNS_TRACE:-info}" \
    RDMASHIM_TRACE_FILE="$3/trace.$ROLE.%p.jsonl" "${extra[@]}"
  [[ $1 == shim-late ]] && echo RDMASHIM_UPGRADE_AFTER_MS=60000
  return 0
}
# pid_in LOG PID: the pid conn_hold printed (READY line), while PID lives.
pid_in() {
  local i
  for ((i = 0; i < 600; i++)); do
    sed -n 's/^READY [0-9]* pid=\([0-9]*\).*/\1/p' "$1" | grep . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
mem() { awk '/^Rss:/ { r = $2 } /^Pss:/ { p = $2 } END { print r + 0, p + 0 }' "/proc/$1/smaps_rollup" 2>/dev/null; }
# res FILE: the rdma resources of the device, per kind.
res() {
  local k
  for k in ctx qp cq mr pd cm_id; do
    echo "== $k"
    timeout 20 rdma res show "$k" 2>&1
  done > "$1"
  timeout 10 rdma res show >> "$1" 2>&1
}
# finish PID DIR SIDE: its status into DIR/SIDE.rc, and the traces (written
# to the guest's tmpfs: a trace line on 9p costs a round trip to the host,
# which would be in the figures) into DIR.
finish() {
  local rc=0
  wait "$1" || rc=$?
  echo "$rc" > "$2/$3.rc"
  tcp_aborts > "$2/$3.aborts"
  cp "$T/$(basename "$2")"/trace.*.jsonl "$2"/ 2>/dev/null
}
# tcp_aborts: this host's counts of connections the kernel ended with a
# reset, since boot: TCPAbortOnClose (closed with unread bytes),
# TCPAbortOnData (bytes after close, or SO_LINGER 0).
tcp_aborts() { timeout 10 nstat -asz 2>/dev/null | awk '$1 ~ /^TcpExtTCPAbortOn(Close|Data)$/ { printf "%s %s ", $1, $2 }'; echo; }
# settle TRACEDIR N PID: the last handshakes may end after the last round:
# wait until this host's traces hold an outcome (upgrade.done or .fail) for
# each of the N connections and the --warm one, at both ends in one VM, or
# no new one came for 15 s (bounded at 120 s).
settle() {
  local want=$(($2 + 1)) i n0=-1 n1 last=$SECONDS
  [[ $ROLE == one ]] && want=$((2 * want))
  for ((i = 0; i < 1200; i++)); do
    n1=$(cat "$1"/trace.*.jsonl 2>/dev/null | grep -cE '"event":"upgrade\.(done|fail)"')
    ((n1 >= want)) && return 0
    ((n1 != n0)) && { n0=$n1; last=$SECONDS; }
    ((SECONDS - last >= 15)) && return 1
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# ---- one connection at a time (conn_hold --seq) ----
server_seq() { # NAME MODE PORT N ROUNDS
  local d=$X/$1 bg pid
  mkdir -p "$d" "$T/$1"
  # shellcheck disable=SC2046
  env $(penv "$2" "$3" "$T/$1") timeout -k 5 "$LIMIT" "$PROGS/conn_hold" server --host "$SRV" --port "$3" \
    --conns "$4" --rounds "$5" --seq --warm "$WARM" > "$d/server.log" 2>&1 &
  bg=$!
  pid=$(pid_in "$d/server.log" "$bg") && touch "$d/listening"
  # A client that gave up leaves the server waiting in accept: stop it.
  while kill -0 "$bg" 2>/dev/null; do
    if [[ -e $d/client.rc ]]; then
      wait_for /nonexistent 10 "$bg"
      kill "$bg" 2>/dev/null
      break
    fi
    sleep 0.2
  done
  finish "$bg" "$d" server
}
client_seq() { # NAME MODE PORT N ROUNDS
  local d=$X/$1 rc=0
  mkdir -p "$d" "$T/$1"
  if ! wait_for "$d/listening" "$LIMIT"; then echo 124 > "$d/client.rc"; return; fi
  # shellcheck disable=SC2046
  env $(penv "$2" "$3" "$T/$1") timeout -k 5 "$LIMIT" "$PROGS/conn_hold" client --host "$SRV" --port "$3" \
    --conns "$4" --rounds "$5" --seq --times --warm "$WARM" > "$d/client.log" 2>&1 || rc=$?
  echo "$rc" > "$d/client.rc"
  tcp_aborts > "$d/client.aborts"
  cp "$T/$1"/trace.*.jsonl "$d"/ 2>/dev/null
}

# ---- all open at once (conn_hold, --go / --hold) ----
server_many() { # NAME MODE PORT N ROUNDS
  local d=$X/$1 bg pid
  mkdir -p "$d" "$T/$1"
  # shellcheck disable=SC2046
  env $(penv "$2" "$3" "$T/$1") timeout -k 5 "$LIMIT" "$PROGS/conn_hold" server --host "$SRV" --port "$3" \
    --conns "$4" --rounds "$5" --warm "$WARM" --hold "$d/hold" > "$d/server.log" 2>&1 &
  bg=$!
  if pid=$(pid_in "$d/server.log" "$bg"); then
    res "$d/server.res0"
    touch "$d/listening"
    until grep -q '^WARMED' "$d/server.log" || [[ -e $d/client.rc ]] || ! kill -0 "$bg" 2>/dev/null; do sleep 0.1; done
    sleep 0.5 # let the warm connection's handshake end
    mem "$pid" > "$d/server.mem0"
    touch "$d/server.ready"
    # The client writes "up" once its rounds are over and the upgrades
    # settled (or it failed: client.rc).
    until [[ -e $d/up || -e $d/client.rc ]] || ! kill -0 "$bg" 2>/dev/null; do sleep 0.2; done
    [[ $2 == shim && $ROLE == a ]] && settle "$T/$1" "$4" "$bg"
    sleep 0.5 # idle
    mem "$pid" > "$d/server.mem1"
    res "$d/server.res"
    echo "$pid" > "$d/server.pid"
    touch "$d/server.measured"
    wait_for "$d/hold" 120 "$bg"
  fi
  finish "$bg" "$d" server
}
client_many() { # NAME MODE PORT N ROUNDS
  local d=$X/$1 bg pid
  mkdir -p "$d" "$T/$1"
  if ! wait_for "$d/listening" "$LIMIT"; then echo 124 > "$d/client.rc"; return; fi
  rm -f "$T/go.$1"
  [[ $ROLE == one ]] || res "$d/client.res0"
  # shellcheck disable=SC2046
  env $(penv "$2" "$3" "$T/$1") timeout -k 5 "$LIMIT" "$PROGS/conn_hold" client --host "$SRV" --port "$3" \
    --conns "$4" --rounds "$5" --warm "$WARM" --go "$T/go.$1" --hold "$d/hold" > "$d/client.log" 2>&1 &
  bg=$!
  if ! pid=$(pid_in "$d/client.log" "$bg"); then
    touch "$d/hold"; finish "$bg" "$d" client; return
  fi
  until grep -q '^WARMED' "$d/client.log" || ! kill -0 "$bg" 2>/dev/null; do sleep 0.1; done
  if ! wait_for "$d/server.ready" 120 "$bg"; then
    touch "$d/hold"; finish "$bg" "$d" client; return
  fi
  mem "$pid" > "$d/client.mem0"
  date +%s.%N > "$d/client.go"
  touch "$T/go.$1"
  until grep -q '^UP ' "$d/client.log" || ! kill -0 "$bg" 2>/dev/null; do sleep 0.2; done
  date +%s.%N > "$d/client.up"
  [[ $2 == shim ]] && settle "$T/$1" "$4" "$bg"
  sleep 0.5 # idle
  mem "$pid" > "$d/client.mem1"
  res "$d/client.res"
  echo "$pid" > "$d/client.pid"
  touch "$d/up"
  wait_for "$d/server.measured" 120
  touch "$d/hold"
  finish "$bg" "$d" client
}

port=7400
# phase KIND NAME MODE N ROUNDS: this host's side of it (both in one VM).
phase() {
  local kind=$1; shift
  port=$((port + 1))
  echo "-- $ROLE: $1 ($2, $3 connections, $4 rounds) on port $port, $(date +%T)"
  mkdir -p "$X/$1" && echo "$3 $4" > "$X/$1/params"
  case $ROLE in
    a) "server_$kind" "$1" "$2" "$port" "$3" "$4" ;;
    b) "client_$kind" "$1" "$2" "$port" "$3" "$4" ;;
    one)
      "server_$kind" "$1" "$2" "$port" "$3" "$4" &
      local sp=$!
      "client_$kind" "$1" "$2" "$port" "$3" "$4"
      wait "$sp"
      ;;
  esac
}

if want first; then
  for ((r = 1; r <= ALT; r++)); do
    if ((r % 2)); then order="plain shim shim-late"; else order="shim-late shim plain"; fi
    for m in $order; do phase seq "fb-$m-$r" "$m" "$SEQ" 1; done
  done
fi
if want upg; then
  phase seq upg shim "$UPG" "$UPG_ROUNDS"
  phase seq upg-plain plain "$UPG" "$UPG_ROUNDS"
fi
if want many; then
  phase many many-plain plain "$MANY" "$MANY_ROUNDS"
  phase many many-shim shim "$MANY" "$MANY_ROUNDS"
fi
echo "== guest $ROLE done $(date +%T)"
exit 0
