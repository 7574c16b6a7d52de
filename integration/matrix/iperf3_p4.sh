#!/bin/bash
# matrix/iperf3_p4: iperf3 with 4 parallel streams (iperf3.sh has 2 and a
# reverse run): -P 4 -n 64M (4 data connections beside the control one,
# all in one select loop per end), then -P 4 -R -n 64M (the server sends on
# its 4 streams). Not --bidir: iperf3 3.12 ends a -n bidirectional test
# when one direction reaches the total, the other at whatever count it
# had then, a timing. A fresh one-shot server (-1) per run. Result: the exit
# statuses, an error-free JSON at both ends, and per direction the bytes
# the sender counted (the total asked, plus at most the sends of iperf3's
# last round: see iperf3.sh) and the receiver's count (every byte, or the
# few still in flight when iperf3 stopped counting).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/iperf3.inc"
MX_SWITCHED_BY="client-P4 client-R4 server-P4 server-R4"
MX_MIN_SWITCHED=4

mx_body() {
  local how extra ask
  for how in P4 R4; do
    extra=(-P 4 -n 64M)
    ask=64
    [[ $how == R4 ]] && extra=(-P 4 -R -n 64M)
    iperf3_pair "$how" "${extra[@]}" || return
    "$PY3" - "$WORK/$MODE-client-$how.json" "$WORK/$MODE-server-$how.out" "$ask" >"$WORK/$MODE-$how.sum" <<'PY'
import json, sys
def load(f):
    try:
        return json.load(open(f))
    except (OSError, ValueError) as e:
        return {"error": "unreadable JSON: %s" % e}
c, s = load(sys.argv[1]), load(sys.argv[2])
ask = int(sys.argv[3]) << 20
end = c.get("end", {})
print("errors:", c.get("error", "none"), s.get("error", "none"))
# Up to 10 sends of 128 KiB per stream in the round that reached the total.
over, slack = 10 * 4 * (128 << 10), 4 * (4 << 20) + 8 * (1 << 20)
pairs = [("sum_sent", "sum_received")]
for i, (a, b) in enumerate(pairs):
    sent, got = end.get(a, {}).get("bytes", 0), end.get(b, {}).get("bytes", 0)
    sys.stderr.write("direction %d: sender counted %d bytes, receiver %d\n" % (i, sent, got))
    print("direction %d: sent the total asked, at most one send round over:" % i, ask <= sent <= ask + over)
    print("direction %d: received all but what may be in flight:" % i, 0 < got <= sent and sent - got <= slack)
print("directions:", len(pairs))
PY
    cat "$WORK/$MODE-$how.sum" >>"$RES"
    mx_check "iperf3 $how: no error, the total sent, received in full or in flight" \
      test "$(grep -c 'False\|errors: .*[^e] \|unreadable' "$WORK/$MODE-$how.sum"):$(grep -c True "$WORK/$MODE-$how.sum")" \
      = 0:2
  done
}

mx_main
