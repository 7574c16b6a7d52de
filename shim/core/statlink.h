/*
 * Link records in the live stats area (statarea.h): one per RDMA queue
 * pair of this process (a link, shim/transport/rdma/rdma_link.h), for
 * `rdmashim qp`. A link record is a record of the area like a
 * connection's, the same size and in the same segments, with the same
 * first fields (seq, gen, born_unix_ns, d); its d.state is
 * SHIM_STAT_LINK_REC, a value past every connection state, so that a
 * reader of connections (`rdmashim stat`) skips it as it skips any state
 * it does not know, and the area's version stays the same.
 *
 * The same two rules as a connection's record: the description (d and l)
 * is written under seq by one writer at a time (the link's lock holder);
 * conns and held are counters, relaxed stores.
 *
 * A link that ends before its QP reached RTS, or after a verbs error, is
 * kept for a while marked gone (at most SHIM_STAT_LINKS_KEPT of them, none
 * older than SHIM_STAT_LINK_KEPT_S): the step it missed and why are what
 * an operator asks for, and the link is gone by the time they look.
 */
#ifndef RDMASHIM_STATLINK_H
#define RDMASHIM_STATLINK_H

#include <stdbool.h>
#include <stdint.h>

#include "statarea.h"

#define SHIM_STAT_LINK_REC 0xff /* d.state of a link record */
#define SHIM_STAT_LINKS_KEPT 8
#define SHIM_STAT_LINK_KEPT_S 300

/* A QP's states, in the order it goes through them. */
enum shim_stat_qp {
	SHIM_STAT_QP_NONE = 0,
	SHIM_STAT_QP_RESET,
	SHIM_STAT_QP_INIT,
	SHIM_STAT_QP_RTR,
	SHIM_STAT_QP_RTS,
	SHIM_STAT_QP_ERR,
	SHIM_STAT_QP_COUNT,
};

const char *shim_stat_qp_name(unsigned st);

/* What a link record describes; written under the record's seq. */
struct shim_stat_link_desc {
	char dev[32];       /* the device (ibv_get_device_name), NUL-terminated */
	uint8_t port;       /* its port number */
	uint8_t qp_state;   /* enum shim_stat_qp: the last state the QP reached */
	uint8_t failed_to;  /* the state a transition to failed; SHIM_STAT_QP_NONE: none failed */
	uint8_t client;     /* 1: this end was C of the link's first connection */
	int32_t err;        /* that transition's errno, positive */
	uint8_t path_mtu;   /* enum ibv_mtu the RTR transition asked for; 0 unknown */
	uint8_t active_mtu; /* the port's active MTU when RTR failed; 0 unknown */
	uint8_t gone;       /* the link is gone; kept to show how it ended */
	uint8_t reached;    /* the furthest of RESET..RTS it reached (qp_state may be ERR since) */
	uint16_t reason;    /* enum shim_reason: why its connection gave up; 0 it did not */
	uint16_t pad1;
	uint32_t lqpn, rqpn; /* rqpn 0: not known yet (before RTR) */
	uint32_t sq_psn;    /* the send PSN it went to RTS with */
	uint32_t num;       /* the link's number in this process's traces */
	uint32_t max_conns;
	int32_t verbs_detail; /* the last verbs error's code: a completion status, an errno, a count */
	uint8_t verbs_wc;   /* 1: verbs_detail is a completion status (enum ibv_wc_status) */
	uint8_t pad2[3];
	char verbs_err[44]; /* what failed last ("transport retry counter exceeded", "post_send"); "" none */
	uint64_t verbs_err_unix_ns;
	uint64_t state_unix_ns; /* when qp_state was reached */
	uint64_t gone_unix_ns;
};

struct shim_stat_link {
	uint64_t seq;
	uint64_t gen;
	uint64_t born_unix_ns; /* when the QP was made */
	struct shim_stat_desc d; /* fd -1, path rdma, state SHIM_STAT_LINK_REC, qpn the lqpn; local and peer addresses */
	struct shim_stat_link_desc l;
	uint64_t conns; /* counter: connections on the link now */
	uint64_t held;  /* counter: places of closed ones the peer has not released yet */
	uint8_t pad[SHIM_STAT_REC_SIZE - 8 * 3 - sizeof(struct shim_stat_desc) - sizeof(struct shim_stat_link_desc) -
		    8 * 2];
};
_Static_assert(sizeof(struct shim_stat_link) == SHIM_STAT_REC_SIZE, "a link record is a record");
_Static_assert(__builtin_offsetof(struct shim_stat_link, d) == __builtin_offsetof(struct shim_stat_rec, d),
	       "a link record starts as a connection's");

/* CLOCK_REALTIME in ns: the clock of every time in a record. */
uint64_t shim_stat_now_unix_ns(void);

/* A record for a QP just made, described by d and l (NULL: stats off, or
 * no room; the caller then publishes nothing). */
struct shim_stat_link *shim_stat_link_new(const struct shim_stat_desc *d, const struct shim_stat_link_desc *l);
/* A new description; the caller is its one writer (the link's lock). */
void shim_stat_link_describe(struct shim_stat_link *r, const struct shim_stat_link_desc *l);
/* The connections on it now, and the places held for the peer. */
void shim_stat_link_conns(struct shim_stat_link *r, unsigned live, unsigned held);
/* The link is gone: keep (true) shows it a while as gone, else the record
 * is free at once. */
void shim_stat_link_end(struct shim_stat_link *r, bool keep);
/* A fork's child: the parent's link records are not its own (statarea.c
 * frees them in the child's copy); nothing kept. */
void shim_statlink_atfork_child(void);

#endif
