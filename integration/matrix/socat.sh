#!/bin/bash
# matrix/socat: socat at all three places. A proxy (TCP-LISTEN,fork: a child
# per connection, relaying between two legs with select) sits between 6
# concurrent socat clients (a file on stdin, the answer on stdout) and a
# backend (TCP-LISTEN,fork, each child running cat on a socketpair: an
# echo). Each client sends 1 B to 3 MB (seeded) and shuts its write side at
# the end of its file; that half-close has to travel through the proxy to
# cat and the echo's end back. Result: exit statuses and each echo's MD5
# (equal to what was sent).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd socat
MX_SWITCHED_BY="client@proxy proxy@backend"

mkdir -p "$WORK/in"
"$PY3" - "$WORK/in" <<'PY'
import random, sys
rng = random.Random(86)
for i, n in enumerate((1, 4096, 100000, 1000000, 3000000, rng.randint(1, 3000000))):
    open("%s/s%d.bin" % (sys.argv[1], i), "wb").write(rng.randbytes(n))
PY
(cd "$WORK/in" && md5sum s*.bin) >"$WORK/want.md5"

mx_body() {
  local pport bport ppid bpid dir f pids=() rc bad=0 p
  pport=$(free_port)
  bport=$(free_port)
  mx_port proxy "$pport"
  mx_port backend "$bport"
  dir=$WORK/$MODE-out
  mkdir -p "$dir"
  mx_bg backend socat -t 30 "TCP-LISTEN:$bport,bind=127.0.0.1,fork,reuseaddr" EXEC:cat
  bpid=$BG_PID
  mx_bg proxy socat -t 30 "TCP-LISTEN:$pport,bind=127.0.0.1,fork,reuseaddr" "TCP:127.0.0.1:$bport"
  ppid=$BG_PID
  if ! mx_wait_listen "$bport" || ! mx_wait_listen "$pport"; then
    stop_bg "$ppid"
    stop_bg "$bpid"
    return
  fi
  for f in "$WORK"/in/s*.bin; do
    mx_fg client socat -t 30 - "TCP:127.0.0.1:$pport" <"$f" >"$dir/$(basename "$f")" 2>"$dir/$(basename "$f").err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    rc=0
    wait "$p" || rc=$?
    ((rc != 0)) && bad=$((bad + 1))
  done
  mx_result "clients with a non-zero exit status: $bad"
  (cd "$dir" && md5sum s*.bin) >"$dir/got.md5" 2>&1
  cat "$dir/got.md5" >>"$RES"
  mx_check "6 clients exit 0 ($bad did not)" test "$bad" -eq 0
  mx_check "6 echoes through the proxy byte for byte (MD5)" cmp -s "$WORK/want.md5" "$dir/got.md5"
  cat "$dir"/*.err | head -n 5
  mx_check "proxy and backend still running" kill -0 "$ppid" "$bpid"
  stop_bg "$ppid"
  stop_bg "$bpid"
}

mx_main
