#!/bin/bash
# t_health: `rdmashim health` on fixture sysfs trees made here
# (RDMASHIM_SYSFS=DIR, laid out as /sys is): an rxe port and an mlx5 port,
# healthy; a port DOWN; a counter that jumps past its limit during the
# window (a background writer changes the file mid-window); a device with
# no counters; no device at all; garbled and unreadable files (state,
# counters, GIDs, a ports or class/infiniband that is a file); a device
# that vanishes during the window, counters garbled during it. Each must give its exit status (0
# healthy, 1 degraded, 2 no usable device) and name the cause, in text
# and in JSON that a parser accepts. Then the real /sys of this machine.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TOOL=$ROOT/build/bin/rdmashim
need_built "$TOOL"

# shellcheck source=integration/health_fixtures.sh
. "$ROOT/integration/health_fixtures.sh"

# health NAME ROOT [ARGS...]: runs health on ROOT, text to $WORK/NAME.txt,
# JSON (a second run) to $WORK/NAME.json; statuses in RC and JRC.
health() {
  local name=$1 root=$2
  shift 2
  RDMASHIM_SYSFS=$root timeout 30 "$TOOL" health --window 0.1 "$@" >"$WORK/$name.txt" 2>"$WORK/$name.err"
  RC=$?
  RDMASHIM_SYSFS=$root timeout 30 "$TOOL" health --window 0.1 --json "$@" >"$WORK/$name.json" 2>>"$WORK/$name.err"
  JRC=$?
}

# says NAME TEXT: the text output names TEXT (shown when not).
says() {
  if grep -qF -- "$2" "$WORK/$1.txt"; then ok "$1 says '$2'"; else
    not_ok "$1 says '$2'"; sed 's/^/    /' "$WORK/$1.txt" | head -30
  fi
}

# json NAME PYTHON-EXPRESSION: the JSON output parses and the expression
# over it (j) is true.
json() {
  if "$PYTHON" - "$WORK/$1.json" "$2" <<'PY'; then ok "$1 json: $2"; else not_ok "$1 json: $2"; fi
import json, sys
j = json.load(open(sys.argv[1]))
def names(p):
    return [c["name"] for c in p["counters"]]
ok = eval(sys.argv[2])
if not ok:
    print(json.dumps(j, indent=1)[:3000])
sys.exit(0 if ok else 1)
PY
}

F=$WORK/fixtures

# 1. rxe, healthy.
rxe_tree "$F/rxe"
health rxe "$F/rxe"
same "rxe healthy: exit" 0 "$RC"
same "rxe healthy: json exit" 0 "$JRC"
says rxe "health: healthy"
says rxe "rxe0 port 1: ACTIVE (LinkUp), 10 Gb/sec (1X QDR), Ethernet"
says rxe "gid 1: fe80:0000:0000:0000:5054:00ff:fe12:3456 RoCE v2 (eth0)"
says rxe "netdev eth0 1500"
json rxe 'j["status"] == "healthy" and j["exit_status"] == 0 and len(j["ports"]) == 1'
json rxe 'j["ports"][0]["state"] == "ACTIVE" and j["ports"][0]["state_code"] == 4 and j["ports"][0]["phys_state"] == "LinkUp"'
json rxe '[g["index"] for g in j["ports"][0]["gids"]] == [0, 1] and j["ports"][0]["gids"][1]["type"] == "RoCE v2"'
json rxe 'j["ports"][0]["netdev"] == "eth0" and j["ports"][0]["netdev_mtu"] == 1500 and j["ports"][0]["active_mtu"] is None'
# What rxe lacks is left out, not shown as 0; its traffic counters are not shown.
json rxe '"retry_exceeded_err" in names(j["ports"][0]) and "symbol_error" not in names(j["ports"][0])'
json rxe '"sent_pkts" not in names(j["ports"][0]) and "out_of_buffer" not in names(j["ports"][0])'

