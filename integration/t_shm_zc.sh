#!/bin/bash
# t_shm_zc: one copy on shared memory (docs/ZEROCOPY.md), forced on
# (RDMASHIM_ZEROCOPY=on). build/progs/zc_shm (integration/progs/zc_shm.c)
# streams large blocking sends; the reader checks every byte against the
# pattern and the sender scribbles on its buffer as soon as send returns,
# so a late or misplaced write shows as a wrong byte.
#   (a) plain: 4 MiB sends into 4 MiB reads; zc_recvs > 0 in the reader,
#       zc_sends > 0 in the sender, every byte right.
#   (b) the same with MSG_WAITALL and 16 MiB sends into 8 MiB reads.
#   (c) withdrawal by a signal: SIGUSR1 (no SA_RESTART) at the reader every
#       ms; reads end with EINTR or short, never a wrong byte.
#   (d) withdrawal by SO_RCVTIMEO (1 ms) while the sender pauses between
#       messages, with every third read MSG_DONTWAIT.
#   (e) a sender killed (SIGKILL) in the middle of a send: the reader gets
#       a right prefix and then the end, in bounded time.
#   (f) RDMASHIM_ZEROCOPY=off: no zc counter at all (the fast path unchanged).
#   (g) another thread's reads settle the offers (build/progs/zc_settle:
#       a thread of the reader peeks without waiting, over and over): the
#       offering read still returns at once, never a 200 ms wait slice
#       later (the worst of 200 round trips under 150 ms).
# The hostile side (offers and DONEs that lie) is tests/test_shm_zc.c.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ZC=$PROGS/zc_shm
SETTLE=$PROGS/zc_settle
need_built "$ZC"
need_built "$SETTLE"
need_cmd python3

# zc_counter FILE... NAME: the NAME counter of the zc object in the
# process.stats lines of the trace files (0 when absent), summed.
zc_counter() {
  local name=${*: -1}
  python3 - "$name" "${@:1:$#-1}" <<'PYEOF'
import json, sys
name, total = sys.argv[1], 0
for path in sys.argv[2:]:
    for line in open(path):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == "process.stats":
            total += ev.get("zc", {}).get(name, 0)
print(total)
PYEOF
}

# run LABEL ZEROCOPY SERVER-ARGS... -- CLIENT-ARGS...: one stream; leaves
# the reader's and the sender's outputs and traces in $WORK/LABEL.
run() {
  local label=$1 zc=$2 dir port spid rc=0 src=0 sargs=() cargs=() side=s
  shift 2
  for a in "$@"; do
    if [[ $a == -- ]]; then side=c; continue; fi
    if [[ $side == s ]]; then sargs+=("$a"); else cargs+=("$a"); fi
  done
  dir=$WORK/$label
  mkdir -p "$dir/srv" "$dir/cli"
  port=$(free_port)
  start_bg "$label-server" shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
    "RDMASHIM_TRACE_FILE=$dir/srv/trace.%p.jsonl" RDMASHIM_ZEROCOPY="$zc" "$ZC" server "$port" "${sargs[@]}"
  spid=$BG_PID
  if ! wait_ready "$label-server" >/dev/null; then
    not_ok "$label: reader ready"
    stop_bg "$spid"
    return
  fi
  with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
    "RDMASHIM_TRACE_FILE=$dir/cli/trace.%p.jsonl" RDMASHIM_ZEROCOPY="$zc" "$ZC" client "$port" "${cargs[@]}" \
    >"$dir/client.out" 2>&1 || rc=$?
  wait_bg "$spid" 60 || src=$?
  CLIENT_RC=$rc
  SERVER_RC=$src
  SERVER_LINE=$(grep '^zc_shm:' "$WORK/$label-server.out" | tail -n 1)
  log "$label: reader: $SERVER_LINE (status $src); sender status $rc"
  ZC_RECVS=$(zc_counter "$dir"/srv/trace.*.jsonl zc_recvs)
  ZC_SENDS=$(zc_counter "$dir"/cli/trace.*.jsonl zc_sends)
  ZC_BYTES=$(zc_counter "$dir"/cli/trace.*.jsonl zc_bytes)
  log "$label: zc_recvs=$ZC_RECVS zc_sends=$ZC_SENDS zc_bytes=$ZC_BYTES"
}

