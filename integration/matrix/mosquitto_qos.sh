#!/bin/bash
# matrix/mosquitto_qos: mosquitto (one epoll loop) between mosquitto_sub and
# mosquitto_pub (libmosquitto), all three under the shim, at each QoS: 0
# (fire and forget), 1 (PUBLISH/PUBACK) and 2 (PUBLISH/PUBREC/PUBREL/
# PUBCOMP), 2000 messages of 1 B to 2 KiB each (mosquitto_pub -l reading
# 2000 lines, mosquitto_sub -C 2000), a new publisher and subscriber per
# QoS on one broker (no queue limit). Result per QoS: both clients' exit
# statuses, how many messages the subscriber got and their SHA-256 in order.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd mosquitto_pub mosquitto_sub
. "$(dirname "${BASH_SOURCE[0]}")/mosquitto.inc"
[[ -x /usr/sbin/mosquitto ]] || skip "mosquitto is not installed"
MX_SWITCHED_BY="broker sub-q0 sub-q1 sub-q2 pub-q0 pub-q1 pub-q2"

"$PY3" -c '
import random
rng = random.Random(43)
for i in range(2000):
    print("m%04d-" % i + "x" * rng.randint(0, 2048))
' >"$WORK/messages"

mx_body() {
  local port q rc_pub rc_sub sub_pid
  port=$(free_port)
  mx_port broker "$port"
  mosquitto_start "$port" "max_inflight_messages 20" || return
  for q in 0 1 2; do
    rc_pub=0 rc_sub=0
    mx_bg "sub-q$q" mosquitto_sub -h 127.0.0.1 -p "$port" -t "qos/$q" -q "$q" -C 2000 -W 60 -i "sub$q"
    sub_pid=$BG_PID
    # The subscription must be in place before the first message: wait
    # for the subscriber's connection, then a little.
    for _ in $(seq 50); do
      [[ $(ss -Htn state established "( dport = :$port )" 2>/dev/null | grep -c 127.0.0.1) -ge 1 ]] && break
      sleep 0.1
    done
    sleep 0.5
    mx_fg "pub-q$q" mosquitto_pub -h 127.0.0.1 -p "$port" -t "qos/$q" -q "$q" -l -i "pub$q" <"$WORK/messages" || rc_pub=$?
    wait_bg "$sub_pid" 60 || rc_sub=$?
    mx_result "QoS $q: publisher exit $rc_pub, subscriber exit $rc_sub," \
      "received $(wc -l <"$WORK/$MODE-sub-q$q.out") messages, sha256 $(sha256sum <"$WORK/$MODE-sub-q$q.out" | cut -c1-16)"
    mx_check "QoS $q: publisher exit status 0 (got $rc_pub)" test "$rc_pub" -eq 0
    mx_check "QoS $q: subscriber exit status 0 (got $rc_sub)" test "$rc_sub" -eq 0
    mx_check "QoS $q: subscriber got all 2000 in order ($(wc -l <"$WORK/$MODE-sub-q$q.out"))" \
      cmp -s "$WORK/$MODE-sub-q$q.out" "$WORK/messages"
  done
  mx_check "broker still running" kill -0 "$BROKER_PID"
  stop_bg "$BROKER_PID"
}

mx_main