# 2. mlx5, healthy: both folders, CNP counters shown but not judged.
mlx5_tree "$F/mlx5"
health mlx5 "$F/mlx5"
same "mlx5 healthy: exit" 0 "$RC"
says mlx5 "health: healthy"
says mlx5 "netdev enp1s0f0 9000"
json mlx5 'all(n in names(j["ports"][0]) for n in ["symbol_error", "port_rcv_errors", "out_of_buffer", "local_ack_timeout_err", "np_cnp_sent", "rp_cnp_handled", "req_cqe_error", "packet_seq_err"])'
json mlx5 '"port_xmit_data" not in names(j["ports"][0]) and "rx_write_requests" not in names(j["ports"][0])'
json mlx5 '[c for c in j["ports"][0]["counters"] if c["name"] == "np_cnp_sent"][0]["limit"] is None'
json mlx5 '[c for c in j["ports"][0]["counters"] if c["name"] == "out_of_buffer"][0]["folder"] == "hw_counters"'
json mlx5 '[c for c in j["ports"][0]["counters"] if c["name"] == "symbol_error"][0]["delta"] == 0'

# 3. A port DOWN: degraded, the port and its state named.
rxe_tree "$F/down"
put "$F/down/class/infiniband/rxe0/ports/1/state" "1: DOWN"
put "$F/down/class/infiniband/rxe0/ports/1/phys_state" "3: Disabled"
health down "$F/down"
same "port down: exit" 1 "$RC"
same "port down: json exit" 1 "$JRC"
says down "health: degraded (1 of 1 port(s)): rxe0 port 1: port is DOWN, not ACTIVE (physical state Disabled)"
json down 'j["status"] == "degraded" and j["ports"][0]["problems"] == ["port is DOWN, not ACTIVE (physical state Disabled)"]'

# 4. A counter that jumps past its limit during the window: a writer
# changes out_of_buffer well inside a 3 s window.
jump_run() { # NAME ARGS...: the run, with the jump mid-window
  local name=$1 f=$F/jump/class/infiniband/mlx5_0/ports/1/hw_counters/out_of_buffer
  shift
  put "$f" 1000
  (sleep 1; printf '1500\n' >"$f") &
  local writer=$!
  RDMASHIM_SYSFS=$F/jump timeout 30 "$TOOL" health --window 3 "$@" >"$WORK/$name.txt" 2>"$WORK/$name.err"
  RC=$?
  wait "$writer"
}
mlx5_tree "$F/jump"
jump_run jump
same "counter jump: exit" 1 "$RC"
says jump "mlx5_0 port 1: counter out_of_buffer grew by 500 (limit 0)"
jump_run jump-json --json
cp "$WORK/jump-json.txt" "$WORK/jump-json.json"
same "counter jump: json exit" 1 "$RC"
json jump-json '[c for c in j["ports"][0]["counters"] if c["name"] == "out_of_buffer"][0]["delta"] == 500'
json jump-json 'j["ports"][0]["problems"] == ["counter out_of_buffer grew by 500 (limit 0)"]'
# The same jump under a limit raised above it is healthy; the limit is shown.
jump_run jump-max --max out_of_buffer=600
same "counter jump under --max out_of_buffer=600: exit" 0 "$RC"
says jump-max "+500"
jump_run jump-off --max out_of_buffer=off
same "counter jump with out_of_buffer=off: exit" 0 "$RC"

# 5. A device with no counters: judged on its state alone, and says so.
rxe_tree "$F/nocount"
rm -rf "$F/nocount/class/infiniband/rxe0/ports/1/hw_counters"
health nocount "$F/nocount"
same "no counters: exit" 0 "$RC"
says nocount "counters: none exposed"
json nocount 'j["ports"][0]["has_counters"] is False and j["ports"][0]["counters"] == []'

