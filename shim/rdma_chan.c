/*
 * The RDMA transport's channel operations (transport.h contracts).
 *
 * Each direction is a byte ring in the consumer's registered memory. The
 * producer copies the application's bytes into a staging copy of the ring
 * (same offsets), RDMA-WRITEs them into the consumer's ring and then WRITEs
 * the new tail into the consumer's control page. The consumer reads its
 * local ring and WRITEs its head back into the producer's control page
 * (credits), at least every eighth of the ring and whenever the producer
 * asked for space.
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
 * That is why tx_should_bell waits for a completion before it bells: a bell
 * must never overtake the bytes it announces. It skips the wait when the
 * consumer is not armed at all (the common, busy-polling case); the race
 * that leaves is closed by the consumer's short first sleep (arm_grace).
 *
 * Selective signaling: data WRITEs go unsignaled; the tail WRITE of a send
 * and every control WRITE we wait for are signaled, plus every 16th WR so the
 * send queue can always be reaped. All calls run under the sock's lock except
 * readable/writable/rx_eof/peer_rx_gone/space_lowat (busy polling in io.c),
 * which only read memory.
 */
#include "rdma.h"
#include "ring.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <endian.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "trace.h"

#define SQ_SIGNAL_EVERY 16
#define SQ_LIMIT 48 /* outstanding WRs kept below this (SQ depth 64) */
#define RECV_WR_ID UINT64_MAX
/* Longest wait for a completion the peer's HCA owes us: an ACK is a round
 * trip; far longer means the peer or the path is gone. */
#define COMPLETION_WAIT_NS (10000ull * 1000 * 1000)

static struct rdma_conn *conn_of(const struct shim_chan *ch)
{
	return (struct rdma_conn *)ch;
}

static unsigned long long mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void mark_broken(struct rdma_conn *c, const char *why, int detail)
{
	if (c->broken)
		return;
	/* Relaxed: rdma_failed() polls it without the lock; what follows a
	 * failure is read under the lock. */
	__atomic_store_n(&c->broken, true, __ATOMIC_RELAXED);
	SHIM_TRACE(SHIM_TRACE_WARN, "rdma.broken", c->fd, c->sock ? &c->sock->tuple : NULL, SHIM_REASON_INTERNAL_ERROR,
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

static void take_switch_at(struct rdma_conn *c, const struct ibv_wc *wc)
{
	struct shim_rdma_switch_at at;

	memcpy(&at, c->ctl->recv_buf, sizeof(at));
	if (wc->byte_len < sizeof(at) || be32toh(at.magic) != SHIM_RDMA_MAGIC || at.type != SHIM_RDMA_SWITCH_AT) {
		mark_broken(c, "bad_switch_at", (int)wc->byte_len);
		return;
	}
	c->peer_no_switch = be16toh(at.flags) & SHIM_RDMA_NO_SWITCH;
	c->peer_at = be64toh(at.offset);
	c->peer_at_known = true;
}

/* The ring's tail and "closed" from the producer's immediate. The HCA
 * writes the completion only after the data is placed. */
static void take_imm(struct rdma_conn *c, const struct ibv_wc *wc)
{
	uint32_t imm = be32toh(wc->imm_data);

	/* Release: pairs with the acquire loads in rdma_readable() and
	 * rdma_rx_eof(), which may run on threads that did not reap. */
	__atomic_store_n(&c->rx_tail, c->rx_tail + (imm & SHIM_RDMA_IMM_BYTES), __ATOMIC_RELEASE);
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
					mark_broken(c, ibv_wc_status_str(wc[i].status), (int)wc[i].status);
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
					mark_broken(c, "post_recv", 0);
				continue;
			}
			if (wc[i].wr_id > c->completed)
				__atomic_store_n(&c->completed, wc[i].wr_id, __ATOMIC_RELAXED);
		}
	}
	if (n < 0)
		mark_broken(c, "poll_cq", n);
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
static void reap_try(struct rdma_conn *c)
{
	if (c->cq && pthread_spin_trylock(&c->cq_lock) == 0) {
		reap_locked(c);
		pthread_spin_unlock(&c->cq_lock);
	}
}

