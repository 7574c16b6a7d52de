#!/bin/bash
# matrix/postgres: PostgreSQL (the postmaster forks a backend per
# connection; backends wait in epoll) and libpq's clients: pgbench -i (a bulk
# COPY into the server), pgbench -c 4 -j 2 -t 100 with a fixed random seed
# (4 connections on 2 threads, each polling its socket), psql over COPY TO
# STDOUT (a bulk answer) and queries. Result: the exit statuses, the
# transactions pgbench counted, and sums and an MD5 over the tables, which
# the seed makes the same in every run whatever the interleaving.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PGBIN=/usr/lib/postgresql/15/bin
[[ -x $PGBIN/postgres && -x $PGBIN/initdb ]] || skip "postgresql-15 is not installed"
need_cmd setpriv
id postgres >/dev/null 2>&1 || skip "no postgres user"
MX_SWITCHED_BY="pgbench-init pgbench psql-copy postgres"

# The server runs as postgres (it refuses root): it needs a way in.
chmod 711 "$WORK"
mkdir -p "$WORK/pg/sock"
chown -R postgres: "$WORK/pg"
AS_PG=(setpriv --reuid=postgres --regid=postgres --init-groups)
if ! timeout 60 "${AS_PG[@]}" "$PGBIN/initdb" -D "$WORK/pg/data" -A trust -U postgres --no-sync -E UTF8 \
     --locale=C.UTF-8 >"$WORK/initdb.out" 2>&1; then
  not_ok "initdb"
  tail -n 5 "$WORK/initdb.out"
  finish
fi

SUMS="SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(bbalance) FROM pgbench_branches),
  (SELECT sum(tbalance) FROM pgbench_tellers), (SELECT count(*) FROM pgbench_history),
  (SELECT md5(string_agg(aid || ':' || abalance, ',' ORDER BY aid)) FROM pgbench_accounts)"

mx_body() {
  local port pid rc out
  port=$(free_port)
  mx_port postgres "$port"
  mx_bg_as postgres postgres "$PGBIN/postgres" -D "$WORK/pg/data" -p "$port" -k "$WORK/pg/sock" \
    -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
    -c max_connections=20 -c logging_collector=off
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; tail -n 5 "$WORK/$MODE-postgres.err"; return; }
  local conn=(-h 127.0.0.1 -p "$port" -U postgres)
  rc=0
  mx_fg pgbench-init pgbench "${conn[@]}" -i -s 1 -q postgres >"$WORK/$MODE-init.out" 2>&1 || rc=$?
  mx_result "pgbench -i exit $rc"
  mx_check "pgbench -i exit status 0 (got $rc)" test "$rc" -eq 0
  rc=0
  mx_fg pgbench pgbench "${conn[@]}" -n -c 4 -j 2 -t 100 --random-seed=4242 postgres \
    >"$WORK/$MODE-bench.out" 2>&1 || rc=$?
  out=$(sed -n 's/^number of transactions actually processed: //p; s/^number of failed transactions: \([0-9]*\).*/failed \1/p' \
        "$WORK/$MODE-bench.out" | tr '\n' ' ')
  mx_result "pgbench -c 4 -t 100 exit $rc: processed $out"
  mx_check "pgbench: exit status 0, 400 of 400 transactions (got $rc: $out)" grep -q '^400/400 failed 0 $' <<<"$out"
  out=$(mx_fg psql-sums psql "${conn[@]}" -XAtq -c "$SUMS" postgres 2>&1)
  mx_result "sums, history rows, md5: $out"
  mx_check "psql: the balances add up (accounts = branches = tellers, 400 history rows)" \
    awk -F'|' '$1 == $2 && $2 == $3 && $4 == 400 { ok = 1 } END { exit !ok }' <<<"$out"
  rc=0
  mx_fg psql-copy psql "${conn[@]}" -Xq -c 'COPY (SELECT * FROM pgbench_accounts ORDER BY aid) TO STDOUT' postgres \
    >"$WORK/$MODE-copy.out" 2>&1 || rc=$?
  mx_result "COPY TO STDOUT exit $rc: $(wc -l <"$WORK/$MODE-copy.out") rows, md5 $(md5sum <"$WORK/$MODE-copy.out" | cut -c1-32)"
  mx_check "COPY TO STDOUT: 100000 rows (got $(wc -l <"$WORK/$MODE-copy.out"))" test "$(wc -l <"$WORK/$MODE-copy.out")" -eq 100000
  mx_check "postgres still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
