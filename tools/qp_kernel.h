/*
 * The kernel's view of this host's queue pairs, from the RDMA netlink as
 * iproute2's `rdma -j resource show qp` prints it, for `rdmashim qp`.
 * The parse takes what it can from any text and never fails on it: a key
 * it does not know is skipped, a value it can not read is left unknown.
 */
#ifndef RDMASHIM_QP_KERNEL_H
#define RDMASHIM_QP_KERNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kqp {
	char dev[32];   /* "ifname" */
	char state[16]; /* "RTS", "ERR", ...; "" unknown */
	char comm[32];
	long port, lqpn, rqpn, pid; /* -1 unknown */
	long long sq_psn, rq_psn;   /* -1 unknown */
};

struct kqps {
	struct kqp *q;
	size_t n, cap;
};

/* Parses text (len bytes) into k (appends). 0 or -ENOMEM. */
int kqp_parse(struct kqps *k, const char *text, size_t len);
/* Runs `rdma -j resource show qp` (bounded in time) into k: 0, or a
 * negative errno when the tool is missing or failed. */
int kqp_from_tool(struct kqps *k);
/* Reads such output from path ("-": standard input) into k. */
int kqp_from_file(struct kqps *k, const char *path);
/* The entry for device dev's QP lqpn, or NULL. */
const struct kqp *kqp_find(const struct kqps *k, const char *dev, uint32_t lqpn);
void kqp_free(struct kqps *k);

#endif
