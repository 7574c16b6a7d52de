#!/bin/bash
# matrix/rsync_daemon: rsync's own protocol over TCP (rsync --daemon
# --no-detach: the daemon forks a child per connection, which forks again
# into sender/receiver roles joined by pipes; the client's generator,
# sender and receiver likewise share the one socket across a fork). 40
# seeded files of 1 B to 4 MB: pushed to a writable module (rsync -a), then
# pulled back from it into a fresh directory, then 10 of them changed in
# place and pushed again (the delta algorithm: checksums one way, only the
# differing blocks the other), then pulled again. Both ends under the
# shim. Result: each rsync's exit status and the MD5 of every file after
# each pull (equal to the source's).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd rsync
MX_SWITCHED_BY="daemon push1 pull1 push2 pull2"

mx_seeded_files "$WORK/src" r 101 40 4000000 1 1000 65536 300000 4000000
cp -a "$WORK/src" "$WORK/src0"

# change_some DIR: rewrites 4 KiB in the middle of 10 files (seeded).
change_some() {
  "$PY3" - "$1" <<'PY'
import os, random, sys
rng = random.Random(102)
for i in range(1, 41, 4):
    p = "%s/r%02d.bin" % (sys.argv[1], i)
    n = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.seek(n // 2)
        f.write(rng.randbytes(min(4096, max(1, n - n // 2))))
PY
}

mx_body() {
  local port pid rc step dir=$WORK/$MODE-rsync
  port=$(free_port)
  mx_port rsyncd "$port"
  rm -rf "$WORK/src" && cp -a "$WORK/src0" "$WORK/src"
  mkdir -p "$dir/module"
  cat >"$dir/rsyncd.conf" <<CONF
pid file = $dir/rsyncd.pid
use chroot = no
uid = root
gid = root
[m]
  path = $dir/module
  read only = no
CONF
  mx_bg daemon rsync --daemon --no-detach --address=127.0.0.1 --port="$port" --config="$dir/rsyncd.conf" \
    --log-file="$dir/rsyncd.log"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  for step in push1 pull1 push2 pull2; do
    rc=0
    case $step in
      push*)
        # The files changed in place keep their size and may keep their
        # mtime's second: rsync's quick check would skip them (seen once,
        # without the shim). --ignore-times sends every file through the
        # delta algorithm instead.
        local again=()
        [[ $step == push2 ]] && { change_some "$WORK/src"; again=(--ignore-times); }
        mx_fg "$step" rsync -a --no-whole-file "${again[@]}" "$WORK/src/" "rsync://127.0.0.1:$port/m/" \
          >"$dir/$step.out" 2>&1 || rc=$?
        ;;
      pull*)
        mkdir -p "$dir/$step"
        mx_fg "$step" rsync -a "rsync://127.0.0.1:$port/m/" "$dir/$step/" >"$dir/$step.out" 2>&1 || rc=$?
        (cd "$dir/$step" && md5sum r*.bin) >"$dir/$step.md5" 2>&1
        (cd "$WORK/src" && md5sum r*.bin) >"$dir/$step.want"
        mx_result "$step md5 of the 40 files: $(md5sum <"$dir/$step.md5" | cut -c1-32)"
        mx_check "$step: the 40 files byte for byte (MD5)" cmp -s "$dir/$step.want" "$dir/$step.md5"
        ;;
    esac
    mx_result "$step exit $rc"
    mx_check "$step: exit status 0 (got $rc: $(head -c 200 "$dir/$step.out"))" test "$rc" -eq 0
  done
  mx_check "rsync daemon still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
