#!/bin/bash
# t_trace_tool: `rdmashim trace` and `rdmashim bundle` on real traces. A
# redis-server under the shim (shm, trace at debug) serves a shimmed
# redis-benchmark (its connections upgrade) and a plain Python client that
# talks for about a second (the server's upgrade fails: peer_no_shim).
#   1. the timelines name the upgrade (upgraded to shm) and the fallback
#      (stayed on TCP: peer_no_shim), with upgrade.start and upgrade.fail;
#   2. --summary --json counts every event and every reason as grep counts
#      them in the raw files, and every line; the plain connection is under
#      not_upgraded peer_no_shim;
#   3. --conn (an id, and an endpoint that selects both ends' views),
#      --pid, --event (prefix), --reason select what they say, and --json is
#      valid JSON;
#   4. gzip-compressed copies give output identical to the plain files';
#   5. a damaged file (a line cut in half, a NUL byte, invalid UTF-8, a line
#      longer than the reader's buffer, bad JSON, a last line cut): one
#      FILE:LINE error each on stderr, exit 1, the good lines still shown;
#      the same file gzipped too; with build/asan/bin/rdmashim as well when
#      it is built (make asan), which must print no sanitizer report;
#      usage errors and an unreadable file exit 2;
#   6. bundle writes a 0600 tarball whose listing holds the expected
#      members, the traces among them (one with a space and a quote in its
#      name).
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
TOOL=$ROOT/build/bin/rdmashim
ASAN_TOOL=$ROOT/build/asan/bin/rdmashim
need_built "$TOOL"
need_cmd redis-server redis-benchmark redis-cli python3 gzip tar

dir=$WORK/trace
mkdir -p "$dir"
port=$(free_port)
# A short upgrade timeout: the plain client's connection fails its upgrade
# (peer_no_shim) while it still talks, instead of closing mid-upgrade. On a
# full machine the shm exchanges stop paying (receivers can not spin) and
# go back to TCP (unpaid): the judgment is off here, where the timeline of
# an upgraded connection is what is read.
vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_TRACE=debug
      "RDMASHIM_TRACE_FILE=$dir/trace.%p.jsonl" RDMASHIM_UPGRADE_TIMEOUT_MS=300 RDMASHIM_UNPAID_PERCENT=0)

start_bg redis shim "${vars[@]}" redis-server --save '' --appendonly no --port "$port" --bind 127.0.0.1 \
  --dir "$WORK" --daemonize no --logfile '' --unixsocket '' --protected-mode yes
srv=$BG_PID
wait_listen "$port" || not_ok "redis-server listening"
out=$(with_shim "${vars[@]}" redis-benchmark -h 127.0.0.1 -p "$port" -n 2000 -c 2 -t set,get -q 2>&1)
check "shimmed redis-benchmark ran ($(tr '\r' '\n' <<<"$out" | grep -c 'requests per second') rates)" \
  grep -q 'GET: .*requests per second' <<<"$(tr '\r' '\n' <<<"$out")"
no_shim "$PYTHON" - "$port" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
for _ in range(20):  # about 1 s: past the server's 300 ms upgrade timeout
    s.sendall(b"PING\r\n")
    got = b""
    while not got.endswith(b"\r\n"):
        got += s.recv(64)
    assert got == b"+PONG\r\n", got
    time.sleep(0.05)
s.close()
PY
check "plain client talked for a second" test $? -eq 0
with_shim "${vars[@]}" redis-cli -h 127.0.0.1 -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1
wait_bg "$srv" 30 || true
srv_pid=$(grep -l '"event":"listen.track"' "$dir"/trace.*.jsonl | sed 's/.*trace\.\([0-9]*\)\.jsonl/\1/')
files=("$dir"/trace.*.jsonl)
check "traces written (${#files[@]} files, server pid ${srv_pid:-none})" test -n "$srv_pid" -a "${#files[@]}" -ge 3

# trace_rc ARGS...: runs the tool, stdout in $WORK/t.out, stderr in $WORK/t.err, status in RC.
trace_rc() {
  timeout 60 "$TOOL" trace "$@" >"$WORK/t.out" 2>"$WORK/t.err"
  RC=$?
}

