/*
 * The health of this host's RDMA ports, read from sysfs without root, and
 * the judgement of it: a port is degraded when it is not ACTIVE, when a
 * counter grew by more than its limit over a window, or when its active
 * MTU does not fit its netdev's MTU. `rdmashim health` prints it; the
 * port watch (rdma_port.c) is meant to use the same judgement, so that the
 * command and the shim never disagree about a port.
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

/* The name without its folder prefix ("hw.out_of_buffer" -> "out_of_buffer"). */
const char *shim_fh_bare_name(const char *counter);

#endif
