/*
 * One look at every stats area the caller may read (shim/core/statarea.h):
 * what `rdmashim stat` prints as a table, JSON or Prometheus text.
 */
#ifndef RDMASHIM_STAT_SNAP_H
#define RDMASHIM_STAT_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "statarea.h"
#include "statlink.h"

struct snap_conn {
	size_t proc; /* index in snap.procs */
	uint64_t slot;
	bool inconsistent; /* its count stayed odd: the writer died mid-way */
	struct shim_stat_rec rec;
};

/* A queue pair's record (statlink.h), with snap_filter.links. */
struct snap_link {
	size_t proc;
	uint64_t slot;
	bool inconsistent;
	struct shim_stat_link rec;
};

struct snap_proc {
	int pid;      /* 0: a user's whole directory we may not read */
	unsigned uid;
	const char *error; /* NULL, "permission denied", "unreadable area (...)" */
	bool hdr_inconsistent;
	bool dead; /* its process is gone (--keep-dead) */
	struct shim_stat_hdr hdr;
	/* Of its connections that pass the filters: live, and every one. */
	uint64_t bytes[SHIM_STAT_PATHS][2], msgs[SHIM_STAT_PATHS][2];
	uint64_t rtt[SHIM_STAT_PATHS][SHIM_STAT_RTT_BUCKETS];
	unsigned live[SHIM_STAT_PATHS];
	/* With snap_filter.ab: a copy of its A/B area (NULL without), and
	 * per arm the bytes of its live connections, sent and received. */
	struct shim_stat_ab *ab;
	uint64_t arm_live_bytes[SHIM_STAT_ARMS][2];
	unsigned arm_live[SHIM_STAT_ARMS];
};

struct snap {
	struct snap_proc *procs;
	size_t nproc, proc_cap;
	struct snap_conn *conns;
	size_t nconn, conn_cap;
	struct snap_link *links;
	size_t nlink, link_cap;
	uint64_t now_unix_ns;
	unsigned removed; /* dead processes' files removed */
};

struct snap_filter {
	int pid;       /* 0: any */
	int port;      /* 0: any; local or peer */
	int path;      /* -1: any */
	bool keep_dead; /* read dead processes' areas, marked dead, and keep them */
	bool ab;        /* copy each area's A/B part too (850 KiB each) */
	bool links;     /* the queue pairs' records too (snap.links) */
};

int snap_take(struct snap *s, const char *base, const struct snap_filter *f);
void snap_free(struct snap *s);

/* cmd_stat_ab.c: prints the A/B arms and verdict; the verdict's exit
 * status (abverdict.h), 6 when the areas can not be read. */
struct stat_ab_opts {
	bool json;
	unsigned long long seed;
	double margin_pct, quantile, max_fallback_pct, max_error_pct;
};
int stat_ab(const char *dir, const struct snap_filter *f, const struct stat_ab_opts *o);

/* cmd_stat_prom.c */
void stat_print_prom(FILE *out, const struct snap *s);
int stat_write_prom_file(const char *dir, const struct snap *s);

#endif
