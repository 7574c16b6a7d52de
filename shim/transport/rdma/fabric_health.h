/*
 * The health of this host's RDMA ports, read from sysfs without root, and
 * the judgement of it: a port is degraded when it is not ACTIVE, when a
 * counter grew by more than its limit over a window, or when its active
 * MTU does not fit its netdev's MTU. `rdmashim health` prints it, and
 * the shim's port watch (rdma_port.c) judges each of its looks with the
 * same functions (shim_fh_state_active, shim_fh_counters_over, and
 * shim_fh_watch_look over them), so that the command and the shim never
 * disagree about a port.
 *
 * Use: shim_fh_scan() reads every device and port and takes the first
 * counters, the caller waits its window, shim_fh_judge() reads the
 * counters again and judges. Nothing here sleeps or prints.
 *
 * A file that is missing is left out (not shown as 0); a file that is
 * there and does not read as expected is named in the port's problems or
 * notes, never a crash: sysfs changes under us (a device removed between
 * two reads is an ordinary event).
 */
#ifndef RDMASHIM_FABRIC_HEALTH_H
#define RDMASHIM_FABRIC_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

#include "nic_counters.h"

#define SHIM_FH_PORTS_MAX 32
#define SHIM_FH_GIDS_MAX 16
#define SHIM_FH_TEXT 64
#define SHIM_FH_LINE 192
#define SHIM_FH_LINES_MAX 12
#define SHIM_FH_LIMITS_MAX 48

/* Exit statuses of `rdmashim health`, and the verdict. */
enum shim_fh_status {
	SHIM_FH_HEALTHY = 0,
	SHIM_FH_DEGRADED = 1,
	SHIM_FH_NO_DEVICE = 2,
};

struct shim_fh_gid {
	unsigned index;
	char gid[48];
	char type[24];   /* "RoCE v2", "IB/RoCE v1"; empty when unknown */
	char netdev[24]; /* empty when unknown */
};

struct shim_fh_port {
	char dev[SHIM_FH_TEXT];
	unsigned num;
	/* The text after "N: " in state and phys_state; empty when the file
	 * is missing or garbled (then a problem says which). */
	char state[SHIM_FH_TEXT];
	int state_code; /* -1 unknown */
	char phys_state[SHIM_FH_TEXT];
	char rate[SHIM_FH_TEXT];
	char link_layer[SHIM_FH_TEXT];
	int active_mtu; /* bytes; -1 unknown (sysfs does not show it: verbs do) */
	char netdev[24];
	int netdev_mtu; /* -1 unknown */
	unsigned n_gids;
	struct shim_fh_gid gids[SHIM_FH_GIDS_MAX];
	bool has_counters;  /* the port has a counters/ or hw_counters/ folder */
	bool counters_gone; /* they were there at the scan, not at the judge */
	struct shim_nic_counters before, after;
	/* What makes it degraded, one sentence each, and what is only worth
	 * knowing (a garbled counter, left out). */
	unsigned n_problems, n_notes;
	char problems[SHIM_FH_LINES_MAX][SHIM_FH_LINE];
	char notes[SHIM_FH_LINES_MAX][SHIM_FH_LINE];
};

struct shim_fh_report {
	char root[256]; /* the sysfs root: "/sys", or RDMASHIM_SYSFS */
	unsigned n_ports;
	unsigned n_devices;
	bool ports_left_out; /* more than SHIM_FH_PORTS_MAX */
	struct shim_fh_port ports[SHIM_FH_PORTS_MAX];
	enum shim_fh_status status;
	char why[SHIM_FH_LINE]; /* with SHIM_FH_NO_DEVICE: the plain reason */
};

/* A counter's limit: its delta over the window above max is a problem;
 * off: shown, never judged. */
struct shim_fh_limits {
	unsigned n;
	struct {
		char name[SHIM_NIC_COUNTER_NAME];
		unsigned long long max;
		bool off;
	} l[SHIM_FH_LIMITS_MAX];
};

/* The state code of an ACTIVE port (the number before the colon in
 * sysfs, and enum ibv_port_state's IBV_PORT_ACTIVE). */
#define SHIM_FH_STATE_ACTIVE 4

