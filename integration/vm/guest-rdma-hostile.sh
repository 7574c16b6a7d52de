# guest-rdma-hostile.sh — the "hostile" scenario of guest-rdma-one.sh (sourced
# from it: uses its shim/check/listening/warm_server helpers and $port).
#
# The victim is a shim echo server in its single-threaded epoll shape, so a
# stall on one connection would stall them all. build/progs/hostile_rdma
# connects to it as a shim client would, proves itself (it does own the
# TCP connection) and then lies in what it writes into the victim's memory
# (imm, head, recvs, norecv, linkmsg, dataclosed, datahead; see the
# program's header). Each time the victim
# must trace the violation (or, for norecv, fail the write at once), stay
# up, announce nothing on the hostile's ring, and keep serving other
# connections byte-exact. Then the squatter: it holds the rdma_cm
# rendezvous of a real client's connection before the client's shim does,
# so the real server's CM connection reaches it instead of the client: the
# real connection must stay byte-exact (on TCP), and the squatter must get
# no byte.

hostile_trace() { cat "$T/hostile"/trace.*.jsonl 2>/dev/null; }

# hostile_other WHAT: two more shim connections at the victim, byte-exact.
hostile_other() {
  local rc=0
  shim hostile "$port" timeout 60 "$PROGS/echo_client" --host "$addr" --port "$port" --bytes 256K --conns 2 \
    --timeout 40 > "$T/hostile.other" 2>&1 || rc=$?
  check "hostile $1: the victim still serves other connections byte-exact after them (status $rc)" test "$rc" -eq 0
  [[ $rc -eq 0 ]] || tail -n 3 "$T/hostile.other"
}

port=$((port + 1))
shim hostile "$port" timeout 240 "$PROGS/echo_server" --shape epoll --bind "$addr" --port "$port" \
  --timeout 230 > "$T/hostile.server" 2>&1 &
hspid=$!
listening "$port"
# Warm the victim (its RDMA warm-up runs on a thread beside its first
# connections) with one plain echo, then wait for it to end.
timeout 60 "$PROGS/echo_client" --host "$addr" --port "$port" --bytes 64K --timeout 30 > "$T/hostile.prewarm" 2>&1 ||
  { echo "hostile: the pre-warm client failed"; cat "$T/hostile.prewarm"; }
for ((i = 0; i < 300; i++)); do
  grep -qs '"event":"rdma.warm"' "$T/hostile"/trace.*.jsonl && break
  sleep 0.2
done

