# shellcheck shell=bash disable=SC2034
# integration/lib.sh: shared helpers for the integration scenarios. Source it
# from a scenario (integration/t_*.sh):
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Paths
#   ROOT LIB PROGS        repository, build/lib/librdmashim.so, build/progs
#   WORK                  this run's scratch directory (under
#                         build/integration-logs/); removed when the scenario
#                         passes, kept when it fails (or with KEEP_WORK=1)
# Running things (every command runs under `timeout`; nothing waits forever)
#   free_port             print a TCP port free on 127.0.0.1 and ::1 (never the
#                         same twice in one scenario, never an ephemeral one)
#   with_shim [RDMASHIM_X=V...] CMD...    run CMD with LD_PRELOAD=$LIB (and a
#                         sanitizer runtime, see below) and only the given
#                         RDMASHIM_* variables (foreground)
#   no_shim [VAR=V...] CMD...             the same without the shim
#   shim_vars DIR PORTS   set SHIM_VARS to the usual tracked-but-never-upgraded
#                         configuration: RDMASHIM_PORTS=PORTS, TRANSPORTS=tcp
#                         (or $SHIM_TRANSPORTS if set, e.g. shm, to run the
#                         same scenario with upgrades), TRACE=debug,
#                         TRACE_FILE=DIR/trace.%p.jsonl
#   start_bg NAME shim|plain [VAR=V...] CMD...  start CMD in the background,
#                         stdout in $WORK/NAME.out, stderr in $WORK/NAME.err;
#                         its pid (a `timeout` that leads CMD's process group)
#                         is in BG_PID; the exit trap ends it and its group
#   wait_bg PID [SECS]    wait for a background command; its status is returned
#   stop_bg PID           end a background command and its process group
#   wait_ready NAME [SECS]  wait for "READY <port>" in $WORK/NAME.out, print port
#   wait_listen PORT [SECS] wait until something listens on PORT (no connect)
# Results
#   ok MSG / not_ok MSG   record one check (TAP-like lines "ok - ", "not ok - ")
#   check MSG CMD...      ok if CMD succeeds, else not_ok
#   same MSG A B          ok if strings A and B are equal (shows both if not)
#   no_output MSG FILE    ok if FILE is empty (shows its first lines if not)
#   skip WHY              exit 77 (skipped), saying why
#   finish                print the tally and exit 0 (all ok) or 1
#   tally_cmd CMD...      run a checker that prints "ok - "/"not ok - " lines
#                         itself; count them (and fail if it dies otherwise)
#   check_sockperf_report LABEL TEST FILE   check a sockperf client report
#   trace_py DIR [ARG...] <<'PY' ... PY   run Python checks over every
#                         DIR/trace.*.jsonl (see TRACE_PRELUDE below)
#
# Tunables: CMD_TIMEOUT (default 60 s, per foreground command), BG_TIMEOUT
# (default 240 s, per background command), SHIM_LIB (another build of the
# library to test), SHIM_PROGS (another build's test programs, default
# build/progs), SHIM_TRANSPORTS (see shim_vars), KEEP_WORK=1,
# INTEGRATION_LOGS (where WORK goes; default build/integration-logs).
# Sanitizer runs (make test-asan, make test-tsan): SHIM_LIB names the
# instrumented library and SHIM_PRELOAD_EXTRA (preloaded before it) or
# SHIM_PRELOAD_AFTER (after it) its runtime, which a program that was not
# built with it lacks (see tests/sanitize.sh for which order and why). Then
# every ASan, UBSan and TSan report goes to a file under $WORK/sanitizer/
# (log_path, appended to any ASAN_OPTIONS, UBSAN_OPTIONS, TSAN_OPTIONS
# given), and finish fails the scenario for each such file, showing its head.
# SHIM_DEFAULT_VARS: VAR=V words given to every shimmed command ahead of the
# scenario's own (which win), e.g. a longer upgrade timeout for a slow build;
# RDMASHIM_UPGRADE_AFTER_MS=0 always comes first (see below).

