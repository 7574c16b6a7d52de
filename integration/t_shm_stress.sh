#!/bin/bash
# t_shm_stress: the integrity stress tool (integration/stress/) with
# both ends under the shim and RDMASHIM_TRANSPORTS=shm, so every connection is
# upgraded to the shared-memory rings after its handshake.
#   1. 1 GiB total over 8 connections, mixed modes (blocking, nonblock,
#      epoll-et per connection), half-close: both sides exit 0, and for every
#      connection the client's byte counts and CRC32C equal the server's
#   2. 1 GiB total over 64 connections on the epoll-et event loops (both
#      ends), the same checks
#   For both, the trace must show upgrade.done (reason upgraded, transport
#   shm) for every connection at both ends (counted, and matched by 4-tuple
#   to the conn.track lines), no upgrade.fail, and tx.switch in both
#   directions, but for a direction the program shut before its upgrade was
#   through (upgrade.done's tx_kept "shut"; unbounded streams only).
#   3. negative: the server flips one byte (--corrupt-at) well past the
#      switch, on the ring: the client must FAIL naming that offset, and the
#      trace proves the connection was upgraded (the check can fail over shm).
# SOAK=SECS: instead of 1, 2 and 3, runs 1 and 2 with --duration SECS
# (unbounded streams, one after the other) and the same checks (not used in
# CI).
# STRESS_DURATION=SECS: 1 and 2 stream for that long instead of moving
# STRESS_BYTES (no volume check), then 3 as usual. The sanitizer runs use
# it: there a connection's share of the bytes (one direction may carry less
# than a MiB) can sit whole in the kernel's socket buffers after one or two
# calls, and the event loop, busy for hundreds of milliseconds with its
# other connections, may next come back to it when its stream is over, so
# it ends on TCP with its upgrade half done (seen under TSan, 1 of 64,
# `peer_closed`, and once under ASan: the server's first call on that
# connection came 0.4 s after its accept).
# An unbounded stream keeps every connection in calls until its upgrade is
# long done, so "every connection upgraded" stays a check of the shim.
# Tunables: STRESS_BYTES (default 1G), STRESS_SEED (default 1).
: "${CMD_TIMEOUT:=180}"
SOAK=${SOAK:-}
DURATION=${STRESS_DURATION:-}
[[ -z $DURATION || $DURATION =~ ^[0-9]+$ ]] || { echo "STRESS_DURATION must be a number of seconds"; exit 1; }
if [[ -n $SOAK ]]; then
  [[ $SOAK =~ ^[0-9]+$ ]] || { echo "SOAK must be a number of seconds"; exit 1; }
  CMD_TIMEOUT=$((SOAK + 180))
  BG_TIMEOUT=$((SOAK + 240))
fi
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STRESS=$PROGS/stress
need_built "$STRESS"
need_cmd python3

BYTES=${STRESS_BYTES:-1G}
MIN_BYTES=$(numfmt --from=iec "$BYTES") || { echo "STRESS_BYTES=$BYTES is no size"; exit 1; }
SEED=${STRESS_SEED:-1}
TMO=$((CMD_TIMEOUT - 20))

# shm_vars DIR PORT: both ends upgrade to shm; info trace per pid in DIR.
shm_vars() {
  SHM_VARS=(RDMASHIM_PORTS="$2" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info
            "RDMASHIM_TRACE_FILE=$1/trace.%p.jsonl")
}