static bool drain_cm_events(struct rdma_conn *c);

static bool cm_disconnected(struct rdma_conn *c)
{
	if (drain_cm_events(c))
		c->peer_disconnected = true;
	return c->peer_disconnected;
}

/* Spins on the CQ until WR seq completed. Bounded: a peer that stops
 * answering breaks the channel instead of hanging the program. */
static bool wait_seq(struct rdma_conn *c, uint64_t seq)
{
	unsigned long long deadline = 0;
	unsigned spins = 0;

	while (c->completed < seq && !c->broken) {
		shim_rdma_reap(c);
		if (c->completed >= seq)
			break;
		if (++spins % 256 == 0) {
			unsigned long long now = mono_ns();

			if (!deadline)
				deadline = now + COMPLETION_WAIT_NS;
			else if (now > deadline)
				mark_broken(c, "completion_timeout", (int)(seq - c->completed));
			/* Soft-RoCE completes in kernel context: on a small VM a
			 * tight spin would hold the CPU the ACK needs. */
			sched_yield();
			/* A peer that closed sends a DREQ before it destroys its
			 * QP: notice it instead of waiting for retries to run out. */
			if (c->done && cm_disconnected(c))
				mark_broken(c, "disconnected", 0);
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
	return wait_seq(c, c->last_signaled) && c->posted - c->completed + n < SQ_LIMIT;
}

/*
 * WRITEs are built into a chain and posted with one ibv_post_send: a send's
 * data and its tail cost one doorbell to the HCA (on Soft-RoCE one system
 * call) instead of one each.
 */
#define CHAIN_MAX 4

struct wr_chain {
	struct ibv_send_wr wr[CHAIN_MAX];
	struct ibv_sge sge[CHAIN_MAX];
	unsigned n;
};

/* Appends one RDMA WRITE of len bytes at local to the peer's remote_off.
 * Precondition: fewer than CHAIN_MAX WRs in the chain. */
static void chain_write(struct rdma_conn *c, struct wr_chain *ch, const void *local, size_t len, uint64_t remote_off,
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
static void chain_word(struct rdma_conn *c, struct wr_chain *ch, size_t ctl_off, uint64_t value, bool signal)
{
	/* Inline copies the value at post time; without inline the source
	 * must be registered and stay put until the WR is done: one scratch
	 * word per send-queue slot (SQ_LIMIT < SHIM_RDMA_SCRATCH_WORDS). */
	uint64_t *src = &c->ctl->scratch[(c->posted + ch->n + 1) % SHIM_RDMA_SCRATCH_WORDS];

	*src = value;
	chain_write(c, ch, src, sizeof(value), ctl_off, signal);
}

/* Makes the chain's last WRITE carry imm (signaled: tx_should_bell waits for
 * it). Precondition: at least one WR in the chain. */
static void chain_imm(struct wr_chain *ch, uint32_t imm)
{
	struct ibv_send_wr *wr = &ch->wr[ch->n - 1];

	wr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr->imm_data = htobe32(imm);
	wr->send_flags |= IBV_SEND_SIGNALED;
}

/* Posts the chain; returns the last WR's sequence number, or 0 on failure
 * (nothing of the chain was posted, or the channel is broken). */
static uint64_t chain_post(struct rdma_conn *c, struct wr_chain *ch)
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
		mark_broken(c, "post_send", rc);
		return 0;
	}
	c->posted += ch->n;
	for (unsigned i = 0; i < ch->n; i++)
		if (ch->wr[i].send_flags & IBV_SEND_SIGNALED)
			c->last_signaled = ch->wr[i].wr_id;
	return c->posted;
}

static uint64_t post_word(struct rdma_conn *c, size_t ctl_off, uint64_t value, bool signal)
{
	struct wr_chain ch = { .n = 0 };

	chain_word(c, &ch, ctl_off, value, signal);
	return chain_post(c, &ch);
}

#define CTL_OFF(field) offsetof(struct shim_rdma_ctl, field)

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
		mark_broken(c, "post_send", rc);
		return -rc;
	}
	c->posted = c->last_signaled = wr.wr_id;
	c->peer_recvs_used++;
	/* The completion is the peer's ACK: its receive is done (and its CQE
	 * written) before our SWITCH frame can go on TCP. */
	return wait_seq(c, wr.wr_id) ? 0 : -EIO;
}

