#!/bin/bash
# matrix/iperf3: iperf3 (a control connection beside the data streams, all
# in one select loop per end): 64 MiB over 2 parallel streams, then 64 MiB
# in reverse (-R: the server sends). Result: the exit statuses, the bytes
# the sender counted (the 64 MiB asked, plus at most the sends of iperf3's
# last round: see below) and an error-free JSON at
# both ends; the receiver's count is checked too (every byte arrived, or the
# few still in flight when iperf3 stopped counting: at most the rings and
# socket buffers).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/iperf3.inc"
MX_SWITCHED_BY="client-P2 client-R server-P2 server-R"
MX_MIN_SWITCHED=2

mx_body() {
  local how extra
  for how in P2 R; do
    extra=(-P 2)
    [[ $how == R ]] && extra=(-R)
    iperf3_pair "$how" -n 64M "${extra[@]}" || return
    "$PY3" - "$WORK/$MODE-client-$how.json" "$WORK/$MODE-server-$how.out" >"$WORK/$MODE-$how.sum" <<'PY'
import json, sys
def load(f):
    try:
        return json.load(open(f))
    except (OSError, ValueError) as e:
        return {"error": "unreadable JSON: %s" % e}
c, s = load(sys.argv[1]), load(sys.argv[2])
end = c.get("end", {})
sent, got = end.get("sum_sent", {}).get("bytes", 0), end.get("sum_received", {}).get("bytes", 0)
print("errors:", c.get("error", "none"), s.get("error", "none"))
# iperf3's send loop (up to 10 sends per stream each round) goes on after
# the -n total within the round in which it was reached, as long as the
# socket takes more: a ring with room takes a block or two where a full
# loopback socket buffer would not. What buffers take is not the
# program's to rely on (integration/diff/README.md), so the count is
# checked to be the 64 MiB asked, plus at most that round's sends.
ask, over = 64 << 20, 10 * 2 * (128 << 10)
sys.stderr.write("sender counted %d bytes\n" % sent)
print("sent 64 MiB, at most one send round over:", ask <= sent <= ask + over)
slack = 4 * (1 << 20) + 8 * (1 << 20)
print("received all but what may be in flight:", 0 < got <= sent and sent - got <= slack)
PY
    cat "$WORK/$MODE-$how.sum" >>"$RES"
    mx_check "iperf3 $how: no error, 64 MiB sent, received in full or in flight" \
      test "$(tr '\n' ' ' <"$WORK/$MODE-$how.sum")" = "errors: none none sent 64 MiB, at most one send round over: True received all but what may be in flight: True "
  done
}

mx_main
