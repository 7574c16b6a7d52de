#!/bin/bash
# t_bad_config: an invalid RDMASHIM_* value must cost exactly one stderr line
# per process, naming the variable and the value, and then nothing else: the
# program runs on with its own output and its own exit status (pass-through,
# no trace written). Checked with `sh -c` (exit status 3 must survive) and with
# an echo server and client pair under the shim. A trace path another user
# could have prepared in a shared directory (a FIFO, a symbolic link, a file
# others may write, another user's file) is such a bad value too, and a FIFO
# with no reader must not hold the program up at all.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/echo_server" "$PROGS/echo_client"

port=$(free_port)
# The usual valid settings; each case overrides one of them.
valid=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=tcp RDMASHIM_TRACE=debug)

# Baselines without the shim.
out=$(no_shim sh -c 'echo "to stdout"; echo "to stderr" >&2; exit 3' 2>"$WORK/base-sh.err")
sh_rc=$?
sh_out=$out
start_bg base-server plain "$PROGS/echo_server" --port "$port" --max-conns 2
pid=$BG_PID
wait_ready base-server >/dev/null || not_ok "baseline server ready"
cli_base=$(no_shim "$PROGS/echo_client" --port "$port" --bytes 256K --conns 2 --seed 5 --half-close)
wait_bg "$pid" 30
check "baseline client: $cli_base" test "${cli_base%% *}" = OK

# one_line_about FILE VAR VALUE: exactly one line, naming VAR and VALUE.
one_line_about() {
  local file=$1 var=$2 value=$3 n
  n=$(wc -l <"$file")
  [[ $n -eq 1 ]] && grep -qF -- "$var" "$file" && grep -qF -- "$value" "$file"
}

# bad_case VAR VALUE: run everything with VAR=VALUE on top of the valid set.
bad_case() {
  local var=$1 value=$2 label="$1=$2" dir i=$((++CASES)) vars=() v out rc
  dir=$WORK/case$i
  mkdir -p "$dir"
  for v in "${valid[@]}" "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl"; do
    [[ ${v%%=*} == "$var" ]] || vars+=("$v")
  done
  vars+=("$var=$value")

  # sh: output and exit status preserved, one extra stderr line.
  out=$(with_shim "${vars[@]}" sh -c 'echo "to stdout"; echo "to stderr" >&2; exit 3' 2>"$dir/sh.err")
  rc=$?
  same "$label: sh -c exit status" "$sh_rc" "$rc"
  same "$label: sh -c stdout" "$sh_out" "$out"
  grep -vxF "to stderr" "$dir/sh.err" >"$dir/sh.shim.err"
  check "$label: sh -c stderr keeps the program's own line" grep -qxF "to stderr" "$dir/sh.err"
  if one_line_about "$dir/sh.shim.err" "$var" "$value"; then
    ok "$label: sh -c got exactly one shim line naming variable and value"
  else
    not_ok "$label: sh -c got exactly one shim line naming variable and value; stderr was:"
    sed 's/^/    /' "$dir/sh.err"
  fi

  # An echo server and client, both under the bad configuration.
  start_bg "case$i-server" shim "${vars[@]}" "$PROGS/echo_server" --port "$port" --max-conns 2
  pid=$BG_PID
  if ! wait_ready "case$i-server" >/dev/null; then
    not_ok "$label: server ready"
    stop_bg "$pid"
    return
  fi
  out=$(with_shim "${vars[@]}" "$PROGS/echo_client" --port "$port" --bytes 256K --conns 2 --seed 5 \
        --half-close 2>"$dir/client.err")
  rc=$?
  same "$label: client output unchanged" "$cli_base" "$out"
  same "$label: client exit status" 0 "$rc"
  rc=0; wait_bg "$pid" 30 || rc=$?
  same "$label: server exit status" 0 "$rc"
  local side f
  for side in client server; do
    f=$dir/client.err
    [[ $side == server ]] && f=$WORK/case$i-server.err
    if one_line_about "$f" "$var" "$value"; then
      ok "$label: $side: exactly one stderr line naming variable and value"
    else
      not_ok "$label: $side: exactly one stderr line naming variable and value; stderr was:"
      sed 's/^/    /' "$f"
    fi
  done
  check "$label: the shim stayed inert (no trace file)" \
    test -z "$(find "$dir" -name 'trace.*' -print -quit)"
  echo "    e.g.: $(head -n 1 "$dir/client.err")"
}

CASES=0
bad_case RDMASHIM_PORTS 80-
bad_case RDMASHIM_PORTS 70000
bad_case RDMASHIM_PORTS abc
bad_case RDMASHIM_PORTS 0
bad_case RDMASHIM_PORTS 90-80
bad_case RDMASHIM_AB_PERCENT 150
bad_case RDMASHIM_AB_PERCENT -5
bad_case RDMASHIM_TRANSPORTS foo
bad_case RDMASHIM_TRANSPORTS tcp,shm
bad_case RDMASHIM_TRACE loud
bad_case RDMASHIM_TRACE_FILE /nonexistent/dir/x

# Traps at the trace path. The FIFO has no reader: a blocking open would
# wait for one at the program's load, for ever.
traps=$WORK/traps
mkdir -p "$traps"
mkfifo "$traps/fifo"
t0=$EPOCHREALTIME
out=$(CMD_TIMEOUT=20 with_shim "${valid[@]}" "RDMASHIM_TRACE_FILE=$traps/fifo" \
      sh -c 'echo "to stdout"; exit 3' 2>"$traps/fifo.err")
rc=$?
secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
same "FIFO at the trace path: exit status" "$sh_rc" "$rc"
same "FIFO at the trace path: stdout" "$sh_out" "$out"
check "FIFO at the trace path: the program was not held up (${secs}s)" \
  awk -v s="$secs" 'BEGIN { exit !(s < 2) }'
check "FIFO at the trace path: the line says why" grep -qF "$traps/fifo is a FIFO" "$traps/fifo.err"
echo "    e.g.: $(head -n 1 "$traps/fifo.err")"
bad_case RDMASHIM_TRACE_FILE "$traps/fifo"

: >"$traps/target"
ln -s "$traps/target" "$traps/link"
bad_case RDMASHIM_TRACE_FILE "$traps/link"
check "symbolic link at the trace path: its target got nothing" test ! -s "$traps/target"

: >"$traps/shared"
chmod 0666 "$traps/shared"
bad_case RDMASHIM_TRACE_FILE "$traps/shared"
check "world-writable file at the trace path: it got nothing" test ! -s "$traps/shared"

if [[ $(id -u) == 0 ]]; then
  : >"$traps/nobodys"
  chown 65534:65534 "$traps/nobodys"
  bad_case RDMASHIM_TRACE_FILE "$traps/nobodys"
  check "another user's file at the trace path: it got nothing" test ! -s "$traps/nobodys"
fi
bad_case RDMASHIM_RING_KB 3000
bad_case RDMASHIM_SPIN_US 99999999999999999999
# The test-only fault list is refused as any value: an unknown kind, a bad
# syntax, an N that would wrap.
bad_case RDMASHIM_TEST_FAULTS nope@1
bad_case RDMASHIM_TEST_FAULTS bell_loss
bad_case RDMASHIM_TEST_FAULTS bell_loss@18446744073709551616

finish