/* ---- producer side ---- */

static uint64_t load_acq(const uint64_t *p)
{
	/* Acquire: pairs with the in-order placement of the peer's WRITEs
	 * (data before tail, tail before closed; see the top of the file). */
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Whether n more immediates fit the receives the peer posted, with one
 * kept back for CLOSED (keep_closed). */
static bool imm_room(const struct rdma_conn *c, unsigned n, bool keep_closed)
{
	uint64_t told = load_acq(&c->ctl->tx_peer_recvs);
	uint64_t posted = told ? told : SHIM_RDMA_RQ_DEPTH;

	return c->peer_recvs_used + n + (keep_closed ? 1 : 0) <= posted;
}

static size_t rdma_writable(const struct shim_chan *ch)
{
	const struct rdma_conn *c = conn_of(ch);

	if (c->broken || !imm_room(c, 1, true))
		return 0;
	return c->ring_bytes - (size_t)(c->tx_tail - load_acq(&c->ctl->tx_head));
}

static size_t rdma_send(struct shim_chan *ch, const struct iovec *iov, int iovcnt, size_t skip)
{
	struct rdma_conn *c = conn_of(ch);
	struct wr_chain wrs = { .n = 0 };
	size_t space, done = 0;
	uint64_t tail = c->tx_tail;

	shim_rdma_reap(c);
	space = rdma_writable(ch);
	done = shim_ring_copy_iov_in(c->tx_shadow, c->mask, tail, iov, iovcnt, skip, space);
	if (!done)
		return 0;
	/* The staging copy has the same offsets as the peer's ring: at most
	 * two WRITEs (the wrap), the last one carrying the byte count as its
	 * immediate, which is the tail's news for the consumer. */
	size_t off = (size_t)(tail & c->mask), first = c->ring_bytes - off < done ? c->ring_bytes - off : done;

	chain_write(c, &wrs, c->tx_shadow + off, first, SHIM_RDMA_CTL_BYTES + off, false);
	if (done > first)
		chain_write(c, &wrs, c->tx_shadow, done - first, SHIM_RDMA_CTL_BYTES, false);
	/* Testing only (RDMASHIM_TEST_FAIL_RDMA_KB): the path dies here, as a
	 * pulled cable would leave it: the program was told these bytes went
	 * out, and the peer never learns of them (no immediate announces them). */
	bool die = shim_cfg.test_fail_rdma_kb && tail + done >= (uint64_t)shim_cfg.test_fail_rdma_kb * 1024u;

	if (!die)
		chain_imm(&wrs, (uint32_t)done);
	if (!chain_post(c, &wrs)) {
		/* Nothing was promised to the program yet: report no progress;
		 * the broken channel shows as EPIPE (peer_rx_gone). */
		return 0;
	}
	c->tx_tail = tail + done;
	c->peer_recvs_used += !die;
	if (die) {
		shim_rdma_qp_error(c);
		mark_broken(c, "injected", (int)shim_cfg.test_fail_rdma_kb);
	}
	return done;
}

static bool rdma_tx_should_bell(struct shim_chan *ch)
{
	struct rdma_conn *c = conn_of(ch);

	/*
	 * A consumer that is not armed yet is spinning on its ring and needs
	 * no bell: return at once instead of waiting a round trip for our
	 * tail's completion. The one race left is a consumer whose arm lands
	 * after this look while our tail is still in flight: its re-check may
	 * miss the tail, and nobody rings. transport.h's arm_grace covers it:
	 * the first sleep after an arm lasts a millisecond, far longer than a
	 * tail's flight, so the consumer looks again and finds it.
	 */
	if (!load_acq(&c->ctl->tx_consumer_armed))
		return false;
	/* Fence: our tail (or closed) WRITE is in the consumer's memory before
	 * we read the armed word again; pairs with the consumer's wait for its
	 * arm WRITE in rdma_rx_arm(): a bell never overtakes its bytes. */
	if (!wait_seq(c, c->last_signaled))
		return false;
	if (!load_acq(&c->ctl->tx_consumer_armed))
		return false;
	/* Exchange: one armed wait gets one bell, not one per send. */
	return __atomic_exchange_n(&c->ctl->tx_consumer_armed, 0, __ATOMIC_ACQ_REL) != 0;
}

static size_t rdma_space_lowat(const struct shim_chan *ch)
{
	return conn_of(ch)->ring_bytes / 4;
}

static bool rdma_peer_rx_gone(const struct shim_chan *ch)
{
	/* A broken channel is not a closed peer: the stream resumes on TCP. */
	return load_acq(&conn_of(ch)->ctl->tx_consumer_closed) != 0;
}

static bool rdma_tx_arm(struct shim_chan *ch)
{
	struct rdma_conn *c = conn_of(ch);
	uint64_t seq;

	/* Broken: what wakes us now is the peer's RESUME (or EOF) on TCP. */
	if (c->broken)
		return true;
	seq = post_word(c, CTL_OFF(rx_wants_space), 1, true);

	/* Fence: our wants_space is in the consumer's memory before we look at
	 * head again; pairs with the wait for the head WRITE in
	 * rdma_rx_should_bell(). */
	if (!seq || !wait_seq(c, seq))
		return false;
	return rdma_writable(ch) < rdma_space_lowat(ch) && !rdma_peer_rx_gone(ch);
}

/* We can not tell whether the consumer took the arm (its word lives over
 * there): clear it and say "not taken". A bell that was on its way anyway
 * is drained as a stray one, which the frame layer allows. */
static bool rdma_tx_disarm(struct shim_chan *ch)
{
	struct rdma_conn *c = conn_of(ch);

	post_word(c, CTL_OFF(rx_wants_space), 0, false);
	return true;
}

/* A zero-length WRITE WITH IMMEDIATE carrying CLOSED: after the last data on
 * the same QP, so its completion comes after theirs; signaled so that
 * tx_should_bell waits for it before looking at armed. */
static uint64_t post_closed(struct rdma_conn *c)
{
	struct wr_chain wrs = { .n = 0 };
	uint64_t seq;

	if (c->closed_sent || !imm_room(c, 1, false))
		return 0;
	chain_write(c, &wrs, NULL, 0, 0, true);
	wrs.wr[0].num_sge = 0;
	chain_imm(&wrs, SHIM_RDMA_IMM_CLOSED);
	seq = chain_post(c, &wrs);
	if (seq) {
		c->closed_sent = true;
		c->peer_recvs_used++;
	}
	return seq;
}

static void rdma_shutdown_tx(struct shim_chan *ch)
{
	post_closed(conn_of(ch));
}

/* ---- consumer side ---- */

static size_t rdma_readable(const struct shim_chan *ch)
{
	/* Busy polling calls this without the sock's lock: the tail comes
	 * from our CQ, which reap_try() polls under cq_lock. */
	struct rdma_conn *c = (struct rdma_conn *)conn_of(ch);

	reap_try(c);
	return (size_t)(__atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE) - c->rx_head);
}

