/*
 * What `rdmashim qp` prints for each queue pair (qp_explain.c): its row,
 * and for one not in RTS the step it misses and the likely cause.
 */
#ifndef RDMASHIM_QP_EXPLAIN_H
#define RDMASHIM_QP_EXPLAIN_H

#include <stdio.h>

#include "qp_kernel.h"
#include "stat_snap.h"

/* One QP's view: the shim's record, the kernel's entry (or NULL). */
struct qp_view {
	const struct snap_link *link;
	const struct snap_proc *proc;
	const struct kqp *k;
	const char *state;  /* the kernel's when it lists the QP, else the shim's */
	bool not_rts;       /* a live QP whose state is not RTS */
	const char *missing; /* "INIT -> RTR" or NULL: nothing missing */
	char cause[256];    /* "" when nothing to explain */
};

void qp_view_of(struct qp_view *v, const struct snap *s, const struct snap_link *l, const struct kqps *k);

/* Print every QP of s; the number of live QPs not in RTS. */
int qp_print_table(FILE *out, const struct snap *s, const struct kqps *k, const char *kernel);
int qp_print_json(FILE *out, const struct snap *s, const struct kqps *k, const char *kernel);

#endif
