/*
 * Links: one RC QP per pair of processes, shared by their connections; see
 * rdma_link.h and shim/PROTOCOL.md, "Links". The object, its places,
 * reaping and posting; which links a process keeps is rdma_link_table.c,
 * the OFFERs a link keeps rdma_link_offers.c.
 */
#include "rdma_link.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include <endian.h>
#include <rdma/rdma_cma.h>

#include "config.h"
#include "faults.h"
#include "rdma.h"
#include "rdma_link_stat.h"
#include "real.h"
#include "self.h"
#include "stats.h"
#include "trace.h"

#define RECV_FLAG (1ull << 63)
#define SQ_SIGNAL_EVERY 16
/* Outstanding WRs kept below this; a send cell is reused only after its WR
 * completed, since at most SQ_LIMIT are outstanding at any time. */
#define SQ_LIMIT (SHIM_LINK_SQ_DEPTH - 2 * CHAIN_MAX)
#define CQ_SPARE 16
#define WANT_INLINE 64
/* Longest wait for a completion the peer's HCA owes us: an ACK is a round
 * trip; far longer means the peer or the path is gone. */
#define COMPLETION_WAIT_NS (10000ull * 1000 * 1000)

static unsigned next_num;
static const struct rdma_link_handlers *handlers;

void shim_rdma_link_set_handlers(const struct rdma_link_handlers *h)
{
	__atomic_store_n(&handlers, h, __ATOMIC_RELEASE);
}

static const struct rdma_link_handlers *hs(void)
{
	return __atomic_load_n(&handlers, __ATOMIC_ACQUIRE);
}

static uint8_t *recv_cell(struct rdma_link *l, unsigned i)
{
	return l->cells + (size_t)i * SHIM_LINK_CELL;
}

static uint8_t *send_cell(struct rdma_link *l, uint64_t seq)
{
	return l->cells + (size_t)(l->rq_depth + seq % SHIM_LINK_SQ_DEPTH) * SHIM_LINK_CELL;
}

void shim_rdma_link_trace(const struct rdma_link *l, int level, const char *event, const char *why)
{
	SHIM_TRACE(level, "rdma.link", -1, NULL, SHIM_REASON_NONE,
		   "\"state\":\"%s\",\"link\":%u,\"conns\":%u,\"cap\":%u,\"client\":%s,\"why\":\"%s\"", event,
		   l->num, l->live, l->max_conns, l->client ? "true" : "false", why ? why : "");
}

/* ---- making and freeing ---- */

/* Connections one link of this device carries: the configured ceiling, or
 * as many as the device's largest RQ and CQ hold receives for (the CQ also
 * takes the send queue's completions). 0: not even one. */
static unsigned link_conn_cap(struct ibv_context *verbs)
{
	struct ibv_device_attr a;
	unsigned cap = shim_cfg.rdma_link_conns, by_wr, by_cqe;

	if (cap == 0 || cap > SHIM_LINK_MAX_CONNS)
		cap = SHIM_CFG_LINK_CONNS_DEFAULT; /* the configuration was not read */
	if (ibv_query_device(verbs, &a))
		return cap < 32 ? cap : 32; /* what every RoCE device we know holds */
	by_wr = a.max_qp_wr > 0 ? (unsigned)a.max_qp_wr / SHIM_LINK_RECVS_PER_CONN : 0;
	by_cqe = a.max_cqe > SHIM_LINK_SQ_DEPTH + CQ_SPARE
			 ? (unsigned)(a.max_cqe - SHIM_LINK_SQ_DEPTH - CQ_SPARE) / SHIM_LINK_RECVS_PER_CONN
			 : 0;
	if (by_wr < cap)
		cap = by_wr;
	if (by_cqe < cap)
		cap = by_cqe;
	return cap;
}