# run_pair LABEL CONNS SERVER-MODE CLIENT-ARGS...: server and client, both
# under the shim; checks exit codes, per-connection CRCs and the trace.
run_pair() {
  local label=$1 conns=$2 smode=$3 port dir spid rc src t0 t1 line cli srv
  shift 3
  dir=$WORK/$label
  mkdir -p "$dir"
  port=$(free_port)
  shm_vars "$dir" "$port"
  start_bg "$label-server" shim "${SHM_VARS[@]}" "$STRESS" server --port "$port" --bind 127.0.0.1 \
    --exit-after "$conns" --mode "$smode" --seed "$SEED" --timeout "$TMO"
  spid=$BG_PID
  if ! wait_ready "$label-server" >/dev/null; then
    not_ok "$label: server ready"
    stop_bg "$spid"
    return
  fi
  rc=0
  t0=$(date +%s%N)
  with_shim "${SHM_VARS[@]}" "$STRESS" client --host 127.0.0.1 --port "$port" --conns "$conns" \
    --seed "$SEED" --timeout "$TMO" -v "$@" >"$WORK/$label-client.out" 2>"$WORK/$label-client.err" || rc=$?
  t1=$(date +%s%N)
  line=$(tail -n 1 "$WORK/$label-client.out")
  log "$label: $line (status $rc, $(( (t1 - t0) / 1000000 )) ms)"
  check "$label: client exit 0 and OK line" test "$rc" -eq 0 -a "$(awk '{print $2}' <<<"$line")" = OK
  src=0
  wait_bg "$spid" 60 || src=$?
  same "$label: server exit status" 0 "$src"
  same "$label: server verdict" "stress-server: OK conns=$conns" \
    "$(grep -o '^stress-server: [A-Z]* conns=[0-9]*' "$WORK/$label-server.out")"
  cli=$(awk '$2 ~ /^conn=/ && $3 == "OK" { print $2, $5, $6, $7, $8 }' "$WORK/$label-client.out" | sort)
  srv=$(awk '$2 ~ /^conn=/ && $3 == "OK" {
               sub("recv=", "sent=", $5); sub("sent=", "recv=", $7); print $2, $5, $6, $7, $8 }' \
          "$WORK/$label-server.out" | sort)
  check "$label: $conns connections reported OK by each side" \
    test "$(grep -c . <<<"$cli")" -eq "$conns" -a "$(grep -c . <<<"$srv")" -eq "$conns"
  same "$label: byte counts and CRC32C agree, both directions, every connection" "$cli" "$srv"
  if [[ -z $SOAK && -z $DURATION ]]; then
    local total
    total=$(awk '$1 == "stress:" && $2 == "OK" { s = $4; r = $5; sub("sent=", "", s); sub("recv=", "", r); print s + r }' \
      <<<"$line")
    check "$label: at least $BYTES moved in total (${total:-?} bytes)" test "${total:-0}" -ge "$MIN_BYTES"
  fi
  check "$label: nothing on client stderr" test ! -s "$WORK/$label-client.err"
  check "$label: nothing on server stderr" test ! -s "$WORK/$label-server.err"
  trace_py "$dir" "$label" "$port" "$conns" "${SOAK:-$DURATION}" <<'PY'
label, port, conns, unbounded = ARGS[0], int(ARGS[1]), int(ARGS[2]), bool(ARGS[3])
L = label + ": "
srv, cli = tracks("server", port), tracks("client", port)
check(len(srv) == conns and len(cli) == conns,
      L + "%d conn.track per side (server %d, client %d)" % (conns, len(srv), len(cli)))
done = events("upgrade.done", reason="upgraded", transport="shm")
dsrv = [r for r in done if r.get("role") == "server"]
dcli = [r for r in done if r.get("role") == "client"]
print("    upgrade.done: server %d, client %d" % (len(dsrv), len(dcli)))
check(len(dsrv) == conns, L + "upgrade.done transport=shm in the server for every connection (%d of %d)" % (len(dsrv), conns))
check(len(dcli) == conns, L + "upgrade.done transport=shm in the client for every connection (%d of %d)" % (len(dcli), conns))
check({conn_key(r) for r in dsrv} == {conn_key(r) for r in srv} == {conn_key(r) for r in dcli} == {conn_key(r) for r in cli},
      L + "the upgraded 4-tuples are exactly the tracked ones, same at both ends")
fails = events("upgrade.fail")
check(not fails, L + "no upgrade.fail (%d)" % len(fails))
for r in fails[:5]:
    print("    %s" % r)
# A direction the program shut before its upgrade was through stays on
# TCP, and upgrade.done says so (tx_kept "shut"): with unbounded streams
# that end by shutdown, an instrumented event loop that comes back to a
# connection only after its stream is over (TSan in CI: 6 of 128). Every
# other reason to keep a direction on TCP fails the check.
sw = events("tx.switch")
kept = [r for r in dsrv + dcli if r.get("tx_kept") != "no"]
shut = [r for r in kept if r.get("tx_kept") == "shut"]
for r in kept[:5]:
    print("    kept on TCP: %s %s %s" % (r.get("role"), conn_key(r), r.get("tx_kept")))
check(len(shut) == len(kept) and len(sw) + len(shut) == 2 * conns,
      L + "tx.switch in both directions of every connection, but for directions shut first "
      "(%d switched, %d shut first, %d kept otherwise)" % (len(sw), len(shut), len(kept) - len(shut)))
if not unbounded:
    check(not kept, L + "a bounded stream keeps no direction on TCP (%d)" % len(kept))
PY
}

