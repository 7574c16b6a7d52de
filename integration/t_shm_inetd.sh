#!/bin/bash
# t_shm_inetd: the inetd shape. A server forks for each connection; the
# child dup2()s the accepted socket onto stdin and stdout and execs a filter
# (cat), which inherits one socket under two fd numbers. Both ends under the
# shim (RDMASHIM_TRANSPORTS=shm), echo_client checks every byte. The filter
# must see one connection (its two fds share it, as after dup), so the
# client gets its bytes back and never a shim frame as data (once it got the
# 24-byte SWITCH frame of a second, separate handshake on the same socket).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/echo_client"
need_cmd python3 cat

CONNS=4
cat >"$WORK/inetd.py" <<'PYEOF'
import os, socket, sys
port, conns = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", port))
l.listen(16)
print("READY %d" % port, flush=True)
kids = []
for _ in range(conns):
    c, _ = l.accept()
    pid = os.fork()
    if pid == 0:
        os.dup2(c.fileno(), 0)
        os.dup2(c.fileno(), 1)
        c.close()
        l.close()
        os.execvp("cat", ["cat"])
    kids.append(pid)
    c.close()
bad = 0
for pid in kids:
    _, st = os.waitpid(pid, 0)
    bad += st != 0
sys.exit(1 if bad else 0)
PYEOF

for flags in "" "--half-close"; do
  label="inetd ${flags:-full-duplex}"
  read -ra fl <<<"$flags"
  port=$(free_port)
  start_bg "plain$port" plain "$PYTHON" "$WORK/inetd.py" "$port" "$CONNS"
  pid=$BG_PID
  wait_ready "plain$port" >/dev/null || not_ok "$label: server (no shim) ready"
  base=$(no_shim "$PROGS/echo_client" --port "$port" --bytes 4M --conns "$CONNS" --seed 5 "${fl[@]}" 2>&1)
  wait_bg "$pid" 30
  check "$label, no shim: $base" test "${base%% *}" = OK

  port=$(free_port)
  dir=$WORK/shm$port
  mkdir -p "$dir"
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
    RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
  start_bg "shm$port" shim "${vars[@]}" "$PYTHON" "$WORK/inetd.py" "$port" "$CONNS"
  pid=$BG_PID
  wait_ready "shm$port" >/dev/null || not_ok "$label: server (shim) ready"
  got=$(with_shim "${vars[@]}" "$PROGS/echo_client" --port "$port" --bytes 4M --conns "$CONNS" --seed 5 \
    "${fl[@]}" 2>&1)
  rc=0; wait_bg "$pid" 30 || rc=$?
  same "$label: client output with the shim = without" "$base" "$got"
  check "$label: every filter exited 0 (server status $rc)" test "$rc" -eq 0
  trace_py "$dir" "$port" "$label" <<'PY'
port, label = int(ARGS[0]), ARGS[1]
inh = [r for r in events("conn.track") if r.get("how") == "inherited" and port_of(r["local"]) == port]
dups = [r for r in events("fd.dup") if port_of(r["local"]) == port]
pids = {r["pid"] for r in inh}
check(len(inh) == len(pids), "%s: one inherited connection per filter (%d tracks in %d processes)"
      % (label, len(inh), len(pids)))
check(not events("frames.bad") and not events("conn.abort"), "%s: no frame read as data, no reset" % label)
done = [r for r in events("upgrade.done") if r.get("pid") in pids]
# A half-closing client may shut its write side before the handshake ends
# (then the connection rightly stays on TCP): only the full-duplex run must
# have upgraded.
if "half-close" not in label:
    check(len(done) > 0, "%s: the filters' connections upgraded (%d upgrade.done in the filters)" % (label, len(done)))
PY
done
finish