int shim_rdma_link_make(struct rdma_cm_id *id, struct rdma_event_channel *ec, struct ibv_pd *pd, bool client,
			const struct shim_endpoint *peer, struct rdma_link **out)
{
	unsigned max_conns = link_conn_cap(id->verbs);
	size_t cells_bytes;
	struct ibv_qp_init_attr init;
	struct rdma_link *l;

	if (max_conns == 0)
		return -ENOSPC;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->max_conns = max_conns;
	l->rq_depth = max_conns * SHIM_LINK_RECVS_PER_CONN;
	cells_bytes = (size_t)(l->rq_depth + SHIM_LINK_SQ_DEPTH) * SHIM_LINK_CELL;
	pthread_mutex_init(&l->lock, NULL);
	pthread_mutex_init(&l->post_lock, NULL);
	l->pid = shim_self_pid();
	l->refs = 1;
	l->busy_ns = shim_now_ns();
	l->id = id;
	l->ec = ec;
	l->pd = pd;
	l->client = client;
	l->peer = *peer;
	if (!client)
		l->peer.port = 0;
	l->num = __atomic_add_fetch(&next_num, 1, __ATOMIC_RELAXED);
	l->cells = aligned_alloc(4096, cells_bytes);
	if (l->cells)
		l->cells_mr = ibv_reg_mr(pd, l->cells, cells_bytes, IBV_ACCESS_LOCAL_WRITE);
	if (l->cells_mr) {
		/* Without a channel (a device or limit that refuses one) the
		 * link works all the same: its sleepers are belled on TCP. */
		l->comp = ibv_create_comp_channel(id->verbs);
		if (l->comp && REAL(fcntl)(l->comp->fd, F_SETFL, REAL(fcntl)(l->comp->fd, F_GETFL) | O_NONBLOCK) < 0) {
			ibv_destroy_comp_channel(l->comp);
			l->comp = NULL;
		}
		l->cq = ibv_create_cq(id->verbs, (int)(SHIM_LINK_SQ_DEPTH + l->rq_depth + CQ_SPARE), NULL, l->comp, 0);
	}
	if (l->cq) {
		memset(&init, 0, sizeof(init));
		init.send_cq = init.recv_cq = l->cq;
		init.qp_type = IBV_QPT_RC;
		init.sq_sig_all = 0; /* selective signaling: see shim_rdma_link_post */
		init.cap.max_send_wr = SHIM_LINK_SQ_DEPTH;
		init.cap.max_recv_wr = l->rq_depth;
		init.cap.max_send_sge = init.cap.max_recv_sge = 1;
		init.cap.max_inline_data = WANT_INLINE;
		l->qp = ibv_create_qp(pd, &init);
		if (!l->qp) {
			/* A device without inline data: words and messages from the cells. */
			init.cap.max_inline_data = 0;
			l->qp = ibv_create_qp(pd, &init);
		}
		l->max_inline = init.cap.max_inline_data;
	}
	if (!l->qp) {
		int rc = errno ? -errno : -ENOMEM;

		shim_rdma_link_put(l);
		return rc;
	}
	*out = l;
	return 0;
}

int shim_rdma_link_post_recvs(struct rdma_link *l)
{
	for (unsigned i = 0; i < l->rq_depth; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)recv_cell(l, i), .length = SHIM_LINK_CELL,
				       .lkey = l->cells_mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = RECV_FLAG | i, .sg_list = &sge, .num_sge = 1 }, *bad;
		int rc = ibv_post_recv(l->qp, &wr, &bad);

		if (rc)
			return -rc;
	}
	return 0;
}

void shim_rdma_link_comp_drain(struct rdma_link *l)
{
	struct ibv_cq *cq;
	void *ctx;

	if (!l->comp)
		return;
	/* Nonblocking fd: -1 with EAGAIN once the channel is empty. Each
	 * event is acked at once, so a destroy never waits on one. */
	while (ibv_get_cq_event(l->comp, &cq, &ctx) == 0)
		ibv_ack_cq_events(cq, 1);
}

static void free_place_memory(struct rdma_link_place *p)
{
	if (p->mr)
		ibv_dereg_mr(p->mr);
	p->mr = NULL;
	if (p->slot.chunk)
		shim_mrpool_put(&p->slot);
	memset(p, 0, sizeof(*p));
}

