#!/bin/bash
# matrix/mariadb: MariaDB (mariadbd: a thread per connection, each blocking
# in poll on its socket; the server speaks first, its greeting) and its
# clients over TCP (--protocol=tcp, libmariadb). A private server in
# $WORK: its own datadir (mariadb-install-db once, copied for each run),
# --socket and --port, --skip-grant-tables, run as the mysql user.
# mariadb-slap (mysqlslap) loads it with 8 concurrent connections: 2400
# UPDATE/INSERT/SELECT statements on an InnoDB table of 1000 accounts (each
# statement moves a fixed amount, so the end state is the same whatever
# the interleaving), then 1600 point SELECTs at concurrency 16. Then the
# mariadb client reads the table back (a bulk result set) and the server
# computes a checksum of it. Result: the exit statuses, the row counts, the
# sum of balances, the MD5 of the rows as the client got them and the
# server's CHECKSUM TABLE and md5 over GROUP_CONCAT.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need_cmd mariadbd mariadb-install-db mariadb-slap mariadb setpriv
id mysql >/dev/null 2>&1 || skip "no mysql user"
MX_SWITCHED_BY="mariadbd slap-rw slap-ro"

chmod 711 "$WORK"
mkdir -p "$WORK/base"
chown mysql: "$WORK/base"
if ! timeout 120 mariadb-install-db --no-defaults --datadir="$WORK/base" --user=mysql \
     --auth-root-authentication-method=normal --skip-test-db >"$WORK/install.out" 2>&1; then
  not_ok "mariadb-install-db"
  tail -n 5 "$WORK/install.out"
  finish
fi

SETUP="CREATE DATABASE mx;
USE mx;
CREATE TABLE mx.acc (id INT PRIMARY KEY, bal BIGINT NOT NULL) ENGINE=InnoDB;
CREATE TABLE mx.log (id INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(64) NOT NULL) ENGINE=InnoDB;
INSERT INTO mx.acc SELECT seq, seq * 10 FROM seq_1_to_1000;"
RW="UPDATE mx.acc SET bal = bal + 7 WHERE id = 1 + (CONNECTION_ID() * 37) % 1000;INSERT INTO mx.log (what) VALUES (REPEAT('x', 40));SELECT SUM(bal) FROM mx.acc"
RO="SELECT bal FROM mx.acc WHERE id = 500"
SUMS="SELECT (SELECT SUM(bal) FROM mx.acc), (SELECT COUNT(*) FROM mx.log),
  (SELECT MD5(GROUP_CONCAT(id, ':', bal ORDER BY id)) FROM mx.acc)"

mx_body() {
  local port pid rc out dir=$WORK/$MODE-db
  port=$(free_port)
  mx_port mariadb "$port"
  cp -a "$WORK/base" "$dir"
  mx_bg_as mysql mariadbd mariadbd --no-defaults --datadir="$dir" --socket="$dir/sock" --port="$port" \
    --bind-address=127.0.0.1 --skip-grant-tables --skip-name-resolve --skip-log-bin \
    --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=0 --max-connections=64 \
    --pid-file="$dir/mariadbd.pid" --log-error="$dir/error.log"
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; tail -n 5 "$dir/error.log"; return; }
  local conn=(--protocol=tcp -h 127.0.0.1 -P "$port" -u root)
  rc=0
  mx_fg setup mariadb "${conn[@]}" -e "$SETUP" >"$WORK/$MODE-setup.out" 2>&1 || rc=$?
  mx_result "setup exit $rc"
  mx_check "setup: exit status 0 (got $rc)" test "$rc" -eq 0
  rc=0
  mx_fg slap-rw mariadb-slap "${conn[@]}" --create-schema=mx --concurrency=8 --iterations=1 \
    --number-of-queries=2400 --delimiter=';' --query="$RW" >"$WORK/$MODE-slap-rw.out" 2>&1 || rc=$?
  mx_result "mariadb-slap read-write, concurrency 8: exit $rc"
  mx_check "mariadb-slap read-write: exit status 0 (got $rc)" test "$rc" -eq 0
  rc=0
  mx_fg slap-ro mariadb-slap "${conn[@]}" --create-schema=mx --concurrency=16 --iterations=1 \
    --number-of-queries=1600 --query="$RO" >"$WORK/$MODE-slap-ro.out" 2>&1 || rc=$?
  mx_result "mariadb-slap read-only, concurrency 16: exit $rc"
  mx_check "mariadb-slap read-only: exit status 0 (got $rc)" test "$rc" -eq 0
  grep -i error "$WORK/$MODE-slap-rw.out" "$WORK/$MODE-slap-ro.out" | head -n 3
  out=$(mx_fg sums mariadb "${conn[@]}" -N -B -e "$SUMS" 2>&1)
  mx_result "sum of balances, log rows, md5: $out"
  # 1000 accounts of 10..10000 (5005000), 800 UPDATEs of +7 and 800 INSERTs.
  mx_check "the balances add up (5010600) and the log has 800 rows ($out)" \
    awk -F'\t' '$1 == 5010600 && $2 == 800 { ok = 1 } END { exit !ok }' <<<"$out"
  rc=0
  mx_fg dump mariadb "${conn[@]}" -N -B -e "SELECT * FROM mx.acc ORDER BY id; SELECT * FROM mx.log ORDER BY id" \
    >"$WORK/$MODE-dump.out" 2>&1 || rc=$?
  mx_result "dump exit $rc: $(wc -l <"$WORK/$MODE-dump.out") rows, md5 $(md5sum <"$WORK/$MODE-dump.out" | cut -c1-32)"
  out=$(mx_fg checksum mariadb "${conn[@]}" -N -B -e "CHECKSUM TABLE mx.acc EXTENDED" 2>&1)
  mx_result "CHECKSUM TABLE: $out"
  mx_check "mariadbd still running" kill -0 "$pid"
  stop_bg "$pid"
  if grep -q '\[ERROR\]' "$dir/error.log"; then
    not_ok "$MODE: mariadbd logged no error"
    grep '\[ERROR\]' "$dir/error.log" | head -n 5 | sed 's/^/    /'
  fi
}

mx_main
