/*
 * Posting and reaping on an RDMA connection's QP; see rdma_post.h, and the
 * top of rdma_chan.c for the protocol these serve.
 */
#include "rdma_post.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <endian.h>
#include <rdma/rdma_cma.h>

#include "trace.h"

#define SQ_SIGNAL_EVERY 16
#define SQ_LIMIT 48 /* outstanding WRs kept below this (SQ depth 64) */
#define RECV_WR_ID UINT64_MAX
/* Longest wait for a completion the peer's HCA owes us: an ACK is a round
 * trip; far longer means the peer or the path is gone. */
#define COMPLETION_WAIT_NS (10000ull * 1000 * 1000)

void shim_rdma_mark_broken(struct rdma_conn *c, const char *why, int detail)
{
	if (c->broken)
		return;
	/* Relaxed: rdma_failed() polls it without the lock; what follows a
	 * failure is read under the lock. */
	__atomic_store_n(&c->broken, true, __ATOMIC_RELAXED);
	SHIM_TRACE(shim_rdma_peer_finished(c) ? SHIM_TRACE_DEBUG : SHIM_TRACE_WARN, "rdma.broken", c->fd, c->sock ? &c->sock->tuple : NULL, SHIM_REASON_INTERNAL_ERROR,
		   "\"why\":\"%s\",\"detail\":%d", why, detail);
}

static int post_recv_one(struct rdma_conn *c)
{
	/* Every receive points at recv_buf: only the SWITCH_AT SEND places
	 * data; a WRITE WITH IMMEDIATE takes the receive and places nothing. */
	struct ibv_sge sge = { .addr = (uintptr_t)c->ctl->recv_buf,
			       .length = sizeof(c->ctl->recv_buf),
			       .lkey = c->slot.lkey };
	struct ibv_recv_wr wr = { .wr_id = RECV_WR_ID, .sg_list = &sge, .num_sge = 1 }, *bad;
	int rc = ibv_post_recv(c->qp, &wr, &bad);

	if (rc == 0)
		__atomic_store_n(&c->recv_posted, c->recv_posted + 1, __ATOMIC_RELAXED);
	return -rc;
}

int shim_rdma_post_recvs(struct rdma_conn *c)
{
	for (unsigned i = 0; i < SHIM_RDMA_RQ_DEPTH; i++) {
		int rc = post_recv_one(c);

		if (rc < 0)
			return rc;
	}
	return 0;
}

void shim_rdma_violation(struct rdma_conn *c, const char *why, unsigned long long value)
{
	if (__atomic_load_n(&c->violated, __ATOMIC_RELAXED))
		return;
	/* Counted where the connection ends (conn.abort or upgrade.fail). */
	__atomic_store_n(&c->violated, true, __ATOMIC_RELAXED);
	SHIM_TRACE(SHIM_TRACE_ERROR, "rdma.violation", c->fd, c->sock ? &c->sock->tuple : NULL,
		   SHIM_REASON_PEER_VIOLATION, "\"why\":\"%s\",\"value\":%llu", why, value);
	shim_rdma_mark_broken(c, "violation", 0);
	/* ERR: nothing the peer posts lands any more, so what we took until
	 * now (rx_tail) is final for the failover's RESUME. */
	shim_rdma_qp_error(c);
}

/* The peer's SWITCH_AT: exactly one per connection, exactly its size, no
 * flag we do not know. Read once out of recv_buf (the peer's SEND placed
 * it there; nothing else writes it until we repost). */
static void take_switch_at(struct rdma_conn *c, const struct ibv_wc *wc)
{
	struct shim_rdma_switch_at at;
	uint16_t flags;

	memcpy(&at, c->ctl->recv_buf, sizeof(at));
	flags = be16toh(at.flags);
	if (wc->byte_len != sizeof(at) || be32toh(at.magic) != SHIM_RDMA_MAGIC || at.version != SHIM_RDMA_VERSION ||
	    at.type != SHIM_RDMA_SWITCH_AT || (flags & ~SHIM_RDMA_NO_SWITCH) || c->peer_at_known) {
		shim_rdma_violation(c, "bad_switch_at", wc->byte_len);
		return;
	}
	c->peer_no_switch = flags & SHIM_RDMA_NO_SWITCH;
	c->peer_at = be64toh(at.offset);
	c->peer_at_known = true;
}

/* The ring's tail and "closed" from the producer's immediate. The HCA
 * writes the completion only after the data is placed. The count must fit
 * the room we credited (the producer saw at most rx_head_sent as our
 * head), and nothing may follow CLOSED: a receive then never reads past
 * the ring nor bytes the producer had no right to announce. */