/* A counter that grew past its limit. */
struct shim_fh_over {
	char name[SHIM_NIC_COUNTER_NAME]; /* as in struct shim_nic_counters */
	unsigned long long delta, limit;
};

/* The port watch's memory of one port between its looks. */
struct shim_fh_watch {
	struct shim_nic_counters seen; /* the last look's counters */
	bool have_seen;
	bool faulty; /* the last look found a counter over its limit */
	struct shim_fh_over why; /* while faulty: the counter that did it */
};

/* What a look changed. */
enum shim_fh_change {
	SHIM_FH_SAME,
	SHIM_FH_FAULTY,    /* a counter grew past its limit (why says which) */
	SHIM_FH_RECOVERED, /* faulty before, no counter over its limit now */
};

/* The documented defaults (docs/OPERATIONS.md lists the same table). */
void shim_fh_limits_default(struct shim_fh_limits *lim);

/* Sets one limit from "NAME=N" or "NAME=off" (NAME without the "hw."
 * prefix: it covers both folders). 0, or -EINVAL for a malformed spec,
 * -ENOSPC when the table is full. */
int shim_fh_limits_set(struct shim_fh_limits *lim, const char *spec);

/* The limit of a counter named as in struct shim_nic_counters ("hw." or
 * not); NULL when it is only shown. */
const unsigned long long *shim_fh_limit_of(const struct shim_fh_limits *lim, const char *counter);

/* Whether rdmashim health shows a counter of this file name: the fault
 * counters of the port watch, out_of_buffer, and the congestion (CNP, ECN)
 * counters. */
bool shim_fh_counter_shown(const char *name);

/* Reads every device and port below sysroot (NULL: "/sys"), and their
 * first counters. Never fails: what it can not read is in r (status
 * SHIM_FH_NO_DEVICE with why when there is no device at all). */
void shim_fh_scan(const char *sysroot, struct shim_fh_report *r);

/* Reads the counters again and judges every port and the whole; returns
 * r->status. */
enum shim_fh_status shim_fh_judge(struct shim_fh_report *r, const struct shim_fh_limits *lim);

/* The delta of counter i of p->after over p->before; false when the
 * counter was not in before (then it is not judged). */
bool shim_fh_delta(const struct shim_fh_port *p, unsigned i, unsigned long long *delta);

/* The same over two reads of counters (a counter that went back was reset:
 * no growth). */
bool shim_fh_counter_delta(const struct shim_nic_counters *before, const struct shim_nic_counters *after, unsigned i,
			   unsigned long long *delta);

/* The judgement of a port's state: ACTIVE or not (by its code). */
bool shim_fh_state_active(int state_code);

/* The judgement of the counters: every counter of after that grew past
 * its limit since before, in after's order, the first max of them into
 * out; returns how many (more than max when some were left out). */
unsigned shim_fh_counters_over(const struct shim_nic_counters *before, const struct shim_nic_counters *after,
			       const struct shim_fh_limits *lim, struct shim_fh_over *out, unsigned max);

/* Whether an RDMA MTU fits its netdev's MTU with the RoCE v2 headers
 * around it (both in bytes, both known). */
bool shim_fh_mtu_fits(int active_mtu, int netdev_mtu);

/* One look of the port watch at port `port` of `dev` below sysroot (NULL:
 * "/sys"): reads the counters health shows and judges their growth since
 * the last look by lim, as health judges a window (the watch looks once a
 * second, health's default window). The first look only takes them.
 * *why: the first counter over its limit (SHIM_FH_FAULTY), or the one that
 * did it before (SHIM_FH_RECOVERED). prev (may be NULL) gets the last
 * look's counters, w->seen this one's (n 0 when the port has none), for
 * the caller's trace of what grew. One caller at a time (a buffer of its
 * own is static: the watch has one thread). */
enum shim_fh_change shim_fh_watch_look(struct shim_fh_watch *w, const char *sysroot, const char *dev, unsigned port,
				       const struct shim_fh_limits *lim, struct shim_nic_counters *prev,
				       struct shim_fh_over *why);

/* The name without its folder prefix ("hw.out_of_buffer" -> "out_of_buffer"). */
const char *shim_fh_bare_name(const char *counter);

#endif