static size_t rdma_recv(struct shim_chan *ch, const struct iovec *iov, int iovcnt, bool peek)
{
	struct rdma_conn *c = conn_of(ch);
	size_t avail = rdma_readable(ch), done = 0;

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
	return done;
}

static bool rdma_rx_eof(const struct shim_chan *ch)
{
	const struct rdma_conn *c = conn_of(ch);

	/* CLOSED completes after the last data (same QP, completions in
	 * order): acquire it first. A broken channel is no EOF: the rest
	 * comes on TCP (failover.c). */
	return __atomic_load_n(&c->rx_closed, __ATOMIC_ACQUIRE) && rdma_readable(ch) == 0;
}

/* Appends our credits for the producer: the head (ring space) and how many
 * receives we posted (room for its immediates). */
static void chain_credits(struct rdma_conn *c, struct wr_chain *wrs, bool signal)
{
	uint64_t posted = __atomic_load_n(&c->recv_posted, __ATOMIC_RELAXED);

	chain_word(c, wrs, CTL_OFF(tx_head), c->rx_head, false);
	chain_word(c, wrs, CTL_OFF(tx_peer_recvs), posted, signal);
	c->rx_head_sent = c->rx_head;
	c->recv_reported = posted;
}

/* Sends our credits to the producer and waits until they are there. */
static bool flush_head(struct rdma_conn *c)
{
	struct wr_chain wrs = { .n = 0 };
	uint64_t seq;

	chain_credits(c, &wrs, true);
	seq = chain_post(c, &wrs);
	return seq && wait_seq(c, seq);
}