static void take_imm(struct rdma_conn *c, const struct ibv_wc *wc)
{
	uint32_t imm = be32toh(wc->imm_data);
	uint64_t bytes = imm & SHIM_RDMA_IMM_BYTES;
	/* Acquire: pairs with the release store in chain_credits(), made
	 * before the credit WRITE whose arrival allowed these bytes. */
	uint64_t credited = __atomic_load_n(&c->rx_head_sent, __ATOMIC_ACQUIRE);

	if (c->violated)
		return;
	if (__atomic_load_n(&c->rx_closed, __ATOMIC_RELAXED) || bytes > c->ring_bytes ||
	    c->rx_tail + bytes - credited > c->ring_bytes) {
		shim_rdma_violation(c, "immediate_beyond_credit", bytes);
		return;
	}
	/* Release: pairs with the acquire loads in rdma_readable() and
	 * rdma_rx_eof(), which may run on threads that did not reap. */
	__atomic_store_n(&c->rx_tail, c->rx_tail + bytes, __ATOMIC_RELEASE);
	if (imm & SHIM_RDMA_IMM_CLOSED)
		__atomic_store_n(&c->rx_closed, true, __ATOMIC_RELEASE);
}

/* Precondition: cq_lock held. */
static void reap_locked(struct rdma_conn *c)
{
	struct ibv_wc wc[16];
	int n;

	while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS) {
				/* Flushes after we moved the QP to ERR are expected. */
				if (!c->torn_down && !c->stopped)
					shim_rdma_mark_broken(c, ibv_wc_status_str(wc[i].status), (int)wc[i].status);
				if (wc[i].wr_id != RECV_WR_ID && wc[i].wr_id > c->completed)
					__atomic_store_n(&c->completed, wc[i].wr_id, __ATOMIC_RELAXED);
				continue;
			}
			if (wc[i].opcode & IBV_WC_RECV) {
				if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM)
					take_imm(c, &wc[i]);
				else
					take_switch_at(c, &wc[i]);
				if (post_recv_one(c) < 0)
					shim_rdma_mark_broken(c, "post_recv", 0);
				continue;
			}
			if (wc[i].wr_id > c->completed)
				__atomic_store_n(&c->completed, wc[i].wr_id, __ATOMIC_RELAXED);
			if (wc[i].wr_id > c->completed_ok)
				__atomic_store_n(&c->completed_ok, wc[i].wr_id, __ATOMIC_RELAXED);
		}
	}
	if (n < 0)
		shim_rdma_mark_broken(c, "poll_cq", n);
}

void shim_rdma_reap(struct rdma_conn *c)
{
	if (!c->cq)
		return;
	pthread_spin_lock(&c->cq_lock);
	reap_locked(c);
	pthread_spin_unlock(&c->cq_lock);
}

/* For the lock-free readers: whoever holds cq_lock is reaping already. */
void shim_rdma_reap_try(struct rdma_conn *c)
{
	if (c->cq && pthread_spin_trylock(&c->cq_lock) == 0) {
		reap_locked(c);
		pthread_spin_unlock(&c->cq_lock);
	}
}

static bool cm_disconnected(struct rdma_conn *c)
{
	if (shim_rdma_drain_cm_events(c))
		c->peer_disconnected = true;
	return c->peer_disconnected;
}

/* Spins on the CQ until WR seq completed. Bounded: a peer that stops
 * answering breaks the channel instead of hanging the program. */
bool shim_rdma_wait_seq(struct rdma_conn *c, uint64_t seq)
{
	unsigned long long deadline = 0;
	unsigned spins = 0;

	while (c->completed < seq && !c->broken) {
		shim_rdma_reap(c);
		if (c->completed >= seq)
			break;
		if (++spins % 256 == 0) {
			unsigned long long now = shim_now_ns();

			if (!deadline)
				deadline = now + COMPLETION_WAIT_NS;
			else if (now > deadline)
				shim_rdma_mark_broken(c, "completion_timeout", (int)(seq - c->completed));
			/* Soft-RoCE completes in kernel context: on a small VM a
			 * tight spin would hold the CPU the ACK needs. */
			sched_yield();
			/* A peer that closed sends a DREQ before it destroys its
			 * QP: notice it instead of waiting for retries to run out. */
			if ((c->done || c->step == RDMA_CONNECTED) && cm_disconnected(c)) {
				/* A peer that closed cleanly had its CLOSED immediate
				 * acknowledged, so completed here, before it sent the
				 * DREQ; the yield above may have let it in since the
				 * last reap. Taken in first, the end reads as the
				 * peer's finish (shim_rdma_peer_finished), not as a
				 * failure to resume from, which would send failover
				 * frames to a socket the peer closed (its reset). */
				shim_rdma_reap(c);
				shim_rdma_mark_broken(c, "disconnected", 0);
			}
		}
	}
	return !c->broken;
}