static void destroy(struct rdma_link *l)
{
	struct rdma_cm_event *ev;

	shim_rdma_link_stat_end(l);
	if (l->qp) {
		struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

		ibv_modify_qp(l->qp, &attr, IBV_QP_STATE);
		ibv_destroy_qp(l->qp);
	}
	if (l->cq) {
		/* ibv_destroy_cq waits for every event it gave to be acked:
		 * take and ack what the channel still holds. */
		shim_rdma_link_comp_drain(l);
		ibv_destroy_cq(l->cq);
	}
	if (l->comp)
		ibv_destroy_comp_channel(l->comp);
	for (unsigned i = 0; i < l->n_places; i++)
		if (l->places[i].used && l->places[i].local_done)
			free_place_memory(&l->places[i]);
	free(l->places);
	free(l->fault_held);
	if (l->cells_mr)
		ibv_dereg_mr(l->cells_mr);
	free(l->cells);
	if (l->cm_owned) {
		if (!l->peer_disconnected && !l->disconnect_sent)
			rdma_disconnect(l->id);
		/* rdma_destroy_id waits for every event of the id to be acked. */
		while (rdma_get_cm_event(l->ec, &ev) == 0)
			rdma_ack_cm_event(ev);
		rdma_destroy_id(l->id);
		rdma_destroy_event_channel(l->ec);
	}
	pthread_mutex_destroy(&l->lock);
	pthread_mutex_destroy(&l->post_lock);
	free(l);
}

void shim_rdma_link_get(struct rdma_link *l)
{
	__atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
}

void shim_rdma_link_put(struct rdma_link *l)
{
	/* Acq_rel: the last one sees every other holder's writes. */
	if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	/* A link made by a forked parent is the parent's: touch nothing. */
	if (l->pid == shim_self_pid())
		destroy(l);
}

void shim_rdma_link_up(struct rdma_link *l)
{
	l->cm_owned = true;
}

/* ---- places ---- */

int shim_rdma_link_attach(struct rdma_link *l, struct rdma_conn *c)
{
	unsigned i;

	pthread_mutex_lock(&l->lock);
	if (l->live + l->held >= l->max_conns) {
		pthread_mutex_unlock(&l->lock);
		return -EBUSY;
	}
	for (i = 0; i < l->n_places && l->places[i].used; i++)
		;
	if (i == l->n_places) {
		unsigned cap = l->n_places ? l->n_places * 2 : 8;
		struct rdma_link_place *p = cap > SHIM_RDMA_IMM_ID ? NULL : realloc(l->places, cap * sizeof(*p));

		if (!p) {
			pthread_mutex_unlock(&l->lock);
			return -ENOMEM;
		}
		memset(p + l->n_places, 0, (cap - l->n_places) * sizeof(*p));
		l->places = p;
		l->n_places = cap;
	}
	l->places[i].used = true;
	l->places[i].conn = c;
	__atomic_add_fetch(&l->live, 1, __ATOMIC_RELAXED);
	shim_rdma_link_stat_conns_locked(l);
	shim_rdma_link_busy(l);
	pthread_mutex_unlock(&l->lock);
	shim_rdma_link_get(l);
	c->link = l;
	c->link_id = i;
	c->on_link = true;
	c->max_inline = l->max_inline;
	if (unlikely(__atomic_load_n(&shim_faults_armed, __ATOMIC_RELAXED) & (1u << SHIM_FAULT_LINK_QP_LOST)))
		c->fault_link_n = shim_fault_strike(SHIM_FAULT_LINK_QP_LOST);
	return 0;
}

void shim_rdma_link_release_to(struct rdma_link *l, uint32_t peer_id)
{
	struct shim_rdma_link_msg m = {
		.magic = htobe32(SHIM_RDMA_MAGIC),
		.version = SHIM_RDMA_VERSION,
		.type = SHIM_RDMA_LINK_RELEASE,
		.to_id = htobe32(peer_id),
	};

	shim_rdma_link_send(l, &m, sizeof(m));
}

