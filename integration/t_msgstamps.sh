#!/bin/bash
# t_msgstamps: the per-message stamps (RDMASHIM_TEST_MSGSTAMPS=1,
# shim/core/msgstamps.h) on a real program: sockperf ping-pong 64 B for 2 s
# between an unmodified server and client, both under the shim over shared
# memory, the trace at warn. Each process writes its "msg.stamps" lines at
# exit (the server ends with SIGINT, through exit()): shm tx and rx, each a
# "spans" and a "phases" line. The numbers must be plausible and agree:
# thousands of messages, the client's sends as many as the server's
# receives (within the one in flight), every figure's count at most the
# messages, p50 and mean positive and under a second, "to" plus "after"
# equal to the total, the phases adding up to no more than the total (and
# to it within the rounding of each mean), each receive found one way, and
# the sender's post and the receiver's copy present in every message.
# Then the same run with the stamps off writes no such line.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
need_cmd sockperf python3

# run_pp NAME STAMPS: one ping-pong, traces in $WORK/NAME/
run_pp() {
  local name=$1 stamps=$2 port pid rc=0 src=0
  local dir=$WORK/$name
  mkdir -p "$dir"
  port=$(free_port)
  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=warn
              "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" RDMASHIM_TEST_MSGSTAMPS="$stamps")
  start_bg "$name-server" shim "${vars[@]}" sockperf sr --tcp -i 127.0.0.1 -p "$port"
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "$name: sockperf server listening"
    stop_bg "$pid"
    return
  fi
  # --mps: unpaced, shm outruns the sequence numbers sockperf sized for
  # the run and the client stops with "_seqN > m_maxSequenceNo".
  with_shim "${vars[@]}" sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t 2 -m 64 --mps 200000 \
    >"$WORK/$name-client.out" 2>&1 || rc=$?
  check "$name: client exit status 0 (got $rc)" test "$rc" -eq 0
  # timeout passes SIGINT on to sockperf, which exits through exit():
  # the shim's destructor runs and writes the stamps.
  kill -INT "$pid" 2>/dev/null
  wait_bg "$pid" 20 || src=$?
  check "$name: server exits on SIGINT (status $src)" test "$src" -eq 0
}

run_pp on 1
trace_py "$WORK/on" <<'PY'
lines = events("msg.stamps")
check(len(lines) == 8, "8 msg.stamps lines: tx and rx, spans and phases, in each of 2 processes (got %d)" % len(lines))
check(all(r.get("level") == "warn" and r.get("transport") == "shm" for r in lines),
      "all at warn, all shm")
by = {}
for r in lines:
    by.setdefault((r["_file"], r["dir"]), {})[r.get("part")] = r
procs = sorted({f for f, _ in by})
check(len(procs) == 2, "two processes wrote stamps (%s)" % procs)
tx_msgs, rx_msgs = {}, {}
for (f, d), parts in sorted(by.items()):
    who = "%s %s" % (f, d)
    if not check(set(parts) == {"spans", "phases"}, who + ": a spans and a phases line"):
        continue
    sp, ph = parts["spans"], parts["phases"]
    msgs = sp["msgs"]
    check(ph["msgs"] == msgs, who + ": both lines count the same messages (%d, %d)" % (msgs, ph["msgs"]))
    check(msgs >= 1000, who + ": at least 1000 messages in 2 s (%d)" % msgs)
    (tx_msgs if d == "tx" else rx_msgs)[f] = msgs
    fig = dict(sp["ns"])
    fig.update(ph["ns"])
    ok_shape = all(isinstance(v, list) and len(v) == 3 for v in fig.values())
    check(ok_shape, who + ": every figure is [count, mean ns, p50 ns]")
    if not ok_shape:
        continue
    check(all(0 < n <= msgs for n, _, _ in fig.values()), who + ": every count in 1..messages")
    check(all(0 < m < 1e9 and 0 < p < 1e9 for _, m, p in fig.values()),
          who + ": every mean and p50 positive and under a second")
    total = fig.get("total")
    if not check(total and total[0] == msgs, who + ": a total for every message"):
        continue
    phases = [k for k in ph["ns"]]
    s = sum(n * m for k, (n, m, _) in ph["ns"].items())
    tsum = total[0] * total[1]
    # Each mean is rounded down: the phases' sum can fall short of the
    # total's by at most one ns per phase per message, and pass it by at
    # most one ns per message.
    check(s <= tsum + total[0], who + ": the phases add up to no more than the total (%d <= %d ns)" % (s, tsum))
    check(s + len(phases) * total[0] >= tsum, who + ": and to it within rounding (%d of %d ns)" % (s, tsum))
    to, after = fig.get("to"), fig.get("after")
    if check(to and after and to[0] == after[0] == msgs, who + ": to and after for every message"):
        diff = to[1] + after[1] - total[1]
        check(-2 <= diff <= 2, who + ": to + after = total (%d + %d vs %d ns)" % (to[1], after[1], total[1]))
    check(fig.get("copy", [0])[0] == msgs, who + ": a copy in every message")
    if d == "tx":
        check(fig.get("post", [0])[0] == msgs, who + ": a post in every send")
    else:
        found = sp.get("found", {})
        check(set(found) == {"now", "spin", "arm", "sleep"} and sum(found.values()) == msgs,
              who + ": each receive found its data one way (%s)" % found)
        check(fig.get("publish", [0])[0] == msgs, who + ": a head published in every receive")
        if found.get("sleep"):
            check(fig.get("wake", [0])[0] == found["sleep"] and fig.get("sleep", [0])[0] >= found["sleep"],
                  who + ": a wake-up to data for every receive found after a sleep")
    check(isinstance(sp.get("clock_ns"), int) and 0 <= sp["clock_ns"] < 100000, who + ": the clock's cost given")
# Each request the client sent is one the server received, and each answer
# back; one may be in flight when the run ends.
if len(tx_msgs) == 2 and len(rx_msgs) == 2:
    a, b = procs
    check(abs(tx_msgs[a] - rx_msgs[b]) <= 1 and abs(tx_msgs[b] - rx_msgs[a]) <= 1,
          "each end's sends match the other's receives (%s, %s)" % (tx_msgs, rx_msgs))
PY

run_pp off 0
trace_py "$WORK/off" <<'PY'
check(not events("msg.stamps"), "stamps off: no msg.stamps line (%d)" % len(events("msg.stamps")))
PY
finish