/* Makes room for n more WRs in the send queue. */
static bool sq_room(struct rdma_conn *c, unsigned n)
{
	if (c->posted - c->completed + n < SQ_LIMIT)
		return true;
	/* Every 16th WR is signaled, so the last signaled one retires all
	 * but at most 15 of those outstanding. */
	return shim_rdma_wait_seq(c, c->last_signaled) && c->posted - c->completed + n < SQ_LIMIT;
}

/*
 * WRITEs are built into a chain and posted with one ibv_post_send: a send's
 * data and its tail cost one doorbell to the HCA (on Soft-RoCE one system
 * call) instead of one each.
 */
/* Appends one RDMA WRITE of len bytes at local to the peer's remote_off.
 * Precondition: fewer than CHAIN_MAX WRs in the chain. */
void shim_rdma_chain_write(struct rdma_conn *c, struct wr_chain *ch, const void *local, size_t len, uint64_t remote_off,
			bool signal)
{
	unsigned i = ch->n++;
	uint64_t seq = c->posted + ch->n;

	signal |= seq % SQ_SIGNAL_EVERY == 0;
	ch->sge[i] = (struct ibv_sge){ .addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = c->slot.lkey };
	ch->wr[i] = (struct ibv_send_wr){ .wr_id = seq, .sg_list = &ch->sge[i], .num_sge = 1 };
	ch->wr[i].opcode = IBV_WR_RDMA_WRITE;
	ch->wr[i].send_flags = (signal ? IBV_SEND_SIGNALED : 0) | (len <= c->max_inline ? IBV_SEND_INLINE : 0);
	ch->wr[i].wr.rdma.remote_addr = c->remote_addr + remote_off;
	ch->wr[i].wr.rdma.rkey = c->rkey;
}

/* Appends a WRITE of one 8-byte control word into the peer's control page. */
void shim_rdma_chain_word(struct rdma_conn *c, struct wr_chain *ch, size_t ctl_off, uint64_t value, bool signal)
{
	/* Inline copies the value at post time; without inline the source
	 * must be registered and stay put until the WR is done: one scratch
	 * word per send-queue slot (SQ_LIMIT < SHIM_RDMA_SCRATCH_WORDS). */
	uint64_t *src = &c->ctl->scratch[(c->posted + ch->n + 1) % SHIM_RDMA_SCRATCH_WORDS];

	*src = value;
	shim_rdma_chain_write(c, ch, src, sizeof(value), ctl_off, signal);
}

/* Makes the chain's last WRITE carry imm (signaled: tx_should_bell waits for
 * it). Precondition: at least one WR in the chain. */
void shim_rdma_chain_imm(struct wr_chain *ch, uint32_t imm)
{
	struct ibv_send_wr *wr = &ch->wr[ch->n - 1];

	wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr->imm_data = htobe32(imm);
	wr->send_flags |= IBV_SEND_SIGNALED;
}

/* Posts the chain; returns the last WR's sequence number, or 0 on failure
 * (nothing of the chain was posted, or the channel is broken). */
uint64_t shim_rdma_chain_post(struct rdma_conn *c, struct wr_chain *ch)
{
	struct ibv_send_wr *bad;
	int rc;

	if (c->broken || !ch->n || !sq_room(c, ch->n))
		return 0;
	for (unsigned i = 0; i + 1 < ch->n; i++)
		ch->wr[i].next = &ch->wr[i + 1];
	rc = ibv_post_send(c->qp, ch->wr, &bad);
	if (rc) {
		/* A partly posted chain leaves a hole in the stream: the
		 * channel is unusable either way. */
		shim_rdma_mark_broken(c, "post_send", rc);
		return 0;
	}
	c->posted += ch->n;
	for (unsigned i = 0; i < ch->n; i++)
		if (ch->wr[i].send_flags & IBV_SEND_SIGNALED)
			c->last_signaled = ch->wr[i].wr_id;
	return c->posted;
}

uint64_t shim_rdma_post_word(struct rdma_conn *c, size_t ctl_off, uint64_t value, bool signal)
{
	struct wr_chain ch = { .n = 0 };

	shim_rdma_chain_word(c, &ch, ctl_off, value, signal);
	return shim_rdma_chain_post(c, &ch);
}

