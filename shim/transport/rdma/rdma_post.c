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

#include "faults.h"
#include "fo_worker.h"
#include "trace.h"

void shim_rdma_mark_broken(struct rdma_conn *c, const char *why, int detail)
{
	/* Also from the link's reaper (another connection's thread). */
	if (__atomic_load_n(&c->broken, __ATOMIC_RELAXED))
		return;
	/* Relaxed: rdma_failed() polls it without the lock; what follows a
	 * failure is read under the lock. */
	__atomic_store_n(&c->broken, true, __ATOMIC_RELAXED);
	SHIM_TRACE(shim_rdma_peer_finished(c) ? SHIM_TRACE_DEBUG : SHIM_TRACE_WARN, "rdma.broken", c->fd, c->sock ? &c->sock->tuple : NULL, SHIM_REASON_INTERNAL_ERROR,
		   "\"why\":\"%s\",\"detail\":%d", why, detail);
	/* Its failover goes on without waiting for the program's next call
	 * on it (fo_worker.h): the peer may be waiting for what it owes. */
	shim_failover_kick(c->sock, c->fd);
}

/*
 * Our receives are the link's, reposted as soon as each is reaped; a
 * connection's share of them is counted as its credit: each immediate or
 * SWITCH_AT of the peer's for it is one more we "posted" for it, and the
 * producer keeps within what we reported (tx_peer_recvs).
 */
static void post_recv_one(struct rdma_conn *c)
{
	__atomic_store_n(&c->recv_posted, c->recv_posted + 1, __ATOMIC_RELAXED);
}

void shim_rdma_post_recvs(struct rdma_conn *c)
{
	__atomic_store_n(&c->recv_posted, c->recv_posted + SHIM_RDMA_RQ_DEPTH, __ATOMIC_RELAXED);
}

/* Marks and traces it; the caller stops what lands (the link's reaper
 * breaks the link itself). */
static void note_violation(struct rdma_conn *c, const char *why, unsigned long long value)
{
	if (__atomic_load_n(&c->violated, __ATOMIC_RELAXED))
		return;
	/* Counted where the connection ends (conn.abort or upgrade.fail). */
	__atomic_store_n(&c->violated, true, __ATOMIC_RELAXED);
	SHIM_TRACE(SHIM_TRACE_ERROR, "rdma.violation", c->fd, c->sock ? &c->sock->tuple : NULL,
		   SHIM_REASON_PEER_VIOLATION, "\"why\":\"%s\",\"value\":%llu", why, value);
	shim_rdma_mark_broken(c, "violation", 0);
}

void shim_rdma_violation(struct rdma_conn *c, const char *why, unsigned long long value)
{
	note_violation(c, why, value);
	/* ERR: nothing the peer posts lands any more, so what we took until
	 * now (rx_tail) is final for the failover's RESUME. The link's other
	 * connections have the same peer: they fail over too. */
	if (c->link)
		shim_rdma_link_break(c->link, "violation", 0);
}

/* The peer's SWITCH_AT: exactly one per connection, exactly its size, no
 * flag we do not know. The link copied it out of its cell; the reaper runs
 * on any thread, so peer_at_known publishes the rest (release; the sock's
 * thread reads it with acquire). false: a violation (the link breaks). */
static bool take_switch_at(struct rdma_conn *c, const void *buf, size_t len)
{
	struct shim_rdma_switch_at at;
	uint16_t flags;

	memcpy(&at, buf, sizeof(at));
	flags = be16toh(at.flags);
	if (len != sizeof(at) || be32toh(at.magic) != SHIM_RDMA_MAGIC || at.version != SHIM_RDMA_VERSION ||
	    at.type != SHIM_RDMA_SWITCH_AT || (flags & ~SHIM_RDMA_NO_SWITCH) ||
	    __atomic_load_n(&c->peer_at_known, __ATOMIC_RELAXED)) {
		note_violation(c, "bad_switch_at", len);
		return false;
	}
	c->peer_no_switch = flags & SHIM_RDMA_NO_SWITCH;
	c->peer_at = be64toh(at.offset);
	__atomic_store_n(&c->peer_at_known, true, __ATOMIC_RELEASE);
	post_recv_one(c);
	return true;
}

