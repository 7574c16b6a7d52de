/*
 * A link's record in the live stats area (shim/core/statlink.h), for
 * `rdmashim qp`: its device, port and QP numbers, the last state its QP
 * reached, the transition that failed and why, its last verbs error, and
 * the connections on it (rdma_link_stat.c). Not on the data path: each is
 * called once per state change or per connection that comes or goes.
 *
 * One writer at a time: the holder of the link's lock (the _locked ones
 * are called with it held, the others take it). A link a forked parent
 * made is never written by the child.
 */
#ifndef RDMASHIM_RDMA_LINK_STAT_H
#define RDMASHIM_RDMA_LINK_STAT_H

#include <stdint.h>

#include <infiniband/verbs.h>

#include "rdma_link.h"
#include "tuple.h"

/* The QP exists (RESET): its record, with the addresses of t (the first
 * connection's) and the device and port it is on. */
void shim_rdma_link_stat_new(struct rdma_link *l, struct ibv_context *verbs, uint8_t port, const struct shim_tuple *t);
/* A transition to st reached (rc 0) or failed (rc -errno); attr holds what
 * rdma_init_qp_attr gave for it (RTR: the peer's QPN and the path MTU;
 * RTS: the send PSN). */
void shim_rdma_link_stat_qp(struct rdma_link *l, enum ibv_qp_state st, int rc, const struct ibv_qp_attr *attr,
			    struct ibv_context *verbs, uint8_t port);
/* The link's QP went to ERR (break_locked, rdma_link.c). */
void shim_rdma_link_stat_broken_locked(struct rdma_link *l, const char *why, int detail);
/* The connection making the link gave up with reason (enum shim_reason):
 * recorded while the link is not up yet (a later connection failing to
 * join an up link says nothing about the link). */
void shim_rdma_link_stat_gave_up(struct rdma_link *l, unsigned reason);
/* Its live or held places changed. */
void shim_rdma_link_stat_conns_locked(struct rdma_link *l);
/* The link is freed: its record goes, or is kept a while as gone when the
 * link failed (a transition, a give-up, a verbs error). */
void shim_rdma_link_stat_end(struct rdma_link *l);

#endif