int shim_rdma_send_switch_at(struct rdma_conn *c, uint64_t offset, bool no_switch)
{
	struct shim_rdma_switch_at at = {
		.magic = htobe32(SHIM_RDMA_MAGIC),
		.version = SHIM_RDMA_VERSION,
		.type = SHIM_RDMA_SWITCH_AT,
		.flags = htobe16(no_switch ? SHIM_RDMA_NO_SWITCH : 0),
		.offset = htobe64(offset),
	};
	struct ibv_sge sge = { .addr = (uintptr_t)c->ctl->send_buf, .length = sizeof(at), .lkey = c->slot.lkey };
	struct ibv_send_wr wr = { 0 }, *bad;
	int rc;

	if (c->broken || !sq_room(c, 1))
		return -EIO;
	memcpy(c->ctl->send_buf, &at, sizeof(at));
	wr.wr_id = c->posted + 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | (sizeof(at) <= c->max_inline ? IBV_SEND_INLINE : 0);
	rc = ibv_post_send(c->qp, &wr, &bad);
	if (rc) {
		shim_rdma_mark_broken(c, "post_send", rc);
		return -rc;
	}
	c->posted = c->last_signaled = wr.wr_id;
	c->peer_recvs_used++;
	/* The completion is the peer's ACK: its receive is done (and its CQE
	 * written) before our SWITCH frame can go on TCP. */
	return shim_rdma_wait_seq(c, wr.wr_id) ? 0 : -EIO;
}


void shim_rdma_qp_error(struct rdma_conn *c)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	int rc;

	if (!c->qp)
		return;
	rc = ibv_modify_qp(c->qp, &attr, IBV_QP_STATE);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "qp.state", c->fd, c->sock ? &c->sock->tuple : NULL, SHIM_REASON_NONE,
		   "\"qp\":%u,\"state\":\"err\",\"rc\":%d", c->qp->qp_num, rc);
}

/* Acks what the event channel holds; true if the peer disconnected. */
bool shim_rdma_drain_cm_events(struct rdma_conn *c)
{
	struct rdma_cm_event *ev;
	bool gone = false;

	/* rdma_destroy_id waits for every event of the id we were handed to
	 * be acked: ack what is queued (the channel is nonblocking). */
	while (c->ec && rdma_get_cm_event(c->ec, &ev) == 0) {
		struct rdma_cm_id *child = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;

		gone |= ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT;
		rdma_ack_cm_event(ev);
		if (child) {
			rdma_reject(child, NULL, 0);
			rdma_destroy_id(child);
		}
	}
	return gone;
}

/*
 * The peer's credits, each word read once and checked against what this
 * end knows: the head never passes our tail, never leaves more than the
 * ring in flight and never moves back; the receive count never moves back
 * and never claims more receives outstanding than the RQ depth both ends
 * use. false: the peer lied (the caller ends the channel, or, lock-free,
 * just reports no room). told == 0: not told yet, the initial depth holds.
 */
bool shim_rdma_peer_credits(const struct rdma_conn *c, uint64_t *head, uint64_t *recvs, const char **why)
{
	uint64_t h = shim_rdma_load_acq(&c->ctl->tx_head);
	uint64_t told = shim_rdma_load_acq(&c->ctl->tx_peer_recvs);
	uint64_t tail = c->tx_tail;

	if (h > tail || tail - h > c->ring_bytes || h < c->peer_head_seen) {
		*why = "head_out_of_range";
		return false;
	}
	if (!told)
		told = SHIM_RDMA_RQ_DEPTH;
	if (told < c->peer_recvs_seen || told < c->peer_recvs_used ||
	    told - c->peer_recvs_used > SHIM_RDMA_RQ_DEPTH) {
		*why = "receive_credit_out_of_range";
		return false;
	}
	*head = h;
	*recvs = told;
	return true;
}

/* Appends our exact head: the producer's ring space (and, at a read that
 * empties the ring or at close, its count of what we left unread). */
void shim_rdma_chain_head(struct rdma_conn *c, struct wr_chain *wrs, bool signal)
{
	/* Release, before the WRITE is posted: pairs with the acquire in
	 * take_imm(), which bounds the producer's immediates by what we
	 * credited. */
	__atomic_store_n(&c->rx_head_sent, c->rx_head, __ATOMIC_RELEASE);
	shim_rdma_chain_word(c, wrs, CTL_OFF(tx_head), c->rx_head, signal);
}
