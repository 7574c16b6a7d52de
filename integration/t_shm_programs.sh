#!/bin/bash
# t_shm_programs: real, unmodified programs with both ends under the shim on a
# whitelisted port and RDMASHIM_TRANSPORTS=shm, so their connections upgrade
# to shared-memory rings.
#   redis    redis-server; redis-benchmark -n 10000 -c 50 -q with the default
#            test set, and again with -t get,set: exit 0, every test reports
#            a rate > 0, no error; the trace shows upgrade.done (transport
#            shm) for the benchmark's connections at both ends (50 per test),
#            the two ends agreeing on the 4-tuples; redis-cli SET / GET of a
#            1 MiB binary value round-trips exactly; SHUTDOWN, exit 0
#   iperf3   1 stream, -P 4, and -R, each -t 2 -J: exit 0 both ends, no error
#            in either JSON, every stream sent > 0, the totals add up, the
#            receiver's count is the sender's minus at most what can still be
#            in flight (the ring, 1 MiB per stream, plus TCP buffers), and
#            upgrade.done at both ends for the control and every data stream
#   sockperf server (sr --tcp) with ping-pong (--mps 1000000, see below),
#            throughput and under-load clients, -t 2 each: exit 0, no ERROR, observations > 0 and no
#            dropped/duplicated/out-of-order messages (latency tests), a
#            message rate > 0 (throughput); upgrade.done at both ends for
#            each client connection
# Each program writes its own trace files (trace.<who>-<pid>.jsonl).
: "${CMD_TIMEOUT:=120}"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built
need_cmd python3
have() { command -v "$1" >/dev/null 2>&1; }
if ! have redis-server && ! have iperf3 && ! have sockperf; then
  skip "none of redis-server, iperf3, sockperf is installed"
fi

RING_BYTES=$((1024 * 1024)) # RDMASHIM_RING_KB default

# vars DIR PORT WHO: the shim configuration of one program.
vars() {
  VARS=(RDMASHIM_PORTS="$2" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info
        "RDMASHIM_TRACE_FILE=$1/trace.$3-%p.jsonl")
}

