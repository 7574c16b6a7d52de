#!/bin/bash
# pgbench.sh: PostgreSQL read-only (pgbench -S, 8 clients, 2 threads), shim
# vs TCP, alternated round by round.
#
# Starts its own clusters (initdb in a temporary directory, one for each
# side, on free ports, 127.0.0.1 only, unix sockets in the temporary
# directory) and never touches a system cluster. PostgreSQL refuses to run as
# root: as root, the server runs as the `postgres` user (the Debian package
# creates it) or BENCH_PG_USER. The shim side has the server (postmaster and
# its forked backends) and pgbench under the shim; the TCP side neither.
# pgbench keeps its 8 connections for the whole run, so on the shim side they
# are upgraded (shm).
#
# Prints each round's tps and then
#   bench pgbench_S: shim N tps tcp M tps ratio R
# Skips (exit 0, says why) when PostgreSQL is not installed (make deps).
#
# Environment: BENCH_PG_ROUNDS (default 4), BENCH_PG_SECS (default 5),
# BENCH_PG_CLIENTS (default 8), BENCH_PG_USER (default postgres, as root).
# BENCH_PG_VARIANTS="NAME:RDMASHIM_VAR=VALUE ..." adds a shim side per
# word to the same rounds (shim_NAME, its own cluster, that variable on top
# of the shim's), each with its ratio to TCP; BENCH_PG_SPIN_AB=1 adds the
# busy polling's two (shim/spin.h): shim_always (RDMASHIM_SPIN_ADAPT=0,
# every wait spins) and shim_nospin (RDMASHIM_SPIN_US=0).
. "$(dirname "${BASH_SOURCE[0]}")/common.bash"
need ss

ROUNDS=${BENCH_PG_ROUNDS:-${BENCH_ROUNDS:-4}}
SECS=${BENCH_PG_SECS:-5}
CLIENTS=${BENCH_PG_CLIENTS:-8}

PGBIN=
for d in /usr/lib/postgresql/*/bin; do [[ -x $d/initdb && -x $d/pgbench ]] && PGBIN=$d; done
if [[ -z $PGBIN ]]; then
	echo "bench pgbench_S: skipped (PostgreSQL is not installed: make deps)"
	exit 0
fi

# as_pg CMD...: as the cluster's owner (never root)
if (($(id -u) == 0)); then
	PGUSER_OS=${BENCH_PG_USER:-postgres}
	getent passwd "$PGUSER_OS" >/dev/null || {
		echo "bench pgbench_S: skipped (running as root and there is no user $PGUSER_OS to run PostgreSQL)"
		exit 0
	}
	chown "$PGUSER_OS" "$WORK"
	chmod 0755 "$WORK"
	as_pg() { runuser -u "$PGUSER_OS" -- "$@"; }
else
	as_pg() { "$@"; }
fi

MODES=(shim tcp)
VARIANTS=${BENCH_PG_VARIANTS:-}
[[ ${BENCH_PG_SPIN_AB:-0} == 1 ]] && VARIANTS+=" always:RDMASHIM_SPIN_ADAPT=0 nospin:RDMASHIM_SPIN_US=0"
for v in $VARIANTS; do
	[[ $v == [a-z]*:RDMASHIM_*=* ]] || die "BENCH_PG_VARIANTS: '$v' is not NAME:RDMASHIM_VAR=VALUE"
	MODES+=("shim_${v%%:*}")
	VARIANT_ENV[shim_${v%%:*}]=${v#*:}
done
declare -A PORT=() SRV=()
bench_stop() {
	local m
	for m in "${!PORT[@]}"; do
		[[ -e $WORK/pg-$m/data/postmaster.pid ]] &&
			as_pg timeout 30 "$PGBIN/pg_ctl" -D "$WORK/pg-$m/data" stop -m immediate >/dev/null 2>&1
	done
	return 0
}
for mode in "${MODES[@]}"; do
	PORT[$mode]=$(free_port)
	d=$WORK/pg-$mode
	as_pg mkdir -p "$d"
	as_pg timeout 120 "$PGBIN/initdb" -D "$d/data" -A trust -U bench --no-sync >"$WORK/initdb-$mode.log" 2>&1 ||
		die "initdb failed: $(tail -n 5 "$WORK/initdb-$mode.log")"
	# shellcheck disable=SC2046
	start_bg "$WORK/pg-$mode.log" as_pg $(mode_env "$mode" "${PORT[$mode]}") timeout -k 5 3600 \
		"$PGBIN/postgres" -D "$d/data" -p "${PORT[$mode]}" -c listen_addresses=127.0.0.1 \
		-c unix_socket_directories="$d" -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
		-c max_connections=50 -c shared_buffers=64MB
	SRV[$mode]=$LAST_BG
done
for mode in "${MODES[@]}"; do
	wait_listen "${PORT[$mode]}"
	timeout 120 "$PGBIN/pgbench" -h 127.0.0.1 -p "${PORT[$mode]}" -U bench -i -s 2 postgres \
		>"$WORK/init-$mode.log" 2>&1 || die "pgbench -i failed: $(tail -n 5 "$WORK/init-$mode.log")"
done

# pg_tps MODE: tps of one pgbench -S run (nan when it gave no figure)
pg_tps() {
	local v
	# shellcheck disable=SC2046
	v=$($(mode_env "$1" "${PORT[$1]}") timeout -k 5 $((SECS + 60)) "$PGBIN/pgbench" -h 127.0.0.1 \
		-p "${PORT[$1]}" -U bench -S -c "$CLIENTS" -j 2 -T "$SECS" postgres 2>/dev/null |
		sed -n 's/^tps = \([0-9.]*\).*/\1/p' | tail -n 1)
	echo "${v:-nan}"
}

say "pgbench -S -c $CLIENTS -j 2 -T $SECS ($(basename "$(dirname "$PGBIN")")), $ROUNDS rounds per side, alternated"
alternate pg_tps "${MODES[@]}"
# shellcheck disable=SC2086
S=$(median ${VALS[shim]}) T=$(median ${VALS[tcp]})
R=$(paired_ratio "${VALS[shim]}" "${VALS[tcp]}")
echo "bench pgbench_S: shim $S tps tcp $T tps ratio $R"
for mode in "${MODES[@]:2}"; do
	# shellcheck disable=SC2086
	echo "bench pgbench_S_$mode: $mode $(median ${VALS[$mode]}) tps tcp $T tps ratio $(paired_ratio "${VALS[$mode]}" "${VALS[tcp]}")"
done
exit 0