# stream_ok LABEL: both ended well, every byte right, and one copy ran.
stream_ok() {
  same "$1: sender exit status" 0 "$CLIENT_RC"
  same "$1: reader exit status" 0 "$SERVER_RC"
  check "$1: reader OK, every byte right" grep -q '^zc_shm: OK' "$WORK/$1-server.out"
  check "$1: receives that got bytes with one copy (zc_recvs > 0)" test "$ZC_RECVS" -gt 0
  check "$1: sends that wrote with one copy (zc_sends > 0)" test "$ZC_SENDS" -gt 0
}

# (a)
run plain on --bytes 256M --buf 4M -- --bytes 256M --msg 4M
stream_ok plain

# (b)
run waitall on --bytes 256M --buf 8M --waitall -- --bytes 256M --msg 16M
stream_ok waitall

# (c)
run signals on --bytes 256M --buf 4M --signals -- --bytes 256M --msg 4M
stream_ok signals
intr=$(sed -n 's/.* intr=\([0-9]*\).*/\1/p' <<<"$SERVER_LINE")
check "signals: some reads ended by the signal (intr=$intr)" test "${intr:-0}" -gt 0

# (d)
run timeouts on --bytes 64M --buf 1M --rcvtimeo 1 --nonblock 3 -- --bytes 64M --msg 1M --pause-us 2000
stream_ok timeouts
tmo=$(sed -n 's/.* tmo=\([0-9]*\).*/\1/p' <<<"$SERVER_LINE")
check "timeouts: some reads ended by SO_RCVTIMEO (tmo=$tmo)" test "${tmo:-0}" -gt 0

# (e)
t0=$(date +%s%N)
run killed on --bytes 1G --buf 4M --die-after 1 -- --bytes 1G --msg 16M --die-after 100M
t1=$(date +%s%N)
same "killed: the sender died by SIGKILL (status 137)" 137 "$CLIENT_RC"
same "killed: reader exit status" 0 "$SERVER_RC"
check "killed: the reader's prefix is right and then the end came" grep -q '^zc_shm: OK' "$WORK/killed-server.out"
got=$(sed -n 's/.* bytes=\([0-9]*\).*/\1/p' <<<"$SERVER_LINE")
check "killed: the reader got at least the 100 MiB sent before (bytes=$got)" test "${got:-0}" -ge $((100 << 20))
check "killed: within 10 s ($(((t1 - t0) / 1000000)) ms)" test $(((t1 - t0) / 1000000)) -lt 10000

# (f)
run off off --bytes 64M --buf 4M -- --bytes 64M --msg 4M
same "off: sender exit status" 0 "$CLIENT_RC"
check "off: reader OK" grep -q '^zc_shm: OK' "$WORK/off-server.out"
same "off: no one-copy receive" 0 "$ZC_RECVS"
same "off: no one-copy send" 0 "$ZC_SENDS"

# (g)
port=$(free_port)
mkdir -p "$WORK/settle"
start_bg settle-server shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
  "RDMASHIM_TRACE_FILE=$WORK/settle/trace.%p.jsonl" RDMASHIM_ZEROCOPY=on "$SETTLE" server "$port" 200
spid=$BG_PID
if wait_ready settle-server >/dev/null; then
  rc=0
  with_shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info \
    "RDMASHIM_TRACE_FILE=$WORK/settle/trace.c%p.jsonl" RDMASHIM_ZEROCOPY=on "$SETTLE" client "$port" 200 \
    >"$WORK/settle-client.out" 2>&1 || rc=$?
  src=0
  wait_bg "$spid" 60 || src=$?
  line=$(grep '^zc_settle:' "$WORK/settle-client.out" | tail -n 1)
  log "settle: $line; reader: $(grep '^zc_settle:' "$WORK/settle-server.out" | tail -n 1)"
  same "settle: sender exit status" 0 "$rc"
  same "settle: reader exit status" 0 "$src"
  check "settle: reader OK, every byte right" grep -q '^zc_settle: OK' "$WORK/settle-server.out"
  recvs=$(zc_counter "$WORK"/settle/trace.[0-9]*.jsonl zc_recvs)
  check "settle: receives that got bytes with one copy (zc_recvs=$recvs)" test "$recvs" -gt 0
  worst=$(sed -n 's/.* worst_ms=\([0-9]*\).*/\1/p' <<<"$line")
  check "settle: no offering read slept on (worst round trip ${worst:-?} ms < 150)" test "${worst:-999}" -lt 150
else
  not_ok "settle: reader ready"
  stop_bg "$spid"
fi

finish