void shim_rdma_link_leave(struct rdma_conn *c)
{
	struct rdma_link *l = c->link;
	bool told_peer = c->link_told_peer;

	if (!l)
		return;
	if (c->on_link) {
		struct rdma_link_place *p;
		bool free_now;

		pthread_mutex_lock(&l->lock);
		p = &l->places[c->link_id];
		p->conn = NULL;
		p->local_done = true;
		p->slot = c->slot;
		p->mr = c->mr;
		memset(&c->slot, 0, sizeof(c->slot));
		c->mr = NULL;
		/* The peer may WRITE into this memory until its RELEASE: it
		 * knows our rkey once it has our hello. */
		free_now = p->peer_released || shim_rdma_link_broken(l) || !told_peer;
		if (free_now)
			free_place_memory(p);
		else
			__atomic_add_fetch(&l->held, 1, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&l->live, 1, __ATOMIC_RELAXED);
		shim_rdma_link_stat_conns_locked(l);
		shim_rdma_link_busy(l);
		pthread_mutex_unlock(&l->lock);
		c->on_link = false;
		/* After our last WRITE for it, on the same QP: placed after them. */
		if (c->peer_id_known && !shim_rdma_link_broken(l))
			shim_rdma_link_release_to(l, c->peer_id);
	}
	c->link = NULL;
	shim_rdma_link_put(l);
}

/* ---- breaking ---- */

/* Precondition: l->lock held. */
static void break_locked(struct rdma_link *l, const char *why, int detail)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	const struct rdma_link_handlers *h = hs();

	if (shim_rdma_link_broken(l))
		return;
	__atomic_store_n(&l->broken, true, __ATOMIC_RELEASE);
	shim_rdma_link_trace(l, SHIM_TRACE_WARN, "down", why);
	shim_rdma_link_stat_broken_locked(l, why, detail);
	/* ERR: nothing more lands for any connection on it, so what each took
	 * until now (its rx_tail) is final for its failover's RESUME. */
	ibv_modify_qp(l->qp, &attr, IBV_QP_STATE);
	/* The peer's end learns now, by the DREQ, instead of by its own
	 * completion wait's bound (COMPLETION_WAIT_NS): a peer that waits
	 * for a completion there reads no RESUME of ours on TCP meanwhile. */
	if (l->cm_owned && l->pid == shim_self_pid() && !l->peer_disconnected && !l->disconnect_sent) {
		l->disconnect_sent = true;
		rdma_disconnect(l->id);
	}
	for (unsigned i = 0; i < l->n_places; i++)
		if (l->places[i].conn && h)
			h->broken(l->places[i].conn, why, detail);
}

void shim_rdma_link_break(struct rdma_link *l, const char *why, int detail)
{
	pthread_mutex_lock(&l->lock);
	break_locked(l, why, detail);
	pthread_mutex_unlock(&l->lock);
}

bool shim_rdma_link_cm_gone(struct rdma_link *l)
{
	struct rdma_cm_event *ev;

	if (!l->cm_owned || l->pid != shim_self_pid())
		return __atomic_load_n(&l->peer_disconnected, __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&l->lock);
	while (rdma_get_cm_event(l->ec, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT)
			__atomic_store_n(&l->peer_disconnected, true, __ATOMIC_RELEASE);
		rdma_ack_cm_event(ev);
	}
	pthread_mutex_unlock(&l->lock);
	return __atomic_load_n(&l->peer_disconnected, __ATOMIC_ACQUIRE);
}

/* ---- reaping ---- */

static struct rdma_conn *conn_at(struct rdma_link *l, uint32_t id)
{
	return id < l->n_places && l->places[id].used ? l->places[id].conn : NULL;
}

static bool msg_head_ok(const uint8_t *buf, size_t len, size_t want)
{
	uint32_t magic;

	if (len != want)
		return false;
	memcpy(&magic, buf, sizeof(magic));
	return be32toh(magic) == SHIM_RDMA_MAGIC && buf[4] == SHIM_RDMA_VERSION;
}

