#!/bin/bash
# tests/sanitize.sh asan|tsan...: the sanitizer runs behind `make test-asan`
# and `make test-tsan` (which build what it needs first); make test runs
# both, beside the VM scenarios (integration/run-all.sh's RUN_ALL_THEN).
#
#   asan  ASan + UBSan (a UBSan report aborts): the unit tests of build/asan,
#         then the scenarios in $SAN_SCENARIOS (default below) with
#         build/asan/lib/librdmashim.so preloaded after the ASan runtime
#   tsan  TSan: the same with build/tsan and the TSan runtime, over the
#         scenarios whose programs run the shim from several threads (redis
#         too: its I/O and background threads)
#
# The programs themselves are the normal build (build/progs), so the runtime
# is preloaded with the instrumented library:
#   ASan  runtime first (ASan insists on it, and must see every allocation)
#   TSan  shim first, runtime after it. TSan's interceptors of blocking calls
#         (recv, epoll_wait, poll, ...) stop modelling mutexes and atomics
#         until they return; with the runtime first they would wrap the
#         shim's wrappers, so the shim's own locking inside them would be
#         invisible and every access under those locks a false race. With
#         the shim first, its wrappers run outside the interceptors and call
#         them as the real functions (dlsym RTLD_NEXT).
# Every report lands in a file (log_path); any such file fails the unit step
# or the scenario (see integration/lib.sh), so a report can not scroll by
# unnoticed. Unit logs:
# build/<kind>/unit-reports/, scenario logs: build/<kind>/integration-logs/.
# Known false positives are suppressed in tests/tsan.supp, each with its
# reason.
#
# Tunables: SAN_SCENARIOS (names, as for integration/run-all.sh), SAN_LEAKS=1
# (leak checks in the scenarios too, see below), STRESS_DURATION
# (t_shm_stress's streams, seconds; default 4 under both: unbounded streams
# for that long instead of a volume, because t_shm_stress wants every
# connection upgraded before its stream ends, and in an instrumented build
# a bounded share could end first, see t_shm_stress.sh; seen under TSan,
# then once under ASan), STRESS_BYTES (the volume when STRESS_DURATION is
# empty).
# Under TSan, and in t_shm_shapes under both, the shimmed commands get
# RDMASHIM_UPGRADE_TIMEOUT_MS=15000 (unless a scenario sets its own): in
# t_shm_shapes' prefork cases a connection waits in the accept queue for a
# worker to finish the previous one, which instrumented and under load can
# take longer than the default 3 s, and it would end on TCP (peer_no_shim).
# Not for the other ASan scenarios: t_shm_plain_peers and t_shm_security
# wait for upgrades that fail by that timeout.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Several kinds (make test: asan tsan): one after the other, each to its end.
if (($# > 1)); then
  rc=0
  for k; do "${BASH_SOURCE[0]}" "$k" || rc=1; done
  exit "$rc"
fi
KIND=${1:-}
case $KIND in
  asan)
    RUNTIME=$(gcc -print-file-name=libasan.so)
    WHERE=SHIM_PRELOAD_EXTRA
    STRESS_DEFAULT=1G
    DURATION_DEFAULT=4
    DEFAULT_VARS=
    # t_shm_hostile makes every lie once, not again with other options
    # (its header): what ASan watches is the shim's code on each lie, and
    # the repeats made it the longest ASan scenario by far.
    export HOSTILE_REPEATS=${HOSTILE_REPEATS-0}
    # Not t_shm_http: curl itself hangs at start-up in setlocale's lock
    # with libasan preloaded, with or without the shim.
    DEFAULT_SCENARIOS="t_passfd t_shm_security t_shm_plain_peers t_shm_shapes t_shm_stress t_shm_calls
                       t_shm_close_answer t_redis t_shm_inetd t_sandboxed t_shm_peer_killed
                       t_concurrency t_shm_hostile t_shm_pair t_shm_unpaid t_shm_loop_handshake
                       t_trace_tool"
    # Leaks: always in the unit tests; in the scenarios with SAN_LEAKS=1
    # only: the check at exit of a shimmed echo_client adds 0.4-0.5 s (the
    # medians of t_shm_plain_peers' cases 1-5 went from 20-60 ms to
    # 360-550 ms), more than its "no added wait" check allows. In a
    # program that was not built with ASan, LeakSanitizer also reports
    # that program's own never-freed memory (python's, the test
    # programs'); lib.sh counts only leaks allocated through the shim. So
    # that such a report does not change the program's exit status,
    # exitcode=0; an ASan or UBSan error still kills it (abort_on_error).
    SCENARIO_OPTS=("ASAN_OPTIONS=detect_leaks=${SAN_LEAKS:-0}:exitcode=0:abort_on_error=1"
                   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:abort_on_error=1)
    UNIT_OPTS=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
               UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
    ;;
  tsan)
    RUNTIME=$(gcc -print-file-name=libtsan.so)
    WHERE=SHIM_PRELOAD_AFTER
    STRESS_DEFAULT=512M
    DURATION_DEFAULT=4
    DEFAULT_VARS=RDMASHIM_UPGRADE_TIMEOUT_MS=15000
    # Not t_concurrency: its programs close fds other threads are using on
    # purpose, which TSan reports as races on the fd (with the shim
    # TSan-clean otherwise; CONC_TSAN=1 runs its own TSan pass).
    DEFAULT_SCENARIOS="t_shm_shapes t_shm_stress t_shm_calls t_shm_close_answer t_redis t_shm_inetd t_shm_peer_killed t_shm_pair t_shm_unpaid t_shm_loop_handshake"
    # die_after_fork=0: the shim starts threads of its own (the reaper,
    # the failover worker) in a fork's child, as glibc allows; TSan's
    # own background thread makes every forking program count as
    # multi-threaded, and TSan would kill the child at that start.
    # atexit_sleep_ms=0: TSan otherwise sleeps a second at every exit
    # while another thread lives (the reaper, idle for its last 100 ms
    # after a process's last release): a fork-per-connection server's
    # children paid it each.
    SCENARIO_OPTS=("TSAN_OPTIONS=suppressions=$ROOT/tests/tsan.supp:second_deadlock_stack=1:die_after_fork=0:atexit_sleep_ms=0")
    UNIT_OPTS=("${SCENARIO_OPTS[@]}")
    ;;
  *)
    echo "usage: $0 asan|tsan" >&2
    exit 2
    ;;