# 1. The timelines.
trace_rc "${files[@]}"
same "trace: exit status" 0 "$RC"
no_output "trace: nothing on stderr" "$WORK/t.err"
check "a connection upgraded to shm" grep -q '^conn .*: upgraded to shm$' "$WORK/t.out"
check "the plain client's connection: stayed on TCP: peer_no_shim" \
  grep -q "^conn $srv_pid/.*server fd .*: stayed on TCP: peer_no_shim\$" "$WORK/t.out"
cp "$WORK/t.out" "$WORK/timeline.txt"
trace_rc --reason peer_no_shim "${files[@]}"
check "--reason peer_no_shim: its timeline has conn.track, upgrade.start, upgrade.fail peer_no_shim" \
  "$PYTHON" -c '
import re, sys
t = open(sys.argv[1]).read()
heads = [l for l in t.splitlines() if l.startswith("conn ")]
ev = [l.split()[2:4] for l in t.splitlines() if re.match(r"^ +[0-9.]+ +[-+][0-9.]+ ", l)]
names = [e[0] for e in ev]
ok = len(heads) == 1 and names[:2] == ["conn.track", "upgrade.start"] and ["upgrade.fail", "peer_no_shim"] in ev
sys.exit(0 if ok else print(t) or 1)' "$WORK/t.out"

# 2. --summary against grep.
trace_rc --summary --json "${files[@]}"
same "summary: exit status" 0 "$RC"
cat "${files[@]}" >"$WORK/all.jsonl"
summary_py() {
  "$PYTHON" -c 'import json, sys; s = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/t.out" "$1"
}
bad_counts=0
for e in $(summary_py '" ".join(s["events"])'); do
  want=$(grep -c "\"event\":\"$e\"" "$WORK/all.jsonl")
  got=$(summary_py "s['events']['$e']")
  [[ $want == "$got" ]] || { bad_counts=$((bad_counts + 1)); echo "    event $e: summary $got, grep $want"; }
done
for r in $(summary_py '" ".join(s["reasons"])'); do
  want=$(grep -c "\"reason\":\"$r\"" "$WORK/all.jsonl")
  got=$(summary_py "s['reasons']['$r']")
  [[ $want == "$got" ]] || { bad_counts=$((bad_counts + 1)); echo "    reason $r: summary $got, grep $want"; }