static bool rdma_rx_should_bell(struct shim_chan *ch)
{
	struct rdma_conn *c = conn_of(ch);
	bool wants = load_acq(&c->ctl->rx_wants_space) != 0;

	/*
	 * Credits go back at least every eighth of the ring and every quarter
	 * of our receives, so the producer's view lags ours by less than
	 * that: with our ring empty it sees more than its low-water mark free
	 * and never waits on us while we sleep.
	 */
	if (!wants && c->rx_head - c->rx_head_sent < c->ring_bytes / 8 &&
	    __atomic_load_n(&c->recv_posted, __ATOMIC_RELAXED) - c->recv_reported < SHIM_RDMA_RQ_DEPTH / 4)
		return false;
	/* Fence: the head is in the producer's memory before we read
	 * wants_space (again); pairs with the wait in rdma_tx_arm(). */
	if (!flush_head(c))
		return false;
	if (!load_acq(&c->ctl->rx_wants_space))
		return false;
	/* Wake it only for room worth writing into; a later read looks again. */
	if (c->ring_bytes - rdma_readable(ch) < rdma_space_lowat(ch))
		return false;
	return __atomic_exchange_n(&c->ctl->rx_wants_space, 0, __ATOMIC_ACQ_REL) != 0;
}

static bool rdma_rx_arm(struct shim_chan *ch)
{
	struct rdma_conn *c = conn_of(ch);
	uint64_t seq;

	if (c->broken)
		return true; /* see rdma_tx_arm() */
	struct wr_chain wrs = { .n = 0 };

	/* Credits first: a producer waiting for room must not wait on us. */
	chain_credits(c, &wrs, false);
	chain_word(c, &wrs, CTL_OFF(tx_consumer_armed), 1, true);
	seq = chain_post(c, &wrs);
	/* Fence: the arm is in the producer's memory before we re-check the
	 * tail; pairs with the wait in rdma_tx_should_bell(). */
	if (!seq || !wait_seq(c, seq))
		return false;
	return !rdma_readable(ch) && !__atomic_load_n(&c->rx_closed, __ATOMIC_ACQUIRE);
}

static bool rdma_rx_disarm(struct shim_chan *ch)
{
	struct rdma_conn *c = conn_of(ch);

	post_word(c, CTL_OFF(tx_consumer_armed), 0, false);
	return true; /* see rdma_tx_disarm() */
}

static void rdma_shutdown_rx(struct shim_chan *ch)
{
	struct rdma_conn *c = conn_of(ch);

	post_word(c, CTL_OFF(tx_consumer_closed), 1, true);
}

/* ---- failure ---- */

static bool rdma_failed(const struct shim_chan *ch)
{
	return __atomic_load_n(&conn_of(ch)->broken, __ATOMIC_RELAXED);
}

static void rdma_fail(struct shim_chan *ch)
{
	struct rdma_conn *c = conn_of(ch);

	if (c->stopped)
		return;
	c->stopped = true;
	mark_broken(c, "stopped", 0);
	/* ERR first: from here on nothing the peer posted lands in our ring,
	 * so the offset our RESUME announces is final. The DREQ then tells a
	 * peer spinning on a completion at once rather than after its retries. */
	shim_rdma_qp_error(c);
	if (c->id)
		rdma_disconnect(c->id);
}

static uint64_t rdma_rx_offset(const struct shim_chan *ch)
{
	struct rdma_conn *c = (struct rdma_conn *)conn_of(ch);

	/* After ERR: what completed before it is in the CQ still. */
	shim_rdma_reap(c);
	return __atomic_load_n(&c->rx_tail, __ATOMIC_ACQUIRE);
}

