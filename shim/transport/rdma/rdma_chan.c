/*
 * The RDMA transport's channel operations (transport.h contracts).
 *
 * Each direction is a byte ring in the consumer's registered memory. The
 * producer copies the application's bytes into a staging copy of the ring
 * (same offsets) and RDMA-WRITEs them into the consumer's ring. An
 * immediate completes on the consumer's CQ: on the last data WRITE itself
 * (a DATA immediate: the tail moves by the bytes placed), or, on a
 * connection whose id does not fit one, on a WRITE of the new tail into
 * the consumer's control page after the data (rdma_wire.h). The consumer
 * reads its
 * local ring and WRITEs its head back into the producer's control page
 * (credits), at least every eighth of the ring and whenever the producer
 * asked for space or it arms, and, exact, with every tail it writes as a
 * producer (the same WRITE) and before it closes: the producer's unread
 * count (rdma_fail.c's tx_unread) rests on that.
 *
 * Ordering: one RC QP places WRITEs in the order they were posted (the IB
 * ordering rules for RDMA WRITE on one QP, which rxe and mlx5 keep and FaRM
 * and rsocket rely on too), so the tail never lands before the bytes it
 * covers, and "closed" never before the last tail. The reader's acquire
 * loads of those words pair with that placement order.
 *
 * Wake-ups without loss (Dekker with completions as fences): the consumer
 * arms by WRITEing 1 into the producer's armed word and waiting for that
 * WRITE's completion (the ACK means it is in the producer's memory), then
 * re-checks its local tail. The producer, after the completion of its tail
 * WRITE (the tail is in the consumer's memory), reads its local armed word
 * and exchanges it to 0: a 1 means a bell. If the consumer's re-check missed
 * the tail, the tail landed after the arm did, so the producer, reading
 * after its tail landed, sees the arm. Space is the same with the roles
 * swapped (wants_space lives in the consumer's memory, head is the cursor).
 * That is why tx_bell waits for a completion before it bells: a bell
 * must never overtake the bytes it announces. It skips the wait when the
 * consumer is not armed at all (the common, busy-polling case); the race
 * that leaves is closed by the consumer's short first sleep (arm_grace).
 *
 * Selective signaling: data WRITEs go unsignaled; the tail WRITE of a send
 * and every control WRITE we wait for are signaled, plus every 16th WR so the
 * send queue can always be reaped. All calls run under the sock's lock except
 * readable/writable/rx_eof/peer_rx_gone/space_lowat (busy polling in io_sleep.c),
 * which only read memory.
 */
#include "rdma.h"
#include "rdma_post.h"
#include "rdma_zc.h"
#include "ring.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <endian.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "msgstamps.h"
#include "stats.h"
#include "trace.h"

/* ---- producer side ---- */


/* Under the lock: takes the peer's credits, or ends the channel. */
static bool take_credits(struct rdma_conn *c, uint64_t *head, uint64_t *recvs)
{
	const char *why = NULL;

	if (!shim_rdma_peer_credits(c, head, recvs, &why)) {
		shim_rdma_violation(c, why, 0);
		return false;
	}
	c->peer_head_seen = *head;
	c->peer_recvs_seen = *recvs;
	return true;
}

/* Whether n more immediates fit the receives the peer posted, with one
 * kept back for CLOSED (keep_closed). */
static bool imm_room(const struct rdma_conn *c, uint64_t recvs, unsigned n, bool keep_closed)
{
	return c->peer_recvs_used + n + (keep_closed ? 1 : 0) <= recvs;
}

/* Room in the peer's ring, from credits already checked. */
static size_t room(const struct rdma_conn *c, uint64_t head, uint64_t recvs)
{
	if (c->broken || !imm_room(c, recvs, 1, true))
		return 0;
	return c->ring_bytes - (size_t)(c->tx_tail - head);
}

/* Lock-free (busy polling): a lie shows as no room; the next call under
 * the lock ends the channel. */
