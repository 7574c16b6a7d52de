#!/bin/bash
# matrix/postgres_pgbench: PostgreSQL (a forked backend per connection, each
# waiting in epoll) under pgbench's TPC-B-like load at 8 connections on 2
# threads (pgbench -c 8 -j 2: each thread multiplexes 4 non-blocking
# connections with poll), a private cluster in $WORK (initdb, run as the
# postgres user, as integration/bench/pgbench.sh starts it). pgbench -i -s 2
# loads it, then two runs of -t 60 with a fixed random seed: the extended
# query protocol with prepared statements (-M prepared), then the simple
# one. Result: the exit statuses, the transactions processed and failed,
# and the consistency query: the sums of account, branch and teller
# balances (equal to each other: every transaction adds the same delta to
# one of each), the history rows (960) and an MD5 over every account's
# balance, which the seed makes the same in every run whatever the
# interleaving.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PGBIN=/usr/lib/postgresql/15/bin
[[ -x $PGBIN/postgres && -x $PGBIN/initdb ]] || skip "postgresql-15 is not installed"
need_cmd setpriv pgbench psql
id postgres >/dev/null 2>&1 || skip "no postgres user"
MX_SWITCHED_BY="postgres pgbench-prepared pgbench-simple"

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
  local port pid rc out how seed
  port=$(free_port)
  mx_port postgres "$port"
  # Each run starts from the same empty cluster.
  rm -rf "$WORK/pg/run"
  cp -a "$WORK/pg/data" "$WORK/pg/run"
  mx_bg_as postgres postgres "$PGBIN/postgres" -D "$WORK/pg/run" -p "$port" -k "$WORK/pg/sock" \
    -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
    -c max_connections=30 -c logging_collector=off
  pid=$BG_PID
  mx_wait_listen "$port" || { stop_bg "$pid"; tail -n 5 "$WORK/$MODE-postgres.err"; return; }
  # It listens before it accepts logins ("the database system is starting
  # up"): wait until it answers (pg_isready, without the shim).
  for _ in $(seq 300); do
    no_shim "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" && break
    sleep 0.1
  done
  local conn=(-h 127.0.0.1 -p "$port" -U postgres)
  rc=0
  mx_fg pgbench-init pgbench "${conn[@]}" -i -s 2 -q postgres >"$WORK/$MODE-init.out" 2>&1 || rc=$?
  mx_result "pgbench -i -s 2 exit $rc"
  mx_check "pgbench -i exit status 0 (got $rc)" test "$rc" -eq 0
  seed=7001
  for how in prepared simple; do
    rc=0
    mx_fg "pgbench-$how" pgbench "${conn[@]}" -n -c 8 -j 2 -t 60 -M "$how" --random-seed=$seed postgres \
      >"$WORK/$MODE-bench-$how.out" 2>&1 || rc=$?
    out=$(sed -n 's/^number of transactions actually processed: //p; s/^number of failed transactions: \([0-9]*\).*/failed \1/p' \
          "$WORK/$MODE-bench-$how.out" | tr '\n' ' ')
    mx_result "pgbench -c 8 -j 2 -t 60 -M $how exit $rc: processed $out"
    mx_check "pgbench -M $how: exit status 0, 480 of 480 transactions (got $rc: $out)" grep -q '^480/480 failed 0 $' <<<"$out"
    grep -iE 'error|abort' "$WORK/$MODE-bench-$how.out" | head -n 3
    seed=$((seed + 1))
  done
  out=$(mx_fg psql-sums psql "${conn[@]}" -XAtq -c "$SUMS" postgres 2>&1)
  mx_result "sums of balances, history rows, md5: $out"
  mx_check "the balances add up (accounts = branches = tellers, 960 history rows: $out)" \
    awk -F'|' '$1 == $2 && $2 == $3 && $4 == 960 { ok = 1 } END { exit !ok }' <<<"$out"
  mx_check "postgres still running" kill -0 "$pid"
  stop_bg "$pid"
}

mx_main
