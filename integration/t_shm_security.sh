#!/bin/bash
# t_shm_security: attacks on the same-host upgrade.
#   (a) spoof by another user: a shimmed client (root here) talks to an echo
#       server WITHOUT the shim, whose port's beacon the attacker holds (as
#       anybody may), so the client offers and its rendezvous listener stays
#       open for RDMASHIM_UPGRADE_TIMEOUT_MS (5000). While that upgrade is pending, a
#       process running as a different user (rdmashim-test, created with
#       useradd -M if missing, run with runuser or setpriv) connects to the
#       client's abstract rendezvous socket and sends a well-formed forged
#       OFFER (integration/progs/spoof_offer). Expected: the client's trace has
#       rv.refused (reason verify_failed, side client), the attacker gets no
#       ring fd (its socket is closed on it), the connection stays on TCP (no
#       switch, no upgrade.done; in the end upgrade.fail peer_no_shim) and the
#       bytes exchanged equal the run without the shim.
#   (b) malformed handshakes from the client's own user: verification is by
#       uid, so a process of the same user that does not own the TCP
#       connection passes it; then a truncated, garbage, wrong-type or
#       bad-ring OFFER must make the client fail the upgrade with
#       handshake_malformed, hand out no ring fd, and keep the data exact.
#   (c) the rings stay private: while two connections are upgraded (stress
#       client and server, both shimmed), no file for them exists in
#       /dev/shm, the client maps them as memfd:rdmashim-ring with mode 0600,
#       and the other user can not read /proc/<pid>/fd, /proc/<pid>/maps or
#       /proc/<pid>/map_files of the shimmed process, nor open a ring there.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SPOOF=$PROGS/spoof_offer
need_built "$PROGS/echo_server" "$PROGS/stress" "$SPOOF"
need_cmd python3

OTHER=rdmashim-test
TIMEOUT_MS=5000

# The other user: created if missing; AS_OTHER runs a command as that user.
other_user() {
  [[ $(id -u) -eq 0 ]] || { log "not root: can not create or become $OTHER"; return 1; }
  if ! id -u "$OTHER" >/dev/null 2>&1; then
    timeout 20 useradd -M -s /usr/sbin/nologin "$OTHER" >/dev/null 2>&1 ||
      timeout 20 useradd -M "$OTHER" >/dev/null 2>&1 || { log "useradd $OTHER failed"; return 1; }
  fi
  if command -v runuser >/dev/null 2>&1; then
    AS_OTHER=(runuser -u "$OTHER" --)
  elif command -v setpriv >/dev/null 2>&1; then
    local u g
    u=$(id -u "$OTHER") g=$(id -g "$OTHER")
    AS_OTHER=(setpriv --reuid="$u" --regid="$g" --clear-groups --)
  else
    log "neither runuser nor setpriv"
    return 1
  fi
  [[ $(timeout 10 "${AS_OTHER[@]}" id -u 2>/dev/null) == "$(id -u "$OTHER")" ]] ||
    { log "can not run as $OTHER"; return 1; }
}

HAVE_OTHER=0
if other_user; then
  HAVE_OTHER=1
  log "other user: $OTHER (uid $(id -u "$OTHER")) via ${AS_OTHER[0]}"
fi

# The victim: connects, makes one nonblocking read (with the shim, that starts
# the upgrade: the rendezvous listener exists from then on, but nobody looks
# at it until the next I/O call), prints LOCAL, waits for the go file, then echoes a
# few rounds over ~6 s (longer than the upgrade timeout), half-closes and
# reads to EOF; writes everything it received to OUT.
cat >"$WORK/victim.py" <<'PYEOF'
import hashlib, os, socket, sys, time
port, go, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rounds, pause = int(sys.argv[4]), float(sys.argv[5])
s = socket.create_connection(("127.0.0.1", port))
try:  # one I/O call: the shim starts the upgrade, the rendezvous listener appears
    s.recv(1, socket.MSG_DONTWAIT)
except BlockingIOError:
    pass
print("LOCAL %s:%d" % s.getsockname(), flush=True)
t_end = time.time() + 30
while not os.path.exists(go):
    if time.time() > t_end:
        raise SystemExit("no go file")
    time.sleep(0.01)