static size_t rchan_writable(const struct shim_chan *ch)
{
	const struct rdma_conn *c = shim_rdma_conn_of(ch);
	uint64_t head, recvs;
	const char *why;

	if (!shim_rdma_peer_credits(c, &head, &recvs, &why))
		return 0;
	return room(c, head, recvs);
}

/*
 * Posts the staged bytes [tx_posted, tx_tail + add) to the peer's ring: at
 * most two WRITEs (the staging copy has the ring's offsets, so a wrap
 * splits it). The last carries a DATA immediate (its byte count is the
 * tail's news, our head rides in it), or the tail word follows them.
 * false: nothing was posted.
 */
static uint64_t post_closed(struct rdma_conn *c);

static bool post_staged(struct rdma_conn *c, size_t add)
{
	struct wr_chain wrs = { .n = 0 };
	uint64_t from = c->tx_posted, to = c->tx_tail + add;
	size_t n = (size_t)(to - from);
	size_t off = (size_t)(from & c->mask), first = c->ring_bytes - off < n ? c->ring_bytes - off : n;
	/* Testing only (RDMASHIM_TEST_FAIL_RDMA_KB): the channel dies here: the
	 * program was told these bytes went out, and the peer never learns of
	 * them (no immediate announces them). */
	bool die = shim_cfg.test_fail_rdma_kb && to >= (uint64_t)shim_cfg.test_fail_rdma_kb * 1024u;
	bool data_imm = !die && shim_rdma_data_imm_begin(c, &wrs);
	uint64_t seq;

	shim_rdma_chain_write(c, &wrs, c->tx_shadow + off, first, SHIM_RDMA_CTL_BYTES + off, false);
	if (n > first)
		shim_rdma_chain_write(c, &wrs, c->tx_shadow, n - first, SHIM_RDMA_CTL_BYTES, false);
	if (data_imm) {
		shim_rdma_chain_data_imm(c, &wrs, n > first);
	} else if (!die) {
		/* The tail word after the data, on the same QP: placed after
		 * them, and its immediate names our connection at the peer.
		 * Our head rides with it (the reply carries the request's). */
		shim_rdma_chain_tail(c, &wrs, to);
		shim_rdma_chain_imm(&wrs, c->peer_id);
	}
	seq = shim_rdma_chain_post(c, &wrs);
	if (!seq)
		return false;
	c->tx_posted = to;
	c->peer_recvs_used += !die;
	if (!die) {
		/* What the peer's RESUME will name once seq completes
		 * (rdma_fail.c, shim_rdma_tx_offset). Release: pairs with
		 * the acquire in the post of a lazy tail word
		 * (shim_rdma_chain_tail_word), on any thread. */
		__atomic_store_n(&c->tx_announced, to, __ATOMIC_RELEASE);
		c->tx_imm_seq = seq;
	} else {
		shim_rdma_mark_broken(c, "injected", (int)shim_cfg.test_fail_rdma_kb);
		shim_rdma_qp_error(c);
	}
	return true;
}

bool shim_rdma_tx_proved(struct rdma_conn *c)
{
	/* Our rx read the peer's SWITCH frame carrying the nonce we sent only
	 * to our CM peer: the TCP peer is the CM peer (PROTOCOL.md, "Proof").
	 * Latched: a failover moves rx back to TCP later. */
	if (!c->proved && c->sock && c->sock->rx_dir == SHIM_DIR_CHAN) {
		c->proved = true;
		/* Its peer is a shim process that owns TCP connections to us:
		 * later ones may be set up over the link. */
		if (c->link)
			shim_rdma_link_trust(c->link);
		shim_rdma_link_making_done(c);
	}
	return c->proved;
}

