#!/bin/bash
# t_shm_http: Python's http.server (a thread per connection, HTTP/1.0: it
# answers and closes) and curl, both under the shim (shm, upgrades started
# at once), 60 requests of a 20 KB file. Every body must arrive exact, and
# no legitimate peer may be refused as a spoofer: an end that answered and
# closed before the other checked it is a closed peer (rv.refused once
# counted 209 of 305 such connections as spoofing attempts).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_cmd python3 curl md5sum

mkdir -p "$WORK/www"
head -c 20000 /dev/urandom >"$WORK/www/f.bin"
want=$(md5sum <"$WORK/www/f.bin")
port=$(free_port)
dir=$WORK/trace
mkdir -p "$dir"
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=info RDMASHIM_TRACE_FILE="$dir/trace.%p.jsonl")
start_bg http shim "${vars[@]}" "$PYTHON" -m http.server "$port" --bind 127.0.0.1 --directory "$WORK/www"
pid=$BG_PID
wait_listen "$port" || not_ok "http.server listens"
bad=0
for _ in $(seq 60); do
  got=$(with_shim "${vars[@]}" curl -s "http://127.0.0.1:$port/f.bin" | md5sum)
  [[ $got == "$want" ]] || bad=$((bad + 1))
done
stop_bg "$pid"
check "60 bodies arrived exact ($bad wrong)" test "$bad" -eq 0
refused=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"rv.refused"' || true)
check "no legitimate peer refused ($refused rv.refused)" test "$refused" -eq 0
done_n=$(cat "$dir"/trace.*.jsonl | grep -c '"event":"upgrade.done"' || true)
log "$done_n upgrade.done for 60 connections (both ends)"
finish