# 6. No device at all: an empty class/infiniband, and no such folder.
mkdir -p "$F/empty/class/infiniband"
health empty "$F/empty"
same "empty class/infiniband: exit" 2 "$RC"
says empty "no RDMA device: $F/empty/class/infiniband is empty"
json empty 'j["status"] == "no_device" and j["ports"] == [] and "is empty" in j["reason"]'
mkdir -p "$F/none"
health none "$F/none"
same "no class/infiniband: exit" 2 "$RC"
says none "does not exist (no RDMA driver loaded: load rdma_rxe or a NIC driver)"
# A device without a port is no usable device either.
mkdir -p "$F/noport/class/infiniband/rxe0/ports"
health noport "$F/noport"
same "device without ports: exit" 2 "$RC"
says noport "no usable RDMA device: 1 device(s)"

# 7. Garbled and unreadable files: one clear line each, never a crash.
rxe_tree "$F/garbled"
printf '\001\002 garbage\n' >"$F/garbled/class/infiniband/rxe0/ports/1/state"
printf 'not a number\n' >"$F/garbled/class/infiniband/rxe0/ports/1/hw_counters/rcvd_seq_err"
printf 'x\n' >"$F/garbled/class/net/eth0/mtu"
health garbled "$F/garbled"
same "garbled state: exit" 1 "$RC"
says garbled "PROBLEM: state file garbled: the port's state is unknown"
says garbled "note: counter rcvd_seq_err does not read as a number: left out"
says garbled "netdev eth0 unknown"
json garbled 'j["ports"][0]["state"] is None and j["ports"][0]["netdev_mtu"] is None'
json garbled '"rcvd_seq_err" not in names(j["ports"][0])'
# A garbled counter alone leaves the port healthy (it is left out, and said).
rxe_tree "$F/badcount"
printf '12abc\n' >"$F/badcount/class/infiniband/rxe0/ports/1/hw_counters/link_downed"
health badcount "$F/badcount"
same "garbled counter: exit" 0 "$RC"
says badcount "note: counter link_downed does not read as a number: left out"
# Unreadable (this runs as root, so a folder stands where a file should be).
rxe_tree "$F/unread"
rm "$F/unread/class/infiniband/rxe0/ports/1/state"
mkdir "$F/unread/class/infiniband/rxe0/ports/1/state"
health unread "$F/unread"
same "unreadable state: exit" 1 "$RC"
says unread "PROBLEM: state file Is a directory: the port's state is unknown"
# A state file missing altogether.
rxe_tree "$F/nostate"
rm "$F/nostate/class/infiniband/rxe0/ports/1/state"
health nostate "$F/nostate"
same "missing state: exit" 1 "$RC"
says nostate "state file missing"
# A counter file that can not be read (a folder in its place), garbled GID
# files, a rate far longer than any: named or left out, never a crash.
rxe_tree "$F/oddfiles"
P=$F/oddfiles/class/infiniband/rxe0/ports/1
rm "$P/hw_counters/retry_exceeded_err"
mkdir "$P/hw_counters/retry_exceeded_err"
printf '\377\376\001garbage\n' >"$P/gids/1"
printf '\001\n' >"$P/gid_attrs/types/0"
head -c 5000 /dev/zero | tr '\0' 'x' >"$P/rate"
printf 'not-a-gid-file\n' >"$P/gids/notanumber"
health oddfiles "$F/oddfiles"
same "unreadable counter, garbled GIDs: exit" 0 "$RC"
says oddfiles "note: counter retry_exceeded_err does not read as a number: left out"
says oddfiles "gid 0: fe80:0000:0000:0000:5054:00ff:fe12:3456 type unknown (eth0)"
json oddfiles '[g["index"] for g in j["ports"][0]["gids"]] == [0] and j["ports"][0]["gids"][0]["type"] is None'
# A device whose ports folder is a file, beside a good one: the good one
# is judged, the odd one has no port.
rxe_tree "$F/oddports"
mkdir -p "$F/oddports/class/infiniband/rxe1"
printf 'x\n' >"$F/oddports/class/infiniband/rxe1/ports"
health oddports "$F/oddports"
same "a device whose ports is a file, beside a good one: exit" 0 "$RC"
json oddports 'j["devices"] == 2 and len(j["ports"]) == 1'
rm -rf "$F/oddports/class/infiniband/rxe0"
health oddports-only "$F/oddports"
same "only a device whose ports is a file: exit" 2 "$RC"
says oddports-only "no usable RDMA device: 1 device(s)"
# A class/infiniband that is a file, not a folder.
mkdir -p "$F/classfile/class"
printf 'x\n' >"$F/classfile/class/infiniband"
health classfile "$F/classfile"
same "class/infiniband a file: exit" 2 "$RC"
says classfile "can not be read (Not a directory)"
# Every case's JSON parses (json.tool), whatever it holds.
for f in "$WORK"/*.json; do
  check "$(basename "$f") parses with json.tool" "$PYTHON" -m json.tool "$f" /dev/null
done

# 8. A device that vanishes during the window; and one whose state and
# counters go garbled during it (the counters are read twice).
rxe_tree "$F/vanish"
(sleep 1; rm -rf "$F/vanish/class/infiniband/rxe0") &
writer=$!
RDMASHIM_SYSFS=$F/vanish timeout 30 "$TOOL" health --window 3 >"$WORK/vanish.txt" 2>"$WORK/vanish.err"
RC=$?
wait "$writer"
same "vanished device: exit" 1 "$RC"
says vanish "counters vanished during the window"
RDMASHIM_SYSFS=$F/vanish timeout 30 "$TOOL" health --window 0.1 >"$WORK/vanished.txt" 2>&1
same "after the device vanished: exit" 2 "$?"
says vanished "no RDMA device: $F/vanish/class/infiniband is empty"
rxe_tree "$F/garble"
(sleep 1; printf '\001\n' >"$F/garble/class/infiniband/rxe0/ports/1/hw_counters/link_downed"
  printf '99999999999999999999999999\n' >"$F/garble/class/infiniband/rxe0/ports/1/hw_counters/rcvd_seq_err") &
writer=$!
RDMASHIM_SYSFS=$F/garble timeout 30 "$TOOL" health --window 3 >"$WORK/garble.txt" 2>"$WORK/garble.err"
RC=$?
wait "$writer"
same "counters garbled during the window: exit" 0 "$RC"
says garble "note: counter link_downed does not read as a number: left out"
says garble "note: counter rcvd_seq_err does not read as a number: left out"

# 9. Bad usage: exit 2 and one line.
for bad in "--window -1" "--window abc" "--max out_of_buffer" "--max =5" "--max x=-3" "--bogus"; do
  # shellcheck disable=SC2086
  RDMASHIM_SYSFS=$F/rxe timeout 30 "$TOOL" health $bad >"$WORK/usage.out" 2>"$WORK/usage.err"
  rc=$?
  check "health $bad: exit 2 with one line on stderr" test "$rc" = 2 -a "$(wc -l <"$WORK/usage.err")" = 1
done

# 10. This machine's real /sys (no RDMA device here unless rxe is loaded).
if [[ -d /sys/class/infiniband ]] && [[ -n $(ls /sys/class/infiniband) ]]; then
  log "this machine has RDMA devices: $(ls /sys/class/infiniband | tr '\n' ' ')"
  timeout 30 "$TOOL" health --window 0.2 >"$WORK/real.txt" 2>&1
  rc=$?
  check "real /sys: exit 0 or 1 ($rc)" test "$rc" -le 1
else
  timeout 30 "$TOOL" health --window 0.2 >"$WORK/real.txt" 2>&1
  rc=$?
  same "real /sys without a device: exit" 2 "$rc"
  says real "health: no RDMA device: /sys/class/infiniband"
  same "real /sys without a device: one plain line" 1 "$(wc -l <"$WORK/real.txt")"
fi

finish
