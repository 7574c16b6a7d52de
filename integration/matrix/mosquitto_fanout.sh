#!/bin/bash
# matrix/mosquitto_fanout: fan-out through an MQTT broker (mosquitto: one
# epoll loop writing each message to every subscriber's socket): 20
# mosquitto_sub subscribers on one topic at QoS 1, one mosquitto_pub
# sending 1500 messages of 1 B to 4 KiB (seeded) at QoS 1 (-l, one
# connection); each subscriber must get all 1500 in order (-C 1500). Then
# a second topic, QoS 1, the other way round: 20 publishers at once, 100
# messages each, to one subscriber (-C 2000), which must get every message
# once (the order between publishers is a timing: compared sorted). All
# under the shim. Result: every client's exit status, how many
# subscribers got the 1500 in order, and the count and sorted SHA-256 of
# what the single subscriber got.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd mosquitto_pub mosquitto_sub
. "$(dirname "${BASH_SOURCE[0]}")/mosquitto.inc"
[[ -x /usr/sbin/mosquitto ]] || skip "mosquitto is not installed"
MX_SWITCHED_BY="broker pub sub1 sub20 fanin"

"$PY3" - "$WORK" <<'PY'
import random, sys
rng = random.Random(103)
with open(sys.argv[1] + "/messages", "w") as f:
    for i in range(1500):
        f.write("m%04d-" % i + "y" * rng.randint(0, 4096) + "\n")
for p in range(20):
    with open(sys.argv[1] + "/fanin.%d" % p, "w") as f:
        for i in range(100):
            f.write("p%02d-%03d-" % (p, i) + "z" * rng.randint(0, 1000) + "\n")
PY
cat "$WORK"/fanin.* | sort >"$WORK/fanin.want"

# wait_subs PORT N: until N connections to the broker are established.
wait_subs() {
  for _ in $(seq 100); do
    [[ $(ss -Htn state established "( dport = :$1 )" 2>/dev/null | grep -c 127.0.0.1) -ge $2 ]] && break
    sleep 0.1
  done
  sleep 0.5
}

mx_body() {
  local port i rc pids=() good=0 bad=() out
  port=$(free_port)
  mx_port broker "$port"
  mosquitto_start "$port" "max_inflight_messages 20" || return
  for i in $(seq 20); do
    mx_bg "sub$i" mosquitto_sub -h 127.0.0.1 -p "$port" -t fan/out -q 1 -C 1500 -W 90 -i "sub$i"
    pids+=("$BG_PID")
  done
  wait_subs "$port" 20
  rc=0
  mx_fg pub mosquitto_pub -h 127.0.0.1 -p "$port" -t fan/out -q 1 -l -i pub <"$WORK/messages" || rc=$?
  mx_result "fan-out publisher exit $rc"
  mx_check "fan-out publisher: exit status 0 (got $rc)" test "$rc" -eq 0
  for i in $(seq 20); do
    rc=0
    wait_bg "${pids[i - 1]}" 90 || rc=$?
    if ((rc == 0)) && cmp -s "$WORK/$MODE-sub$i.out" "$WORK/messages"; then
      good=$((good + 1))
    else
      bad+=("sub$i: exit $rc, $(wc -l <"$WORK/$MODE-sub$i.out") messages")
    fi
  done
  mx_result "fan-out: $good of 20 subscribers got the 1500 messages in order"
  mx_check "fan-out: every subscriber exits 0 with the 1500 messages in order (${bad[*]:0:3})" test "$good" -eq 20
  mx_bg fanin mosquitto_sub -h 127.0.0.1 -p "$port" -t fan/in -q 1 -C 2000 -W 90 -i fanin
  out=$BG_PID
  wait_subs "$port" 1
  pids=()
  # The 20 publishers at once: one background shell per file.
  for i in $(seq 0 19); do
    mx_bg "pubin$i" sh -c 'exec mosquitto_pub -h 127.0.0.1 -p "$1" -t fan/in -q 1 -l -i "pin$2" <"$3"' \
      pubin "$port" "$i" "$WORK/fanin.$i"
    pids+=("$BG_PID")
  done
  bad=()
  for i in $(seq 0 19); do
    rc=0
    wait_bg "${pids[i]}" 90 || rc=$?
    ((rc == 0)) || bad+=("pubin$i: exit $rc")
  done
  mx_result "fan-in: publishers failed: ${#bad[@]}"
  mx_check "fan-in: the 20 publishers exit 0 (${bad[*]:0:3})" test "${#bad[@]}" -eq 0
  rc=0
  wait_bg "$out" 90 || rc=$?
  sort "$WORK/$MODE-fanin.out" >"$WORK/$MODE-fanin.sorted"
  mx_result "fan-in: subscriber exit $rc, $(wc -l <"$WORK/$MODE-fanin.sorted") messages," \
    "sorted sha256 $(sha256sum <"$WORK/$MODE-fanin.sorted" | cut -c1-16)"
  mx_check "fan-in: the subscriber got each of the 2000 messages once" cmp -s "$WORK/fanin.want" "$WORK/$MODE-fanin.sorted"
  mx_check "broker still running" kill -0 "$BROKER_PID"
  stop_bg "$BROKER_PID"
}

mx_main