got = bytearray()
def recv_exact(n):
    buf = bytearray()
    while len(buf) < n:
        b = s.recv(n - len(buf))
        if not b:
            raise SystemExit("EOF after %d of %d bytes" % (len(buf), n))
        buf += b
    return bytes(buf)
for i in range(rounds):
    msg = (b"secret %d " % i) * (1 + 997 * i)
    s.sendall(msg)
    echo = recv_exact(len(msg))
    if echo != msg:
        raise SystemExit("echo mismatch in round %d" % i)
    got += echo
    time.sleep(pause)
s.shutdown(socket.SHUT_WR)
while True:
    b = s.recv(65536)
    if not b:
        break
    got += b
s.close()
open(out, "wb").write(got)
print("victim: %d bytes md5 %s" % (len(got), hashlib.md5(got).hexdigest()), flush=True)
PYEOF

# (a) runs 12 rounds 0.5 s apart, past the 5 s upgrade timeout, to see the
# client give up on its own after refusing the stranger; (b) fails at once.
ROUNDS=12

# Baseline: the victim's transcript without any shim.
port=$(free_port)
start_bg base-server plain "$PROGS/echo_server" --shape threads --bind 127.0.0.1 --port "$port" --max-conns 1 --timeout 60
spid=$BG_PID
if wait_ready base-server >/dev/null; then
  touch "$WORK/base.go"
  BASE=$(no_shim "$PYTHON" "$WORK/victim.py" "$port" "$WORK/base.go" "$WORK/base.bin" "$ROUNDS" 0.01 2>&1 | tail -n 1)
  wait_bg "$spid" 20 || true
else
  stop_bg "$spid"
fi
if [[ $BASE != victim:* ]]; then
  not_ok "baseline victim run without shim: $BASE"
  finish
fi
log "baseline: $BASE"