static void peer_released(struct rdma_link *l, uint32_t id)
{
	struct rdma_link_place *p;

	if (id >= l->n_places || !l->places[id].used || l->places[id].peer_released)
		return;
	p = &l->places[id];
	p->peer_released = true;
	if (p->local_done) {
		free_place_memory(p);
		__atomic_sub_fetch(&l->held, 1, __ATOMIC_RELAXED);
		shim_rdma_link_stat_conns_locked(l);
		shim_rdma_link_busy(l);
	}
}

/* A SEND of the peer's: one message, read once out of its cell. */
static void take_message(struct rdma_link *l, const uint8_t *cell, size_t len)
{
	const struct rdma_link_handlers *h = hs();
	struct shim_rdma_link_msg m;
	struct rdma_conn *c;
	uint32_t to;

	if (len < 8 || len > SHIM_LINK_CELL) {
		break_locked(l, "bad_message", (int)len);
		return;
	}
	if (cell[5] == SHIM_RDMA_SWITCH_AT) {
		struct shim_rdma_switch_at at;

		if (len != sizeof(at)) {
			break_locked(l, "bad_switch_at", (int)len);
			return;
		}
		memcpy(&at, cell, sizeof(at));
		c = conn_at(l, be32toh(at.to_id));
		if (c && h && !h->switch_at(c, &at, len))
			break_locked(l, "violation", 0);
		return;
	}
	if (!msg_head_ok(cell, len, sizeof(m))) {
		break_locked(l, "bad_message", (int)len);
		return;
	}
	memcpy(&m, cell, sizeof(m));
	to = be32toh(m.to_id);
	switch (m.type) {
	case SHIM_RDMA_LINK_OFFER:
		shim_rdma_link_keep_offer(l, &m);
		return;
	case SHIM_RDMA_LINK_ACCEPT:
		c = conn_at(l, to);
		if (c && h && !h->accept(c, &m))
			break_locked(l, "violation", 0);
		return;
	case SHIM_RDMA_LINK_RELEASE:
		peer_released(l, to);
		return;
	default:
		break_locked(l, "bad_message_type", m.type);
	}
}

static int repost(struct rdma_link *l, unsigned i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)recv_cell(l, i), .length = SHIM_LINK_CELL,
			       .lkey = l->cells_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = RECV_FLAG | i, .sg_list = &sge, .num_sge = 1 }, *bad;

	return -ibv_post_recv(l->qp, &wr, &bad);
}

static void raise_to(uint64_t *word, uint64_t v)
{
	if (v > __atomic_load_n(word, __ATOMIC_RELAXED))
		__atomic_store_n(word, v, __ATOMIC_RELEASE);
}

/* Precondition: l->lock held. */
static void take_wc(struct rdma_link *l, const struct ibv_wc *wc)
{
	const struct rdma_link_handlers *h = hs();

	if (wc->wr_id & RECV_FLAG) {
		unsigned i = (unsigned)(wc->wr_id & ~RECV_FLAG);

		/* Test-only (faults.h, cq_stall): from the Nth data completion
		 * on, every receive completion is lost for good. */
		if (unlikely(l->fault_cq_stall))
			return;
		if (unlikely(wc->status == IBV_WC_SUCCESS && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
			     shim_fault_hit(SHIM_FAULT_CQ_STALL, -1, NULL, "reap"))) {
			l->fault_cq_stall = true;
			return;
		}

		if (wc->status != IBV_WC_SUCCESS) {
			break_locked(l, ibv_wc_status_str(wc->status), (int)wc->status);
			return;
		}
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
			uint32_t imm = be32toh(wc->imm_data);
			struct rdma_conn *c = conn_at(l, shim_rdma_imm_id(imm));

			/* No connection: one we detached; what it wrote is dropped. */
			if (c && h && !h->imm(c, imm, wc->byte_len))
				break_locked(l, "violation", 0);
		} else {
			take_message(l, recv_cell(l, i), wc->byte_len);
		}
		if (!shim_rdma_link_broken(l) && repost(l, i) < 0)
			break_locked(l, "post_recv", 0);
		return;
	}
	raise_to(&l->completed, wc->wr_id);
	if (wc->status == IBV_WC_SUCCESS)
		raise_to(&l->completed_ok, wc->wr_id);
	else
		break_locked(l, ibv_wc_status_str(wc->status), (int)wc->status);
}

