#!/bin/bash
# t_sshd: the real OpenSSH server under the shim (RDMASHIM_TRANSPORTS=shm,
# port whitelisted), issue 33. Its pre-auth child chroots to /run/sshd,
# drops to the sshd user, sets RLIMIT_FSIZE to 0 and installs a seccomp
# filter that kills on any call it does not list (sendmsg, getsockopt,
# socket...); the monitor forks the session child after login.
#   plain: an ssh client WITHOUT the shim must see exactly what TCP gives:
#      three logins running a command (output and status as expected), scp
#      of a 4 MiB file up and down (SHA-256 equal both ways), sshd logs no
#      reset and no child killed by a signal; the server's trace shows the
#      connections tracked (whitelisted), so the shim really was on them (the
#      pre-auth children trace nothing: a line past their file limit of 0
#      would be a SIGXFSZ).
#   untraced: plain again with no trace at all, so that neither the trace
#      nor its file limit is what keeps the pre-auth child alive.
#   shim: the same with the client under the shim too (the product's
#      default RDMASHIM_UPGRADE_AFTER_MS). Correct all the same; the scenario
#      prints how many connections upgraded and the reasons the others gave,
#      and each connection has a reason in the server's trace (an upgrade,
#      or an upgrade.fail with its reason: forked, sandboxed...).
#   shim0: the same with RDMASHIM_UPGRADE_AFTER_MS=0, where the upgrade
#      may finish before sshd forks its pre-auth child, which then hands
#      the switched connection back to TCP as it sandboxes itself (its
#      session child finds it there, failover.elsewhere).
# With the library before issue 33's fix, plain fails: the pre-auth child
# is killed (SIGSYS: the shim's data path made the program's write a
# sendmsg; SIGXFSZ: a trace line past RLIMIT_FSIZE) and the client sees
# "Connection reset".
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_cmd ssh scp ssh-keygen sha256sum
SSHD=/usr/sbin/sshd
[[ -x $SSHD ]] || skip "$SSHD is not installed (tools/install-deps.sh installs openssh-server)"
[[ $(id -u) -eq 0 ]] || skip "sshd's privilege separation needs root"
# sshd's privilege-separation directory (the package's service makes it).
mkdir -p /run/sshd && chmod 0755 /run/sshd

KEYS=$WORK/keys
mkdir -p "$KEYS"
ssh-keygen -q -t ed25519 -N '' -f "$KEYS/host" || not_ok "host key"
ssh-keygen -q -t ed25519 -N '' -f "$KEYS/user" || not_ok "user key"
cp "$KEYS/user.pub" "$KEYS/authorized_keys"
head -c 4M /dev/urandom >"$WORK/blob"
SUM=$(sha256sum <"$WORK/blob" | cut -d' ' -f1)
SFTP=/usr/lib/openssh/sftp-server
CONNS=5 # three logins and two scp

ssh_opts=(-F /dev/null -i "$KEYS/user" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no
  -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=20)

for client in plain untraced shim shim0; do
  port=$(free_port)
  dir=$WORK/$client
  mkdir -p "$dir/trace"
  cat >"$dir/sshd_config" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $KEYS/host
PidFile $dir/sshd.pid
AuthorizedKeysFile $KEYS/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp $SFTP
EOF
  after=2
  [[ $client == shim0 ]] && after=0
  vars=(RDMASHIM_PORTS="$port" RDMASHIM_TRANSPORTS=shm RDMASHIM_UPGRADE_AFTER_MS=$after)
  [[ $client == untraced ]] || vars+=(RDMASHIM_TRACE=info "RDMASHIM_TRACE_FILE=$dir/trace/trace.%p.jsonl")
  start_bg "sshd-$client" shim "${vars[@]}" "$SSHD" -D -e -f "$dir/sshd_config"
  sshd_pid=$BG_PID
  wait_listen "$port" || not_ok "$client: sshd listens"
  run() {
    if [[ $client == shim* ]]; then with_shim "${vars[@]}" "$@"; else no_shim "$@"; fi
  }
  for i in 1 2 3; do
    got=$(run ssh -p "$port" "${ssh_opts[@]}" root@127.0.0.1 "echo login-$i; id -u; exit 7" 2>"$dir/ssh.$i.err")
    rc=$?
    same "$client: login $i runs its command (status $rc, stderr: $(head -c 200 "$dir/ssh.$i.err"))" \
      "login-$i 0 7" "$(tr '\n' ' ' <<<"$got")$rc"
  done
  run scp -P "$port" "${ssh_opts[@]}" "$WORK/blob" "root@127.0.0.1:$dir/up.bin" 2>"$dir/scp-up.err"
  rc=$?
  check "$client: scp up exits 0 (status $rc, $(head -c 200 "$dir/scp-up.err"))" test "$rc" -eq 0
  same "$client: the file that went up is the same (SHA-256)" "$SUM" "$( (sha256sum <"$dir/up.bin") 2>/dev/null | cut -d' ' -f1)"
  run scp -P "$port" "${ssh_opts[@]}" "root@127.0.0.1:$WORK/blob" "$dir/down.bin" 2>"$dir/scp-down.err"
  rc=$?
  check "$client: scp down exits 0 (status $rc, $(head -c 200 "$dir/scp-down.err"))" test "$rc" -eq 0
  same "$client: the file that came down is the same (SHA-256)" "$SUM" "$( (sha256sum <"$dir/down.bin") 2>/dev/null | cut -d' ' -f1)"
  stop_bg "$sshd_pid"
  bad=$(grep -E 'terminated by signal|Connection reset|Broken pipe|fatal' "$WORK/sshd-$client.err" | head -n 3)
  check "$client: sshd logged no reset and no child killed ($bad)" test -z "$bad"
  [[ $client == untraced ]] && continue

  trace_py "$dir/trace" "$client" "$port" "$CONNS" <<'PY'
client, port, conns = ARGS[0], int(ARGS[1]), int(ARGS[2])
L = client + ": "
# sshd re-executes itself per connection: each connection is adopted
# (inherited) by a process of its own.
tr = tracks("server", port)
keys = {conn_key(r) for r in tr}
check(len(keys) == conns and all(r["reason"] == "whitelisted" for r in tr),
      L + "the server tracked every connection as whitelisted (%d of %d)" % (len(keys), conns))
switched = {(r["local"], r["peer"]) for r in events("tx.switch")}
fails = events("upgrade.fail")
why = {}
for r in fails:
    why.setdefault(r["reason"], set()).add((r["local"], r["peer"]))
up = {k for k in keys if (k[1], k[0]) in switched}
print("    %s client: %d of %d connections upgraded; upgrade.fail reasons: %s" %
      (client, len(up), len(keys), {k: len(v) for k, v in sorted(why.items())}))
check(not events("conn.abort"), L + "no connection was aborted")
if not client.startswith("shim"):
    check(not up, L + "nothing switched towards a client without the shim")
    check(set(why) <= {"peer_no_shim", "timeout", "forked", "sandboxed"},
          L + "every upgrade.fail says why in a plain client's terms (%s)" % sorted(why))
else:
    told = {(r["peer"], r["local"]) for r in fails}
    check(all(k in up or k in told for k in keys),
          L + "every connection upgraded or its trace says why not")
PY
done
finish