# attack NAME AS MODE PAUSE: one victim connection, one forged message.
# AS is other or same; checks the victim, the attacker and the trace.
attack() {
  local name=$1 as=$2 mode=$3 pause=$4 dir port spid vpid apid bpid lport i rc arc label
  label="($name) $mode OFFER from the $as user"
  dir=$WORK/$name
  mkdir -p "$dir"
  port=$(free_port)
  start_bg "$name-server" plain "$PROGS/echo_server" --shape threads --bind 127.0.0.1 --port "$port" \
    --max-conns 1 --timeout 60
  spid=$BG_PID
  wait_ready "$name-server" >/dev/null || { not_ok "$label: server ready"; stop_bg "$spid"; return; }
  # The port's beacon (shim/PROTOCOL.md "Port beacon"), held by the
  # attacker: anybody may bind it, and it only makes a client offer, as
  # every client did before beacons. Without it the victim, whose server
  # has no shim, would offer nothing to attack.
  local holder=("$SPOOF" --beacon "$port")
  [[ $as == other ]] && holder=("${AS_OTHER[@]}" "${holder[@]}")
  start_bg "$name-beacon" plain "${holder[@]}"
  bpid=$BG_PID
  wait_line "$name-beacon" '^BEACON' || log "$label: the attacker's beacon never came up"
  start_bg "$name-victim" shim RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug \
    RDMASHIM_UPGRADE_TIMEOUT_MS="$TIMEOUT_MS" "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" \
    "$PYTHON" "$WORK/victim.py" "$port" "$dir/go" "$dir/victim.bin" "$ROUNDS" "$pause"
  vpid=$BG_PID
  lport=
  for ((i = 0; i < 500; i++)); do
    lport=$(awk '$1 == "LOCAL" { print $2; exit }' "$WORK/$name-victim.out" 2>/dev/null)
    [[ -n $lport ]] && break
    sleep 0.02
  done
  if [[ -z $lport ]]; then
    not_ok "$label: victim connected"
    stop_bg "$vpid"; stop_bg "$spid"; stop_bg "$bpid"
    return
  fi
  # The attacker, while the victim's upgrade is pending and before it looks.
  local cmd=("$SPOOF" --client "$lport" --server "127.0.0.1:$port" --mode "$mode" --connect-wait-ms 3000
             --reply-wait-ms 8000)
  [[ $as == other ]] && cmd=("${AS_OTHER[@]}" "${cmd[@]}")
  start_bg "$name-attacker" plain "${cmd[@]}"
  apid=$BG_PID
  wait_line "$name-attacker" '^spoof_offer: (sent|connect failed)' || true
  # Only now does the victim do I/O (and so look at its rendezvous).
  touch "$dir/go"
  rc=0; wait_bg "$vpid" 40 || rc=$?
  arc=0; wait_bg "$apid" 20 || arc=$?
  wait_bg "$spid" 20 || true
  stop_bg "$bpid"
  sed 's/^/    /' "$WORK/$name-attacker.out"
  check "$label: the attacker connected to the victim's rendezvous and sent its message" \
    grep -q '^spoof_offer: sent ' "$WORK/$name-attacker.out"
  check "$label: the attacker got no ring fd (exit $arc, 4 would mean a ring fd)" test "$arc" -eq 0
  check "$label: the victim closed the rendezvous on the attacker (reply: eof/reset)" \
    grep -qE '^spoof_offer: reply: (eof|reset)$' "$WORK/$name-attacker.out"
  check "$label: victim exit 0 (got $rc: $(tail -n 1 "$WORK/$name-victim.err" 2>/dev/null))" test "$rc" -eq 0
  same "$label: the victim's transcript = baseline" "$BASE" "$(tail -n 1 "$WORK/$name-victim.out")"
  check "$label: received bytes identical to the baseline's" cmp -s "$WORK/base.bin" "$dir/victim.bin"
  check "$label: nothing on the server's stderr" test ! -s "$WORK/$name-server.err"
  trace_py "$dir" "$label" "$as" <<'PY'
label, who = ARGS[0], ARGS[1]
L = label + ": "
check(not events("upgrade.done") and not events("tx.switch") and not events("rx.switch"),
      L + "the connection stayed on TCP: no upgrade.done, no tx.switch/rx.switch")
refused = events("rv.refused")
fails = events("upgrade.fail")
print("    rv.refused %s; upgrade.fail %s" % ([(r.get("side"), r.get("reason")) for r in refused],
                                           [r.get("reason") for r in fails]))
if who == "other":
    check(len(refused) >= 1 and all(r.get("reason") == "verify_failed" and r.get("side") == "client" for r in refused),
          L + "rv.refused reason=verify_failed side=client")
    check([r.get("reason") for r in fails] == ["peer_no_shim"],
          L + "after refusing the stranger the client kept waiting for the real server, then upgrade.fail peer_no_shim")
elif label.startswith("(b-valid)"):
    # Same user, well-formed OFFER, but the attacker does not hold the TCP
    # socket: the socket check (the fd it names is not that inode) refuses.
    check(len(refused) == 1 and refused[0].get("reason") == "verify_failed",
          L + "rv.refused reason=verify_failed: a same-user process that does not hold the socket")
    check([r.get("reason") for r in fails] == ["verify_failed"], L + "upgrade.fail reason=verify_failed")
else:
    check(not refused, L + "no rv.refused: the same uid passes the user check")
    check([r.get("reason") for r in fails] == ["handshake_malformed"], L + "upgrade.fail reason=handshake_malformed")
stats = events("process.stats")
if stats:
    print("    process.stats reasons: %s" % stats[-1].get("reasons"))
PY
}

if ((HAVE_OTHER)); then
  attack a-spoof other valid 0.5
else
  log "(a) not run: no other user"
fi
for mode in valid truncate garbage wrongtype badring; do
  attack "b-$mode" same "$mode" 0.05
done

