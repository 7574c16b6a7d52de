/*
 * The RDMA channel's failure and resume operations (transport.h, "Failure
 * and resume"; conn/failover.c runs them), and what the producer knows of
 * the consumer's reads (tx_unread). The data operations are in rdma_chan.c.
 *
 * Where the peer's RESUME will stand (tx_offset). The peer's rx_offset is
 * the sum of the immediates it reaped, after its QP went to ERR (what
 * completed before ERR stays in its CQ). An RC responder executes a
 * request, and completes the receive an immediate takes, before it
 * acknowledges it (rxe_resp.c: execute, do_complete, then
 * acknowledge); a QP in ERR drops what it has not executed. So a WRITE WITH
 * IMMEDIATE that completed successfully here is counted over there; one
 * that did not complete, or completed in error (a lost ACK, a flush), may
 * or may not be. The offset is therefore exact only when the WR carrying
 * our last immediate completed successfully: fail() on a live channel (a
 * spill, an urgent send) waits for that, one round trip, before it moves
 * the QP to ERR. tx_offset says "unknown" otherwise, and for a channel that
 * broke by itself (see shim_rdma_tx_offset): the peer's RESUME decides.
 */
#include "rdma.h"
#include "rdma_post.h"
#include "ring.h"

#include <errno.h>

#include <rdma/rdma_cma.h>

/* A channel the peer broke the rules of is not resumed: the caller resets
 * the connection (shim_rdma_violated). */
bool shim_rdma_failed(const struct shim_chan *ch)
{
	const struct rdma_conn *c = shim_rdma_conn_of(ch);

	return __atomic_load_n(&c->broken, __ATOMIC_RELAXED) && !__atomic_load_n(&c->violated, __ATOMIC_RELAXED) &&
	       !shim_rdma_peer_finished(c);
}

bool shim_rdma_violated(const struct shim_chan *ch)
{
	return __atomic_load_n(&shim_rdma_conn_of(ch)->violated, __ATOMIC_RELAXED);
}

void shim_rdma_fail(struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);

	if (c->stopped)
		return;
	/* A channel stopped on purpose, while it worked: settle our last
	 * immediate first (see the top), so that we know where the peer will
	 * resume without its RESUME. Bounded: a peer that went breaks the
	 * channel (DREQ, completion timeout), and the RESUME decides. Not when
	 * that RESUME is here already: the peer's QP is in ERR, and nothing
	 * in flight will be acknowledged. */
	if (!c->broken && !(c->sock && c->sock->fo_peer_known)) {
		if (c->link && c->tx_imm_seq > shim_rdma_link_completed_ok(c->link))
			shim_rdma_wait_seq(c, c->tx_imm_seq);
		c->settled = !c->broken;
	}
	c->stopped = true;
	shim_rdma_mark_broken(c, "stopped", 0);
	/* ERR first: from here on nothing the peer posted lands in our ring,
	 * so the offset our RESUME announces is final. The link's other
	 * connections fail over with it (shim_rdma_qp_error). */
	shim_rdma_qp_error(c);
	/* We never posted a byte (the peer was unproven): it received nothing
	 * on the channel, so our replay starts at 0 without its RESUME, which
	 * may never come (its direction may never switch). */
	if (c->tx_posted == 0 && c->sock)
		c->sock->fo_peer_rx_nothing = true;
}

uint64_t shim_rdma_rx_offset(const struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);

	/* After ERR: what completed before it is in the CQ still. */
	shim_rdma_reap(c);
	if (__atomic_load_n(&c->rx_dropped, __ATOMIC_RELAXED))
		return c->rx_head;
	return __atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE);
}

bool shim_rdma_tx_offset(const struct shim_chan *ch, uint64_t *offset)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);

	/* Only a channel we stopped on purpose: one that broke by itself may
	 * have broken because the peer stopped it for a hand-off, whose RESUME
	 * names the bytes it read, not those it received (drop_unread), and
	 * that RESUME can arrive after we noticed the break. */
	if (!c->settled || !c->link || shim_rdma_link_completed_ok(c->link) < c->tx_imm_seq)
		return false;
	*offset = c->tx_announced;
	return true;
}

/* A hand-off (handback.c): the bytes received but not read go back to the
 * peer's care. Our RESUME then names rx_head, which is never more than a
 * ring behind what the peer sent, so its staging copy still holds them
 * (shim_rdma_tx_unreceived). Only after fail: nothing lands any more. */
void shim_rdma_drop_unread(struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);

	if (!c->stopped)
		return;
	shim_rdma_reap(c);
	__atomic_store_n(&c->rx_dropped, true, __ATOMIC_RELAXED);
}

int shim_rdma_tx_unreceived(const struct shim_chan *ch, uint64_t from, struct iovec out[2])
{
	const struct rdma_conn *c = shim_rdma_conn_of(ch);

	/* The staging copy holds the last ring_bytes bytes we sent, and the
	 * peer's offset is at least the head it credited us, so a true offset
	 * is always inside; but not the bytes sent without a copy (rdma_zc.h),
	 * which only a hand-off's RESUME can name. */
	if (from < c->zc_end)
		return -ERANGE;
	return shim_ring_span(c->tx_shadow, c->mask, from, c->tx_tail, out);
}

/*
 * Our tail minus the consumer's head, as it wrote it into our page: never
 * 0 while bytes are unread (the head only lags). After a read that emptied
 * its ring the consumer writes its exact head with its next tail, its arm
 * or its "closed" (rdma_chan.c, shim_rdma_chain_tail and chain_credits;
 * rdma_teardown.c), not at the read itself: a consumer killed between
 * that read and its next call on the socket counts as having left them
 * unread (PROTOCOL.md, "RDMA" 5). Bytes held for an unproven peer count too: on
 * TCP they would have been in its socket. The head is the peer's word:
 * read once, checked as every credit (a lie is a violation, and counts 0:
 * the connection ends as a protocol error anyway).
 */
size_t shim_rdma_tx_unread(const struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);
	uint64_t head, recvs;
	const char *why = NULL;

	if (!shim_rdma_peer_credits(c, &head, &recvs, &why)) {
		shim_rdma_violation(c, why, 0);
		return 0;
	}
	return (size_t)(c->tx_tail - head);
}