void shim_rdma_unproven(struct rdma_conn *c, const char *why)
{
	if (c->broken)
		return;
	shim_rdma_mark_broken(c, why, 0);
	shim_stats_count(SHIM_REASON_UNPROVEN_PEER);
	SHIM_TRACE(SHIM_TRACE_WARN, "rdma.unproven", c->fd, c->sock ? &c->sock->tuple : NULL,
		   SHIM_REASON_UNPROVEN_PEER, "\"why\":\"%s\",\"staged\":%llu", why,
		   (unsigned long long)(c->tx_tail - c->tx_posted));
	shim_rdma_qp_error(c);
}

/* Unproven with bytes staged for longer than the upgrade may take: the
 * channel ends (failover: they go on TCP behind our RESUME). */
static bool hold_expired(struct rdma_conn *c)
{
	if (c->proved || c->tx_posted == c->tx_tail || c->broken ||
	    shim_now_ns() - c->staged_since_ns < (unsigned long long)shim_cfg.upgrade_timeout_ms * 1000000ull)
		return false;
	shim_rdma_unproven(c, "hold_expired");
	return true;
}

int shim_rdma_tx_release(struct rdma_conn *c)
{
	if (c->broken || !shim_rdma_tx_proved(c))
		return hold_expired(c) ? -ETIMEDOUT : 0;
	if (c->tx_posted != c->tx_tail && !post_staged(c, 0))
		return -EIO;
	if (c->close_pending)
		post_closed(c);
	return 0;
}

static size_t rchan_send(struct shim_chan *ch, const struct iovec *iov, int iovcnt, size_t skip)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);
	uint64_t head, recvs;
	size_t done;

	SHIM_MSGSTAMP_OP(SHIM_TRANSPORT_RDMA, SHIM_MSG_TX);
	shim_rdma_reap(c);
	if (!take_credits(c, &head, &recvs))
		return 0;
	SHIM_MSGSTAMP_MARK(SHIM_MSG_REAP);
	/* A large blocking send to a proved peer goes from the program's
	 * memory (rdma_zc.h). */
	if (shim_cfg.zerocopy == SHIM_ZC_ON && shim_rdma_tx_proved(c) && (done = shim_rdma_zc_send(c, iov, iovcnt, skip, room(c, head, recvs))))
		return done;
	done = shim_ring_copy_iov_in(c->tx_shadow, c->mask, c->tx_tail, iov, iovcnt, skip, room(c, head, recvs));
	SHIM_MSGSTAMP_MARK(SHIM_MSG_COPY);
	if (!shim_rdma_tx_proved(c)) {
		/* Staged only: no byte goes to a peer that has not proved it
		 * is the TCP peer; shim_rdma_tx_release() posts them. */
		if (hold_expired(c))
			return 0;
		if (done && c->tx_posted == c->tx_tail)
			c->staged_since_ns = shim_now_ns();
		c->tx_tail += done;
		return done;
	}
	if ((!done && c->tx_posted == c->tx_tail) || !post_staged(c, done)) {
		/* Nothing was promised to the program yet: report no progress;
		 * the broken channel shows as EPIPE (peer_rx_gone). */
		return 0;
	}
	SHIM_MSGSTAMP_MARK(SHIM_MSG_POST);
	SHIM_MSGSTAMP_POSTED();
	c->tx_tail += done;
	return done;
}

