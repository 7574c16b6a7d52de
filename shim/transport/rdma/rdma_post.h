/*
 * Posting and reaping on an RDMA connection's QP (rdma_post.c), shared by
 * the channel operations (rdma_chan.c). Every function here is called with
 * the sock's lock held, except shim_rdma_reap_try(), which the lock-free
 * readable() uses; the CQ itself is guarded by cq_lock (see rdma.h).
 */
#ifndef RDMASHIM_RDMA_POST_H
#define RDMASHIM_RDMA_POST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "rdma.h"

#define CTL_OFF(field) offsetof(struct shim_rdma_ctl, field)


/* What the link's reaper hands to a connection (take_imm and the rest). */
extern const struct rdma_link_handlers shim_rdma_link_handlers;
/* Appends one RDMA WRITE of len bytes at local to the peer's remote_off.
 * Precondition: fewer than CHAIN_MAX WRs in the chain. */
void shim_rdma_chain_write(struct rdma_conn *c, struct wr_chain *ch, const void *local, size_t len, uint64_t remote_off,
		      bool signal);
/* Appends a WRITE of one 8-byte control word into the peer's control page. */
void shim_rdma_chain_word(struct rdma_conn *c, struct wr_chain *ch, size_t ctl_off, uint64_t value, bool signal);
/* Appends our tail for the peer's receive ring and, in the same 16-byte
 * WRITE, our head of its (rdma_wire.h): signaled, for chain_imm to make
 * the tail's news. At most one per chain. */
void shim_rdma_chain_tail(struct rdma_conn *c, struct wr_chain *ch, uint64_t tail);
/* Before a send's data WRITEs: true if the send ends with a DATA
 * immediate (rdma_wire.h); may append our head word first. */
bool shim_rdma_data_imm_begin(struct rdma_conn *c, struct wr_chain *ch);
/* After them, when begin said so: the last data WRITE carries the DATA
 * immediate; wrapped: the send is two data WRITEs. */
void shim_rdma_chain_data_imm(struct rdma_conn *c, struct wr_chain *ch, bool wrapped);
/* The lazy tail word (rdma_wire.h): appends a WRITE, without immediate,
 * of tx_announced as the chain is posted into the peer's rx_announced;
 * after the post, tail_word_sent notes it. tail_word_lags: what our DATA
 * immediates announced is ahead of the last word (never after CLOSED). */
void shim_rdma_chain_tail_word(struct rdma_conn *c, struct wr_chain *ch);
void shim_rdma_tail_word_sent(struct rdma_conn *c, const struct wr_chain *ch);
bool shim_rdma_tail_word_lags(const struct rdma_conn *c);
/* Makes the chain's last WRITE carry imm, signaled. Precondition: n > 0. */
void shim_rdma_chain_imm(struct wr_chain *ch, uint32_t imm);
/* Posts the chain: the last WR's sequence number, or 0 (nothing posted). */
uint64_t shim_rdma_chain_post(struct rdma_conn *c, struct wr_chain *ch);
/* rdma_chan.c: appends our exact head (rx_head) for the producer, and
 * makes it the credit take_imm() bounds immediates by. */
void shim_rdma_chain_head(struct rdma_conn *c, struct wr_chain *wrs, bool signal);
/* The peer's credits (head, receives) read once from our page and checked
 * against what this end knows; false and *why when it lied (the caller
 * makes that a violation, or just reports no room when lock-free). */
bool shim_rdma_peer_credits(const struct rdma_conn *c, uint64_t *head, uint64_t *recvs, const char **why);
/* One control word, posted at once. */
uint64_t shim_rdma_post_word(struct rdma_conn *c, size_t ctl_off, uint64_t value, bool signal);
/* Spins (bounded) until WR seq completed; false when the channel broke. */
bool shim_rdma_wait_seq(struct rdma_conn *c, uint64_t seq);
/* Reaps unless another thread is reaping already (lock-free readers). */
void shim_rdma_reap_try(struct rdma_conn *c);
/* The channel failed: traced once, why and a detail. */
void shim_rdma_mark_broken(struct rdma_conn *c, const char *why, int detail);
/* The peer wrote a value outside our bounds: traced (rdma.violation), the
 * QP goes to ERR and the channel reports violated() (transport.h): the
 * connection is reset, or stays on TCP if nothing moved yet. */
void shim_rdma_violation(struct rdma_conn *c, const char *why, unsigned long long value);
/* Acks what the event channel holds; true if the peer disconnected. */
bool shim_rdma_drain_cm_events(struct rdma_conn *c);

/* Acquire: pairs with the in-order placement of the peer's WRITEs. */
static inline uint64_t shim_rdma_load_acq(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* The peer's head of our send ring, as its WRITEs and its DATA immediates
 * gave it; unchecked (shim_rdma_peer_credits checks it). Acquire: pairs
 * with the in-order placement of the peer's WRITEs and with the release
 * in take_imm_head(). */
static inline uint64_t shim_rdma_peer_head(const struct rdma_conn *c)
{
	uint64_t w = shim_rdma_load_acq(&c->ctl->tx_head);
	uint64_t i = __atomic_load_n(&c->peer_head_imm, __ATOMIC_ACQUIRE);

	return w > i ? w : i;
}

/* The peer's SWITCH_AT came. Acquire: pairs with the release in
 * take_switch_at(), which the link's reaper may run on another thread:
 * peer_at and peer_no_switch are complete. */
static inline bool shim_rdma_peer_at_known(const struct rdma_conn *c)
{
	return __atomic_load_n(&c->peer_at_known, __ATOMIC_ACQUIRE);
}

/* The peer closed both directions the orderly way (CLOSED immediate and
 * consumer_closed): a failure after that is its teardown, not ours. */
static inline bool shim_rdma_peer_finished(const struct rdma_conn *c)
{
	return __atomic_load_n(&c->rx_closed, __ATOMIC_ACQUIRE) && shim_rdma_load_acq(&c->ctl->tx_consumer_closed);
}

#endif
