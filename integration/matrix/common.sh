# shellcheck shell=bash disable=SC2034
# integration/matrix/common.sh: what every program of the real-program matrix
# shares. A program's script (integration/matrix/NAME.sh) sources this file,
# defines mx_body and calls mx_main:
#
#   mx_body MODE    run the program pair once; MODE is plain (no shim at
#                   all) or shim (both ends under it, shm upgrades). Start
#                   things with mx_bg / mx_fg, name the whitelisted ports with
#                   mx_port, and write what an observer sees (exit statuses,
#                   hashes, counts, never timings) with mx_result.
#
# mx_main runs mx_body plain, then mx_body shim, and checks:
#   (a) the two runs' results are the same lines (and each run's result is
#       not empty);
#   (b) the trace of the shim run shows, for every port named with
#       mx_port, at least MX_MIN_SWITCHED (default 1) connections upgraded
#       (upgrade.done) at both ends and switched (tx.switch transport shm;
#       rx.switch: bytes crossed the ring); and every process named in
#       MX_SWITCHED_BY (the WHO of mx_fg / the NAME of mx_bg) has at least
#       one such connection (WHO@LABEL: one to the port named LABEL);
#   (c) no rv.refused, conn.abort, frames.bad, rx.switch_behind,
#       rx.switch_mismatch, conn.untracked or close.unflushed record
#       (close.frames_late is printed as a note), and no record whose
#       reason is peer_violation or internal_error, unless the script names
#       the event in MX_ALLOW_EVENTS (with the reason why, in its header).
#
# Knobs: MX_TRANSPORTS (default shm) is RDMASHIM_TRANSPORTS in the shim run;
# MX_TRANSPORTS=tcp must make check (b) fail. MX_KNOWN="reason" marks the
# program a known failure: its checks still run and print, and the matrix
# driver reports "ok - NAME # TODO known: reason" when they fail.
# A script runs alone too: bash integration/matrix/NAME.sh
: "${CMD_TIMEOUT:=40}"
: "${BG_TIMEOUT:=90}"
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
need_built

MX_NAME=$T_NAME
MX_TRANSPORTS=${MX_TRANSPORTS:-shm}
MX_MIN_SWITCHED=${MX_MIN_SWITCHED:-1}
MX_ALLOW_EVENTS=${MX_ALLOW_EVENTS:-}
MX_SWITCHED_BY=${MX_SWITCHED_BY:-}
# Debian's interpreter (its python3-* packages), not a version manager's.
PY3=/usr/bin/python3
MODE=
RES=
TRACE_DIR=$WORK/trace
MX_WHITELIST=

[[ -n ${MX_KNOWN:-} ]] && echo "# known failure: $MX_KNOWN"

# mx_port LABEL PORT [MIN]: PORT is a server port of this run (whitelisted
# in the shim run, and checked there for at least MIN switched connections,
# default MX_MIN_SWITCHED).
mx_port() {
  MX_WHITELIST=${MX_WHITELIST:+$MX_WHITELIST,}$2
  echo "$1 $2 ${3:-$MX_MIN_SWITCHED}" >>"$WORK/$MODE.ports"
}

# mx_result TEXT...: one line of the observable result of this run.
mx_result() {
  echo "$*" >>"$RES"
}

# mx_vars WHO: VARS = the shim configuration of one process (its trace file
# is trace.WHO-PID.jsonl).
mx_vars() {
  VARS=(RDMASHIM_PORTS="$MX_WHITELIST" RDMASHIM_TRANSPORTS="$MX_TRANSPORTS" RDMASHIM_TRACE=${MX_TRACE:-info}
        "RDMASHIM_TRACE_FILE=$TRACE_DIR/trace.$1-%p.jsonl")
}

# mx_fg WHO CMD...: run CMD in the foreground, under the shim in the shim run.
mx_fg() {
  local who=$1
  shift
  if [[ $MODE == shim ]]; then
    mx_vars "$who"
    with_shim "${VARS[@]}" "$@"
  else
    no_shim "$@"
  fi
}

# mx_bg NAME CMD...: start CMD in the background (start_bg; output in
# $WORK/MODE-NAME.out and .err, pid in BG_PID), under the shim in the shim run.
mx_bg() {
  local name=$1
  shift
  if [[ $MODE == shim ]]; then
    mx_vars "$name"
    start_bg "$MODE-$name" shim "${VARS[@]}" "$@"
  else
    start_bg "$MODE-$name" plain "$@"
  fi
}

