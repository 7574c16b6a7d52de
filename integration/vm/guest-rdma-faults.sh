# shellcheck shell=bash disable=SC2030,SC2031,SC2163
# guest-rdma-faults.sh — the "faults" part of guest-rdma-one.sh (sourced
# from it: uses its shim/check/listening/warm_server helpers, $port, $T and
# $addr): each RDMA kind of RDMASHIM_TEST_FAULTS (shim/core/faults.h) under
# the stress tool's checksummed streams, over rxe in one VM.
#
# For each kind: every byte right at both ends (stress: OK, stress-server:
# OK ... failed=0), the striking process traced fault.injected with the kind
# and counted it (process.stats, "faults"), and the trace says what came of
# it:
#   cm_timeout (server, three in a row) three upgrade.fail cm_timeout, then
#              the breaker open: the fourth connection is not tried
#              (upgrade.fail breaker_open);
#   cm_reject  (client) upgrade.fail cm_rejected at both ends: TCP stays;
#   reg_fail   (client) upgrade.fail ring_alloc_failed: TCP stays;
#   qp_error   (client, at 2, 8, 14 and 20 MiB) links go down by the real
#              error path (rdma.link down, not "injected"), both ends of
#              each connection on them fail over;
#   cq_lost    (client, four strikes) each link's completions late by 2 s:
#              the streams pause, or the stall watch breaks the link
#              (why cq_stall) or a writer spills, and both ends fail
#              over;
#   link_qp_lost (client; conn_hold, whose connections join one link) one
#              link down under several connections, each of them failing
#              over at both ends;
#   cq_stall   (server, its receive completions lost for good from the
#              Nth on) the stall watch breaks the link (rdma.cq_stall,
#              link down why cq_stall) within its bound, and both ends
#              fail over: every byte right;
#   cq_stall_gap (the same with the watch off, RDMASHIM_RDMA_STALL_MS=0,
#              one blocking stream) the client's writer spills with its
#              RESUME saying where its bytes start, ahead of the server's
#              count: a reset at both ends with its reason (failover.gap,
#              replay_gap; peer_offset_behind), never a wrong byte.
# No failover.reset anywhere (but in cq_stall_gap, where the reset is the
# point). The failover kinds' failover times (detection
# to the first byte on TCP: failover_time.py) are printed as "# failover
# time" lines; FAULTS_ROUNDS (default 1) repeats those kinds for more
# samples. FAULTS_KINDS picks a subset (comma or space separated).

