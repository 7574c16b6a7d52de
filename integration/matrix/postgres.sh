#!/bin/bash
# matrix/postgres: PostgreSQL (the postmaster forks a backend per
# connection; backends wait in epoll) and libpq's clients: pgbench -i (a bulk
# COPY into the server), pgbench -c 4 -j 2 -t 100 with a fixed random seed
# (4 connections on 2 threads, each polling its socket), psql over COPY TO
# STDOUT (a bulk answer) and queries. Result: the exit statuses, the
# transactions pgbench counted, and sums and an MD5 over the tables, which
# the seed makes the same in every run whatever the interleaving.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/postgres.inc"
MX_SWITCHED_BY="pgbench-init pgbench psql-copy postgres"

mx_body() {
  local port rc
  port=$(free_port)
  mx_port postgres "$port"
  pg_start "$WORK/pg/data" "$port" 20 || return
  pg_init 1
  pg_bench pgbench "pgbench -c 4 -t 100" 400 -c 4 -j 2 -t 100 --random-seed=4242
  pg_sums 400
  rc=0
  mx_fg psql-copy psql "${PG_CONN[@]}" -Xq -c 'COPY (SELECT * FROM pgbench_accounts ORDER BY aid) TO STDOUT' postgres \
    >"$WORK/$MODE-copy.out" 2>&1 || rc=$?
  mx_result "COPY TO STDOUT exit $rc: $(wc -l <"$WORK/$MODE-copy.out") rows, md5 $(md5sum <"$WORK/$MODE-copy.out" | cut -c1-32)"
  mx_check "COPY TO STDOUT: 100000 rows (got $(wc -l <"$WORK/$MODE-copy.out"))" test "$(wc -l <"$WORK/$MODE-copy.out")" -eq 100000
  pg_stop
}

mx_main
