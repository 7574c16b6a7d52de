#!/bin/bash
# t_iperf3: an unmodified iperf3 pair (server -s -1, client -n 200M -J) with
# 1 stream, -P 4, -R and -P 4 -R; each variant without the shim and with both
# ends under it on the whitelisted port (tracked, never upgraded). Both ways:
# exit status 0, no "error" in either JSON, the sender reports the requested
# bytes (exactly with one stream; with -P 4 iperf3 itself may overshoot by up
# to 3 blocks), spread over all the streams, and in reverse mode the client
# received exactly what was sent. With the shim the trace shows the control
# connection and every data stream from both ends, agreeing on the 4-tuples.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
need_cmd iperf3 python3

BYTES=$((200 * 1024 * 1024))

# run_iperf LABEL MODE STREAMS REVERSE [VAR=V...]
run_iperf() {
  local label=$1 mode=$2 streams=$3 reverse=$4 port pid rc=0 crc=0
  shift 4
  local run=(no_shim) extra=(-P "$streams")
  [[ $mode == shim ]] && run=(with_shim "$@")
  [[ $reverse == 1 ]] && extra+=(-R)
  port=$PORT
  start_bg "$label-server" "$mode" "$@" iperf3 -s -1 -J -p "$port" -B 127.0.0.1
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "$label: iperf3 server listening"
    stop_bg "$pid"
    return
  fi
  "${run[@]}" iperf3 -c 127.0.0.1 -p "$port" -n "$BYTES" -J "${extra[@]}" \
    >"$WORK/$label-client.json" 2>"$WORK/$label-client.err" || crc=$?
  wait_bg "$pid" 30 || rc=$?
  check "$label: client exit status 0 (got $crc)" test "$crc" -eq 0
  check "$label: server exit status 0 (got $rc)" test "$rc" -eq 0
  tally_cmd "$PYTHON" - "$WORK/$label-client.json" "$WORK/$label-server.out" "$label" "$BYTES" \
    "$streams" "$reverse" <<'PY'
import json, sys
cf, sf, label, want, streams, reverse = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
def load(f):
    try:
        return json.load(open(f))
    except (OSError, ValueError) as e:
        return {"error": "unreadable JSON: %s" % e}
def say(cond, msg):
    print(("ok - " if cond else "not ok - ") + label + ": " + msg)
c, s = load(cf), load(sf)
say("error" not in c, "client JSON has no error (%s)" % c.get("error", "-"))
say("error" not in s, "server JSON has no error (%s)" % s.get("error", "-"))
end = c.get("end", {})
sent = end.get("sum_sent", {}).get("bytes", -1)
blk = c.get("start", {}).get("test_start", {}).get("blksize", 128 * 1024)
# With -n and P streams, iperf3 itself may send up to one block per stream
# beyond the limit (blocks already under way when the total crosses it);
# with one stream it stops exactly.
if streams == 1:
    say(sent == want, "sum_sent.bytes = %d requested (got %s)" % (want, sent))
else:
    say(want <= sent <= want + streams * blk,
        "sum_sent.bytes = %d requested, + at most %d blocks of %d (got %s)" % (want, streams, blk, sent))
per = [st.get("sender", {}).get("bytes", 0) for st in end.get("streams", [])]
say(len(per) == streams and sum(per) == sent and all(b > 0 for b in per),
    "%d streams, each sent > 0, summing to sum_sent (%s)" % (streams, per))
got = end.get("sum_received", {}).get("bytes", 0)
if reverse:
    say(got == sent, "reverse: the client received exactly what was sent, %s (got %s)" % (sent, got))
else:
    say(0 < got <= sent, "receiver counted 0 < %s <= %s bytes" % (got, sent))
PY
}

for variant in "1 0" "4 0" "1 1" "4 1"; do
  read -r streams reverse <<<"$variant"
  name="P$streams$([[ $reverse == 1 ]] && echo R)"
  PORT=$(free_port)
  run_iperf "$name-plain" plain "$streams" "$reverse"
  dir=$WORK/trace-$name
  mkdir -p "$dir"
  shim_vars "$dir" "$PORT"
  run_iperf "$name-shim" shim "$streams" "$reverse" "${SHIM_VARS[@]}"
  trace_py "$dir" "$name" "$PORT" "$streams" <<'PY'
name, port, streams = ARGS[0], int(ARGS[1]), int(ARGS[2])
L = name + " shim: "
lis = events("listen.track")
check(len(lis) >= 1 and all(port_of(r["local"]) == port for r in lis), L + "listen.track on %d" % port)
srv, cli = tracks("server", port), tracks("client", port)
check(len(srv) == 1 + streams, L + "server tracked control + %d streams (got %d)" % (streams, len(srv)))
check(len(cli) == 1 + streams, L + "client tracked control + %d streams (got %d)" % (streams, len(cli)))
check({conn_key(r) for r in srv} == {conn_key(r) for r in cli}, L + "both ends agree on the 4-tuples")
check(all(decided(r) for r in srv + cli), L + "all " + DECISION)
PY
done

finish
