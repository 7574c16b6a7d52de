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
. "$(dirname "${BASH_SOURCE[0]}")/postgres.inc"
MX_SWITCHED_BY="postgres pgbench-prepared pgbench-simple"

mx_body() {
  local port how seed
  port=$(free_port)
  mx_port postgres "$port"
  # Each run starts from the same empty cluster.
  rm -rf "$WORK/pg/run"
  cp -a "$WORK/pg/data" "$WORK/pg/run"
  pg_start "$WORK/pg/run" "$port" 30 || return
  # It listens before it accepts logins ("the database system is starting
  # up"): wait until it answers (pg_isready, without the shim).
  for _ in $(seq 300); do
    no_shim "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$port" && break
    sleep 0.1
  done
  pg_init 2
  seed=7001
  for how in prepared simple; do
    pg_bench "pgbench-$how" "pgbench -c 8 -j 2 -t 60 -M $how" 480 -c 8 -j 2 -t 60 -M "$how" --random-seed=$seed
    seed=$((seed + 1))
  done
  pg_sums 960
  pg_stop
}

mx_main
