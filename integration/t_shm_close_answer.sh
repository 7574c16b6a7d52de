#!/bin/bash
# t_shm_close_answer: the HTTP/1.0 shape, both ends under the shim with
# RDMASHIM_TRANSPORTS=shm. The server (two prefork workers) reads a request,
# writes its answer and closes at once; the client (4 threads) reads until
# EOF and checks every byte. Every other request waits 2 ms before its
# answer, so that upgrades complete before, during and after the answer. Answers of 100 B, 5 KB and 300 KB, 300
# connections each. Over TCP every answer arrives whole, then EOF; under the
# shim too: no reset, no short answer (a close once left the peer's SWITCH
# frame unread in the socket, and the kernel reset the connection, dropping
# the answer the client had not read yet). Some connections must have
# upgraded, or the run proves nothing. Last, 300 KB answers from a child
# per connection that exits without closing (the CGI shape): the exit
# settles the wire as a close would.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/close_answer"

CONNS=${CLOSE_ANSWER_CONNS:-300}
for run in 100 5000 300000 300000-exit; do
  answer=${run%-exit}
  extra=()
  [[ $run == *-exit ]] && extra=(--fork-exit 1)
  port=$(free_port)
  dir=$WORK/a$run
  mkdir -p "$dir"
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info
    RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
  start_bg "serve$run" shim "${vars[@]}" "$PROGS/close_answer" serve --port "$port" \
    --conns "$CONNS" --answer "$answer" --workers 2 --delay-us 2000 "${extra[@]}"
  pid=$BG_PID
  wait_ready "serve$run" >/dev/null || not_ok "answer $answer: server ready"
  got=$(with_shim "${vars[@]}" "$PROGS/close_answer" fetch --port "$port" --conns "$CONNS" \
    --answer "$answer" --parallel 4 2>&1)
  rc=0; wait_bg "$pid" 60 || rc=$?
  same "answer $run B: every answer whole, then EOF" "fetch: $CONNS ok, 0 short, 0 reset, 0 other errors" "$got"
  check "answer $run B: server exit 0 (got $rc)" test "$rc" -eq 0
  upgraded=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"upgrade.done"' || true)
  log "answer $run B: $upgraded upgrade.done lines (both ends) for $CONNS connections"
  check "answer $run B: connections upgraded ($upgraded upgrade.done)" test "$upgraded" -gt 0
  aborts=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"conn.abort"' || true)
  check "answer $run B: no connection aborted ($aborts)" test "$aborts" -eq 0
done
finish