# mx_bg_as USER NAME CMD...: mx_bg with CMD run as USER (setpriv). The user
# changes before the shim loads: a trace file opened by root under the same
# pid (setpriv execs in place) would be closed to the program.
mx_bg_as() {
  local user=$1 name=$2
  shift 2
  local as=(setpriv --reuid="$user" --regid="$user" --init-groups)
  if [[ $MODE == shim ]]; then
    mx_vars "$name"
    start_bg "$MODE-$name" plain "${as[@]}" env LD_PRELOAD="$PRELOAD" "${SHIM_DEFAULTS[@]}" "${VARS[@]}" "$@"
  else
    start_bg "$MODE-$name" plain "${as[@]}" "$@"
  fi
}

# mx_check MSG CMD... / mx_same MSG A B: check and same, the message naming
# the run.
mx_check() {
  local msg=$1
  shift
  check "$MODE: $msg" "$@"
}
mx_same() {
  same "$MODE: $1" "$2" "$3"
}

# mx_wait_listen PORT: wait_listen, failing the run's check when it fails.
mx_wait_listen() {
  if wait_listen "$1" 20; then
    return 0
  fi
  not_ok "$MODE: something listens on port $1"
  return 1
}

# mx_wrk WHO URL WRK_ARG...: wrk (an epoll loop per thread, non-blocking
# sockets, keep-alive) loads URL for its fixed duration, under the shim in
# the shim run (trace name WHO). Adds the result line "WHO: exit RC, socket
# errors connect/read/write/timeout C/R/W/T, non-2xx N" (counts, not the
# number of requests, which is a timing) and checks exit 0, no socket error
# and no non-2xx answer. wrk prints its "Socket errors" and "Non-2xx or 3xx"
# lines only when a count is not 0. Its output: $WORK/MODE-WHO.out.
# The plain run loads for 1 s whatever -d says (MX_PLAIN_WRK_D): its
# result line, the reference, counts errors, not requests, and plain TCP's
# are the same after 1 s as after 5; the load is the shim run's to bear.
mx_wrk() {
  local who=$1 url=$2 rc=0 out errs non2xx a args=()
  shift 2
  for a in "$@"; do
    [[ $MODE == plain && $a =~ ^-d[0-9]+s$ ]] && a=-d${MX_PLAIN_WRK_D:-1s}
    args+=("$a")
  done
  out=$WORK/$MODE-$who.out
  mx_fg "$who" wrk "${args[@]}" "$url" >"$out" 2>&1 || rc=$?
  errs=$(sed -n 's/.*Socket errors: connect \([0-9]*\), read \([0-9]*\), write \([0-9]*\), timeout \([0-9]*\).*/\1\/\2\/\3\/\4/p' "$out")
  non2xx=$(sed -n 's/.*Non-2xx or 3xx responses: \([0-9]*\).*/\1/p' "$out")
  errs=${errs:-0/0/0/0}
  non2xx=${non2xx:-0}
  mx_result "$who: exit $rc, socket errors connect/read/write/timeout $errs, non-2xx $non2xx"
  mx_check "$who: exit status 0 (got $rc)" test "$rc" -eq 0
  mx_check "$who: no socket error (connect/read/write/timeout $errs)" test "$errs" = 0/0/0/0
  mx_check "$who: no non-2xx answer ($non2xx)" test "$non2xx" = 0
  grep -q 'requests in' "$out" && log "$who: $(grep 'requests in' "$out" | sed 's/^ *//')"
}

# mx_ab WHO URL AB_ARG...: ApacheBench (one select/poll loop, -k keep-alive)
# under the shim in the shim run (trace name WHO), -s 10: a stalled run
# ends in 10 s, not 30. Adds the result line
# "WHO: exit RC, complete C, failed F, non-2xx N" and checks exit 0, no
# failed request, no non-2xx answer and C equal to ab's -n (the caller's
# AB_N). Its output: $WORK/MODE-WHO.out.
mx_ab() {
  local who=$1 url=$2 rc=0 out complete failed non2xx
  shift 2
  out=$WORK/$MODE-$who.out
  mx_fg "$who" ab -q -r -s 10 "$@" "$url" >"$out" 2>&1 || rc=$?
  complete=$(sed -n 's/^Complete requests: *\([0-9]*\).*/\1/p' "$out")
  failed=$(sed -n 's/^Failed requests: *\([0-9]*\).*/\1/p' "$out")
  non2xx=$(sed -n 's/^Non-2xx responses: *\([0-9]*\).*/\1/p' "$out")
  complete=${complete:-none} failed=${failed:-none} non2xx=${non2xx:-0}
  mx_result "$who: exit $rc, complete $complete, failed $failed, non-2xx $non2xx"
  mx_check "$who: exit status 0 (got $rc)" test "$rc" -eq 0
  mx_check "$who: all $AB_N requests complete ($complete)" test "$complete" = "$AB_N"
  mx_check "$who: no failed request ($failed)" test "$failed" = 0
  mx_check "$who: no non-2xx answer ($non2xx)" test "$non2xx" = 0
  if [[ $failed != 0 ]]; then
    grep -A3 '^Failed requests' "$out" | sed 's/^/    /'
  fi
  grep -E 'apr_|Total of|error' "$out" | sed 's/^Benchmarking [^.]*\.\.\.//' | head -n 3
}