static int rdma_tx_unreceived(const struct shim_chan *ch, uint64_t from, struct iovec out[2])
{
	const struct rdma_conn *c = conn_of(ch);
	size_t n, off, first;

	/* The staging copy holds the last ring_bytes bytes we sent, and the
	 * peer's offset is at least the head it credited us, so a true offset
	 * is always inside. */
	if (from > c->tx_tail || c->tx_tail - from > c->ring_bytes)
		return -ERANGE;
	n = (size_t)(c->tx_tail - from);
	off = (size_t)(from & c->mask);
	first = c->ring_bytes - off < n ? c->ring_bytes - off : n;
	out[0] = (struct iovec){ .iov_base = c->tx_shadow + off, .iov_len = first };
	out[1] = (struct iovec){ .iov_base = c->tx_shadow, .iov_len = n - first };
	return n > first ? 2 : 1;
}

static void rdma_destroy(struct shim_chan *ch)
{
	shim_rdma_teardown(conn_of(ch));
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
static bool drain_cm_events(struct rdma_conn *c)
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

/* How long close waits for its "closed" WRITEs: a courtesy (TCP's FIN tells
 * the peer too), so a short bound; a peer that is gone must not stall a
 * single-threaded server once per connection. */
#define TEARDOWN_WAIT_NS (20ull * 1000 * 1000)

void shim_rdma_teardown(struct rdma_conn *c)
{
	bool peer_gone = drain_cm_events(c) || c->peer_disconnected;

	if (c->qp && c->remote_addr && c->installed && !c->broken && !peer_gone) {
		/* The peer sees both directions closed, as with shm. */
		post_closed(c);
		uint64_t seq = post_word(c, CTL_OFF(tx_consumer_closed), 1, true);
		unsigned long long end = mono_ns() + TEARDOWN_WAIT_NS;

		while (seq && c->completed < seq && !c->broken && mono_ns() < end) {
			shim_rdma_reap(c);
			sched_yield();
		}
	}
	c->torn_down = true;
	if (c->id && c->installed && !peer_gone)
		rdma_disconnect(c->id);
	shim_rdma_qp_error(c);
	shim_rdma_reap(c);
	if (c->qp)
		ibv_destroy_qp(c->qp);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	drain_cm_events(c);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->listen_id)
		rdma_destroy_id(c->listen_id);
	if (c->ec)
		rdma_destroy_event_channel(c->ec);
	shim_mrpool_put(&c->slot);
	if (c->cq_lock_ready)
		pthread_spin_destroy(&c->cq_lock);
	free(c);
}

void shim_rdma_chan_init(struct rdma_conn *c)
{
	c->chan.ops = &shim_rdma_ops;
	c->chan.priv = c;
	c->ctl = c->slot.addr;
	c->rx_data = (uint8_t *)c->slot.addr + SHIM_RDMA_CTL_BYTES;
	c->tx_shadow = c->rx_data + c->ring_bytes;
	c->mask = c->ring_bytes - 1;
	if (!c->cq_lock_ready) {
		pthread_spin_init(&c->cq_lock, PTHREAD_PROCESS_PRIVATE);
		c->cq_lock_ready = true;
	}
}

const struct shim_transport_ops shim_rdma_ops = {
	.kind = SHIM_TRANSPORT_RDMA,
	.send = rdma_send,
	.recv = rdma_recv,
	.readable = rdma_readable,
	.writable = rdma_writable,
	.space_lowat = rdma_space_lowat,
	.rx_eof = rdma_rx_eof,
	.peer_rx_gone = rdma_peer_rx_gone,
	.tx_should_bell = rdma_tx_should_bell,
	.rx_should_bell = rdma_rx_should_bell,
	.rx_arm = rdma_rx_arm,
	.rx_disarm = rdma_rx_disarm,
	.tx_arm = rdma_tx_arm,
	.tx_disarm = rdma_tx_disarm,
	.shutdown_tx = rdma_shutdown_tx,
	.shutdown_rx = rdma_shutdown_rx,
	.destroy = rdma_destroy,
	.arm_grace = true,
	.failed = rdma_failed,
	.fail = rdma_fail,
	.rx_offset = rdma_rx_offset,
	.tx_unreceived = rdma_tx_unreceived,
};