static void watch_locked(struct rdma_link *l, unsigned long long now);

static void reap_locked(struct rdma_link *l)
{
	struct ibv_wc wc[16];
	int n, taken = 0;

	/* Test-only (faults.h, cq_lost): the CQ delivers nothing for
	 * SHIM_FAULT_CQ_LATE_MS, or until the link breaks; then what it held
	 * is taken, late, before any failover reads its offsets ("acked
	 * means counted" holds). */
	if (unlikely(l->fault_cq_lost)) {
		if (!shim_rdma_link_broken(l) && shim_now_ns() < l->fault_cq_until_ns)
			return;
		for (unsigned i = 0; i < l->fault_held_n; i++)
			take_wc(l, &l->fault_held[i]);
		l->fault_held_n = 0;
		l->fault_cq_lost = false;
		l->fault_cq_done = true;
	}
	while ((n = ibv_poll_cq(l->cq, 16, wc)) > 0)
		for (int i = 0; i < n; i++, taken++) {
			if (unlikely(!l->fault_cq_done && shim_fault_hit(SHIM_FAULT_CQ_LOST, -1, NULL, "reap")) &&
			    (l->fault_held = malloc((size_t)(n - i) * sizeof(wc[0])))) {
				/* Polled already: held, and taken first, late. */
				memcpy(l->fault_held, &wc[i], (size_t)(n - i) * sizeof(wc[0]));
				l->fault_held_n = (unsigned)(n - i);
				l->fault_cq_lost = true;
				l->fault_cq_until_ns = shim_now_ns() + SHIM_FAULT_CQ_LATE_MS * 1000000ull;
				return;
			}
			take_wc(l, &wc[i]);
		}
	if (n < 0)
		break_locked(l, "poll_cq", n);
	/* A reap that found nothing is a receiver waiting: the stall watch's
	 * moment. A busy CQ (our own sends complete on it too) looks every
	 * so many reaps, so that a clock read stays rare there. */
	if (shim_cfg.rdma_stall_ms && (!taken || ++l->stall_reaps % 64 == 0))
		watch_locked(l, shim_now_ns());
}

/* Precondition: l->lock held, and the CQ just reaped. */
static void watch_locked(struct rdma_link *l, unsigned long long now)
{
	const struct rdma_link_handlers *h = hs();
	unsigned long long bound = (unsigned long long)shim_cfg.rdma_stall_ms * 1000000ull;
	uint64_t behind = 0;

	if (!bound || !h || !h->rx_stalled || shim_rdma_link_broken(l) || now - l->stall_look_ns < bound / 4)
		return;
	l->stall_look_ns = now;
	for (unsigned i = 0; i < l->n_places; i++) {
		struct rdma_conn *c = l->places[i].conn;

		if (c && h->tx_lazy)
			h->tx_lazy(c, now, bound);
		if (c && h->rx_stalled(c, now, bound, &behind)) {
			SHIM_TRACE(SHIM_TRACE_WARN, "rdma.cq_stall", c->fd, c->sock ? &c->sock->tuple : NULL,
				   SHIM_REASON_CQ_STALL, "\"link\":%u,\"behind\":%llu,\"ms\":%u", l->num,
				   (unsigned long long)behind, shim_cfg.rdma_stall_ms);
			shim_stats_count(SHIM_REASON_CQ_STALL);
			break_locked(l, "cq_stall", (int)(behind > INT32_MAX ? INT32_MAX : behind));
			return;
		}
	}
}