esac
BUILD=$ROOT/build/$KIND
[[ -e $RUNTIME && -e $BUILD/lib/librdmashim.so ]] || {
  echo "$KIND: missing $RUNTIME or $BUILD/lib/librdmashim.so (make $KIND)" >&2
  exit 1
}

t0=$EPOCHREALTIME
rc=0

# Unit tests: each report file fails the step (a report in a test's forked
# child may not change the suite's result by itself).
reports=$BUILD/unit-reports
rm -rf "$reports"
mkdir -p "$reports"
for t in "$BUILD"/tests/test_*; do
  [[ -x $t && $t != *.d ]] || continue
  echo "== $KIND $t"
  env "${UNIT_OPTS[@]/%/:log_path=$reports/${t##*/}}" CK_DEFAULT_TIMEOUT=120 \
    timeout -k 10 900 "$t" || rc=1
done
for f in "$reports"/*; do
  [[ -e $f ]] || continue
  echo "$KIND report in the unit tests: ${f#"$ROOT"/}"
  head -n 40 "$f" | sed 's/^/    | /'
  rc=1
done

# Scenarios: run_scenarios DEFAULT_VARS NAME...
run_scenarios() {
  local vars=$1
  shift
  (($# > 0)) || return 0
  env "${SCENARIO_OPTS[@]}" SHIM_LIB="$BUILD/lib/librdmashim.so" $WHERE="$RUNTIME" \
    STRESS_BYTES="${STRESS_BYTES:-$STRESS_DEFAULT}" STRESS_DURATION="${STRESS_DURATION-$DURATION_DEFAULT}" \
    SHIM_DEFAULT_VARS="$vars" \
    INTEGRATION_LOGS="$BUILD/integration-logs" "$ROOT/integration/run-all.sh" "$@"
}
read -r -d '' -a names <<<"${SAN_SCENARIOS:-$DEFAULT_SCENARIOS}" || true # -d '': all lines
rest=() slow=()
for n in "${names[@]}"; do
  if [[ $n == t_shm_shapes ]]; then slow+=("$n"); else rest+=("$n"); fi
done
run_scenarios "$DEFAULT_VARS" "${rest[@]}" || rc=1
run_scenarios RDMASHIM_UPGRADE_TIMEOUT_MS=15000 "${slow[@]}" || rc=1
# TSan: the hostile flood alone (t_shm_hostile (c)), whose strangers queue
# blocking fds on the victim's rendezvous: the reaper thread and the
# program's threads meet there. ASan runs every part of it above.
if [[ $KIND == tsan && -z ${SAN_SCENARIOS:-} ]]; then
  HOSTILE_PARTS=c run_scenarios "$DEFAULT_VARS" t_shm_hostile || rc=1
fi

echo "$KIND: wall time $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s," \
  "$( ((rc == 0)) && echo "no sanitizer report" || echo FAILED)"
exit "$rc"
