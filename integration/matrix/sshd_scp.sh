#!/bin/bash
# matrix/sshd_scp: the OpenSSH server (sshd -D: it re-executes itself per
# connection; a privilege-separated pre-auth child, chrooted, seccomp
# sandboxed, does the key exchange and authentication; after login the
# monitor forks the session child that relays between the connection and
# the command's pipes) and a shimmed ssh/scp client, set up as
# integration/t_sshd.sh does (host and user keys in $WORK, no PAM, root by
# key). One login running a command, then scp of a 100 MB file up and down
# (scp runs ssh, which talks to sftp-server on the far side).
# Result: the login's output and status, scp's exit statuses, the SHA-256
# of both copies (equal to the file's), and sshd logged no reset or child
# killed by a signal.
#
# No connection can be counted as upgraded here, so the port is checked
# with MIN 0 and MX_SWITCHED_BY is empty: sshd hands every connection to a
# forked child (the pre-auth child, which sandboxes itself: seccomp and
# no_new_privs, so the shim leaves it; then the session child), and a
# connection changing hands returns to TCP (the server's trace:
# upgrade.fail reason forked, upgrade.settle_fork; or, when the upgrade
# finished in the re-executed sshd before it forked the pre-auth child,
# a hand-back in that child as it sandboxes itself, which gives the ssh
# client's unread KEXINIT, in front of the client's SWITCH frame, back to
# the client to send again (RETURN, shim/PROTOCOL.md; not in the trace:
# the child's RLIMIT_FSIZE of 0 drops its lines), then failover.elsewhere
# in the session child, which finds the connection back on TCP); and ssh
# closes every fd above 2 at start (closefrom), the shim's trace file with
# them, so the client's end of each connection is never in the trace.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd ssh scp ssh-keygen sha256sum
SSHD=/usr/sbin/sshd
[[ -x $SSHD ]] || skip "$SSHD is not installed (tools/install-deps.sh installs openssh-server)"
[[ $(id -u) -eq 0 ]] || skip "sshd's privilege separation needs root"
mkdir -p /run/sshd && chmod 0755 /run/sshd
MX_SWITCHED_BY=

KEYS=$WORK/keys
mkdir -p "$KEYS"
ssh-keygen -q -t ed25519 -N '' -f "$KEYS/host" || not_ok "host key"
ssh-keygen -q -t ed25519 -N '' -f "$KEYS/user" || not_ok "user key"
cp "$KEYS/user.pub" "$KEYS/authorized_keys"
"$PY3" -c 'import random, sys; open(sys.argv[1], "wb").write(random.Random(99).randbytes(100 * 1000 * 1000))' "$WORK/blob"
SUM=$(sha256sum <"$WORK/blob" | cut -d' ' -f1)
ssh_opts=(-F /dev/null -i "$KEYS/user" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no
  -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=30 -o Compression=no)

mx_body() {
  local port pid rc got way dir=$WORK/$MODE-sshd
  port=$(free_port)
  mx_port sshd "$port" 0
  mkdir -p "$dir"
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
Subsystem sftp /usr/lib/openssh/sftp-server
EOF
  mx_bg sshd "$SSHD" -D -e -f "$dir/sshd_config"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; return; }
  rc=0
  got=$(mx_fg ssh ssh -p "$port" "${ssh_opts[@]}" root@127.0.0.1 'echo login; id -u; exit 7' 2>"$dir/ssh.err") || rc=$?
  mx_result "login: $(tr '\n' ' ' <<<"$got")status $rc"
  mx_same "login runs its command (stderr: $(head -c 200 "$dir/ssh.err"))" "login 0 7" "$(tr '\n' ' ' <<<"$got")$rc"
  for way in up down; do
    local from=$WORK/blob to=root@127.0.0.1:$dir/up.bin
    [[ $way == down ]] && { from=root@127.0.0.1:$WORK/blob; to=$dir/down.bin; }
    rc=0
    mx_fg "scp-$way" scp -P "$port" "${ssh_opts[@]}" "$from" "$to" 2>"$dir/scp-$way.err" || rc=$?
    got=$( (sha256sum <"$dir/$way.bin") 2>/dev/null | cut -d' ' -f1)
    mx_result "scp $way exit $rc, sha256 $got"
    mx_check "scp $way: exit status 0 (got $rc: $(head -c 200 "$dir/scp-$way.err"))" test "$rc" -eq 0
    mx_same "scp $way: the 100 MB arrived byte for byte (SHA-256)" "$SUM" "$got"
    rm -f "$dir/$way.bin"
  done
  mx_check "sshd still running" kill -0 "$pid"
  stop_bg "$pid"
  got=$(grep -E 'terminated by signal|Connection reset|Broken pipe|fatal' "$WORK/$MODE-sshd.err" | head -n 3)
  mx_check "sshd logged no reset and no child killed ($got)" test -z "$got"
}

mx_main
