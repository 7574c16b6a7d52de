#!/bin/bash
# demo.sh (make demo): an unmodified redis-server and redis-benchmark, both
# loaded with the shim, on a free loopback port that the shim whitelists,
# with the trace on stderr at info level. Shows the first trace lines of both
# programs and the benchmark's result, then cleans up. Takes a few seconds.
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=$ROOT/build/lib/librdmashim.so
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rdmashim-demo.XXXXXX")
SERVER=

cleanup() {
  if [[ -n $SERVER ]] && kill -0 "$SERVER" 2>/dev/null; then
    kill -TERM "$SERVER" 2>/dev/null
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

for c in redis-server redis-benchmark redis-cli python3; do
  if ! command -v "$c" >/dev/null; then
    echo "demo: $c is not installed (make deps installs it)"
    exit 1
  fi
done
if [[ ! -e $LIB ]]; then
  echo "demo: $LIB is missing (run make)"
  exit 1
fi

PORT=$(timeout 20 python3 -c '
import random, socket
for _ in range(200):
    p = random.randint(20000, 32000)
    try:
        s = socket.socket(); s.bind(("127.0.0.1", p)); s.close()
        print(p); break
    except OSError:
        pass')
# The shim's whole configuration: which port, how much to say (on stderr);
# RDMASHIM_TRANSPORTS passes through if set, every other RDMASHIM_* is dropped.
transports=${RDMASHIM_TRANSPORTS:-}
while read -r v; do unset "$v"; done < <(compgen -e | grep '^RDMASHIM_' || true)
unset LD_PRELOAD
SHIM=(env LD_PRELOAD="$LIB" RDMASHIM_PORTS="$PORT" RDMASHIM_TRACE=info)
[[ -n $transports ]] && SHIM+=(RDMASHIM_TRANSPORTS="$transports")

echo "== rdmashim demo: unmodified redis on 127.0.0.1:$PORT, LD_PRELOAD=${LIB#"$ROOT"/}"
echo "   ${SHIM[*]:2}"
echo
timeout -k 5 50 "${SHIM[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$TMP" --logfile '' --daemonize no >"$TMP/redis.log" 2>"$TMP/redis.trace" &
SERVER=$!
for _ in $(seq 100); do
  [[ -n $(timeout 5 ss -Hltn "sport = :$PORT" 2>/dev/null) ]] && break
  sleep 0.05
done

echo "-- redis-benchmark -q -n 20000 -t get,set (also under the shim):"
timeout -k 5 40 "${SHIM[@]}" redis-benchmark -h 127.0.0.1 -p "$PORT" -q -n 20000 -t get,set \
  2>"$TMP/bench.trace" | tr '\r' '\n' | grep 'requests per second' | sed 's/^/   /'
timeout 5 redis-cli -h 127.0.0.1 -p "$PORT" SHUTDOWN NOSAVE >/dev/null 2>&1
for _ in $(seq 50); do kill -0 "$SERVER" 2>/dev/null || break; sleep 0.1; done

echo
echo "-- first trace lines of redis-server (its stderr):"
head -n 4 "$TMP/redis.trace" | cut -c1-230 | sed 's/^/   /'
echo "-- first trace lines of redis-benchmark (its stderr):"
head -n 3 "$TMP/bench.trace" | cut -c1-230 | sed 's/^/   /'
n_srv=$(grep -c '"event":"conn.track"' "$TMP/redis.trace")
n_cli=$(grep -c '"event":"conn.track"' "$TMP/bench.trace")
n_up=$(cat "$TMP/redis.trace" "$TMP/bench.trace" | grep -c '"event":"upgrade.done"')
echo "   ... $n_srv connections tracked by redis-server, $n_cli by redis-benchmark;" \
  "$n_up upgrade.done lines (both ends)"
echo
echo "What you see: neither program was changed or rebuilt; LD_PRELOAD put the shim into both."
echo "Each TCP connection to the whitelisted port (RDMASHIM_PORTS) shows as a conn.track line: role server in redis-server, client in the benchmark, its 4-tuple and the decision."
if ((n_up > 0)); then
  echo "upgrade.done / tx.switch / rx.switch: the stream moved to a shared-memory ring; the kernel TCP connection stays open for wake-ups and fallback."
else
  echo "No connection upgraded here (eligible=false or no side channel), so every byte went over plain TCP."
fi
echo "Connections to other ports are never touched: they cost one table lookup per call."