void shim_rdma_link_watch(struct rdma_link *l)
{
	pthread_mutex_lock(&l->lock);
	reap_locked(l);
	watch_locked(l, shim_now_ns()); /* at most one look per quarter bound */
	pthread_mutex_unlock(&l->lock);
}

void shim_rdma_link_reap(struct rdma_link *l)
{
	pthread_mutex_lock(&l->lock);
	reap_locked(l);
	pthread_mutex_unlock(&l->lock);
}

void shim_rdma_link_reap_try(struct rdma_link *l)
{
	if (pthread_mutex_trylock(&l->lock) == 0) {
		reap_locked(l);
		pthread_mutex_unlock(&l->lock);
	}
}

bool shim_rdma_link_wait(struct rdma_link *l, uint64_t seq)
{
	unsigned long long deadline = 0;
	unsigned spins = 0;

	while (shim_rdma_link_completed(l) < seq && !shim_rdma_link_broken(l)) {
		shim_rdma_link_reap(l);
		if (shim_rdma_link_completed(l) >= seq)
			break;
		if (++spins % 256 == 0) {
			unsigned long long now = shim_now_ns();

			if (!deadline)
				deadline = now + COMPLETION_WAIT_NS;
			else if (now > deadline)
				shim_rdma_link_break(l, "completion_timeout", (int)(seq - shim_rdma_link_completed(l)));
			/* Soft-RoCE completes in kernel context: on a small VM a
			 * tight spin would hold the CPU the ACK needs. */
			sched_yield();
			/* A peer that went sends a DREQ before it destroys its
			 * QP: notice it instead of waiting for retries to run
			 * out. What completed before it is taken in first. */
			if (shim_rdma_link_cm_gone(l)) {
				shim_rdma_link_reap(l);
				if (shim_rdma_link_completed(l) < seq)
					shim_rdma_link_break(l, "disconnected", 0);
			}
		}
	}
	return shim_rdma_link_completed(l) >= seq;
}

/* ---- posting ---- */

/* locked: l->lock is held (the stall watch's lazy tail words): no wait
 * for room, and a break is break_locked's. */