# (c) The rings are private.
rings_private() {
  local dir=$WORK/c port spid cpid pid i maps line range mode
  mkdir -p "$dir"
  port=$(free_port)
  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info RDMASHIM_RING_KB=256
              "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl")
  local before
  before=$(ls -A /dev/shm 2>/dev/null | sort)
  start_bg c-server shim "${vars[@]}" "$PROGS/stress" server --port "$port" --bind 127.0.0.1 --exit-after 2 \
    --mode blocking --timeout 30
  spid=$BG_PID
  wait_ready c-server >/dev/null || { not_ok "(c) stress server ready"; stop_bg "$spid"; return; }
  start_bg c-client shim "${vars[@]}" "$PROGS/stress" client --host 127.0.0.1 --port "$port" --conns 2 \
    --mode blocking --duration 4 --max-msg 64K --timeout 30
  cpid=$BG_PID
  pid=
  for ((i = 0; i < 250; i++)); do
    pid=$(cat "$dir"/trace.*.jsonl 2>/dev/null | timeout 20 "$PYTHON" -c '
import json, sys
c = {}
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("event") == "upgrade.done" and r.get("role") == "client":
        c[r["pid"]] = c.get(r["pid"], 0) + 1
print(next((p for p, n in c.items() if n >= 2), ""))')
    [[ -n $pid ]] && break
    sleep 0.02
  done
  if [[ -z $pid ]]; then
    not_ok "(c) both connections upgraded at the client"
    stop_bg "$cpid"; stop_bg "$spid"
    return
  fi
  ok "(c) both connections upgraded at the client (pid $pid)"
  same "(c) no new file in /dev/shm while rings are in use" "$before" "$(ls -A /dev/shm 2>/dev/null | sort)"
  check "(c) nothing named rdmashim in /dev/shm" test -z "$(ls -A /dev/shm 2>/dev/null | grep -i rdmashim)"
  maps=$(grep 'memfd:rdmashim-ring' "/proc/$pid/maps" 2>/dev/null)
  check "(c) the client maps its rings from memfds: $(grep -c . <<<"$maps") memfd:rdmashim-ring mappings" \
    test -n "$maps"
  check "(c) no ring memfd left open as a file descriptor (mapped only)" \
    test -z "$(ls -l "/proc/$pid/fd" 2>/dev/null | grep memfd)"
  range=$(awk 'NR == 1 { print $1 }' <<<"$maps")
  if [[ -n $range ]]; then
    mode=$(stat -L -c %a "/proc/$pid/map_files/$range" 2>/dev/null)
    same "(c) the ring memfd's mode" 600 "$mode"
  fi
  if ((HAVE_OTHER)); then
    check "(c) $OTHER can not list /proc/$pid/fd" \
      bash -c '! timeout 10 "$@" ls "/proc/'"$pid"'/fd" >/dev/null 2>&1' _ "${AS_OTHER[@]}"
    check "(c) $OTHER can not read /proc/$pid/maps" \
      bash -c '! timeout 10 "$@" grep -q rdmashim "/proc/'"$pid"'/maps" 2>/dev/null' _ "${AS_OTHER[@]}"
    check "(c) $OTHER can not list /proc/$pid/map_files" \
      bash -c '! timeout 10 "$@" ls "/proc/'"$pid"'/map_files" >/dev/null 2>&1' _ "${AS_OTHER[@]}"
    if [[ -n $range ]]; then
      check "(c) $OTHER can not open the ring through /proc/$pid/map_files/$range" \
        bash -c '! timeout 10 "$@" dd if="/proc/'"$pid"'/map_files/'"$range"'" of=/dev/null bs=4096 count=1 2>/dev/null' \
        _ "${AS_OTHER[@]}"
    fi
    check "(c) $OTHER can not read /proc/$pid/mem" \
      bash -c '! timeout 10 "$@" dd if="/proc/'"$pid"'/mem" of=/dev/null bs=1 count=1 2>/dev/null' _ "${AS_OTHER[@]}"
  fi
  local rc=0 src=0
  wait_bg "$cpid" 40 || rc=$?
  wait_bg "$spid" 20 || src=$?
  check "(c) stress client exit 0 (got $rc: $(tail -n 1 "$WORK/c-client.out"))" test "$rc" -eq 0
  check "(c) stress server exit 0 (got $src)" test "$src" -eq 0
}
rings_private

if ((!HAVE_OTHER)) && ((N_FAIL == 0)); then
  skip "(b) passed; (a) and the other-user part of (c) need a second user (root to create $OTHER)"
fi
finish