done
same "summary: every event and reason count equals grep's" 0 "$bad_counts"
same "summary: the lines, all counted" "$(wc -l <"$WORK/all.jsonl")" "$(summary_py 's["lines"]')"
same "summary: events grep finds, all there" "$(grep -o '"event":"[^"]*"' "$WORK/all.jsonl" | sort -u | wc -l)" \
  "$(summary_py 'len(s["events"])')"
check "summary: upgraded on shm ($(summary_py 's["upgraded"]'))" test "$(summary_py 's["upgraded"].get("shm", 0)')" -ge 2
same "summary: not upgraded for peer_no_shim" 1 "$(summary_py 's["not_upgraded"].get("peer_no_shim")')"
trace_rc --summary "${files[@]}"
check "summary text: the peer_no_shim group with its meaning" \
  grep -qE '^ +1  peer_no_shim +the peer answered no offer' "$WORK/t.out"

# 3. Filters, read through --json.
# filtered NAME PYTHON-EXPRESSION ARGS...: the JSON of `trace --json ARGS`
# parses and the expression over it (j; C its connections) holds.
filtered() {
  local name=$1 expr=$2
  shift 2
  trace_rc --json "$@" "${files[@]}"
  if [[ $RC == 0 ]] && "$PYTHON" - "$WORK/t.out" "$expr" <<'PY'; then ok "$name"; else not_ok "$name (status $RC)"; fi
import json, sys
j = json.load(open(sys.argv[1]))
C = j["connections"]
ok = eval(sys.argv[2])
if not ok:
    print(json.dumps(j, indent=1)[:2000])
sys.exit(0 if ok else 1)
PY
}
filtered "--json: valid, processes and connections" 'len(j["processes"]) >= 3 and len(C) >= 5 and not j["bad_lines"]'
up_id=$("$TOOL" trace --json "${files[@]}" | "$PYTHON" -c '
import json, sys
print([c["id"] for c in json.load(sys.stdin)["connections"] if c["outcome"] == "upgraded" and c["role"] == "client"][0])')
cli_ep=$(cut -d/ -f2 <<<"$up_id")
filtered "--conn $up_id: that connection alone" "[c['id'] for c in C] == ['$up_id']" --conn "$up_id"
filtered "--conn $cli_ep: both ends' views of it" \
  "sorted(c['role'] for c in C) == ['client', 'server'] and all(c['outcome'] == 'upgraded' for c in C)" --conn "$cli_ep"
filtered "--pid $srv_pid: the server's connections only" \
  "C and all(c['pid'] == $srv_pid for c in C) and all(p['pid'] == $srv_pid for p in j['processes'])" --pid "$srv_pid"
filtered "--event upgrade.: only upgrade.* lines" \
  "C and all(e['record']['event'].startswith('upgrade.') for c in C for e in c['events'])" --event upgrade.
filtered "--event upgrade.done --event tx.switch: both, nothing else" \
  "{e['record']['event'] for c in C for e in c['events']} == {'upgrade.done', 'tx.switch'}" \
  --event upgrade.done --event tx.switch
filtered "--reason peer_no_shim: one connection, the plain client's" \
  "len(C) == 1 and C[0]['outcome'] == 'failed' and C[0]['reason'] == 'peer_no_shim' and C[0]['pid'] == $srv_pid" \
  --reason peer_no_shim
filtered "--all: every line of the connections is shown" \
  "sum(len(c['events']) for c in C) + sum(len(p['events']) for p in j['processes']) == $(wc -l <"$WORK/all.jsonl")" --all

# 4. gzip copies: the same output.
mkdir -p "$WORK/gz"
for f in "${files[@]}"; do gzip -c "$f" >"$WORK/gz/$(basename "$f").gz"; done
gz=("$WORK"/gz/*.gz)
for args in "" "--summary" "--reason peer_no_shim" "--all"; do
  # shellcheck disable=SC2086
  timeout 60 "$TOOL" trace $args "${files[@]}" >"$WORK/plain.out" 2>&1
  # shellcheck disable=SC2086
  timeout 60 "$TOOL" trace $args "${gz[@]}" >"$WORK/gz.out" 2>&1
  check "gzip copies: output of 'trace $args' identical" cmp -s "$WORK/plain.out" "$WORK/gz.out"
done

# 5. A damaged file.
srv_file=$dir/trace.$srv_pid.jsonl
bad=$WORK/damaged.jsonl
{
  sed -n 1,4p "$srv_file"                              # 1-4 good
  sed -n 5p "$srv_file" | head -c 60; echo             # 5 cut in half
  sed -n 6p "$srv_file" | sed 's/"level"/"lev\x00el"/'  # 6 a NUL byte
  sed -n 7p "$srv_file" | sed 's/"level"/"lev\xffel"/'  # 7 invalid UTF-8
  printf '{"event":"x","pad":"%s"}\n' "$(head -c 70000 /dev/zero | tr '\0' a)"  # 8 longer than the buffer
  echo '{"event":"conn.track",,}'                      # 9 bad JSON
  sed -n 8,12p "$srv_file"                             # 10-14 good
  sed -n 13p "$srv_file" | head -c 40                  # 15 cut, the file ends
} >"$bad"
gzip -c "$bad" >"$bad.gz"
damaged() {
  local tool=$1 file=$2 label=$3 n
  timeout 60 "$tool" trace --all "$file" >"$WORK/d.out" 2>"$WORK/d.err"
  same "$label: exit status 1" 1 "$?"
  for n in 5 6 7 8 9 15; do
    check "$label: error names $(basename "$file"):$n" grep -q "^rdmashim trace: $file:$n: " "$WORK/d.err"
  done
  same "$label: six errors, no more" 6 "$(grep -c . "$WORK/d.err")"
  same "$label: the nine good lines still shown" 9 \
    "$(grep -cE '^ +[0-9.]+ +[-+][0-9.]+ ' "$WORK/d.out")"
  check "$label: no sanitizer report" bash -c "! grep -qE 'Sanitizer|runtime error' '$WORK/d.err'"
}
damaged "$TOOL" "$bad" damaged
grep -E 'NUL|UTF-8|too long|cut' "$WORK/d.err" | sed 's/^/    /'
damaged "$TOOL" "$bad.gz" "damaged, gzipped"
head -c $(( $(stat -c %s "$bad.gz") - 30 )) "$bad.gz" >"$WORK/cut.gz"
timeout 60 "$TOOL" trace "$WORK/cut.gz" >/dev/null 2>"$WORK/d.err"
same "a gzip file cut short: exit status 1" 1 "$?"
check "a gzip file cut short: says so" grep -q "cut.gz:[0-9]*: gzip data ends early" "$WORK/d.err"
if [[ -x $ASAN_TOOL ]]; then
  damaged "$ASAN_TOOL" "$bad" "damaged, ASan build"
  damaged "$ASAN_TOOL" "$bad.gz" "damaged gzipped, ASan build"
  ASAN_OPTIONS=detect_leaks=1 timeout 60 "$ASAN_TOOL" trace --json --all "${files[@]}" "$WORK/cut.gz" \
    >/dev/null 2>"$WORK/d.err"
  check "ASan build: --json over all, no report" bash -c "! grep -qE 'Sanitizer|runtime error' '$WORK/d.err'"
else
  log "build/asan/bin/rdmashim not built (make asan): the damaged files ran on the normal build only"
fi
trace_rc
same "no file: exit status 2" 2 "$RC"
trace_rc "$WORK/no-such-file"
same "a missing file: exit status 2" 2 "$RC"
check "a missing file: named" grep -q "no-such-file: No such file or directory" "$WORK/t.err"
trace_rc --bogus "${files[0]}"
same "unknown option: exit status 2" 2 "$RC"
out=$(timeout 10 "$TOOL" help trace)
check "help trace: describes --summary and --conn" grep -q -- '--conn ID' <<<"$out"
out=$(timeout 10 "$TOOL" help bundle)
check "help bundle: describes -o" grep -q -- '-o FILE' <<<"$out"

# 6. bundle.
odd="$WORK/we ird'name.jsonl"
cp "$srv_file" "$odd"
(cd "$WORK" && timeout 120 "$TOOL" bundle -o "$WORK/bug report.tar.gz" "$srv_file" "$odd") >"$WORK/b.out" 2>"$WORK/b.err"
same "bundle: exit status" 0 "$?"
tarball="$WORK/bug report.tar.gz"
same "bundle: the tarball is 0600" 600 "$(stat -c %a "$tarball" 2>/dev/null)"
tar tzf "$tarball" >"$WORK/list.txt" 2>&1
sed 's/^/    /' "$WORK/list.txt"
for m in MANIFEST.txt version.txt config.txt health.json uname.txt rdma-core.txt cpu.txt \
         "traces/1-trace.$srv_pid.jsonl" "traces/2-we ird'name.jsonl"; do
  check "bundle holds $m" grep -qxE "rdmashim-bundle-[0-9-]+/$(sed 's/[.]/[.]/g' <<<"$m")" "$WORK/list.txt"
done
mkdir -p "$WORK/x" && tar xzf "$tarball" -C "$WORK/x"
b=("$WORK"/x/rdmashim-bundle-*)
same "bundle: version.txt" "$("$TOOL" version)" "$(cat "${b[0]}/version.txt")"
check "bundle: health.json parses" "$PYTHON" -c 'import json, sys; json.load(open(sys.argv[1]))' "${b[0]}/health.json"
check "bundle: MANIFEST records health's exit status" grep -qE '^health.json +rdmashim health --json: exit status [0-9]' \
  "${b[0]}/MANIFEST.txt"
check "bundle: stat.json, or the MANIFEST says it is left out" \
  bash -c "[[ -e '${b[0]}/stat.json' ]] || grep -q '^stat.json .*left out' '${b[0]}/MANIFEST.txt'"
check "bundle: qp.json parses, and the MANIFEST records qp's exit status" bash -c \
  "'$PYTHON' -c 'import json, sys; json.load(open(sys.argv[1]))' '${b[0]}/qp.json' &&
   grep -qE '^qp.json +rdmashim qp --json: exit status [0-9]' '${b[0]}/MANIFEST.txt'"
check "bundle: the trace copied byte for byte" cmp -s "$srv_file" "${b[0]}/traces/1-trace.$srv_pid.jsonl"
check "bundle: no temporary directory left" bash -c "! ls -d \"\${TMPDIR:-/tmp}\"/rdmashim-bundle.* 2>/dev/null | grep -q ."
timeout 30 "$TOOL" bundle "$WORK/no-such-trace" >/dev/null 2>&1
same "bundle: a missing trace: exit status 2" 2 "$?"

finish