# mx_client WHO CMD...: runs CMD once in the foreground (mx_fg WHO), its
# output in $WORK/MODE-WHO.out (named by MX_OUT; its lines go into the
# result) and its errors in $WORK/MODE-WHO.err (shown when there are any).
# Adds the result line "WHO exit RC" and checks exit status 0; the caller
# checks what the output says.
mx_client() {
  local who=$1 rc=0 err
  shift
  MX_OUT=$WORK/$MODE-$who.out
  err=$WORK/$MODE-$who.err
  mx_fg "$who" "$@" >"$MX_OUT" 2>"$err" || rc=$?
  mx_result "$who exit $rc"
  cat "$MX_OUT" >>"$RES"
  mx_check "$who exit status 0 (got $rc)" test "$rc" -eq 0
  if [[ -s $err ]]; then
    # A traceback ends with its cause, a list of failures starts with the first.
    if (($(wc -l <"$err") > 6)); then
      head -n 3 "$err"
      echo "    ..."
      tail -n 3 "$err"
    else
      cat "$err"
    fi
  fi
  return 0
}

# mx_seeded_files DIR PREFIX SEED COUNT MAX SIZE...: COUNT files of random
# bytes from the seed, DIR/PREFIX01.bin on, each of one of the sizes
# SIZE... or a random one from 1 to MAX; their MD5s (md5sum in DIR) in
# $WORK/want.md5. MX_SEEDED_BIG=K:N makes the files from the Kth on N
# bytes each.
mx_seeded_files() {
  local dir=$1 prefix=$2
  mkdir -p "$dir"
  "$PY3" - "$@" "${MX_SEEDED_BIG:-0:0}" <<'PY'
import random, sys
d, pre, seed, count, top = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sizes = tuple(int(x) for x in sys.argv[6:-1])
big_from, big = (int(x) for x in sys.argv[-1].split(":"))
rng = random.Random(seed)
for i in range(1, count + 1):
    n = rng.choice(sizes + (rng.randint(1, top),))
    if big_from and i >= big_from:
        n = big
    open("%s/%s%02d.bin" % (d, pre, i), "wb").write(rng.randbytes(n))
PY
  (cd "$dir" && md5sum "$prefix"*.bin) >"$WORK/want.md5"
}

# mx_small_files DIR: what the load generators' entries fetch, DIR/small.txt
# (6 bytes) and DIR/64k.bin (64 KiB, seeded).
mx_small_files() {
  mkdir -p "$1"
  printf 'small\n' >"$1/small.txt"
  "$PY3" -c 'import random, sys; open(sys.argv[1], "wb").write(random.Random(64).randbytes(65536))' "$1/64k.bin"
}

# mx_curl_files WHO LABEL OUT URL PREFIX N CURL_ARG...: one curl (trace name
# WHO) fetches the N files URL/PREFIX01.bin on (mx_seeded_files) into the
# directory OUT; per file its HTTP version, code and connections opened in
# OUT.codes. Adds the result lines "LABEL exit RC, HTTP versions and codes:
# ..." and the files' MD5s; checks exit status 0 and every file byte for
# byte against $WORK/want.md5.
mx_curl_files() {
  local who=$1 label=$2 out=$3 url=$4 prefix=$5 n=$6 rc=0
  shift 6
  mkdir -p "$out"
  mx_fg "$who" curl -sS "$@" -w '%{http_version} %{http_code} %{num_connects}\n' -o "$out/$prefix#1.bin" \
    "$url/${prefix}[01-$(printf %02d "$n")].bin" >"$out.codes" 2>"$out.err" || rc=$?
  mx_result "$label exit $rc, HTTP versions and codes:" \
    "$(cut -d' ' -f1,2 "$out.codes" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  (cd "$out" && md5sum "$prefix"*.bin) >"$out.md5" 2>&1
  cat "$out.md5" >>"$RES"
  mx_check "$label: exit status 0 (got $rc)" test "$rc" -eq 0
  mx_check "$label: the $n files byte for byte (MD5)" cmp -s "$WORK/want.md5" "$out.md5"
  [[ -s $out.err ]] && head -n 3 "$out.err"
  return 0
}

