#!/bin/bash
# matrix/mosquitto: a publish/subscribe broker with acknowledged delivery.
# mosquitto (one epoll loop) between a subscriber and a publisher, both
# mosquitto's own clients (libmosquitto), all three under the shim, MQTT
# QoS 1 (each message acknowledged, PUBLISH/PUBACK both ways): 2000
# messages of 1 B to 2 KiB (no queue limit: a full queue drops messages
# by design, and how full it gets depends on timing). Result: how many the subscriber got, their
# SHA-256 in order, both clients' exit statuses.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/mosquitto.inc"

mx_body() {
  local port rc_pub=0 rc_sub=0 sub_pid
  command -v mosquitto >/dev/null || command -v /usr/sbin/mosquitto >/dev/null || {
    mx_result "mosquitto missing"
    return
  }
  port=$(free_port)
  mx_port broker "$port"
  mosquitto_start "$port" || return
  "$PY3" -c '
import random
rng = random.Random(42)
for i in range(2000):
    print("m%04d-" % i + "x" * rng.randint(0, 2048))
' >"$WORK/$MODE-messages"
  mx_bg sub mosquitto_sub -h 127.0.0.1 -p "$port" -t bench/t -q 1 -C 2000 -W 90 -i sub
  sub_pid=$BG_PID
  # The subscription must be in place before the first message: the
  # broker lists it in its log only at debug level, so wait for the
  # subscriber's connection to be established instead, then a little.
  for _ in $(seq 50); do
    ss -tn state established "( dport = :$port )" 2>/dev/null | grep -q 127.0.0.1 && break
    sleep 0.1
  done
  sleep 0.5
  mx_fg pub mosquitto_pub -h 127.0.0.1 -p "$port" -t bench/t -q 1 -l -i pub <"$WORK/$MODE-messages" || rc_pub=$?
  wait_bg "$sub_pid" 90 || rc_sub=$?
  mx_result "publisher exit $rc_pub, subscriber exit $rc_sub"
  mx_result "received $(wc -l <"$WORK/$MODE-sub.out") messages, sha256 $(sha256sum <"$WORK/$MODE-sub.out" | cut -c1-16)"
  mx_check "publisher exit status 0 (got $rc_pub)" test "$rc_pub" -eq 0
  mx_check "subscriber got all 2000 in order" cmp -s "$WORK/$MODE-sub.out" "$WORK/$MODE-messages"
  mx_check "broker still running" kill -0 "$BROKER_PID"
  stop_bg "$BROKER_PID"
}

mx_main