# devloss is not in the default set: FAULTS_KINDS=devloss runs it.
faults_kinds=${FAULTS_KINDS:-cm_timeout cm_reject reg_fail qp_error cq_lost link_qp_lost cq_stall cq_stall_gap}
faults_kinds=${faults_kinds//,/ }
faults_rounds=${FAULTS_ROUNDS:-1}

fkind() { [[ " $faults_kinds " == *" $1 "* ]]; }
ftrace() { cat "$T/$1"/trace.*.jsonl 2>/dev/null; }
# fcount NAME PATTERN...: lines of NAME's traces matching every pattern.
fcount() {
  local name=$1; shift
  local out
  out=$(ftrace "$name")
  for p in "$@"; do out=$(grep -F -- "$p" <<< "$out"); done
  [[ -n $out ]] && wc -l <<< "$out" || echo 0
}

# The upgrade bounds of every process here but cm_timeout's (which tests
# the bound itself): each kind tests what its fault does to an upgraded
# connection, not the default bounds under emulation. In one make test run
# beside other work, cq_stall_gap's stream never reached RDMA and the kind
# never struck. A kind's own ENV arguments override these.
fault_bounds=(RDMASHIM_UPGRADE_TIMEOUT_MS=15000 RDMASHIM_CM_TIMEOUT_MS=10000)

# fault_upgraded NAME MIN: at least MIN server connections traced
# upgrade.done over RDMA, so that a run whose streams stayed on TCP (and
# tested nothing) says so.
fault_upgraded() {
  local n
  n=$(fcount "$1" '"upgrade.done"' '"transport":"rdma"' '"role":"server"')
  check "$1: at least $2 server connections upgraded to RDMA ($n)" test "$n" -ge "$2"
}

# Server connections: the warming one (warm_server), then the client's
# own --warm-up one, then its --conns.
# fault_server NAME EXIT_AFTER FAULTS [ENV...]: a stress server under the
# shim, FAULTS in its RDMASHIM_TEST_FAULTS; sets fsrv (its pid).
fault_server() {
  local name=$1 n=$2 faults=$3; shift 3
  port=$((port + 1))
  rm -rf "${T:?}/$name"
  ( export "${fault_bounds[@]}"; [[ $# -eq 0 ]] || export "$@"; export RDMASHIM_TEST_FAULTS="$faults"
    shim "$name" "$port" timeout 300 "$PROGS/stress" server --bind "$addr" --port "$port" --exit-after "$n" \
      --timeout 120 ) > "$T/$name.server" 2>&1 &
  fsrv=$!
  listening "$port"
}

# fault_client NAME FAULTS [ENV...] -- STRESS_ARGS...: a stress client under
# the shim, FAULTS in its RDMASHIM_TEST_FAULTS; its status in frc.
fault_client() {
  local name=$1 faults=$2; shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  frc=0
  ( export "${fault_bounds[@]}"; [[ ${#envs[@]} -eq 0 ]] || export "${envs[@]}"; export RDMASHIM_TEST_FAULTS="$faults"
    shim "$name" "$port" timeout 240 "$PROGS/stress" client --host "$addr" --port "$port" --timeout 200 "$@" ) \
    >> "$T/$name.client" 2>&1 || frc=$?
}

# fault_end NAME CONNS WHAT: the server's end and the byte checks.
fault_end() {
  local name=$1 conns=$2 what=$3 src=0
  wait "$fsrv" || src=$?
  check "$what: client byte-exact (status $frc)" test "$(grep -c '^stress: OK' "$T/$name.client")" -ge 1 -a \
    "$(grep -c '^stress: FAIL' "$T/$name.client")" -eq 0 -a "$frc" -eq 0
  check "$what: server byte-exact on every connection (status $src)" \
    grep -q "stress-server: OK conns=$conns failed=0" "$T/$name.server"
  [[ $src -eq 0 && $frc -eq 0 ]] || { tail -n 5 "$T/$name.client" "$T/$name.server"; dump "$name"; }
  n=$(fcount "$name" '"failover.reset"')
  check "$what: no connection reset ($n)" test "$n" -eq 0
}

# fault_struck NAME KIND WHO MIN: WHO's process traced at least MIN
# fault.injected of KIND and counted them in its process.stats.
fault_struck() {
  local name=$1 kind=$2 who=$3 min=$4 n c
  n=$(fcount "$name" '"fault.injected"' "\"kind\":\"$kind\"")
  check "$name: fault.injected $kind traced ($n, at least $min, $who)" test "$n" -ge "$min"
  c=$(ftrace "$name" | grep '"process.stats"' | grep -oE "\"faults\":\\{[^}]*\"$kind\":[0-9]+" | grep -oE '[0-9]+$' |
      awk '{ s += $1 } END { print s + 0 }')
  check "$name: the strikes counted in process.stats ($c)" test "${c:-0}" -eq "$n"
}

# fault_failover NAME: both ends of every connection that went down failed
# over and sent on TCP; prints its failover times.
# A spill with nothing sent ("sent":0: the bytes held for the peer's
# proof) leaves the peer's sending side unswitched: one send on TCP for
# two starts (as in guest-rdma-one.sh's failover part).
fault_failover() {
  local name=$1 st tx sp0
  st=$(fcount "$name" '"failover.start"')
  tx=$(fcount "$name" '"failover.tx_tcp"')
  sp0=$(fcount "$name" '"failover.spill"' '"sent":0,')
  check "$name: failovers started ($st, at least 2: both ends)" test "$st" -ge 2
  check "$name: both ends back on TCP for each failover ($tx sends on TCP, $st starts, $sp0 unsent spills)" \
    test "$tx" -eq $((st - sp0))
  python3 "$here/failover_time.py" "# failover time $name" "$T/$name"/trace.*.jsonl || true
}

# ms_between NAME EVENT_A EVENT_B: ms from the first EVENT_A to the first
# EVENT_B in NAME's traces (one VM: one clock); empty if either is missing.
ms_between() {
  ftrace "$1" | python3 -c '
import json, sys
from datetime import datetime
a, b = sys.argv[1], sys.argv[2]
t = {}
for line in sys.stdin:
    try:
        e = json.loads(line)
    except ValueError:
        continue
    ev = e.get("event")
    if ev in (a, b):
        w = datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()
        t[ev] = min(t.get(ev, w), w)
if a in t and b in t:
    print(int((t[b] - t[a]) * 1000))
' "$2" "$3"
}

if fkind cm_timeout; then
  # No warming connection: each of the four is one upgrade attempt, and
  # the first three are the ones the server's faults strike.
  fault_server faults_cm_timeout 4 cm_timeout@1,cm_timeout@2,cm_timeout@3 RDMASHIM_CM_TIMEOUT_MS=1000 \
    RDMASHIM_UPGRADE_TIMEOUT_MS=3000 RDMASHIM_BREAKER_FAILURES=3 RDMASHIM_BREAKER_COOLDOWN_MS=600000
  for i in 1 2 3 4; do
    fault_client faults_cm_timeout "" RDMASHIM_CM_TIMEOUT_MS=2000 RDMASHIM_UPGRADE_TIMEOUT_MS=3000 -- --conns 1 --duration $((i == 1 ? 12 : 6)) --mode blocking
  done
  fault_end faults_cm_timeout 4 "cm_timeout x3"
  fault_struck faults_cm_timeout cm_timeout server 3
  n=$(fcount faults_cm_timeout '"upgrade.fail"' '"reason":"cm_timeout"' '"role":"server"')
  check "cm_timeout: three server attempts gave up with cm_timeout ($n)" test "$n" -eq 3
  n=$(fcount faults_cm_timeout '"upgrade.fail"' '"reason":"breaker_open"')
  check "cm_timeout: then the breaker was open: the fourth not tried ($n breaker_open)" test "$n" -ge 1
  n=$(fcount faults_cm_timeout '"upgrade.done"' '"transport":"rdma"')
  check "cm_timeout: no connection upgraded ($n)" test "$n" -eq 0
fi

if fkind cm_reject; then
  fault_server faults_cm_reject 2 ""
  warm_server faults_cm_reject "$port"
  fault_client faults_cm_reject cm_reject@1 -- --conns 1 --duration 10 --mode mixed
  fault_end faults_cm_reject 2 "cm_reject"
  fault_struck faults_cm_reject cm_reject client 1
  n=$(fcount faults_cm_reject '"upgrade.fail"' '"reason":"cm_rejected"' '"role":"server"')
  check "cm_reject: the server read the reject (upgrade.fail cm_rejected: $n)" test "$n" -ge 1
  n=$(fcount faults_cm_reject '"upgrade.fail"' '"reason":"cm_rejected"' '"role":"client"')
  check "cm_reject: the client gave up with it (upgrade.fail cm_rejected: $n)" test "$n" -ge 1
fi

if fkind reg_fail; then
  fault_server faults_reg_fail 2 ""
  warm_server faults_reg_fail "$port"
  fault_client faults_reg_fail reg_fail@1 -- --conns 1 --duration 10 --mode mixed
  fault_end faults_reg_fail 2 "reg_fail"
  fault_struck faults_reg_fail reg_fail client 1
  n=$(fcount faults_reg_fail '"upgrade.fail"' '"reason":"ring_alloc_failed"' '"role":"client"')
  check "reg_fail: the client stayed on TCP (upgrade.fail ring_alloc_failed: $n)" test "$n" -ge 1
fi

# Each connection of one stress client makes a link of its own here (they
# start together, and under TCG the first link is not up within the wait
# for it): qp_error and cq_lost strike up to four of them, one each.
for ((round = 1; round <= faults_rounds; round++)); do
  if fkind qp_error; then
    name=faults_qp_error_$round
    fault_server "$name" 6 ""
    warm_server "$name" "$port"
    fault_client "$name" qp_error@2097152,qp_error@8388608,qp_error@14680064,qp_error@20971520 -- \
      --conns 4 --bytes 64M --mode mixed --warm-up 60
    fault_end "$name" 6 "qp_error at 2, 8, 14, 20 MiB, round $round"
    fault_struck "$name" qp_error client 1
    n=$(fcount "$name" '"rdma.link"' '"state":"down"')
    w=$(ftrace "$name" | grep '"rdma.link"' | grep '"state":"down"' | grep -oE '"why":"[^"]*"' | sort | uniq -c | paste -sd' ' -)
    check "qp_error: links went down by the real error path ($n: $w)" test "$n" -ge 1 -a "${w/injected/}" = "$w"
    fault_failover "$name"
  fi

  if fkind cq_lost; then
    name=faults_cq_lost_$round
    fault_server "$name" 6 ""
    warm_server "$name" "$port"
    fault_client "$name" cq_lost@100,cq_lost@200,cq_lost@300,cq_lost@450 -- \
      --conns 4 --bytes 64M --mode mixed --warm-up 60
    fault_end "$name" 6 "cq_lost, round $round"
    fault_struck "$name" cq_lost client 1
    w=$(ftrace "$name" | grep -E '"rdma.link"|"failover.spill"' | grep -E '"state":"down"|spill' |
        grep -oE '"why":"[^"]*"|failover.spill' | sort | uniq -c | paste -sd' ' -)
    echo "   cq_lost: what followed: ${w:-a pause only}"
    # A pause of 2 s fails a connection over where the stall watch saw a
    # peer's tail word ahead of the held completions for its bound
    # (500 ms), or a writer found its ring full meanwhile: both ends
    # then, as for the kinds above.
    # The strikes' N: a process takes a few hundred completions in this
    # run (one signaled WR in 16, one receive per immediate).
    if [[ $(fcount "$name" '"failover.start"') -gt 0 ]]; then
      fault_failover "$name"
    else
      echo "# failover time $name n=0 (the streams paused, none failed over)"
    fi
  fi

  # link_qp_lost: conn_hold (every byte of every round checked, and each
  # stream's EOF) makes its connections one after the other (--each), so
  # that they join the link the first one made; the client's 9th
  # connection on a link (the warm one, then 8) strikes in its rounds.
  if fkind link_qp_lost; then
    name=faults_link_qp_lost_$round
    port=$((port + 1))
    rm -rf "${T:?}/$name" "$T/$name.hold"
    shim "$name" "$port" timeout 300 "$PROGS/conn_hold" server --host "$addr" --port "$port" --conns 8 --each 10 \
      --rounds 30 --size 4096 --warm 1000 --hold "$T/$name.hold" > "$T/$name.server" 2>&1 &
    fsrv=$!
    listening "$port"
    ( export RDMASHIM_TEST_FAULTS=link_qp_lost@9
      shim "$name" "$port" timeout 300 "$PROGS/conn_hold" client --host "$addr" --port "$port" --conns 8 \
        --each 10 --rounds 30 --size 4096 --warm 1000 --hold "$T/$name.hold" ) > "$T/$name.client" 2>&1 &
    fcl=$!
    for ((i = 0; i < 1200; i++)); do
      grep -q '^UP ' "$T/$name.client" 2>/dev/null && break
      kill -0 "$fcl" 2>/dev/null || break
      sleep 0.2
    done
    touch "$T/$name.hold"
    frc=0; wait "$fcl" || frc=$?
    src=0; wait "$fsrv" || src=$?
    check "link_qp_lost: client: every byte and each EOF checked (status $frc)" grep -q '^CHECKED conns=8' "$T/$name.client"
    check "link_qp_lost: server: every byte and each EOF checked (status $src)" grep -q '^CHECKED conns=8' "$T/$name.server"
    [[ $frc -eq 0 && $src -eq 0 ]] || { tail -n 5 "$T/$name.client" "$T/$name.server"; dump "$name"; }
    n=$(fcount "$name" '"failover.reset"')
    check "link_qp_lost: no connection reset ($n)" test "$n" -eq 0
    fault_struck "$name" link_qp_lost client 1
    c=$(ftrace "$name" | grep '"rdma.link"' | grep '"state":"down"' | grep -oE '"conns":[0-9]+' | grep -oE '[0-9]+' |
        sort -n | tail -n 1)
    check "link_qp_lost: a link went down under several connections (at most ${c:-0} on one)" test "${c:-0}" -ge 4
    n=$(ftrace "$name" | grep '"failover.start"' | grep -c '"peer":"'"$addr:$port"'"' || true)
    check "link_qp_lost: the client failed each of them over (at least 4: $n)" test "$n" -ge 4
    fault_failover "$name"
  fi
done

# In cq_stall and cq_stall_gap the server sends only 64 KiB a connection
# (--down-bytes): a server that sent as much as the client filled its ring
# while the client still read the TCP bytes before its switch under a
# busy TCG, spilled after a second, and took the connection to TCP before
# the fault could strike (seen in make test runs: no strike, every byte
# right on TCP). Not --duration: its streams end with shutdown, and a
# server that shut its side before the upgrade leaves its direction on TCP,
# where the client's can not be proved (rdma.unproven peer_stays_on_tcp).
#
# cq_stall: the server's receive completions are lost for good from its
# 10th data completion on (one link's; the others go on). The stall watch
# (default bound, RDMASHIM_RDMA_STALL_MS) sees the client's tail words
# ahead of the server's count and breaks the link: the client, which did
# not stop on purpose, waits for the server's RESUME and resumes at its
# count. Every byte right, within the bound.
if fkind cq_stall; then
  name=faults_cq_stall
  fault_server "$name" 4 cq_stall@10
  warm_server "$name" "$port"
  fault_client "$name" "" -- --conns 2 --bytes 64M --mode mixed --down-bytes 64K --warm-up 60
  fault_end "$name" 4 "cq_stall (watch on)"
  fault_upgraded "$name" 2
  fault_struck "$name" cq_stall server 1
  n=$(fcount "$name" '"rdma.cq_stall"')
  check "cq_stall: the stall watch saw it (rdma.cq_stall: $n)" test "$n" -ge 1
  n=$(fcount "$name" '"rdma.link"' '"state":"down"' '"why":"cq_stall"')
  check "cq_stall: the link went down with why cq_stall ($n)" test "$n" -ge 1
  ms=$(ms_between "$name" fault.injected rdma.cq_stall)
  echo "   cq_stall: detected ${ms:-?} ms after the strike (bound 500 ms, looks every 125 ms)"
  check "cq_stall: detected within 2 s of the strike (${ms:-none} ms)" test "${ms:-99999}" -le 2000
  fault_failover "$name"
fi

# cq_stall_gap: the same loss with the watch off at the server. One
# blocking stream of 128 MiB (long enough to outlast an upgrade slowed by
# a busy host): the client's writer finds its ring full for a second and
# spills; its RESUME says its bytes start at its own count (its last WRITE
# was acknowledged), past the server's. The server resets before it reads
# one of them (failover.gap), the client when the server's RESUME names
# less than it said (peer_offset_behind): a clean reset with its reason,
# never a wrong byte (the stress tool prints expected=/got= for those).
if fkind cq_stall_gap; then
  name=faults_cq_stall_gap
  fault_server "$name" 3 cq_stall@10 RDMASHIM_RDMA_STALL_MS=0
  warm_server "$name" "$port"
  fault_client "$name" "" -- --conns 1 --bytes 128M --mode blocking --down-bytes 64K --warm-up 60
  src=0; wait "$fsrv" || src=$?
  fault_upgraded "$name" 1
  bad=$(grep -hcE 'expected=0x|MSG_PEEK saw' "$T/$name.client" "$T/$name.server" | awk '{ s += $1 } END { print s + 0 }')
  check "cq_stall_gap: no wrong byte at either end ($bad)" test "$bad" -eq 0
  fault_struck "$name" cq_stall server 1
  gap=$(fcount "$name" '"failover.gap"')
  ab=$(fcount "$name" '"conn.abort"' '"reason":"resume_failed"')
  ok_c=$(grep -c '^stress: OK' "$T/$name.client")
  echo "   cq_stall_gap: client status $frc, server $src; failover.gap $gap, conn.abort resume_failed $ab; $(grep -hE 'FAIL' "$T/$name.client" "$T/$name.server" | head -n 2 | cut -c1-160 | paste -sd'|' -)"
  # The stream ends byte-exact (a resume that came right) or reset with
  # the reason traced at both ends; with this schedule, the reset.
  check "cq_stall_gap: the gap was seen before a byte of it was read (failover.gap $gap)" test "$gap" -ge 1
  check "cq_stall_gap: both ends reset with reason resume_failed ($ab)" test "$ab" -ge 2 -o "$ok_c" -ge 1
  [[ $gap -ge 1 ]] || dump "$name"
fi

# devloss: the device goes away under live streams. Two checksummed
# streams run over RDMA; then `rdma link delete rxe0` removes the device
# (its verbs objects in both processes become a device's that is gone),
# it is added back, and the netdev is taken down and up. Every connection
# must finish byte-exact (on TCP), neither process may crash, and the
# delete must not hang on the processes' objects. Last, a new connection
# after all that: byte-exact too (over RDMA again or on TCP).
if fkind devloss; then
  name=faults_devloss
  # Server connections: warm_server's, the client's --warm-up one and its
  # 2 streams, then the after-client's --warm-up one and its own.
  fault_server "$name" 6 ""
  warm_server "$name" "$port"
  ( shim "$name" "$port" timeout 240 "$PROGS/stress" client --host "$addr" --port "$port" --conns 2 --duration 30 \
      --mode mixed --warm-up 60 --timeout 200 ) > "$T/$name.client" 2>&1 &
  fcl=$!
  for ((i = 0; i < 300; i++)); do
    n=$(fcount "$name" '"upgrade.done"' '"transport":"rdma"' '"role":"client"')
    ((n >= 2)) && break
    sleep 0.5
  done
  echo "   devloss: $n client connections on RDMA before the delete ($((i / 2)) s)"
  sleep 1
  t0=$SECONDS; drc=0
  timeout 60 rdma link delete rxe0 || drc=$?
  tdel=$((SECONDS - t0))
  check "devloss: rdma link delete rxe0 under live streams returned (status $drc, ${tdel} s)" test "$drc" -eq 0
  sleep 2
  arc=0; timeout 30 rdma link add rxe0 type rxe netdev dummy0 || arc=$?
  sleep 2
  ip link set dummy0 down; sleep 1; ip link set dummy0 up
  frc=0; wait "$fcl" || frc=$?
  RXE_UP_WAIT=30 rxe_up dummy0 "$addr/24" >/dev/null 2>&1 || echo "   devloss: rxe0 not back ACTIVE"
  shim "$name" "$port" timeout 120 "$PROGS/stress" client --host "$addr" --port "$port" --conns 1 --bytes 4M \
    --mode blocking --warm-up 20 --timeout 100 > "$T/$name.after" 2>&1 || frc2=$?
  src=0; wait "$fsrv" || src=$?
  check "devloss: client byte-exact through the delete, re-add, down and up (status $frc)" \
    test "$(grep -c '^stress: OK' "$T/$name.client")" -ge 1 -a "$frc" -eq 0
  check "devloss: a connection after it all byte-exact (status ${frc2:-0})" grep -q '^stress: OK' "$T/$name.after"
  check "devloss: server byte-exact on every connection (status $src)" grep -q "stress-server: OK conns=6 failed=0" \
    "$T/$name.server"
  crashed=$(grep -chE 'Segmentation|Aborted|core dumped|Bus error' "$T/$name.client" "$T/$name.server" "$T/$name.after" |
    awk '{ s += $1 } END { print s + 0 }')
  check "devloss: no process crashed ($crashed)" test "$crashed" -eq 0 -a "$src" -lt 128 -a "$frc" -lt 128
  w=$(ftrace "$name" | grep -E '"rdma.link"|"rdma.port"' | grep -oE '"(why|source)":"[^"]*"' | sort | uniq -c | paste -sd' ' -)
  echo "   devloss: $w; add status $arc"
  n=$(fcount "$name" '"failover.start"')
  check "devloss: the streams failed over ($n failover.start)" test "$n" -ge 2
  [[ $frc -eq 0 && $src -eq 0 && ${frc2:-0} -eq 0 ]] ||
    { tail -n 5 "$T/$name.client" "$T/$name.after" "$T/$name.server"; dump "$name"; }
fi