static unsigned tx_bell_due(struct rdma_conn *c)
{
	/*
	 * A consumer that is not armed yet is spinning on its ring and needs
	 * no bell: return at once instead of waiting a round trip for our
	 * tail's completion. The one race left is a consumer whose arm lands
	 * after this look while our tail is still in flight: its re-check may
	 * miss the tail, and nobody rings. transport.h's arm_grace covers it:
	 * the first sleep after an arm lasts a millisecond, far longer than a
	 * tail's flight, so the consumer looks again and finds it.
	 */
	if (!c->proved || !shim_rdma_load_acq(&c->ctl->tx_consumer_armed))
		return 0;
	SHIM_MSGSTAMP_MARK(SHIM_MSG_BELL);
	/* Fence: our tail (or closed) WRITE is in the consumer's memory before
	 * we read the armed word again; pairs with the consumer's wait for its
	 * arm WRITE in rchan_rx_arm(): a bell never overtakes its bytes. */
	if (!shim_rdma_wait_seq(c, c->last_signaled))
		return 0;
	SHIM_MSGSTAMP_MARK(SHIM_MSG_COMPLETION);
	if (!shim_rdma_load_acq(&c->ctl->tx_consumer_armed))
		return 0;
	/* Exchange: one armed wait gets one bell, not one per send. */
	return __atomic_exchange_n(&c->ctl->tx_consumer_armed, 0, __ATOMIC_ACQ_REL) ? SHIM_BELL_TCP : 0;
}

static unsigned rchan_tx_bell(struct shim_chan *ch)
{
	unsigned bells;

	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	bells = tx_bell_due(shim_rdma_conn_of(ch));
	SHIM_MSGSTAMP_MARK(SHIM_MSG_BELL);
	return bells;
}

static size_t rchan_space_lowat(const struct shim_chan *ch)
{
	return shim_rdma_conn_of(ch)->ring_bytes / 4;
}

static bool rchan_peer_rx_gone(const struct shim_chan *ch)
{
	const struct rdma_conn *c = shim_rdma_conn_of(ch);

	/* A broken channel is not a closed peer: the stream resumes on TCP.
	 * Only a proved peer may end our stream (EPIPE); relaxed: proved is
	 * set under the lock and only ever goes from false to true. */
	return __atomic_load_n(&c->proved, __ATOMIC_RELAXED) && shim_rdma_load_acq(&c->ctl->tx_consumer_closed) != 0;
}

/* Its CLOSED immediate came (taken from the CQ here), then its exact head
 * and consumer_closed (posted after it on the same QP, rdma_teardown.c):
 * the peer closed cleanly with nothing of ours unread. */
static bool rchan_peer_ended_clean(struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);

	shim_rdma_reap(c);
	return !__atomic_load_n(&c->violated, __ATOMIC_RELAXED) && __atomic_load_n(&c->rx_closed, __ATOMIC_ACQUIRE) &&
	       rchan_peer_rx_gone(ch) && shim_rdma_tx_unread(ch) == 0;
}

static void comp_clean(struct rdma_link *l);

/* how: TCP always; the line (bell_fd) is for rx only (rchan_rx_arm). */
static bool rchan_tx_arm(struct shim_chan *ch, unsigned how)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);
	uint64_t seq;

	/* We sleep on the line too (the wait watches it): an event a past
	 * rx wait left there (comp_give) would wake us again and again. */
	if (how == SHIM_BELL_LINE && c->link)
		comp_clean(c->link);
	/* Broken: what wakes us now is the peer's RESUME (or EOF) on TCP. */
	if (c->broken)
		return true;
	/* Unproven: room comes with the peer's SWITCH frame (our proof), on
	 * TCP; or the hold expires and the channel fails over. */
	if (!shim_rdma_tx_proved(c))
		return !hold_expired(c);
	struct wr_chain wrs = { .n = 0 };

	/* Waiting for room: our lazy tail word goes too, so that the peer's
	 * stall watch sees what a CQ that stopped delivering keeps from it. */
	if (shim_rdma_tail_word_lags(c))
		shim_rdma_chain_tail_word(c, &wrs);
	shim_rdma_chain_word(c, &wrs, CTL_OFF(rx_wants_space), 1, true);
	seq = shim_rdma_chain_post(c, &wrs);
	if (seq && wrs.late_src)
		shim_rdma_tail_word_sent(c, &wrs);

	/* Fence: our wants_space is in the consumer's memory before we look at
	 * head again; pairs with the wait for the head WRITE in
	 * rx_bell_due(). */
	if (!seq || !shim_rdma_wait_seq(c, seq))
		return false;
	return rchan_writable(ch) < rchan_space_lowat(ch) && !rchan_peer_rx_gone(ch);
}