/* The peer's head of our send ring from a DATA immediate's low bits
 * (rdma_wire.h): the smallest at or after the one its previous DATA
 * immediate gave (taken in order, under the link's lock) with them. Not
 * from the tx_head word: one the peer posted after this immediate may be
 * placed already, and a head counted from a later one would run ahead. A
 * lie shows where every credit is read (shim_rdma_peer_credits): past our
 * tail. */
static void take_imm_head(struct rdma_conn *c, uint32_t imm)
{
	uint64_t had = __atomic_load_n(&c->peer_head_imm, __ATOMIC_RELAXED);

	/* Release: pairs with the acquire in shim_rdma_peer_head(), read on
	 * the sock's thread, or lock-free while busy polling. */
	__atomic_store_n(&c->peer_head_imm, shim_rdma_imm_head(had, imm), __ATOMIC_RELEASE);
}

/* The ring's tail and "closed" from the producer's immediate: a DATA one
 * moves it by the bytes its WRITE placed (and carries the peer's head), a
 * tail word one names it in the word it WRITEs (rx_announced). The HCA
 * writes the completion only after the WRITE and those before it are
 * placed. The tail must not move back and must fit the room we credited
 * (the producer saw at most rx_head_sent as our head), and nothing may
 * follow CLOSED: a receive then never reads past the ring nor bytes the
 * producer had no right to announce. Under the link's lock: rx_tail has
 * one writer at a time. false: a violation. */
static bool take_imm(struct rdma_conn *c, uint32_t imm, uint32_t byte_len)
{
	/* Acquire: pairs with the release store in chain_credits(), made
	 * before the credit WRITE whose arrival allowed these bytes. */
	uint64_t credited = __atomic_load_n(&c->rx_head_sent, __ATOMIC_ACQUIRE);
	uint64_t had = __atomic_load_n(&c->rx_tail, __ATOMIC_RELAXED);
	bool data = imm & SHIM_RDMA_IMM_DATA;
	/* Acquire (the word): pairs with the in-order placement of the
	 * peer's WRITEs. */
	uint64_t tail = data ? shim_rdma_imm_tail(had, imm, byte_len, c->ring_bytes)
			     : shim_rdma_load_acq(&c->ctl->rx_announced);

	if (__atomic_load_n(&c->violated, __ATOMIC_RELAXED))
		return true;
	if (data && (imm & SHIM_RDMA_IMM_CLOSED)) {
		note_violation(c, "closed_with_data", imm);
		return false;
	}
	if (__atomic_load_n(&c->rx_closed, __ATOMIC_RELAXED) || tail < had || tail - credited > c->ring_bytes) {
		note_violation(c, "immediate_beyond_credit", tail - had);
		return false;
	}
	if (data)
		take_imm_head(c, imm);
	/* Release: pairs with the acquire loads in rdma_readable() and
	 * rdma_rx_eof(), which may run on threads that did not reap. */
	__atomic_store_n(&c->rx_tail, tail, __ATOMIC_RELEASE);
	if (imm & SHIM_RDMA_IMM_CLOSED)
		__atomic_store_n(&c->rx_closed, true, __ATOMIC_RELEASE);
	post_recv_one(c);
	return true;
}

/* C: S's ACCEPT of the OFFER we sent on the link, for our progress to take
 * (rdma_setup.c). A second one is a violation. */
static bool take_accept(struct rdma_conn *c, const struct shim_rdma_link_msg *m)
{
	if (__atomic_load_n(&c->accept_in, __ATOMIC_ACQUIRE) || c->peer_id_known) {
		note_violation(c, "second_accept", 0);
		return false;
	}
	c->accept_msg = *m;
	/* Release: accept_msg is complete before the flag says so. */
	__atomic_store_n(&c->accept_in, true, __ATOMIC_RELEASE);
	return true;
}

/*
 * The stall watch's look at one connection (rdma_link.h), right after a
 * reap under the link's lock: every completion the CQ delivered is
 * counted, so a tail word of the peer's (written behind the WRITEs it
 * counts: by the one whose immediate announces it, or lazily on a DATA
 * connection, rdma_wire.h) still ahead of our count is one whose
 * completion did not come. It stands for a moment in flight (placed,
 * completion not yet written); past the bound, with our count not moving
 * meanwhile, the CQ stopped delivering. The word is the peer's: read once
 * and only compared (a peer that writes a tail it never announces gets
 * its channel failed over to TCP, which it could ask for anyway).
 */
