#!/bin/bash
# matrix/redis_replica: replication between two redis-servers. A master gets
# 5000 binary values (redis-cli --pipe); a replica starts (--replicaof), does
# its full sync (diskless: the master streams its RDB over the link), then
# the master gets 5000 more values and 3000 INCRs, which flow to the replica
# as a command stream. Result: the link came up, the replica caught up with
# the master's offset, and both servers' SHA-1 over all values (EVAL_RO on
# each, equal to the one computed here), DBSIZE and the counter.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/redis.inc"
MX_SWITCHED_BY="replica@master"

"$PY3" - "$WORK" <<'PY'
import hashlib, random, sys
work = sys.argv[1]
rng = random.Random(78)
vals = [rng.randbytes(rng.randint(1, 4000)) for _ in range(10000)]
def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
with open(work + "/first.resp", "wb") as f:
    for i in range(5000):
        f.write(resp(b"SET", b"r:%d" % i, vals[i]))
with open(work + "/second.resp", "wb") as f:
    for i in range(5000, 10000):
        f.write(resp(b"SET", b"r:%d" % i, vals[i]))
        if i % 5 != 0:
            f.write(resp(b"INCR", b"counter"))
open(work + "/want.sha1", "w").write(hashlib.sha1(b"|".join(vals)).hexdigest() + "\n")
PY
DIGEST=$(redis_digest r 10000)

# info PORT FIELD: one field of INFO replication.
info() {
  mx_fg cli-info redis-cli -h 127.0.0.1 -p "$1" INFO replication 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"
}

mx_body() {
  local mport rport mpid rpid out i up=0 caught=0 moff roff rc
  mport=$(free_port)
  rport=$(free_port)
  mx_port master "$mport"
  # Only redis-cli's short INFO polls connect to the replica: none has to
  # live long enough to switch.
  mx_port replica "$rport" 0
  redis_start master "$mport" "$WORK" --repl-diskless-sync yes --repl-diskless-sync-delay 0
  mpid=$BG_PID
  mx_wait_listen "$mport" || { stop_bg "$mpid"; return; }
  out=$(mx_fg pipe1 redis-cli -h 127.0.0.1 -p "$mport" --pipe <"$WORK/first.resp" 2>&1)
  mx_result "first 5000 to the master: $(grep -o 'errors: .*' <<<"$out")"
  mkdir -p "$WORK/$MODE-replica"
  redis_start replica "$rport" "$WORK/$MODE-replica" --replicaof 127.0.0.1 "$mport"
  rpid=$BG_PID
  mx_wait_listen "$rport" || { stop_bg "$mpid"; stop_bg "$rpid"; return; }
  for ((i = 0; i < 150; i++)); do
    [[ $(info "$rport" master_link_status) == up ]] && { up=1; break; }
    sleep 0.1
  done
  mx_result "replica link up after the full sync: $up"
  mx_check "the replica's link to the master is up" test "$up" -eq 1
  out=$(mx_fg pipe2 redis-cli -h 127.0.0.1 -p "$mport" --pipe <"$WORK/second.resp" 2>&1)
  mx_result "next 5000 and 4000 INCRs to the master: $(grep -o 'errors: .*' <<<"$out")"
  for ((i = 0; i < 150; i++)); do
    moff=$(info "$mport" master_repl_offset)
    roff=$(info "$rport" slave_repl_offset)
    [[ -n $moff && $moff == "$roff" ]] && { caught=1; break; }
    sleep 0.1
  done
  mx_result "replica caught up with the master's offset: $caught"
  mx_check "the replica caught up with the master's offset ($moff, replica $roff)" test "$caught" -eq 1
  for who in master replica; do
    local p=$mport
    [[ $who == replica ]] && p=$rport
    out=$(mx_fg "cli-$who" redis-cli -h 127.0.0.1 -p "$p" EVAL_RO "$DIGEST" 0 2>&1)
    mx_result "$who: SHA-1 of the values $out"
    mx_same "$who holds the 10000 values byte for byte (SHA-1)" "$(cat "$WORK/want.sha1")" "$out"
    mx_result "$who: DBSIZE $(mx_fg cli-dbsize redis-cli -h 127.0.0.1 -p "$p" DBSIZE 2>&1)," \
      "counter $(mx_fg cli-get redis-cli -h 127.0.0.1 -p "$p" GET counter 2>&1)"
  done
  for p in "$rport" "$mport"; do
    mx_fg cli-shutdown redis-cli -h 127.0.0.1 -p "$p" SHUTDOWN NOSAVE >/dev/null 2>&1
  done
  rc=0
  wait_bg "$rpid" 20 || rc=$?
  mx_result "replica exit $rc"
  rc=0
  wait_bg "$mpid" 20 || rc=$?
  mx_result "master exit $rc"
}

mx_main