/* We can not tell whether the consumer took the arm (its word lives over
 * there): clear it and say "not taken". A bell that was on its way anyway
 * is drained as a stray one, which the frame layer allows. */
static bool rchan_tx_disarm(struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);

	shim_rdma_post_word(c, CTL_OFF(rx_wants_space), 0, false);
	return true;
}

/* The tail word once more, with CLOSED in its immediate: after the last
 * data on the same QP, so its completion comes after theirs; signaled so
 * that tx_bell waits for it before looking at armed. */
static uint64_t post_closed(struct rdma_conn *c)
{
	struct wr_chain wrs = { .n = 0 };
	uint64_t seq;

	uint64_t head, recvs;

	if (c->closed_sent || !take_credits(c, &head, &recvs) || !imm_room(c, recvs, 1, false))
		return 0;
	shim_rdma_chain_tail(c, &wrs, c->tx_posted);
	shim_rdma_chain_imm(&wrs, c->peer_id | SHIM_RDMA_IMM_CLOSED);
	seq = shim_rdma_chain_post(c, &wrs);
	if (seq) {
		/* Relaxed: the sweeper's look (tx_lazy) only skips after it. */
		__atomic_store_n(&c->closed_sent, true, __ATOMIC_RELAXED);
		c->peer_recvs_used++;
	}
	return seq;
}

static void rchan_shutdown_tx(struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);

	/* CLOSED follows the last byte: while bytes wait for the proof, it
	 * waits with them (shim_rdma_tx_release). */
	if (!shim_rdma_tx_proved(c) || c->tx_posted != c->tx_tail) {
		c->close_pending = true;
		return;
	}
	post_closed(c);
}

/* ---- consumer side ---- */

static size_t rchan_readable(const struct shim_chan *ch)
{
	/* Busy polling calls this without the sock's lock: the tail comes
	 * from the link's CQ, which shim_rdma_reap_try() polls under the
	 * link's lock. */
	struct rdma_conn *c = (struct rdma_conn *)shim_rdma_conn_of(ch);

	if (__atomic_load_n(&c->rx_dropped, __ATOMIC_RELAXED))
		return 0;
	shim_rdma_reap_try(c);
	return (size_t)(__atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE) - c->rx_head);
}

static size_t rchan_recv(struct shim_chan *ch, const struct iovec *iov, int iovcnt, bool peek)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);
	size_t avail, done = 0;

	SHIM_MSGSTAMP_OP(SHIM_TRANSPORT_RDMA, SHIM_MSG_RX);
	avail = rchan_readable(ch);
	SHIM_MSGSTAMP_MARK(SHIM_MSG_REAP);
	if (avail)
		SHIM_MSGSTAMP_SEEN();
	for (int i = 0; i < iovcnt && done < avail; i++) {
		size_t n = iov[i].iov_len, off, first;

		if (n > avail - done)
			n = avail - done;
		off = (size_t)((c->rx_head + done) & c->mask);
		first = c->ring_bytes - off < n ? c->ring_bytes - off : n;
		memcpy(iov[i].iov_base, c->rx_data + off, first);
		memcpy((uint8_t *)iov[i].iov_base + first, c->rx_data, n - first);
		done += n;
	}
	if (!peek)
		c->rx_head += done;
	if (done)
		SHIM_MSGSTAMP_MARK(SHIM_MSG_COPY);
	return done;
}

static bool rchan_rx_eof(const struct shim_chan *ch)
{
	const struct rdma_conn *c = shim_rdma_conn_of(ch);

	/* CLOSED completes after the last data (same QP, completions in
	 * order): acquire it first. A broken channel is no EOF: the rest
	 * comes on TCP (failover.c). */
	return __atomic_load_n(&c->rx_closed, __ATOMIC_ACQUIRE) && rchan_readable(ch) == 0;
}