static bool rx_stalled(struct rdma_conn *c, unsigned long long now, unsigned long long bound_ns, uint64_t *behind)
{
	/* Acquire: pairs with the in-order placement of the peer's WRITEs. */
	uint64_t word = shim_rdma_load_acq(&c->ctl->rx_announced);
	/* Relaxed: take_imm, its one writer, runs under this same lock. */
	uint64_t tail = __atomic_load_n(&c->rx_tail, __ATOMIC_RELAXED);

	if (__atomic_load_n(&c->broken, __ATOMIC_RELAXED) || __atomic_load_n(&c->rx_closed, __ATOMIC_RELAXED)) {
		c->stall_since_ns = 0;
		return false;
	}
	*behind = word > tail ? word - tail : 0;
	return shim_rdma_stall_judge(&c->stall_since_ns, &c->stall_tail, word, tail, now, bound_ns);
}

/*
 * The links' sweeper (rdma_link.c, watch_locked; under the link's lock):
 * our lazy tail word, once it lagged what our DATA immediates announced
 * for a quarter of the peer's bound (ours: both ends run one
 * configuration), so that the peer's watch sees a stalled CQ of a sender
 * that neither arms nor waits for room (those publish it themselves,
 * rdma_chan.c). Never waits for room on the send queue: a later look
 * tries again.
 */
static void tx_lazy(struct rdma_conn *c, unsigned long long now, unsigned long long bound_ns)
{
	struct wr_chain wrs = { .n = 0 };
	uint64_t word = __atomic_load_n(&c->tx_word, __ATOMIC_RELAXED);
	uint64_t announced = __atomic_load_n(&c->tx_announced, __ATOMIC_RELAXED);

	if (!__atomic_load_n(&c->proved, __ATOMIC_RELAXED) || __atomic_load_n(&c->broken, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&c->closed_sent, __ATOMIC_RELAXED) || !c->link)
		word = announced; /* nothing to publish: forget any lag */
	if (!shim_rdma_lazy_due(&c->tx_lag_ns, &c->tx_lag_tail, word, announced, now, bound_ns))
		return;
	shim_rdma_chain_tail_word(c, &wrs);
	if (shim_rdma_link_post_locked(c->link, &wrs)) {
		shim_rdma_tail_word_sent(c, &wrs);
		c->tx_lag_ns = 0;
	}
}

const struct rdma_link_handlers shim_rdma_link_handlers = {
	.imm = take_imm,
	.switch_at = take_switch_at,
	.accept = take_accept,
	.broken = shim_rdma_mark_broken,
	.rx_stalled = rx_stalled,
	.tx_lazy = tx_lazy,
};

void shim_rdma_reap(struct rdma_conn *c)
{
	if (c->link)
		shim_rdma_link_reap(c->link);
}

/* For the lock-free readers: whoever holds the link's lock is reaping. */
void shim_rdma_reap_try(struct rdma_conn *c)
{
	struct rdma_link *l = __atomic_load_n(&c->link, __ATOMIC_ACQUIRE);

	if (l)
		shim_rdma_link_reap_try(l);
}

/* Spins on the link's CQ until WR seq completed. Bounded: a peer that stops
 * answering breaks the link instead of hanging the program. */
bool shim_rdma_wait_seq(struct rdma_conn *c, uint64_t seq)
{
	if (!c->link)
		return false;
	return shim_rdma_link_wait(c->link, seq) && !__atomic_load_n(&c->broken, __ATOMIC_RELAXED);
}

/* Appends one RDMA WRITE of len bytes at local to the peer's remote_off.
 * Precondition: fewer than CHAIN_MAX WRs in the chain. */
void shim_rdma_chain_write(struct rdma_conn *c, struct wr_chain *ch, const void *local, size_t len, uint64_t remote_off,
			bool signal)
{
	unsigned i = ch->n++;

	ch->sge[i] = (struct ibv_sge){ .addr = (uintptr_t)local, .length = (uint32_t)len, .lkey = c->slot.lkey };
	ch->wr[i] = (struct ibv_send_wr){ .sg_list = &ch->sge[i], .num_sge = 1 };
	ch->wr[i].opcode = IBV_WR_RDMA_WRITE;
	ch->wr[i].send_flags = signal ? IBV_SEND_SIGNALED : 0;
	ch->wr[i].wr.rdma.remote_addr = c->remote_addr + remote_off;
	ch->wr[i].wr.rdma.rkey = c->rkey;
}

