#!/bin/bash
# t_concurrency: a shim socket's lifetime under threads and processes
# (shim/LIFETIME.md). Each mode of integration/progs/conc.c runs once without
# the shim (the baseline: the scenario itself is sound) and once with both
# ends under the shim (RDMASHIM_TRANSPORTS=shm, so the connections upgrade):
#   close-race   recv, send and poll on one fd while another thread closes it
#                (or dup2()s onto it)
#   reuse        a reader inside recv() while its fd closes and the number is
#                reused: it must get its peer's next byte, the new connection
#                its own bytes (long busy-polling, so the reader is spinning,
#                not sleeping, when the fd closes)
#   epoll-close  epoll_wait() while another thread closes the epoll fd
#   epoll-two    two threads in epoll_wait() on one set while the connection
#                upgrades
#   fork-storm   fork() in a threaded program; children close their copies of
#                upgraded connections: no child hangs, the parent's
#                connections carry on byte-exact (no EOF)
#   fork-close   the same without threads: a child's close of its copy must
#                not end the parent's connection; the parent's last close
#                then gives the peer its last byte, then EOF
#   scm          connections handed to a worker with SCM_RIGHTS, the sender's
#                copy closed at once
#   scm-upgraded the same after the sender's end upgraded: the sender's
#                sendmsg returns the connection to TCP at a clean offset
#                first (handback.c), so the receiver reads and echoes every
#                byte the peer sent, in order, every end in time
#   scm-early    handed over while the handshake is under way: the same
#                checks (the shim gives the handshake up: plain TCP)
# Every run is bounded (conc fails a thread that does not end in time; the
# command has a timeout too). MALLOC_PERTURB_ fills freed memory, so a use
# after free shows as a crash rather than by chance.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/conc"

CMD_TIMEOUT=40

# run_mode MODE ROUNDS [VAR=VALUE...]
run_mode() {
  local mode=$1 rounds=$2 port out rc
  shift 2
  port=$(free_port)
  out=$(no_shim MALLOC_PERTURB_=165 "$PROGS/conc" "$mode" --port "$port" --rounds "$rounds" 2>&1)
  rc=$?
  check "$mode, no shim: $out (status $rc)" test "$rc" -eq 0 -a "${out%% *}" = OK
  port=$(free_port)
  out=$(with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm MALLOC_PERTURB_=165 "$@" \
        "$PROGS/conc" "$mode" --port "$port" --rounds "$rounds" 2>&1)
  rc=$?
  check "$mode, shim: $out (status $rc)" test "$rc" -eq 0 -a "${out%% *}" = OK
  shim_out=$out
}

run_mode close-race 100
run_mode reuse 12 RDMASHIM_SPIN_US=10000
run_mode epoll-close 100
run_mode epoll-two 2000
run_mode fork-storm 300
run_mode fork-close 40
run_mode scm 30
run_mode scm-upgraded 20
check "scm-upgraded: every connection handed on whole (back to TCP, not ended)" \
  grep -q "served_in_full=20" <<<"$shim_out"
run_mode scm-early 20
check "scm-early: every connection handed on whole" grep -q "served_in_full=20" <<<"$shim_out"

# Opt-in: the shim and conc built with ThreadSanitizer and linked together
# (a preloaded TSan library does not see the locks taken inside libtsan's own
# poll/epoll_wait interceptors); any report in the shim's code fails.
if [[ ${CONC_TSAN:-0} == 1 ]]; then
  tsan=$WORK/tsan
  if make -s -C "$ROOT" BUILD="$tsan" SAN=tsan "$tsan/lib/librdmashim.so" >/dev/null 2>&1 &&
     cc -std=gnu11 -O1 -g -D_GNU_SOURCE -fsanitize=thread -o "$tsan/conc" "$ROOT/integration/progs/conc.c" \
       "$tsan"/obj/shim/*.o -ldl -lpthread -lrdmacm -libverbs 2>/dev/null; then
    for m in "close-race 20" "epoll-two 2000" "epoll-close 30"; do
      read -r mode rounds <<<"$m"
      port=$(free_port)
      out=$(timeout -k 5 120 env RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm \
            TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0 log_path=$tsan/report.$mode" \
            "$tsan/conc" "$mode" --port "$port" --rounds "$rounds" 2>&1)
      races=$(cat "$tsan"/report."$mode".* 2>/dev/null | grep -c '^    #0 .* shim/')
      check "tsan $mode: $out, $races report frames in shim/" test "${out%% *}" = OK -a "$races" -eq 0
    done
  else
    not_ok "tsan build (CONC_TSAN=1)"
  fi
fi

finish