/* Appends our credits for the producer: the head (ring space) and how many
 * receives we posted (room for its immediates). */
static void chain_credits(struct rdma_conn *c, struct wr_chain *wrs, bool signal)
{
	uint64_t posted = __atomic_load_n(&c->recv_posted, __ATOMIC_RELAXED);

	shim_rdma_chain_head(c, wrs, false);
	shim_rdma_chain_word(c, wrs, CTL_OFF(tx_peer_recvs), posted, signal);
	c->recv_reported = posted;
}

/* Sends our credits to the producer and waits until they are there;
 * with_word: our lazy tail word first (an arm's, rchan_rx_arm). */
static bool flush_head(struct rdma_conn *c, bool with_word)
{
	struct wr_chain wrs = { .n = 0 };
	uint64_t seq;

	if (with_word)
		shim_rdma_chain_tail_word(c, &wrs);
	chain_credits(c, &wrs, true);
	seq = shim_rdma_chain_post(c, &wrs);
	if (seq && with_word)
		shim_rdma_tail_word_sent(c, &wrs);
	return seq && shim_rdma_wait_seq(c, seq);
}

/* Our lazy tail word alone: nothing waits for it (only the peer's stall
 * watch reads it, which allows for one in flight). */
static void publish_tail_word(struct rdma_conn *c)
{
	struct wr_chain wrs = { .n = 0 };

	shim_rdma_chain_tail_word(c, &wrs);
	if (shim_rdma_chain_post(c, &wrs))
		shim_rdma_tail_word_sent(c, &wrs);
}

static bool rx_bell_due(struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);
	bool wants = shim_rdma_load_acq(&c->ctl->rx_wants_space) != 0;

	/*
	 * Credits go back at least every eighth of the ring and every quarter
	 * of our receives, so the producer's view lags ours by less than
	 * that: with our ring empty it sees more than its low-water mark free
	 * and never waits on us while we sleep.
	 *
	 * A read that empties the ring posts nothing more: the exact head
	 * goes with our next tail (a reply: in the tail WRITE, or in the
	 * immediate of a one-WRITE send), our arm
	 * (chain_credits) or our close (rdma_teardown.c), whichever comes
	 * first. Written here, it was a WRITE of its own on the QP right
	 * ahead of the reply in every request/answer exchange.
	 */
	if (!wants && c->rx_head - c->rx_head_sent < c->ring_bytes / 8 &&
	    __atomic_load_n(&c->recv_posted, __ATOMIC_RELAXED) - c->recv_reported < SHIM_RDMA_RQ_DEPTH / 4)
		return false;
	/* Fence: the head is in the producer's memory before we read
	 * wants_space (again); pairs with the wait in rchan_tx_arm(). */
	if (!flush_head(c, false))
		return false;
	if (!shim_rdma_load_acq(&c->ctl->rx_wants_space))
		return false;
	/* Wake it only for room worth writing into; a later read looks again. */
	if (c->ring_bytes - rchan_readable(ch) < rchan_space_lowat(ch))
		return false;
	return __atomic_exchange_n(&c->ctl->rx_wants_space, 0, __ATOMIC_ACQ_REL) != 0;
}

static bool rchan_rx_should_bell(struct shim_chan *ch)
{
	bool bell;

	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	bell = rx_bell_due(ch);
	SHIM_MSGSTAMP_MARK(SHIM_MSG_CREDIT);
	return bell;
}

/*
 * The sleeping consumer's wake-up without the producer: every data WRITE
 * of the producer's ends with an immediate (post_staged), whose receive
 * completes on our link's CQ; armed (ibv_req_notify_cq), the CQ turns the
 * next completion into an event on the link's completion channel, the fd
 * the waits watch as this channel's line (bell_fd). No arm WRITE, no
 * round trip for it, no bell on TCP: the device wakes us. One thread of
 * ours at a time owns the channel's wake-ups (comp_take), since its drain
 * at disarm takes the events that would have woken another.
 */