mx_trace_check() {
  trace_py "$TRACE_DIR" "$WORK/shim.ports" "$MX_ALLOW_EVENTS" "$MX_SWITCHED_BY" <<'PY'
import collections
ports = [l.split() for l in open(ARGS[0]) if l.strip()]
allowed = set(ARGS[1].split())
by = ARGS[2].split()
def who(r):
    return r["_file"].split(".")[1].rsplit("-", 1)[0]
def key(r):
    return frozenset((r.get("local"), r.get("peer")))
def sport(k):
    return min(port_of(e) for e in k)
done = collections.defaultdict(set)
for r in events("upgrade.done", reason="upgraded", transport="shm"):
    done[key(r)].add(r.get("role"))
txs = collections.Counter(key(r) for r in events("tx.switch", transport="shm"))
rxs = collections.Counter(key(r) for r in events("rx.switch"))
fails = collections.Counter(r.get("reason") for r in events("upgrade.fail"))
for label, port, need in ports:
    port, need = int(port), int(need)
    tracked = {key(r) for r in tracks(port=port)}
    both = {k for k in tracked if done.get(k) == {"client", "server"}}
    switched = {k for k in both if txs[k] >= 1 and rxs[k] >= 1}
    print("    %s (port %d): %d connections tracked, %d upgraded at both ends, %d switched with bytes over the ring"
          % (label, port, len(tracked), len(both), len(switched)))
    check(len(switched) >= need,
          "shim: %s: at least %d connection(s) on port %d upgraded to shm at both ends and switched (%d)"
          % (label, need, port, len(switched)))
sw_all = {k for k in done if done[k] == {"client", "server"} and txs[k] >= 1 and rxs[k] >= 1}
port_by_label = {label: int(port) for label, port, _ in ports}
for w in by:
    w, _, to = w.partition("@")
    mine = {key(r) for r in events("conn.track") if who(r) == w
            and (not to or server_port(r) == port_by_label.get(to))}
    check(mine & sw_all, "shim: %s: at least one of its %d connections%s switched to shm (%d)"
          % (w, len(mine), " to " + to if to else "", len(mine & sw_all)))
if fails:
    print("    upgrade.fail by reason: %s" % dict(fails))
# close.frames_late: a close waited its full 2 s for a frame of the peer's
# that never came (over TCP the close is immediate). It costs time, not
# bytes, and one case of it still shows now and then under load (curl's
# HTTP/2 connection, a bell counted as owed that the peer never sent):
# printed as a note, not failed, so that the matrix fails only on what a
# program would see as wrong. t_shm_close_bells fails on the cause found.
late = [r for r in T if r.get("event") == "close.frames_late"]
if late:
    print("    note: %d close.frames_late (a close that waited 2 s): %s" % (len(late), late[0].get("_file")))
bad_events = {"rv.refused", "conn.abort", "frames.bad", "rx.switch_behind", "rx.switch_mismatch",
              "conn.untracked", "close.unflushed"} - allowed
bad = [r for r in T if r.get("event") in bad_events
       or (r.get("reason") in ("peer_violation", "internal_error") and r.get("event") not in allowed)]
check(not bad, "shim: no %s record and no peer_violation or internal_error (%d)"
      % ("/".join(sorted(bad_events)), len(bad)))
for r in bad[:5]:
    print("    %s: %s" % (r["_file"], {k: v for k, v in r.items() if k != "_file"}))
PY
}

mx_main() {
  local m t0
  mkdir -p "$TRACE_DIR"
  # Processes that change user (setpriv) write their trace here too.
  chmod 1777 "$TRACE_DIR"
  for m in plain shim; do
    MODE=$m
    RES=$WORK/$m.result
    MX_WHITELIST=
    : >"$RES"
    : >"$WORK/$m.ports"
    log "--- $m run"
    t0=$EPOCHREALTIME
    mx_body "$m"
    log "--- $m run took $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"
  done
  MODE=both
  check "plain: the run has a result" test -s "$WORK/plain.result"
  if cmp -s "$WORK/plain.result" "$WORK/shim.result"; then
    ok "shim and plain runs saw the same result ($(wc -l <"$WORK/plain.result") lines)"
  else
    not_ok "shim and plain runs saw the same result"
    diff "$WORK/plain.result" "$WORK/shim.result" | head -n 20 | sed 's/^/    /'
  fi
  sed 's/^/    result: /' "$WORK/shim.result" | head -n 12
  if [[ -s $WORK/shim.ports ]]; then
    mx_trace_check
  else
    not_ok "shim: the run named its ports (mx_port)"
  fi
  finish
}