for m in imm head recvs norecv linkmsg dataclosed datahead; do
  rc=0
  # norecv keeps its connection 9 s after the lie: a victim that waited for
  # the RNR retries (endless at rnr_retry 7) would wait until then.
  linger=2; [[ $m == norecv ]] && linger=9
  timeout 60 "$PROGS/hostile_rdma" --host "$addr" --port "$port" --mode "$m" --linger "$linger" --timeout 30 \
    > "$T/hostile.$m" 2>&1 &
  hpid=$!
  for ((i = 0; i < 300; i++)); do
    grep -qs 'hostile: lie sent' "$T/hostile.$m" && break
    kill -0 "$hpid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ $m == norecv ]]; then
    # Right after the lie the victim echoes into a ring with no receive
    # posted: a plain client's whole echo must not wait for that (with
    # endless RNR retries it waited, under the victim's socket lock, until
    # its 10 s bound or the peer's DREQ).
    t0=$(date +%s%N)
    rc2=0
    timeout 30 "$PROGS/echo_client" --host "$addr" --port "$port" --bytes 64K --timeout 9 \
      > "$T/hostile.norecv.plain" 2>&1 || rc2=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    check "hostile norecv: a plain client's 64K echo meanwhile is not held up ($ms ms, status $rc2)" \
      test "$rc2" -eq 0 -a "$ms" -lt 7000
  fi
  wait "$hpid" || rc=$?
  cat "$T/hostile.$m"
  check "hostile $m: the victim proved the peer, switched, and got the lie (status $rc)" \
    grep -q 'hostile: lie sent' "$T/hostile.$m"
  case $m in
    imm) what='"rdma.violation".*"why":"immediate_beyond_credit"' ;;
    head) what='"rdma.violation".*"why":"head_out_of_range"' ;;
    recvs) what='"rdma.violation".*"why":"receive_credit_out_of_range"' ;;
    norecv) what='"rdma.broken".*"why":"RNR retry counter exceeded"' ;;
    linkmsg) what='"rdma.link".*"state":"down".*"why":"bad_message_type"' ;;
    dataclosed) what='"rdma.violation".*"why":"closed_with_data"' ;;
    datahead) what='"rdma.violation".*"why":"head_out_of_range"' ;;
  esac
  check "hostile $m: the victim ended the channel ($what)" bash -c "cat '$T/hostile'/trace.*.jsonl | grep -qE '$what'"
  if [[ $m == linkmsg ]]; then
    # The stranger's OFFER is refused, the RELEASE of a live connection
    # changes nothing: the 100 bytes came back before the unknown type.
    check "hostile linkmsg: the victim refused an OFFER naming another client" \
      bash -c "cat '$T/hostile'/trace.*.jsonl | grep -q '\"why\":\"offer_not_from_peer\"'"
    check "hostile linkmsg: the connection lived on after both (echoed 100)" \
      grep -q 'hostile: echoed 100 before' "$T/hostile.$m"
  else
    check "hostile $m: the victim announced nothing on the liar's ring" grep -q 'hostile: ring bytes 0 after' "$T/hostile.$m"
  fi
  check "hostile $m: the victim is alive" kill -0 "$hspid"
done
hostile_other "imm, head, recvs, norecv, linkmsg, dataclosed, datahead"

# The squatter. The real client's connection is made first (bash, no shim)
# so that its port is known; the squatter takes that port's rdma_cm
# rendezvous; then a shim client (RDMASHIM_TRANSPORTS=rdma) adopts the
# connection and echoes 1M through the victim. The client's own rendezvous
# is busy, so the victim's CM connection reaches the squatter.
exec 3<>"/dev/tcp/$addr/$port"
cport=$(ss -Htnp "dport = :$port" | grep "pid=$$," | awk '{print $4}' | sed 's/.*://' | head -n 1)
timeout 60 "$PROGS/hostile_rdma" --host "$addr" --mode squat --ports "$cport-$cport" --timeout 12 \
  > "$T/hostile.squat" 2>&1 &
hpid=$!
for ((i = 0; i < 100; i++)); do
  grep -qs 'hostile: squatting' "$T/hostile.squat" && break
  sleep 0.1
done
rc=0
shim hostile "$port" timeout 60 "$PROGS/echo_client" --fd 3 --bytes 1M --timeout 40 \
  > "$T/hostile.squatclient" 2>&1 || rc=$?
exec 3>&-
wait "$hpid"
cat "$T/hostile.squat"
check "hostile squat: the real client's echo stays byte-exact (status $rc)" test "$rc" -eq 0
if [[ $rc -ne 0 ]]; then
  tail -n 3 "$T/hostile.squatclient"
  echo "-- trace of the squatted connection (port $cport):"
  cat "$T/hostile"/trace.*.jsonl 2>/dev/null | grep -F ":$cport" | tail -n 60
fi
n=$(grep -o 'squat accepted [0-9]*' "$T/hostile.squat" | grep -o '[0-9]*$')
check "hostile squat: the victim's CM connection reached the squatter at port ${cport:-?} (accepted ${n:-none})" \
  test "${n:-0}" -ge 1
check "hostile squat: the squatter got no byte of the stream" grep -q 'ring bytes 0$' "$T/hostile.squat"
n=$(hostile_trace | grep -c '"rdma.unproven"\|"rx.switch_refused"\|"switch_at_behind"' || true)
echo "   hostile squat: the victim's refusals: $n"
check "hostile: the victim is alive at the end" kill -0 "$hspid"
kill "$hspid" 2>/dev/null
wait "$hspid" 2>/dev/null