static bool comp_take(struct rdma_link *l)
{
	uintptr_t me = (uintptr_t)pthread_self(), cur = 0;

	if (!__atomic_compare_exchange_n(&l->comp_owner, &cur, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED) &&
	    cur != me)
		return false;
	/* Events an earlier arm caused, left by its owner (comp_give): left,
	 * they would keep our level-triggered wait awake. Taken before we
	 * arm, so none of ours is among them. */
	if (!l->comp_nest++ && l->comp_dirty) {
		shim_rdma_link_comp_drain(l);
		l->comp_dirty = false;
	}
	return true;
}

/*
 * The events go with the channel, not drained here: the owner gives it
 * back as it wakes, and a drain now (a read that finds the event, then
 * one that finds none) would come between the wake-up and the data it
 * woke for. The next owner drains before it arms (comp_take), while it
 * waits anyway; until then no arm is outstanding, so at most the one event
 * that woke us waits there. The acquire of the owner word in comp_take
 * pairs with this release, handing comp_dirty over.
 */
static void comp_give(struct rdma_link *l)
{
	if (--l->comp_nest)
		return;
	l->comp_dirty = true;
	__atomic_store_n(&l->comp_owner, 0, __ATOMIC_RELEASE);
}

/* Drains what an earlier owner left, if no other thread owns the channel
 * now (its own take drained it then), without arming. */
static void comp_clean(struct rdma_link *l)
{
	if (!l->comp || !comp_take(l))
		return;
	if (!--l->comp_nest)
		__atomic_store_n(&l->comp_owner, 0, __ATOMIC_RELEASE);
}

static bool line_arm(struct rdma_conn *c)
{
	struct rdma_link *l = c->link;

	if (!l || !l->comp || !comp_take(l))
		return false;
	if (ibv_req_notify_cq(l->cq, 0)) {
		comp_give(l);
		return false;
	}
	c->rx_line_armed = true;
	/* Fence: the CQ is armed before we look at our tail. A tail that
	 * lands after this look completes its immediate after the arm, and
	 * the device raises the event; one that landed before, we see. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return true;
}

static int rchan_bell_fd(const struct shim_chan *ch)
{
	const struct rdma_conn *c = shim_rdma_conn_of(ch);

	return c->link && c->link->comp ? c->link->comp->fd : -1;
}

static bool rchan_rx_arm(struct shim_chan *ch, unsigned how)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);
	uint64_t seq;

	/* Broken, the line may still be watched (bell_fd) while the peer's
	 * RESUME is on its way: the event that woke the last owner, left
	 * there (comp_give), would wake the wait again and again. */
	if (c->broken) {
		if (how == SHIM_BELL_LINE && c->link)
			comp_clean(c->link);
		return true; /* see rchan_tx_arm() */
	}
	if (how == SHIM_BELL_LINE && line_arm(c)) {
		/* Credits need not go with this arm: they lag ours by less
		 * than an eighth of the ring and a quarter of our receives
		 * (rx_should_bell), so a producer never waits on us while we
		 * sleep with an empty ring. Our exact head does, when it moved
		 * since our last tail or arm carried it (a request answered
		 * carries it already): the producer's tx_unread rests on it
		 * for a consumer killed in its sleep (PROTOCOL.md, RDMA 5). */
		bool lags = shim_rdma_tail_word_lags(c);

		if (c->rx_head != __atomic_load_n(&c->rx_head_sent, __ATOMIC_RELAXED)) {
			if (!flush_head(c, lags))
				return false;
		} else if (lags) {
			/* Armed, our lazy tail word goes (rdma_wire.h): the
			 * peer's stall watch reads it. */
			publish_tail_word(c);
		}
		return !rchan_readable(ch) && !__atomic_load_n(&c->rx_closed, __ATOMIC_ACQUIRE);
	}
	struct wr_chain wrs = { .n = 0 };

	/* Credits first: a producer waiting for room must not wait on us. */
	chain_credits(c, &wrs, false);
	if (shim_rdma_tail_word_lags(c))
		shim_rdma_chain_tail_word(c, &wrs);
	shim_rdma_chain_word(c, &wrs, CTL_OFF(tx_consumer_armed), 1, true);
	seq = shim_rdma_chain_post(c, &wrs);
	if (seq && wrs.late_src)
		shim_rdma_tail_word_sent(c, &wrs);
	/* Fence: the arm is in the producer's memory before we re-check the
	 * tail; pairs with the wait in tx_bell_due(). */
	if (!seq || !shim_rdma_wait_seq(c, seq))
		return false;
	return !rchan_readable(ch) && !__atomic_load_n(&c->rx_closed, __ATOMIC_ACQUIRE);
}