set -u
set -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=${SHIM_LIB:-$ROOT/build/lib/librdmashim.so}
SHIM_PRELOAD_EXTRA=${SHIM_PRELOAD_EXTRA:-}
SHIM_PRELOAD_AFTER=${SHIM_PRELOAD_AFTER:-}
PRELOAD=${SHIM_PRELOAD_EXTRA:+$SHIM_PRELOAD_EXTRA:}$LIB${SHIM_PRELOAD_AFTER:+:$SHIM_PRELOAD_AFTER}
SAN_RUN=${SHIM_PRELOAD_EXTRA}${SHIM_PRELOAD_AFTER}
read -r -a SHIM_DEFAULTS <<<"${SHIM_DEFAULT_VARS:-}"
# The scenarios test the handshake and what runs over it, so a connection
# starts its upgrade at its first data call, however young (the default
# waits RDMASHIM_UPGRADE_AFTER_MS, which t_shm_short_policy tests); a
# scenario that sets the variable itself wins.
SHIM_DEFAULTS=(RDMASHIM_UPGRADE_AFTER_MS=0 "${SHIM_DEFAULTS[@]}")
PROGS=${SHIM_PROGS:-$ROOT/build/progs}
LOG_DIR=${INTEGRATION_LOGS:-$ROOT/build/integration-logs}
T_NAME=${SCENARIO_NAME:-$(basename "$0" .sh)}
CMD_TIMEOUT=${CMD_TIMEOUT:-60}
export SHIM_TRANSPORTS=${SHIM_TRANSPORTS:-tcp}
BG_TIMEOUT=${BG_TIMEOUT:-240}
# The interpreter itself, not a version-manager wrapper script (much faster).
PYTHON=$(timeout 20 python3 -c 'import sys; print(sys.executable)' 2>/dev/null) || PYTHON=python3

# Only what a scenario sets reaches the programs.
while read -r _v; do unset "$_v"; done < <(compgen -e | grep '^RDMASHIM_' || true)
unset LD_PRELOAD _v

mkdir -p "$LOG_DIR"
WORK=$(mktemp -d "$LOG_DIR/$T_NAME.XXXXXX")
SAN_LOGS=$WORK/sanitizer
if [[ -n $SAN_RUN ]]; then
  mkdir -p "$SAN_LOGS"
  # A report file is created only when there is something to report.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}log_path=$SAN_LOGS/asan"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}log_path=$SAN_LOGS/ubsan"
  export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}log_path=$SAN_LOGS/tsan"
fi
N_OK=0
N_FAIL=0
BG_PIDS=()
BG_PID=
declare -A BG_NAME=()

log() { echo "[$T_NAME] $*"; }

ok() { N_OK=$((N_OK + 1)); echo "ok - $*"; }
not_ok() { N_FAIL=$((N_FAIL + 1)); echo "not ok - $*"; }

check() {
  local msg=$1; shift
  if "$@"; then ok "$msg"; else not_ok "$msg"; fi
}

same() {
  if [[ "$2" == "$3" ]]; then
    ok "$1"
  else
    not_ok "$1"
    echo "    expected: $2"
    echo "    got:      $3"
  fi
}

no_output() {
  if [[ ! -s $2 ]]; then
    ok "$1"
  else
    not_ok "$1"
    head -n 5 "$2" | sed 's/^/    | /'
  fi
}

skip() {
  echo "SKIP: $*"
  exit 77
}

# True if FILE holds only LeakSanitizer reports and none of their leaks was
# allocated through the shim (a frame in shim/*.c or librdmashim): the test
# programs and interpreters that run under the shim have leaks of their own.
_foreign_leaks_only() {
  grep -q 'ERROR: LeakSanitizer' "$1" || return 1
  grep -qE 'ERROR: (AddressSanitizer|ThreadSanitizer)|runtime error|WARNING: ThreadSanitizer' "$1" && return 1
  ! grep -qE '(^|[ /])shim/[a-z_]+\.c:|librdmashim' "$1"
}

