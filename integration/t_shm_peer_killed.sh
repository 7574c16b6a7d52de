#!/bin/bash
# t_shm_peer_killed: a sender blocked in a large send on an upgraded
# connection whose peer (which stopped reading) is killed with SIGKILL. Over
# TCP the killed peer's kernel answers with a reset (it had unread bytes)
# and the blocked send fails with ECONNRESET; under the shim (shm) it must
# fail the same way, not with EPIPE.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_cmd python3

cat >"$WORK/peer.py" <<'PYEOF'
import socket, sys, time
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(1)
print("READY %s" % sys.argv[1], flush=True)
c, _ = l.accept()
for _ in range(20):                    # round trips: both ends upgrade
    assert c.recv(4, socket.MSG_WAITALL) == b"ping"
    c.sendall(b"pong")
time.sleep(60)                         # reads nothing more
PYEOF
cat >"$WORK/sender.py" <<'PYEOF'
import socket, sys, time
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for _ in range(20):
    c.sendall(b"ping")
    assert c.recv(4, socket.MSG_WAITALL) == b"pong"
    time.sleep(0.01)
print("blocking", flush=True)
try:
    c.sendall(b"x" * (256 << 20))
    print("sent all")
except OSError as e:
    print(type(e).__name__)
PYEOF

run() { # run shim|plain -> prints the sender's verdict
  local mode=$1 port dir
  port=$(free_port)
  dir=$WORK/$mode
  mkdir -p "$dir"
  local vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info
    RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
  start_bg "peer-$mode" "$mode" "${vars[@]}" "$PYTHON" "$WORK/peer.py" "$port"
  local peer=$BG_PID
  wait_ready "peer-$mode" >/dev/null
  start_bg "sender-$mode" "$mode" "${vars[@]}" "$PYTHON" "$WORK/sender.py" "$port"
  local sender=$BG_PID
  for _ in $(seq 100); do grep -q blocking "$WORK/sender-$mode.out" && break; sleep 0.1; done
  sleep 1
  pkill -KILL -f "peer.py $port"
  wait_bg "$sender" 20
  stop_bg "$peer"
  tail -n 1 "$WORK/sender-$mode.out"
}
base=$(run plain)
same "without the shim the blocked send fails with ECONNRESET" ConnectionResetError "$base"
got=$(run shim)
same "under the shim (upgraded) the same" "$base" "$got"
n=$(cat "$WORK"/shim/trace.*.jsonl | grep -c '"event":"upgrade.done"' || true)
check "the connection was upgraded at both ends ($n upgrade.done)" test "$n" -eq 2
finish
