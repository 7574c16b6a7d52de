#!/bin/bash
# t_stress_tcp: the integrity stress tool (integration/stress/) on plain
# TCP, no shim: the baseline every shim run of it must match, and proof that
# the tool itself can fail.
#   1. server and client as two processes, 1 GiB total over 8 connections,
#      mixed modes, half-close; both exit 0, and for every connection the
#      client's count and CRC32C of what it sent (and received) equal the
#      server's of what it received (and sent)
#   2. the same in one process (selftest), 1 GiB, mixed, half-close
#   3. 1000 concurrent connections, epoll-et, 256 MiB
#   4. negative: the server flips one byte (--corrupt-at); the client must
#      exit 1 naming that offset (selftest and two processes)
# Tunables: STRESS_BYTES (default 1G), STRESS_SEED (default 1).
: "${CMD_TIMEOUT:=180}"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STRESS=$PROGS/stress
[[ -x $STRESS ]] || { echo "not built: $STRESS (run make)"; exit 1; }

BYTES=${STRESS_BYTES:-1G}
SEED=${STRESS_SEED:-1}
TMO=$((CMD_TIMEOUT - 20))

# run_client NAME ARGS...: the client in the foreground, output in
# $WORK/NAME.out; RC its status, LINE its last line
run_client() {
  local name=$1
  shift
  RC=0
  no_shim "$STRESS" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || RC=$?
  LINE=$(tail -n 1 "$WORK/$name.out")
  log "$name: $LINE (status $RC)"
}

# 1. Two processes.
start_bg server plain "$STRESS" server --port 0 --bind 127.0.0.1 --exit-after 8 --mode mixed \
  --seed "$SEED" --timeout "$TMO"
spid=$BG_PID
if port=$(wait_ready server); then
  run_client client client --host 127.0.0.1 --port "$port" --conns 8 --bytes "$BYTES" \
    --mode mixed --half-close --seed "$SEED" --timeout "$TMO" -v
  check "two processes: client exit 0 and OK line" \
    test "$RC" -eq 0 -a "${LINE%% *}" = "stress:" -a "$(awk '{print $2}' <<<"$LINE")" = OK
  src=0
  wait_bg "$spid" 60 || src=$?
  same "two processes: server exit status" 0 "$src"
  same "two processes: server verdict" "stress-server: OK conns=8" \
    "$(grep -o '^stress-server: [A-Z]* conns=[0-9]*' "$WORK/server.out")"
  # Per connection: client "sent=N crc32c=A recv=M crc32c=B" must be the
  # server's "recv=N crc32c=A sent=M crc32c=B".
  cli=$(awk '$2 ~ /^conn=/ && $3 == "OK" { print $2, $5, $6, $7, $8 }' "$WORK/client.out" | sort)
  srv=$(awk '$2 ~ /^conn=/ && $3 == "OK" {
               sub("recv=", "sent=", $5); sub("sent=", "recv=", $7); print $2, $5, $6, $7, $8 }' \
          "$WORK/server.out" | sort)
  check "two processes: 8 connections reported by each side" \
    test "$(wc -l <<<"$cli")" -eq 8 -a "$(wc -l <<<"$srv")" -eq 8
  same "two processes: byte counts and CRC32C agree, both directions, every connection" "$cli" "$srv"
else
  not_ok "two processes: server never became ready"
fi

# 2. One process.
run_client selftest selftest --conns 8 --bytes "$BYTES" --mode mixed --half-close \
  --seed "$SEED" --timeout "$TMO"
check "selftest 1 GiB mixed half-close: exit 0, OK line" \
  test "$RC" -eq 0 -a "$(awk '{print $2}' <<<"$LINE")" = OK

# 3. Many connections on the event loops.
run_client many selftest --conns 1000 --bytes 256M --mode epoll-et --seed "$SEED" --timeout "$TMO"
check "selftest 1000 connections epoll-et: exit 0, OK line" \
  test "$RC" -eq 0 -a "$(awk '{print $2}' <<<"$LINE")" = OK

# 4. The tool can fail.
run_client corrupt selftest --conns 4 --bytes 64M --mode mixed --half-close --seed "$SEED" \
  --corrupt-at 123457 --timeout "$TMO"
check "selftest --corrupt-at: exit 1" test "$RC" -eq 1
check "selftest --corrupt-at: FAIL names the offset" \
  grep -Eq '^stress: FAIL conn=[0-9]+ offset=123457 expected=0x[0-9a-f]{2} got=0x[0-9a-f]{2}$' \
  "$WORK/corrupt.out"

start_bg bad-server plain "$STRESS" server --port 0 --bind 127.0.0.1 --exit-after 1 \
  --corrupt-at 5 --timeout 10
spid=$BG_PID
if port=$(wait_ready bad-server); then
  run_client bad-client client --host 127.0.0.1 --port "$port" --conns 1 --bytes 8M \
    --mode blocking --seed 7 --timeout "$TMO"
  check "two processes --corrupt-at: client exit 1" test "$RC" -eq 1
  check "two processes --corrupt-at: FAIL names the offset" \
    grep -Eq '^stress: FAIL conn=0 offset=5 expected=0x[0-9a-f]{2} got=0x[0-9a-f]{2}$' \
    "$WORK/bad-client.out"
  wait_bg "$spid" 30 || true
else
  not_ok "two processes --corrupt-at: server never became ready"
fi

finish