if [[ -n $SOAK ]]; then
  log "soak mode: $SOAK s"
  run_pair soak-mixed8 8 mixed --mode mixed --duration "$SOAK"
  run_pair soak-epoll64 64 epoll-et --mode epoll-et --duration "$SOAK"
  finish
fi

# 1. and 2.
if [[ -n $DURATION ]]; then
  run_pair mixed8 8 mixed --mode mixed --half-close --duration "$DURATION"
  run_pair epoll64 64 epoll-et --mode epoll-et --duration "$DURATION"
else
  run_pair mixed8 8 mixed --bytes "$BYTES" --mode mixed --half-close
  run_pair epoll64 64 epoll-et --bytes "$BYTES" --mode epoll-et
fi

# 3. The check can fail through the shim.
label=corrupt
dir=$WORK/$label
mkdir -p "$dir"
port=$(free_port)
shm_vars "$dir" "$port"
CORRUPT_AT=5000000
start_bg "$label-server" shim "${SHM_VARS[@]}" "$STRESS" server --port "$port" --bind 127.0.0.1 \
  --exit-after 1 --mode blocking --corrupt-at "$CORRUPT_AT" --timeout 20
spid=$BG_PID
if wait_ready "$label-server" >/dev/null; then
  rc=0
  with_shim "${SHM_VARS[@]}" "$STRESS" client --host 127.0.0.1 --port "$port" --conns 1 --bytes 64M \
    --mode blocking --seed 7 --timeout 60 >"$WORK/$label-client.out" 2>"$WORK/$label-client.err" || rc=$?
  log "$label: $(tail -n 1 "$WORK/$label-client.out") (status $rc)"
  check "corrupt-at through shm: client exit 1" test "$rc" -eq 1
  check "corrupt-at through shm: FAIL names offset $CORRUPT_AT" \
    grep -Eq "^stress: FAIL conn=0 offset=$CORRUPT_AT expected=0x[0-9a-f]{2} got=0x[0-9a-f]{2}\$" \
    "$WORK/$label-client.out"
  wait_bg "$spid" 30 || true
  trace_py "$dir" "$port" <<'PY'
port = int(ARGS[0])
done = events("upgrade.done", reason="upgraded", transport="shm")
check(len([r for r in done if r.get("role") == "client"]) == 1 and len([r for r in done if r.get("role") == "server"]) == 1,
      "corrupt-at through shm: the connection was upgraded at both ends (%d upgrade.done)" % len(done))
sw = [r for r in events("tx.switch") if port_of(r["local"]) == port and r.get("offset", 1 << 62) < 5000000]
check(len(sw) == 1, "corrupt-at through shm: the server's direction (the corrupted one) switched before the corrupted offset")
PY
else
  not_ok "corrupt-at: server ready"
  stop_bg "$spid"
fi

finish