# One not_ok per sanitizer report file (only in a sanitizer run).
# The background commands end first: a report may come at a process's exit.
san_reports() {
  local f pid
  [[ -n $SAN_RUN ]] || return 0
  for pid in "${BG_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null && stop_bg "$pid"
  done
  for f in "$SAN_LOGS"/*; do
    [[ -e $f ]] || continue
    if _foreign_leaks_only "$f"; then
      log "${f#"$WORK"/}: leaks of the program itself, none through the shim (not counted)"
      continue
    fi
    not_ok "sanitizer report ${f#"$WORK"/}"
    grep -m 3 -E 'ERROR|WARNING|SUMMARY|runtime error' "$f" | sed 's/^/    | /'
  done
}

finish() {
  san_reports
  echo "[$T_NAME] $N_OK ok, $N_FAIL not ok"
  if ((N_FAIL > 0)); then
    echo "[$T_NAME] scratch files kept in $WORK"
    exit 1
  fi
  exit 0
}

need_cmd() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || skip "$c is not installed"
  done
}

# need_rxe_vm: skips (77) with the reason unless a Soft-RoCE VM can boot here
# (qemu, a kernel in /boot, the rdma_rxe module).
need_rxe_vm() {
  command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed"
  compgen -G '/boot/vmlinuz-*' >/dev/null || skip "no kernel in /boot"
  find /lib/modules -name 'rdma_rxe.ko*' 2>/dev/null | grep -q . || skip "no kernel module rdma_rxe"
}

need_built() {
  local f
  for f in "$LIB" "$@"; do
    if [[ ! -e $f ]]; then
      echo "not built: $f (run make)"
      exit 1
    fi
  done
}

# Ports: below the ephemeral range, so no client socket takes one meanwhile.
free_port() {
  timeout 20 "$PYTHON" - "$WORK/.ports" <<'PY'
import os, random, socket, sys
used_file = sys.argv[1]
used = set()
if os.path.exists(used_file):
    used = {int(x) for x in open(used_file).read().split()}
lo, hi = 20000, 32000
try:
    e_lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    hi = min(hi, e_lo - 1)
except OSError:
    pass
for _ in range(500):
    p = random.randint(lo, hi)
    if p in used:
        continue
    try:
        for fam, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            s = socket.socket(fam, socket.SOCK_STREAM)
            try:
                s.bind((host, p))
            finally:
                s.close()
    except OSError:
        continue
    with open(used_file, "a") as f:
        f.write("%d\n" % p)
    print(p)
    sys.exit(0)
sys.exit("no free port")
PY
}

with_shim() {
  timeout -k 5 "$CMD_TIMEOUT" env LD_PRELOAD="$PRELOAD" "${SHIM_DEFAULTS[@]}" "$@"
}

no_shim() {
  timeout -k 5 "$CMD_TIMEOUT" env -u LD_PRELOAD "$@"
}

shim_vars() {
  SHIM_VARS=(RDMASHIM_PORTS="$2" RDMASHIM_TRANSPORTS="${SHIM_TRANSPORTS:-tcp}" RDMASHIM_TRACE=debug
             "RDMASHIM_TRACE_FILE=$1/trace.%p.jsonl")
}

start_bg() {
  local name=$1 mode=$2
  shift 2
  local pre=(env -u LD_PRELOAD)
  [[ $mode == shim ]] && pre=(env LD_PRELOAD="$PRELOAD" "${SHIM_DEFAULTS[@]}")
  # A simple command: $! is timeout's own pid, and timeout leads a process
  # group holding CMD and all its children.
  timeout -k 5 "$BG_TIMEOUT" "${pre[@]}" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  BG_PID=$!
  BG_PIDS+=("$BG_PID")
  BG_NAME[$BG_PID]=$name
}

wait_bg() {
  local pid=$1 secs=${2:-$CMD_TIMEOUT} i rc=0
  for ((i = 0; i < secs * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "background ${BG_NAME[$pid]:-$pid} still running after ${secs}s: stopping it"
    stop_bg "$pid"
    return 124
  fi
  wait "$pid" || rc=$?
  return "$rc"
}

stop_bg() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 30; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$pid" 2>/dev/null
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return 0
}

wait_ready() {
  local name=$1 secs=${2:-20} i port
  for ((i = 0; i < secs * 50; i++)); do
    port=$(awk '$1 == "READY" { print $2; exit }' "$WORK/$name.out" 2>/dev/null)
    if [[ -n $port ]]; then
      echo "$port"
      return 0
    fi
    sleep 0.02
  done
  log "$name never printed READY; its stderr:" >&2
  tail -n 20 "$WORK/$name.err" >&2
  return 1
}

# wait_line NAME REGEX [SECS]: until a line of $WORK/NAME.out matches the
# extended REGEX (5 s by default); 1 if none did.
wait_line() {
  local name=$1 re=$2 secs=${3:-5} i
  for ((i = 0; i < secs * 50; i++)); do
    grep -qE "$re" "$WORK/$name.out" 2>/dev/null && return 0
    sleep 0.02
  done
  return 1
}

# hold_seq NAME CONNS ROUNDS [SERVER_FLAG...]: a conn_hold server (in the
# background, named NAME) and client on $port, both under the shim with the
# caller's "${vars[@]}", CONNS connections one after the other (--seq) of
# ROUNDS one-byte rounds; checks that every byte came back, then waits for
# the server (one with --fork serves on and is stopped). The words of the
# array HOLD_FLAGS, when set, go to both ends.
hold_seq() {
  local name=$1 conns=$2 rounds=$3 pid got both=(${HOLD_FLAGS[@]+"${HOLD_FLAGS[@]}"})
  shift 3
  start_bg "$name" shim "${vars[@]}" "$PROGS/conn_hold" server --port "$port" --conns "$conns" --rounds "$rounds" \
    --seq ${both[@]+"${both[@]}"} "$@"
  pid=$BG_PID
  wait_ready "$name" >/dev/null || not_ok "$name: server ready"
  got=$(with_shim "${vars[@]}" "$PROGS/conn_hold" client --port "$port" --conns "$conns" --rounds "$rounds" --seq \
    ${both[@]+"${both[@]}"} 2>&1)
  check "$name: every byte came back ($(tail -n 1 <<<"$got"))" grep -q '^DONE' <<<"$got"
  if [[ " $* " == *" --fork "* ]]; then
    stop_bg "$pid"
  else
    wait_bg "$pid" 60 || not_ok "$name: server exit"
  fi
}

wait_listen() {
  local port=$1 secs=${2:-20} i
  for ((i = 0; i < secs * 20; i++)); do
    if [[ -n $(timeout 5 ss -Hltn "sport = :$port" 2>/dev/null) ]]; then
      return 0
    fi
    sleep 0.05
  done
  log "nothing listens on port $port after ${secs}s" >&2
  return 1
}

_cleanup() {
  local pid
  for pid in "${BG_PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null && stop_bg "$pid"
  done
  if [[ ${KEEP_WORK:-0} != 1 && $N_FAIL -eq 0 ]]; then
    rm -rf "$WORK"
  fi
}
trap _cleanup EXIT
trap 'echo "[$T_NAME] interrupted"; exit 1' INT TERM

# Python checks over a trace directory. The snippet sees:
#   T            every trace record (dicts; r["_file"] names its file)
#   BAD          lines that did not parse as JSON (must stay empty)
#   ARGS         the extra arguments of trace_py
#   check(cond, msg)          one "ok - " / "not ok - " line
#   events(name, **fields)    records of one event with these field values
#   tracks(role=None, port=None)  conn.track records; port = the server port
#   port_of("addr:port")      the port of an endpoint string
#   conn_key(r)   (client endpoint, server endpoint) of a conn.track, so the
#                 two sides of one connection get the same key
#   decided(r)    r carries the decision shim_vars asks for: eligible=false
#                 reason=tcp_only (or, with SHIM_TRANSPORTS set to upgrade,
#                 eligible=true reason=whitelisted); DECISION describes it
TRACE_PRELUDE='
import glob, json, os, sys
D = sys.argv[1]
ARGS = sys.argv[2:]
T, BAD = [], []
for f in sorted(glob.glob(os.path.join(D, "trace.*.jsonl"))):
    with open(f) as fh:
        for line in fh:
            try:
                r = json.loads(line)
            except ValueError:
                BAD.append((f, line))
                continue
            r["_file"] = os.path.basename(f)
            T.append(r)
_fails = 0
def check(cond, msg):
    global _fails
    if cond:
        print("ok - " + msg)
    else:
        _fails += 1
        print("not ok - " + msg)
    return cond
def events(name, **kw):
    return [r for r in T if r.get("event") == name and all(r.get(k) == v for k, v in kw.items())]
def port_of(ep):
    return int(ep.rsplit(":", 1)[1])
def server_port(r):
    return port_of(r["local"] if r.get("role") == "server" else r["peer"])
def tracks(role=None, port=None):
    out = []
    for r in events("conn.track"):
        if role is not None and r.get("role") != role:
            continue
        if port is not None and server_port(r) != int(port):
            continue
        out.append(r)
    return out
def conn_key(r):
    return (r["local"], r["peer"]) if r.get("role") == "client" else (r["peer"], r["local"])
TCP_ONLY = os.environ.get("SHIM_TRANSPORTS", "tcp") == "tcp"
DECISION = "eligible=false reason=tcp_only" if TCP_ONLY else "eligible=true reason=whitelisted"
def decided(r):
    if TCP_ONLY:
        return r.get("reason") == "tcp_only" and r.get("eligible") is False
    return r.get("reason") == "whitelisted" and r.get("eligible") is True
check(not BAD, "every trace line parses as JSON (%d bad)" % len(BAD))
for f, line in BAD[:3]:
    print("    bad line in %s: %r" % (f, line[:200]))
'

tally_cmd() {
  local out rc=0
  out=$(timeout -k 5 "$CMD_TIMEOUT" "$@" 2>&1) || rc=$?
  [[ -n $out ]] && echo "$out"
  N_OK=$((N_OK + $(grep -c '^ok - ' <<<"$out")))
  N_FAIL=$((N_FAIL + $(grep -c '^not ok - ' <<<"$out")))
  if ((rc != 0)) && ! grep -q '^not ok - ' <<<"$out"; then
    not_ok "checker $1 failed (status $rc)"
  fi
  return 0
}

trace_py() {
  local dir=$1 code
  shift
  code=$(cat)
  tally_cmd "$PYTHON" -c "$TRACE_PRELUDE
$code
sys.exit(1 if _fails else 0)" "$dir" "$@"
}

# Prints a short digest of a trace directory (for failure analysis).
trace_digest() {
  local dir=$1
  timeout 30 "$PYTHON" - "$dir" <<'PY' || true
import collections, glob, json, os, sys
c = collections.Counter()
for f in glob.glob(os.path.join(sys.argv[1], "trace.*.jsonl")):
    for line in open(f):
        try:
            r = json.loads(line)
        except ValueError:
            c["<unparsable>"] += 1
            continue
        c[(r.get("event"), r.get("role"), r.get("how"))] += 1
for k, v in sorted(c.items(), key=str):
    print("    %5d %s" % (v, k))
PY
}

# check_sockperf_report LABEL TEST FILE: checks a sockperf client report in FILE
# (TEST: ping-pong, under-load or throughput) and prints its summary.
check_sockperf_report() {
  local label=$1 test=$2 file=$3 text n
  text=$(sed 's/\x1b\[[0-9;]*m//g' "$file")
  if grep -qiE 'ERROR|fail' <<<"$text"; then
    not_ok "$label: no ERROR in the report"
    grep -iE 'ERROR|fail' <<<"$text" | head -n 5 | sed 's/^/    /'
  else
    ok "$label: no ERROR in the report"
  fi
  if [[ $test == throughput ]]; then
    n=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' <<<"$text" | head -n 1)
    check "$label: messages sent > 0 (${n:-none})" test "${n:-0}" -gt 0
    n=$(sed -n 's/.*Message Rate is \([0-9]*\).*/\1/p' <<<"$text" | head -n 1)
    check "$label: message rate > 0 (${n:-none} msg/s)" test "${n:-0}" -gt 0
  else
    n=$(sed -n 's/.*Total \([0-9]*\) observations.*/\1/p' <<<"$text" | head -n 1)
    check "$label: observations > 0 (${n:-none})" test "${n:-0}" -gt 0
    n=$(sed -n 's/.*\[Valid Duration\].*ReceivedMessages=\([0-9]*\).*/\1/p' <<<"$text" | head -n 1)
    check "$label: valid received messages > 0 (${n:-none})" test "${n:-0}" -gt 0
    check "$label: no dropped, duplicated or out-of-order messages" \
      grep -q '# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0' <<<"$text"
  fi
  grep -E 'Summary:' <<<"$text" | sed "s/^sockperf: /    $label: /"
}