# ------------------------------------------------------------------ redis
run_redis() {
  local dir=$WORK/redis port pid out rc t n rps lines
  mkdir -p "$dir"
  port=$(free_port)
  timeout 30 "$PYTHON" -c '
import random, sys
r = random.Random(20240602)
sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(1 << 20)))' >"$WORK/value.bin"
  printf '\n' | cat "$WORK/value.bin" - >"$WORK/value.expected"

  vars "$dir" "$port" server
  start_bg redis-server shim "${VARS[@]}" redis-server --save '' --appendonly no --port "$port" \
    --bind 127.0.0.1 --dir "$WORK" --daemonize no --logfile '' --unixsocket '' --protected-mode yes
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "redis: redis-server listening"
    tail -n 20 "$WORK/redis-server.out" "$WORK/redis-server.err"
    stop_bg "$pid"
    return
  fi
  # The default test set, then GET/SET only.
  for t in all getset; do
    local extra=()
    [[ $t == getset ]] && extra=(-t get,set)
    vars "$dir" "$port" "bench$t"
    rc=0
    out=$(with_shim "${VARS[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -n 10000 -c 50 -q "${extra[@]}" \
          2>"$WORK/bench-$t.err" | tr '\r' '\n') || rc=$?
    # The final line of each test: "NAME: N requests per second, p50=..."
    lines=$(grep -E '^[^ ].*: [0-9.]+ requests per second' <<<"$out")
    printf '%s\n' "$lines" >"$WORK/bench-$t.results"
    check "redis-benchmark ($t): exit status 0 (got $rc)" test "$rc" -eq 0
    n=$(grep -c . <<<"$lines")
    if [[ $t == all ]]; then
      check "redis-benchmark (default tests): at least 15 tests reported (got $n)" test "$n" -ge 15
    else
      check "redis-benchmark (-t get,set): SET and GET reported (got $n)" test "$n" -eq 2
    fi
    if awk -F': ' '{ split($2, a, " "); if (!(a[1] > 0)) bad = 1 } END { exit bad }' <<<"$lines"; then
      ok "redis-benchmark ($t): every test's rate > 0"
    else
      not_ok "redis-benchmark ($t): every test's rate > 0"
      printf '%s\n' "$lines" | sed 's/^/    /'
    fi
    if grep -qiE 'error|ERR ' <<<"$out" || [[ -s $WORK/bench-$t.err ]]; then
      not_ok "redis-benchmark ($t): no error"
      grep -iE 'error|ERR ' <<<"$out" | head -n 5
      head -n 5 "$WORK/bench-$t.err"
    else
      ok "redis-benchmark ($t): no error"
    fi
    sed "s/^/    [$t] /" "$WORK/bench-$t.results"
    echo "$n" >"$dir/tests.$t"
  done

  vars "$dir" "$port" cliset
  out=$(with_shim "${VARS[@]}" redis-cli -h 127.0.0.1 -p "$port" -x SET bigvalue <"$WORK/value.bin" 2>&1)
  same "redis-cli SET of 1 MiB" "OK" "$out"
  vars "$dir" "$port" cliget
  with_shim "${VARS[@]}" redis-cli -h 127.0.0.1 -p "$port" --raw GET bigvalue >"$WORK/got.bin" 2>&1
  check "redis-cli GET returns the 1 MiB value byte for byte" cmp -s "$WORK/value.expected" "$WORK/got.bin"
  vars "$dir" "$port" clistrlen
  out=$(with_shim "${VARS[@]}" redis-cli -h 127.0.0.1 -p "$port" STRLEN bigvalue 2>&1)
  same "redis-cli STRLEN" "1048576" "$out"
  vars "$dir" "$port" clishutdown
  with_shim "${VARS[@]}" redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
  rc=0; wait_bg "$pid" 30 || rc=$?
  check "redis-server exits 0 after SHUTDOWN (got $rc)" test "$rc" -eq 0
  check "redis-server stderr empty" test ! -s "$WORK/redis-server.err"

  trace_py "$dir" "$port" "$(cat "$dir/tests.all")" "$(cat "$dir/tests.getset")" <<'PY'
port, n_all, n_gs = int(ARGS[0]), int(ARGS[1]), int(ARGS[2])
def who(r):
    return r["_file"].split(".")[1].rsplit("-", 1)[0]
done = events("upgrade.done", reason="upgraded")
check(all(r.get("transport") == "shm" for r in done), "redis: every upgrade.done says transport shm (%d)" % len(done))
srv_done = {conn_key(r) for r in done if who(r) == "server" and r.get("role") == "server"}
srv_tracks = [r for r in tracks("server", port)]
print("    redis-server: %d connections tracked, %d upgraded" % (
    len(srv_tracks), len([r for r in done if who(r) == "server" and r.get("role") == "server"])))
for bench, n in (("benchall", n_all), ("benchgetset", n_gs)):
    cl = [r for r in tracks("client", port) if who(r) == bench]
    # Counted as records: over a thousand short connections the kernel may
    # hand out the same ephemeral port (so the same 4-tuple) again.
    cd = [r for r in done if who(r) == bench and r.get("role") == "client"]
    want = 50 * n
    print("    %s: %d connections, %d upgraded at the client" % (bench, len(cl), len(cd)))
    check(len(cd) >= want, "redis: %s: upgrade.done at the client for the 50 connections of each of its %d tests (%d >= %d)"
          % (bench, n, len(cd), want))
    check({conn_key(r) for r in cd} <= srv_done, "redis: %s: each of them upgraded at the server too (same 4-tuple)" % bench)
    fails = [r for r in events("upgrade.fail") if who(r) == bench]
    check(not fails, "redis: %s: no upgrade.fail (%s)" % (bench, sorted({r.get("reason") for r in fails})))
for cli in ("cliset", "cliget"):
    cd = [r for r in done if who(r) == cli]
    print("    redis-cli %s: %s" % (cli[3:], "upgraded (%d upgrade.done)" % len(cd) if cd else "stayed on TCP (short-lived)"))
sfails = [r for r in events("upgrade.fail") if who(r) == "server"]
check({r.get("reason") for r in sfails} <= {"peer_closed", "shutdown"},
      "redis: the server's upgrade.fail, if any, only for connections closed mid-handshake (%s)" %
      sorted({r.get("reason") for r in sfails}))
PY
}