static uint64_t post_chain(struct rdma_link *l, struct wr_chain *ch, bool locked)
{
	struct ibv_send_wr *bad;
	uint64_t bytes = 0;
	int rc;

	if (!ch->n)
		return 0;
	for (;;) {
		uint64_t wait_for;

		if (shim_rdma_link_broken(l))
			return 0;
		pthread_mutex_lock(&l->post_lock);
		if (l->posted - shim_rdma_link_completed(l) + ch->n < SQ_LIMIT)
			break;
		/* Every 16th WR is signaled, so the last signaled one retires
		 * all but at most 15 of those outstanding. */
		wait_for = l->last_signaled;
		pthread_mutex_unlock(&l->post_lock);
		if (locked || !shim_rdma_link_wait(l, wait_for))
			return 0;
	}
	/* Acquire: pairs with the release store of what it names, made after
	 * the post that placed the WRs it counts (shim_rdma_chain_tail_word). */
	if (ch->late_src)
		ch->words[ch->late_i] = __atomic_load_n(ch->late_src, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < ch->n; i++) {
		uint64_t seq = l->posted + i + 1;
		struct ibv_send_wr *wr = &ch->wr[i];
		struct ibv_sge *sge = &ch->sge[i];

		wr->wr_id = seq;
		wr->next = i + 1 < ch->n ? &ch->wr[i + 1] : NULL;
		if (seq % SQ_SIGNAL_EVERY == 0)
			wr->send_flags |= IBV_SEND_SIGNALED;
		if (wr->num_sge && sge->length <= l->max_inline) {
			wr->send_flags |= IBV_SEND_INLINE;
		} else if (wr->num_sge && (ch->copy_mask & (1u << i))) {
			/* Not inline: the source must be registered and stay
			 * put until the WR is done: this sequence number's cell. */
			memcpy(send_cell(l, seq), (const void *)(uintptr_t)sge->addr, sge->length);
			sge->addr = (uintptr_t)send_cell(l, seq);
			sge->lkey = l->cells_mr->lkey;
		}
		if (wr->opcode != IBV_WR_SEND && !(ch->copy_mask & (1u << i)))
			bytes += sge->length;
	}
	rc = ibv_post_send(l->qp, ch->wr, &bad);
	if (rc == 0) {
		l->posted += ch->n;
		for (unsigned i = 0; i < ch->n; i++)
			if (ch->wr[i].send_flags & IBV_SEND_SIGNALED)
				l->last_signaled = ch->wr[i].wr_id;
		l->bytes_posted += bytes;
	}
	uint64_t last = l->posted;
	bool die = rc == 0 && shim_cfg.test_fail_link_kb && l->bytes_posted >= (uint64_t)shim_cfg.test_fail_link_kb * 1024u;
	/* Test-only (faults.h, qp_error): N is an offset in the process's
	 * data bytes posted. */
	bool qp_err = rc == 0 && bytes && !locked && shim_fault_hit_bytes(SHIM_FAULT_QP_ERROR, bytes, -1, NULL, "link_post");

	pthread_mutex_unlock(&l->post_lock);
	/* A partly posted chain leaves a hole in a stream: the link is
	 * unusable either way. Testing only (RDMASHIM_TEST_FAIL_LINK_KB): the
	 * path dies, as a pulled cable would leave it, under every connection
	 * at once. */
	if ((rc || die) && locked)
		break_locked(l, rc ? "post_send" : "injected", rc ? rc : (int)shim_cfg.test_fail_link_kb);
	else if (rc || die)
		shim_rdma_link_break(l, rc ? "post_send" : "injected", rc ? rc : (int)shim_cfg.test_fail_link_kb);
	if (qp_err)
		shim_rdma_link_fault_err(l);
	return rc ? 0 : last;
}

uint64_t shim_rdma_link_post(struct rdma_link *l, struct wr_chain *ch)
{
	return post_chain(l, ch, false);
}

uint64_t shim_rdma_link_post_locked(struct rdma_link *l, struct wr_chain *ch)
{
	return post_chain(l, ch, true);
}

void shim_rdma_link_fault_err(struct rdma_link *l)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	int rc = ibv_modify_qp(l->qp, &attr, IBV_QP_STATE);

	/* Failed: the link breaks here instead (the test still sees one). */
	if (rc)
		shim_rdma_link_break(l, "fault_modify_qp", rc);
}

uint64_t shim_rdma_link_send(struct rdma_link *l, const void *msg, size_t len)
{
	struct wr_chain ch = { .n = 1, .copy_mask = 1 };

	if (len > SHIM_LINK_CELL)
		return 0;
	ch.sge[0] = (struct ibv_sge){ .addr = (uintptr_t)msg, .length = (uint32_t)len, .lkey = l->cells_mr->lkey };
	ch.wr[0] = (struct ibv_send_wr){ .sg_list = &ch.sge[0], .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED };
	return shim_rdma_link_post(l, &ch);
}

/* ---- offers (kept ones: rdma_link_offers.c) ---- */

bool shim_rdma_link_take_offer(struct rdma_link *l, const struct shim_tuple *t, unsigned long long max_age_ns,
			       struct shim_rdma_link_msg *out)
{
	uint32_t owed[SHIM_LINK_OFFERS];
	unsigned n_owed;
	bool found;

	pthread_mutex_lock(&l->lock);
	reap_locked(l);
	found = shim_rdma_link_offers_scan(l, t, max_age_ns, shim_now_ns(), out);
	n_owed = l->n_owed;
	memcpy(owed, l->owed, n_owed * sizeof(owed[0]));
	l->n_owed = 0;
	pthread_mutex_unlock(&l->lock);
	/* Outside the lock: a post may wait for room, reaping. */
	for (unsigned i = 0; i < n_owed; i++)
		shim_rdma_link_release_to(l, owed[i]);
	return found;
}