/* Appends a WRITE of one 8-byte control word into the peer's control page. */
void shim_rdma_chain_word(struct rdma_conn *c, struct wr_chain *ch, size_t ctl_off, uint64_t value, bool signal)
{
	unsigned i = ch->n;

	/* Inline copies the value at post time; without inline the link
	 * copies it into a registered cell (shim_rdma_link_post). */
	ch->words[i] = value;
	ch->copy_mask |= 1u << i;
	shim_rdma_chain_write(c, ch, &ch->words[i], sizeof(value), ctl_off, signal);
}

/* Raises *w to v; relaxed: tx_word is only ever compared. */
static void raise_word(uint64_t *w, uint64_t v)
{
	uint64_t had = __atomic_load_n(w, __ATOMIC_RELAXED);

	while (had < v && !__atomic_compare_exchange_n(w, &had, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/*
 * The lazy tail word (rdma_wire.h, version 8): a plain WRITE, without
 * immediate and unsignaled, of what our DATA immediates announced into
 * the peer's rx_announced, for its stall watch only. Its value is read
 * as the chain takes its place on the QP (late_src, under the post lock):
 * tx_announced is stored only after the post of the bytes it counts, so
 * the word never names a byte whose WRITE is behind it on the QP, and
 * words from the sock's thread and the sweeper reach the peer in QP
 * order, never moving back (a CLOSED word after them names the same).
 */
void shim_rdma_chain_tail_word(struct rdma_conn *c, struct wr_chain *ch)
{
	ch->late_src = &c->tx_announced;
	ch->late_i = ch->n;
	shim_rdma_chain_word(c, ch, CTL_OFF(rx_announced), 0, false);
}

/* After the chain of shim_rdma_chain_tail_word posted. */
void shim_rdma_tail_word_sent(struct rdma_conn *c, const struct wr_chain *ch)
{
	raise_word(&c->tx_word, ch->words[ch->late_i]);
}

bool shim_rdma_tail_word_lags(const struct rdma_conn *c)
{
	return !__atomic_load_n(&c->closed_sent, __ATOMIC_RELAXED) &&
	       __atomic_load_n(&c->tx_word, __ATOMIC_RELAXED) < __atomic_load_n(&c->tx_announced, __ATOMIC_RELAXED);
}

void shim_rdma_chain_tail(struct rdma_conn *c, struct wr_chain *ch, uint64_t tail)
{
	unsigned i = ch->n;

	/* Release, before the WRITE is posted: pairs with the acquire in
	 * take_imm(), as in shim_rdma_chain_head(). The head goes with every
	 * tail, exact: a reply says how far its request was read at no cost,
	 * which is what lets a read that empties the ring post nothing. */
	__atomic_store_n(&c->rx_head_sent, c->rx_head, __ATOMIC_RELEASE);
	raise_word(&c->tx_word, tail);
	ch->tail_head[0] = tail;
	ch->tail_head[1] = c->rx_head;
	ch->copy_mask |= 1u << i;
	shim_rdma_chain_write(c, ch, ch->tail_head, sizeof(ch->tail_head), CTL_OFF(rx_announced), true);
}

/* Before a send's data WRITEs: whether it ends with a DATA immediate
 * (rdma_wire.h: every send of a connection whose peer id fits, never
 * mixed with tail words). Its head bits may move the head at most
 * SHIM_RDMA_IMM_DATA_HEAD past the last DATA immediate's: beyond, our
 * exact head goes first in a word of its own, and the immediate carries
 * a lagging one (a head only ever lags). */
bool shim_rdma_data_imm_begin(struct rdma_conn *c, struct wr_chain *ch)
{
	if (c->peer_id > SHIM_RDMA_IMM_DATA_ID)
		return false;
	if (c->rx_head - c->rx_head_imm > SHIM_RDMA_IMM_DATA_HEAD)
		shim_rdma_chain_head(c, ch, false);
	return true;
}

/* After them: the last data WRITE carries the DATA immediate, our head in
 * it. wrapped: the send is two data WRITEs (the ring's end). */
void shim_rdma_chain_data_imm(struct rdma_conn *c, struct wr_chain *ch, bool wrapped)
{
	uint64_t h = c->rx_head;

	if (h - c->rx_head_imm > SHIM_RDMA_IMM_DATA_HEAD)
		h = c->rx_head_imm + SHIM_RDMA_IMM_DATA_HEAD;
	c->rx_head_imm = h;
	/* Release, before the WRITE is posted: as in shim_rdma_chain_tail().
	 * Exact: the word before carried rx_head when h lags it. */
	__atomic_store_n(&c->rx_head_sent, c->rx_head, __ATOMIC_RELEASE);
	shim_rdma_chain_imm(ch, shim_rdma_imm_data(c->peer_id, h, wrapped));
}

/* Makes the chain's last WRITE carry imm (signaled: tx_bell waits for
 * it). Precondition: at least one WR in the chain. */
void shim_rdma_chain_imm(struct wr_chain *ch, uint32_t imm)
{
	struct ibv_send_wr *wr = &ch->wr[ch->n - 1];

	wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr->imm_data = htobe32(imm);
	wr->send_flags |= IBV_SEND_SIGNALED;
}

/* Posts the chain on the link; returns the last WR's sequence number, or 0
 * on failure (nothing of the chain was posted, or the channel is broken). */
uint64_t shim_rdma_chain_post(struct rdma_conn *c, struct wr_chain *ch)
{
	uint64_t seq;

	if (__atomic_load_n(&c->broken, __ATOMIC_RELAXED) || !c->link || !ch->n)
		return 0;
	seq = shim_rdma_link_post(c->link, ch);
	if (!seq)
		return 0;
	for (unsigned i = 0; i < ch->n; i++)
		if (ch->wr[i].send_flags & IBV_SEND_SIGNALED)
			c->last_signaled = ch->wr[i].wr_id;
	if (unlikely(c->fault_link_n) && c->proved) {
		/* Test-only (faults.h, link_qp_lost): the QP goes under every
		 * connection the link carries now. */
		SHIM_FAULT_TRACE_(SHIM_FAULT_LINK_QP_LOST, c->fd, c->sock ? &c->sock->tuple : NULL, "link_post",
				  c->fault_link_n);
		c->fault_link_n = 0;
		shim_rdma_link_fault_err(c->link);
	}
	return seq;
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
		.to_id = htobe32(c->peer_id),
	};
	uint64_t seq;

	if (c->broken || !c->link)
		return -EIO;
	seq = shim_rdma_link_send(c->link, &at, sizeof(at));
	if (!seq)
		return -EIO;
	c->last_signaled = seq;
	c->peer_recvs_used++;
	/* The completion is the peer's ACK: its receive is done (and its CQE
	 * written) before our SWITCH frame can go on TCP. */
	return shim_rdma_wait_seq(c, seq) ? 0 : -EIO;
}

/*
 * Nothing more lands for this connection: its link's QP goes to ERR, so
 * every connection on the link stops and fails over, each at its own
 * offset. A stop of one connection alone (the link's other connections
 * going on) would let the peer's WRITEs for it still execute after our
 * stop and be acknowledged, and the failover's offsets rest on "acked means
 * counted" (rdma_fail.c): that needs ERR.
 */
void shim_rdma_qp_error(struct rdma_conn *c)
{
	SHIM_TRACE(SHIM_TRACE_DEBUG, "qp.state", c->fd, c->sock ? &c->sock->tuple : NULL, SHIM_REASON_NONE,
		   "\"link\":%u,\"state\":\"err\"", c->link ? c->link->num : 0);
	if (c->link)
		shim_rdma_link_break(c->link, "stopped", 0);
}

/* Acks what the connection's event channel holds (its rendezvous, its
 * handshake); once its link is up, the link's are looked at. true if the
 * peer disconnected. */
bool shim_rdma_drain_cm_events(struct rdma_conn *c)
{
	struct rdma_link *l = c->link;
	struct rdma_cm_event *ev;
	bool gone = false;

	if (l && l->cm_owned && l->ec == c->ec)
		return shim_rdma_link_cm_gone(l);
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
	if (l && l->cm_owned)
		gone |= shim_rdma_link_cm_gone(l);
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
	uint64_t h = shim_rdma_peer_head(c);
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