# ----------------------------------------------------------------- iperf3
run_iperf() {
  local name=$1 streams=$2 reverse=$3 dir port pid rc crc
  local extra=(-P "$streams")
  [[ $reverse == 1 ]] && extra+=(-R)
  dir=$WORK/iperf-$name
  mkdir -p "$dir"
  port=$(free_port)
  vars "$dir" "$port" server
  start_bg "iperf-$name-server" shim "${VARS[@]}" iperf3 -s -1 -J -p "$port" -B 127.0.0.1
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "iperf3 $name: server listening"
    stop_bg "$pid"
    return
  fi
  vars "$dir" "$port" client
  crc=0
  with_shim "${VARS[@]}" iperf3 -c 127.0.0.1 -p "$port" -t 2 -J "${extra[@]}" \
    >"$dir/client.json" 2>"$dir/client.err" || crc=$?
  rc=0; wait_bg "$pid" 30 || rc=$?
  check "iperf3 $name: client exit status 0 (got $crc)" test "$crc" -eq 0
  check "iperf3 $name: server exit status 0 (got $rc)" test "$rc" -eq 0
  tally_cmd "$PYTHON" - "$dir/client.json" "$WORK/iperf-$name-server.out" "iperf3 $name" "$streams" "$reverse" \
    "$RING_BYTES" <<'PY'
import json, sys
cf, sf, label, streams, reverse, ring = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1", int(sys.argv[6])
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
sent = end.get("sum_sent", {}).get("bytes", 0)
got = end.get("sum_received", {}).get("bytes", 0)
per = [st.get("sender", {}).get("bytes", 0) for st in end.get("streams", [])]
perr = [st.get("receiver", {}).get("bytes", 0) for st in end.get("streams", [])]
say(len(per) == streams and all(b > 0 for b in per) and sum(per) == sent,
    "%d streams, each sent > 0, summing to sum_sent %d (%s)" % (streams, sent, per))
say(sum(perr) == got, "per-stream received bytes sum to sum_received %d" % got)
slack = streams * ring + 8 * 1024 * 1024
say(0 < got <= sent and sent - got <= slack,
    "received %d of %d sent: short by %d, at most the ring + TCP buffers in flight (%d)" % (got, sent, sent - got, slack))
# The server's own JSON tells the same totals from its side.
send = s.get("end", {})
if reverse:
    say(send.get("sum_sent", {}).get("bytes") == sent, "server's sum_sent = client's (%s)" % send.get("sum_sent", {}).get("bytes"))
else:
    say(send.get("sum_received", {}).get("bytes") == got, "server's sum_received = client's (%s)" % send.get("sum_received", {}).get("bytes"))
bps = end.get("sum_received", {}).get("bits_per_second", 0)
print("    %s: %.2f Gbit/s received, %d bytes sent, %d received" % (label, bps / 1e9, sent, got))
PY
  trace_py "$dir" "iperf3 $name" "$port" "$streams" <<'PY'
label, port, streams = ARGS[0], int(ARGS[1]), int(ARGS[2])
L = label + ": "
srv, cli = tracks("server", port), tracks("client", port)
done = events("upgrade.done", reason="upgraded", transport="shm")
ds = {conn_key(r) for r in done if r.get("role") == "server"}
dc = {conn_key(r) for r in done if r.get("role") == "client"}
check(len(srv) == 1 + streams and len(cli) == 1 + streams,
      L + "control + %d streams tracked at both ends (server %d, client %d)" % (streams, len(srv), len(cli)))
check(ds == dc == {conn_key(r) for r in cli},
      L + "upgrade.done transport=shm at both ends for every connection (server %d, client %d)" % (len(ds), len(dc)))
check(not events("upgrade.fail"), L + "no upgrade.fail")
PY
}

# --------------------------------------------------------------- sockperf
run_sockperf() {
  local dir=$WORK/sockperf port pid rc test
  mkdir -p "$dir"
  port=$(free_port)
  vars "$dir" "$port" server
  start_bg sockperf-server shim "${VARS[@]}" sockperf sr --tcp -i 127.0.0.1 -p "$port"
  pid=$BG_PID
  if ! wait_listen "$port"; then
    not_ok "sockperf: server listening"
    stop_bg "$pid"
    return
  fi
  for test in ping-pong throughput under-load; do
    vars "$dir" "$port" "$test"
    # ping-pong: an explicit rate. At the default (--mps=max) sockperf sizes
    # its per-message table for a rate that shared memory exceeds (over a
    # million round trips a second here), and then stops with "ERROR: _seqN >
    # m_maxSequenceNo" although every reply was right; with --mps it sizes
    # the table from the rate it is given.
    local mps=()
    [[ $test == ping-pong ]] && mps=(--mps 1000000)
    rc=0
    with_shim "${VARS[@]}" sockperf "$test" --tcp -i 127.0.0.1 -p "$port" -t 2 -m 64 "${mps[@]}" \
      >"$WORK/sockperf-$test.out" 2>&1 || rc=$?
    check "sockperf $test -t 2: exit status 0 (got $rc)" test "$rc" -eq 0
    check_sockperf_report "sockperf $test" "$test" "$WORK/sockperf-$test.out"
  done
  check "sockperf: server still running after the three clients" kill -0 "$pid"
  stop_bg "$pid"
  if grep -qi 'ERROR' "$WORK/sockperf-server.out" "$WORK/sockperf-server.err"; then
    not_ok "sockperf: no ERROR from the server"
    grep -hi 'ERROR' "$WORK/sockperf-server.out" "$WORK/sockperf-server.err" | head -n 5
  else
    ok "sockperf: no ERROR from the server"
  fi
  trace_py "$dir" "$port" <<'PY'
port = int(ARGS[0])
def who(r):
    return r["_file"].split(".")[1].rsplit("-", 1)[0]
done = events("upgrade.done", reason="upgraded", transport="shm")
ds = {conn_key(r) for r in done if r.get("role") == "server"}
for t in ("ping-pong", "throughput", "under-load"):
    cl = [r for r in tracks("client", port) if who(r) == t]
    dc = {conn_key(r) for r in done if who(r) == t and r.get("role") == "client"}
    check(len(cl) == 1 and dc == {conn_key(r) for r in cl} and dc <= ds,
          "sockperf %s: its connection upgraded at both ends (client tracks %d, upgrade.done %d)" % (t, len(cl), len(dc)))
check(not events("upgrade.fail"), "sockperf: no upgrade.fail")
PY
}

if have redis-server && have redis-benchmark && have redis-cli; then
  run_redis
else
  log "redis-server/redis-benchmark/redis-cli not installed: redis part skipped"
fi
if have iperf3; then
  run_iperf P1 1 0
  run_iperf P4 4 0
  run_iperf R 1 1
else
  log "iperf3 not installed: iperf3 part skipped"
fi
if have sockperf; then
  run_sockperf
else
  log "sockperf not installed: sockperf part skipped"
fi

finish