static bool rchan_rx_disarm(struct shim_chan *ch)
{
	struct rdma_conn *c = shim_rdma_conn_of(ch);

	if (c->rx_line_armed) {
		c->rx_line_armed = false;
		comp_give(c->link);
		return true; /* nothing was asked of the producer */
	}
	shim_rdma_post_word(c, CTL_OFF(tx_consumer_armed), 0, false);
	return true; /* see rchan_tx_disarm() */
}

static void rchan_abortive(struct shim_chan *ch)
{
	shim_rdma_conn_of(ch)->abortive = true;
}

static void rchan_destroy(struct shim_chan *ch)
{
	shim_rdma_teardown(shim_rdma_conn_of(ch));
}


void shim_rdma_chan_init(struct rdma_conn *c)
{
	c->chan.ops = &shim_rdma_ops;
	c->chan.priv = c;
	c->ctl = c->slot.addr;
	c->rx_data = (uint8_t *)c->slot.addr + SHIM_RDMA_CTL_BYTES;
	c->tx_shadow = c->rx_data + c->ring_bytes;
	c->mask = c->ring_bytes - 1;
	shim_rdma_link_set_handlers(&shim_rdma_link_handlers);
}

static uint32_t rchan_qpn(const struct shim_chan *ch)
{
	const struct rdma_conn *c = shim_rdma_conn_of(ch);

	return c->link && c->link->qp ? c->link->qp->qp_num : 0;
}

const struct shim_transport_ops shim_rdma_ops = {
	.qpn = rchan_qpn,
	.kind = SHIM_TRANSPORT_RDMA,
	.send = rchan_send,
	.recv = rchan_recv,
	.readable = rchan_readable,
	.writable = rchan_writable,
	.space_lowat = rchan_space_lowat,
	.rx_eof = rchan_rx_eof,
	.peer_rx_gone = rchan_peer_rx_gone,
	.tx_bell = rchan_tx_bell,
	.rx_should_bell = rchan_rx_should_bell,
	.rx_arm = rchan_rx_arm,
	.rx_disarm = rchan_rx_disarm,
	.bell_fd = rchan_bell_fd,
	.tx_arm = rchan_tx_arm,
	.tx_disarm = rchan_tx_disarm,
	.shutdown_tx = rchan_shutdown_tx,
	.destroy = rchan_destroy,
	.abortive = rchan_abortive,
	.arm_grace = true,
	.tx_unread = shim_rdma_tx_unread,
	.peer_ended_clean = rchan_peer_ended_clean,
	.violated = shim_rdma_violated,
	.failed = shim_rdma_failed,
	.fail = shim_rdma_fail,
	.rx_offset = shim_rdma_rx_offset,
	.drop_unread = shim_rdma_drop_unread,
	.tx_offset = shim_rdma_tx_offset,
	.tx_unreceived = shim_rdma_tx_unreceived,
};
