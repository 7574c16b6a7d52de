#!/bin/bash
# matrix/socat_parallel: many one-way bulk streams at once through socat
# (socat.sh has 6 echoes through a proxy). Up: 12 socat clients at once,
# each sending its own 8 MB file (-u, then shutdown of its write side) to
# a listener (TCP-LISTEN,fork: a child per connection) that pipes each
# connection into sha256sum (SYSTEM, a file per peer port). Down: a
# listener serving one 16 MB file to every connection, 12
# clients at once reading it to their own file (a child per connection
# running cat). Both ends under the shim.
# Result: every client's exit status, the SHA-256 of each stream as the
# other end saw it (equal to the file's).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd socat sha256sum
MX_SWITCHED_BY="up-server down-server up1 down1"

mkdir -p "$WORK/in"
"$PY3" - "$WORK/in" <<'PY'
import random, sys
rng = random.Random(104)
for i in range(1, 13):
    open("%s/u%02d.bin" % (sys.argv[1], i), "wb").write(rng.randbytes(8 * 1000 * 1000))
open("%s/down.bin" % sys.argv[1], "wb").write(rng.randbytes(16 * 1000 * 1000))
PY
(cd "$WORK/in" && sha256sum u*.bin | cut -d' ' -f1 | sort) >"$WORK/up.want"
DOWN_SUM=$(sha256sum <"$WORK/in/down.bin" | cut -d' ' -f1)

mx_body() {
  local up down upid dpid i rc pids=() bad=() dir=$WORK/$MODE-socat got n
  up=$(free_port)
  down=$(free_port)
  mx_port up "$up"
  mx_port down "$down"
  mkdir -p "$dir/sums" "$dir/got"
  mx_bg up-server socat -u "TCP-LISTEN:$up,bind=127.0.0.1,fork,reuseaddr,backlog=64" \
    "SYSTEM:sha256sum >$dir/sums/\$SOCAT_PEERPORT"
  upid=$BG_PID
  # Each child opens the file itself (an OPEN address before the listener
  # would be one file offset shared by all the children).
  mx_bg down-server socat "TCP-LISTEN:$down,bind=127.0.0.1,fork,reuseaddr,backlog=64" \
    "SYSTEM:cat $WORK/in/down.bin"
  dpid=$BG_PID
  mx_wait_listen "$up" && mx_wait_listen "$down" || { stop_bg "$upid"; stop_bg "$dpid"; return; }
  for i in $(seq 1 12); do
    mx_bg "up$i" socat -u "OPEN:$WORK/in/u$(printf %02d "$i").bin" "TCP:127.0.0.1:$up"
    pids+=("$BG_PID")
    mx_bg "down$i" socat -u "TCP:127.0.0.1:$down" "CREATE:$dir/got/d$i.bin"
    pids+=("$BG_PID")
  done
  for i in "${!pids[@]}"; do
    rc=0
    wait_bg "${pids[i]}" 90 || rc=$?
    ((rc == 0)) || bad+=("client $i: exit $rc")
  done
  mx_result "clients failed: ${#bad[@]}"
  mx_check "the 24 clients exit 0 (${bad[*]:0:3})" test "${#bad[@]}" -eq 0
  # The listener's children may still be hashing the last bytes.
  for _ in $(seq 100); do
    n=$(find "$dir/sums" -type f -size +0 | wc -l)
    ((n >= 12)) && break
    sleep 0.1
  done
  sleep 0.3
  cat "$dir"/sums/* 2>/dev/null | cut -d' ' -f1 | sort >"$dir/up.got"
  mx_result "up: $(wc -l <"$dir/up.got") streams hashed, sha256 of the sorted sums $(sha256sum <"$dir/up.got" | cut -c1-16)"
  mx_check "up: the 12 streams arrived byte for byte (SHA-256)" cmp -s "$WORK/up.want" "$dir/up.got"
  got=0
  for i in $(seq 1 12); do
    [[ $( (sha256sum <"$dir/got/d$i.bin") 2>/dev/null | cut -d' ' -f1) == "$DOWN_SUM" ]] && got=$((got + 1))
  done
  mx_result "down: $got of 12 clients got the 16 MB byte for byte"
  mx_check "down: the 12 clients got the 16 MB byte for byte (SHA-256)" test "$got" -eq 12
  mx_check "up listener still running" kill -0 "$upid"
  mx_check "down listener still running" kill -0 "$dpid"
  stop_bg "$upid"
  stop_bg "$dpid"
}

mx_main
