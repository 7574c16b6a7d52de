#!/bin/bash
# matrix/redis_cluster: a Redis Cluster of 3 masters (redis-server
# --cluster-enabled yes, each with its cluster bus on a port of its own,
# --cluster-port) joined by redis-cli --cluster create (16384 slots split
# in three; the nodes meet and gossip over the bus). Clients that follow
# the slots: redis-benchmark --cluster (it asks CLUSTER NODES, then keeps
# connections to every master, 12 per master, 20000 SETs and GETs with keys
# hash-tagged per node) and redis-cli -c reading 1000 SETs then 1000 GETs
# from stdin (it follows each MOVED redirection by connecting to the node
# named, so many short connections). All under the shim; the client ports
# and the bus ports are whitelisted. Result: --cluster create's exit
# status, every node's cluster_state, redis-benchmark's exit status and
# tests, the MD5 of the 1000 values read back (equal to those set) and
# every node's DBSIZE (the slots decide where each key lives).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd redis-benchmark
. "$(dirname "${BASH_SOURCE[0]}")/redis.inc"
MX_SWITCHED_BY="node1 node2 node3 bench"

"$PY3" - "$WORK" <<'PY'
import hashlib, random, sys
work = sys.argv[1]
rng = random.Random(91)
vals = [rng.randbytes(rng.randint(1, 1500)).hex() for _ in range(1000)]
with open(work + "/sets.txt", "w") as f:
    for i, v in enumerate(vals):
        f.write("SET c:%d %s\n" % (i, v))
with open(work + "/gets.txt", "w") as f:
    for i in range(1000):
        f.write("GET c:%d\n" % i)
open(work + "/want.md5", "w").write(hashlib.md5("".join(v + "\n" for v in vals).encode()).hexdigest() + "\n")
PY

mx_body() {
  local i p b pids=() ports=() out rc state all
  for i in 1 2 3; do
    p=$(free_port)
    b=$(free_port)
    ports+=("$p")
    mx_port "node$i" "$p"
    # The bus carries gossip pings (a few a second): whether a link
    # switches before the run ends is a timing.
    mx_port "bus$i" "$b" 0
    mkdir -p "$WORK/$MODE-node$i"
    redis_start "node$i" "$p" "$WORK/$MODE-node$i" --cluster-port "$b" --cluster-enabled yes \
      --cluster-config-file "$WORK/$MODE-node$i/nodes.conf" --cluster-node-timeout 15000
    pids+=("$BG_PID")
  done
  for p in "${ports[@]}"; do
    mx_wait_listen "$p" || { for i in "${pids[@]}"; do stop_bg "$i"; done; return; }
  done
  rc=0
  mx_fg create redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes \
    >"$WORK/$MODE-create.out" 2>&1 || rc=$?
  mx_result "cluster create exit $rc"
  mx_check "redis-cli --cluster create: exit status 0 (got $rc)" test "$rc" -eq 0
  for ((i = 0; i < 300; i++)); do
    all=1
    for p in "${ports[@]}"; do
      state=$(mx_fg cli-info redis-cli -h 127.0.0.1 -p "$p" CLUSTER INFO 2>/dev/null | tr -d '\r' | sed -n 's/^cluster_state://p')
      [[ $state == ok ]] || all=0
    done
    ((all)) && break
    sleep 0.1
  done
  mx_result "every node's cluster_state ok: $all"
  mx_check "every node's cluster_state is ok" test "$all" -eq 1
  rc=0
  mx_fg bench redis-benchmark --cluster -h 127.0.0.1 -p "${ports[0]}" -c 12 -n 20000 -t set,get -q \
    >"$WORK/$MODE-bench.out" 2>&1 || rc=$?
  mx_result "redis-benchmark --cluster exit $rc, tests: $(tr '\r' '\n' <"$WORK/$MODE-bench.out" | grep -oE '^(SET|GET): [0-9.]+ requests per second' | cut -d: -f1 | tr '\n' ' ')"
  mx_check "redis-benchmark --cluster: exit status 0 (got $rc)" test "$rc" -eq 0
  mx_check "redis-benchmark --cluster: SET and GET ran" \
    test "$(tr '\r' '\n' <"$WORK/$MODE-bench.out" | grep -cE '^(SET|GET): [0-9.]+ requests per second')" -eq 2
  rc=0
  mx_fg cli-sets redis-cli -c -h 127.0.0.1 -p "${ports[0]}" <"$WORK/sets.txt" >"$WORK/$MODE-sets.out" 2>&1 || rc=$?
  # redis-cli -c prints "-> Redirected to slot [S] located at HOST:PORT" before
  # the answer of each command it sent again to another node.
  mx_result "redis-cli -c 1000 SETs exit $rc: $(grep -v '^-> Redirected' "$WORK/$MODE-sets.out" | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  mx_check "redis-cli -c: 1000 OK (exit $rc)" test "$(grep -cx OK "$WORK/$MODE-sets.out")" -eq 1000
  rc=0
  mx_fg cli-gets redis-cli -c -h 127.0.0.1 -p "${ports[1]}" <"$WORK/gets.txt" >"$WORK/$MODE-gets.out" 2>&1 || rc=$?
  out=$(grep -v '^-> Redirected' "$WORK/$MODE-gets.out" | md5sum | cut -c1-32)
  mx_result "redis-cli -c 1000 GETs exit $rc, md5 $out"
  mx_same "redis-cli -c reads the 1000 values back (MD5)" "$(cat "$WORK/want.md5")" "$out"
  for i in 0 1 2; do
    mx_result "node$((i + 1)) DBSIZE $(mx_fg cli-dbsize redis-cli -h 127.0.0.1 -p "${ports[i]}" DBSIZE 2>&1)"
    mx_check "node$((i + 1)) still running" kill -0 "${pids[i]}"
  done
  for i in "${pids[@]}"; do stop_bg "$i"; done
}

mx_main
