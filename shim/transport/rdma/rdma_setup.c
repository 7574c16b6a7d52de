/*
 * The RDMA upgrade: rdma_cm setup, the QP state machine and the handshake.
 *
 * C (connect() side) listens with rdma_cm at (C's IP, C's TCP port) in
 * RDMA_PS_TCP; on RoCE that port space is rdma_cm's own, separate from the
 * kernel's TCP ports. S (accept() side) resolves C's address and route and
 * connects with OFFER {nonce_S, its ring} as REQ private data. C checks that
 * the CM source address is the TCP peer's address and answers with ACCEPT
 * {nonce_C, its ring} as REP private data.
 *
 * Trust unit: the host. The CM source IP check proves only that the OFFER
 * came from the TCP peer's host (RoCE itself trusts IP addresses, and any
 * process on that host with an RDMA device could send it). Who may receive
 * our bytes is decided later, by the nonces (rdma_switch.c): an end posts
 * nothing on the QP until the peer's in-band SWITCH frame carried the nonce
 * this end sent only to its CM peer (shim/PROTOCOL.md, "Proof").
 *
 * Switch offsets travel as two-sided SENDs (SWITCH_AT), one each way: C's
 * once its ESTABLISHED event (the RTU) or S's SWITCH_AT came, S's once C's
 * SWITCH frame proved C. The brief put C's offset into ACCEPT; but between
 * rdma_accept and ESTABLISHED the program may write more on TCP, so the
 * offset would be stale. An end writes its SWITCH frame only after the SEND
 * with its offset completed (the peer's HCA ACKed it, its CQE is written),
 * so the peer learns the offset no later than the frame's bytes can reach
 * it: it polls its CQ in progress after every TCP read while rx is
 * pending. Before the RTU, S may still give up (rdma_destroy_id REJects
 * C), and C, which has not switched, gives up too.
 *
 * Every wait is bounded (RDMASHIM_CM_TIMEOUT_MS per CM step) and none
 * blocks: the event channel is nonblocking and progressed from
 * shim_upgrade_progress(); the connection runs on TCP meanwhile.
 */
#include "rdma.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <endian.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "breaker.h"
#include "frames.h"
#include "real.h"
#include "stats.h"
#include "trace.h"
#include "rdma_post.h"
#include "upgrade.h"

/* 4.096 us * 2^17 = 537 ms per try, 8 tries: a dead peer shows as a failed
 * completion in about four seconds (a peer that closed is seen at once, by
 * its DREQ). rdma_cm's default on RoCE comes from the path's packet
 * lifetime and was about a second per try on rxe; shorter tries than these
 * gave up under QEMU TCG load, where a VM can stall for 100 ms. */
#define ACK_TIMEOUT 17
#define RETRY_COUNT 7
#define SQ_DEPTH 64
#define CQ_DEPTH (SQ_DEPTH + SHIM_RDMA_RQ_DEPTH + 8)
#define WANT_INLINE 64
/* S retries a missing listener (C not there yet) after these delays. */
#define RETRY_FIRST_NS (1ull * 1000 * 1000)
#define RETRY_MAX_NS (200ull * 1000 * 1000)
/* IB CM reject reason when nobody listens on the service id. */
#define REJ_INVALID_SERVICE_ID 8
#define MS_NS 1000000ull

/* ---- helpers ---- */


static socklen_t to_sockaddr(const struct shim_endpoint *ep, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (shim_endpoint_is_v4(ep)) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		memcpy(&sin->sin_addr, ep->addr + 12, 4);
		return sizeof(*sin);
	}
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(port);
	memcpy(&sin6->sin6_addr, ep->addr, 16);
	return sizeof(*sin6);
}

static const char *state_name(enum ibv_qp_state st)
{
	switch (st) {
	case IBV_QPS_RESET: return "reset";
	case IBV_QPS_INIT: return "init";
	case IBV_QPS_RTR: return "rtr";
	case IBV_QPS_RTS: return "rts";
	case IBV_QPS_ERR: return "err";
	default: return "other";
	}
}

/* One explicit QP transition, attributes from rdma_cm (path, PSNs, QPNs). */
static int qp_to(struct rdma_conn *c, enum ibv_qp_state st)
{
	struct ibv_qp_attr attr;
	int mask = 0, rc;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = st;
	rc = rdma_init_qp_attr(c->id, &attr, &mask) ? -errno : 0;
	if (rc == 0) {
		if (st == IBV_QPS_INIT) {
			/* Before the CM exchange (the active side) rdma_cm hands
			 * out no access rights; the peer WRITEs into our ring. */
			attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
			mask |= IBV_QP_ACCESS_FLAGS;
		}
		if (st == IBV_QPS_RTS) {
			/* Our retries are ours to bound, whatever the peer's CM
			 * message asked for (rdma_cm takes them from it). RNR: an
			 * honest peer never runs out of receives (we send no more
			 * immediates than it credited), so the first RNR NAK fails
			 * the WR at once: 7 would mean retry forever, and a peer
			 * posting no receives would stall us in rdma_wait_seq(). */
			attr.rnr_retry = 0;
			attr.retry_cnt = RETRY_COUNT;
			mask |= IBV_QP_RNR_RETRY | IBV_QP_RETRY_CNT;
		}
		rc = -ibv_modify_qp(c->qp, &attr, mask);
	}
	SHIM_TRACE(rc ? SHIM_TRACE_WARN : SHIM_TRACE_DEBUG, "qp.state", c->fd, &c->sock->tuple, SHIM_REASON_NONE,
		   "\"qp\":%u,\"state\":\"%s\",\"rc\":%d", c->qp->qp_num, state_name(st), rc);
	return rc;
}

/* PD, slot, CQ and QP on the id's device; the QP in INIT with its receive
 * posted (a SWITCH_AT may arrive as soon as the peer is in RTS). */
static int make_qp(struct rdma_conn *c)
{
	struct ibv_qp_init_attr init;
	struct ibv_pd *pd = shim_rdma_pd_for(c->id->verbs);
	size_t slot_bytes = shim_rdma_slot_bytes(c->ring_bytes);
	uint8_t timeout = ACK_TIMEOUT;
	int rc;

	if (!pd)
		return -ENOMEM;
	/* Before RTS, whose attributes rdma_init_qp_attr computes from it. */
	rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof(timeout));
	if (c->slot.chunk && c->pd != pd) {
		if (c->mr)
			ibv_dereg_mr(c->mr);
		c->mr = NULL;
		shim_mrpool_put(&c->slot);
	}
	if (!c->slot.chunk) {
		rc = shim_mrpool_get(pd, slot_bytes, &c->slot);
		if (rc < 0)
			return rc;
	}
	if (!c->mr) {
		/* The peer's window into our memory: this connection's control
		 * page and receive ring, nothing else (the pool's chunk MR
		 * grants local access only). One registration per connection,
		 * of ring_bytes + 4 KiB already faulted in. */
		unsigned long long t0 = shim_now_ns();

		c->mr = ibv_reg_mr(pd, c->slot.addr, SHIM_RDMA_CTL_BYTES + c->ring_bytes,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!c->mr)
			return -errno;
		c->mr_reg_ns = shim_now_ns() - t0;
	}
	c->pd = pd;
	shim_rdma_chan_init(c);
	c->cq = ibv_create_cq(c->id->verbs, CQ_DEPTH, NULL, NULL, 0);
	if (!c->cq)
		return -errno;
	memset(&init, 0, sizeof(init));
	init.send_cq = init.recv_cq = c->cq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 0; /* selective signaling: rdma_chan.c decides */
	init.cap.max_send_wr = SQ_DEPTH;
	init.cap.max_recv_wr = SHIM_RDMA_RQ_DEPTH;
	init.cap.max_send_sge = init.cap.max_recv_sge = 1;
	init.cap.max_inline_data = WANT_INLINE;
	c->qp = ibv_create_qp(pd, &init);
	if (!c->qp) {
		/* A device without inline data: everything from registered memory. */
		init.cap.max_inline_data = 0;
		c->qp = ibv_create_qp(pd, &init);
	}
	if (!c->qp)
		return -errno;
	c->max_inline = init.cap.max_inline_data;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "qp.state", c->fd, &c->sock->tuple, SHIM_REASON_NONE,
		   "\"qp\":%u,\"state\":\"reset\",\"rc\":0,\"max_inline\":%u", c->qp->qp_num, c->max_inline);
	rc = qp_to(c, IBV_QPS_INIT);
	if (rc == 0)
		rc = shim_rdma_post_recvs(c);
	return rc;
}

static void drop_qp(struct rdma_conn *c)
{
	if (c->qp) {
		shim_rdma_qp_error(c);
		ibv_destroy_qp(c->qp);
		c->qp = NULL;
	}
	if (c->cq) {
		ibv_destroy_cq(c->cq);
		c->cq = NULL;
	}
	/* The next QP starts with its own receives: the peer checks the
	 * count we report against the queue depth. */
	c->recv_posted = c->recv_reported = 0;
}

static void fill_hello(const struct rdma_conn *c, struct shim_rdma_hello *h, uint8_t type, const uint8_t *nonce)
{
	memset(h, 0, sizeof(*h));
	h->magic = htobe32(SHIM_RDMA_MAGIC);
	h->version = SHIM_RDMA_VERSION;
	h->type = type;
	h->order = 0x0102;
	memcpy(h->nonce, nonce, SHIM_NONCE_LEN);
	h->addr = htobe64((uint64_t)(uintptr_t)c->slot.addr);
	h->rkey = htobe32(c->mr->rkey);
	h->ring_bytes = htobe32(c->ring_bytes);
}

/* Checks a hello of type from private data; fills the peer's ring. */
static int take_hello(struct rdma_conn *c, const void *data, size_t len, uint8_t type, uint8_t *nonce_out)
{
	struct shim_rdma_hello h;

	if (!data || len < sizeof(h))
		return -EPROTO;
	memcpy(&h, data, sizeof(h));
	if (be32toh(h.magic) != SHIM_RDMA_MAGIC || h.version != SHIM_RDMA_VERSION || h.type != type ||
	    h.order != 0x0102 || be32toh(h.ring_bytes) != c->ring_bytes || !h.addr)
		return -EPROTO;
	memcpy(nonce_out, h.nonce, SHIM_NONCE_LEN);
	c->remote_addr = be64toh(h.addr);
	c->rkey = be32toh(h.rkey);
	return 0;
}

static int new_nonce(uint8_t nonce[SHIM_NONCE_LEN])
{
	return getrandom(nonce, SHIM_NONCE_LEN, GRND_NONBLOCK) == SHIM_NONCE_LEN ? 0 : -EIO;
}

static void conn_param(struct rdma_conn *c, struct rdma_conn_param *p, const void *pd, size_t len)
{
	memset(p, 0, sizeof(*p));
	p->private_data = pd;
	p->private_data_len = (uint8_t)len;
	/* WRITEs and SENDs only: no RDMA READ or atomics either way. */
	p->responder_resources = 0;
	p->initiator_depth = 0;
	/* What we ask of the peer; our own QP is set in qp_to() regardless. */
	p->retry_count = RETRY_COUNT;
	p->rnr_retry_count = 0; /* receives are posted before RTR, and credited */
	p->qp_num = c->qp->qp_num;
}

/* ---- failing ---- */

static bool breaker_counts(enum shim_reason r)
{
	return r == SHIM_REASON_CM_TIMEOUT || r == SHIM_REASON_CM_REJECTED || r == SHIM_REASON_CM_UNREACHABLE;
}

/* Gives up before any direction moved: everything goes, TCP stays. */
void shim_rdma_give_up(struct shim_sock *s, int fd, enum shim_reason reason)
{
	struct rdma_conn *c = s->rdma;

	if (c) {
		if (s->role == SHIM_ROLE_SERVER && breaker_counts(reason))
			shim_breaker_record(shim_breaker_global(), s->tuple.peer.addr, false, shim_breaker_now_ms());
		if (c->installed && s->chan == &c->chan)
			s->chan = NULL;
		c->installed = false;
		s->rdma = NULL;
		shim_rdma_teardown(c);
	}
	shim_upgrade_fail(s, fd, reason);
}

/*
 * An attempt a forked parent started: its ids, QP, CQ and slot are the
 * parent's (the rdma_cm and uverbs file descriptions are shared, so even
 * destroying our copies would destroy the parent's objects). Forget them,
 * touching nothing, not even the frames queued for TCP (the parent's to
 * send).
 */
void shim_rdma_forget_inherited(struct shim_sock *s)
{
	struct rdma_conn *c = s->rdma;

	if (c->installed && s->chan == &c->chan)
		s->chan = NULL;
	s->rdma = NULL;
	free(c);
}

/* ---- C: listen, accept ---- */

static void c_listen(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	struct sockaddr_storage ss;
	int rc;

	to_sockaddr(&s->tuple.local, s->tuple.local.port, &ss);
	rc = rdma_create_id(c->ec, &c->listen_id, c, RDMA_PS_TCP) ? -errno : 0;
	if (rc == 0)
		rc = rdma_bind_addr(c->listen_id, (struct sockaddr *)&ss) ? -errno : 0;
	if (rc == 0)
		rc = rdma_listen(c->listen_id, 4) ? -errno : 0;
	if (rc < 0) {
		SHIM_TRACE(SHIM_TRACE_INFO, "rdma.listen_failed", fd, &s->tuple, SHIM_REASON_NONE, "\"errno\":%d", -rc);
		shim_rdma_give_up(s, fd, rc == -EADDRINUSE ? SHIM_REASON_RENDEZVOUS_BUSY : SHIM_REASON_NO_RDMA_DEVICE);
		return;
	}
	c->step = RDMA_C_LISTEN;
	c->step_deadline_ns = s->deadline_ns;
}

static void c_connect_request(struct shim_sock *s, int fd, struct rdma_conn *c, struct rdma_cm_id *child,
			      const void *pdata, size_t plen)
{
	struct shim_endpoint src;
	struct sockaddr *sa = rdma_get_peer_addr(child);
	struct shim_rdma_hello accept;
	struct rdma_conn_param param;
	int rc = -EPROTO;

	/* The OFFER must come from the TCP peer's host (the trust unit). */
	if (c->step != RDMA_C_LISTEN ||
	    shim_endpoint_from_sockaddr(sa, sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
								       : sizeof(struct sockaddr_in6), &src) < 0 ||
	    memcmp(src.addr, s->tuple.peer.addr, 16) != 0 ||
	    take_hello(c, pdata, plen, SHIM_RDMA_OFFER, s->tx_nonce) < 0) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rv.refused", fd, &s->tuple, SHIM_REASON_VERIFY_FAILED,
			   "\"side\":\"client\",\"transport\":\"rdma\"");
		shim_stats_count(SHIM_REASON_VERIFY_FAILED);
		rdma_reject(child, NULL, 0);
		rdma_destroy_id(child);
		return;
	}
	c->id = child;
	rc = make_qp(c);
	if (rc == 0)
		rc = qp_to(c, IBV_QPS_RTR);
	if (rc == 0)
		rc = qp_to(c, IBV_QPS_RTS);
	if (rc == 0)
		rc = new_nonce(s->rx_nonce);
	if (rc == 0) {
		fill_hello(c, &accept, SHIM_RDMA_ACCEPT, s->rx_nonce);
		conn_param(c, &param, &accept, sizeof(accept));
		rc = rdma_accept(child, &param) ? -errno : 0;
	}
	if (rc < 0) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.accept_failed", fd, &s->tuple, SHIM_REASON_NONE, "\"errno\":%d", -rc);
		rdma_reject(child, NULL, 0);
		shim_rdma_give_up(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	/* Installed for rx: S may switch as soon as it has sent its SWITCH_AT,
	 * which can be before our ESTABLISHED. Our tx stays on TCP. */
	s->chan = &c->chan;
	c->installed = true;
	c->step = RDMA_C_ACCEPTED;
	c->step_deadline_ns = shim_now_ns() + (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS;
}

/* ---- S: resolve, connect ---- */

static void s_resolve(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	struct sockaddr_storage src, dst;
	int rc;

	to_sockaddr(&s->tuple.local, 0, &src);
	to_sockaddr(&s->tuple.peer, s->tuple.peer.port, &dst);
	rc = rdma_create_id(c->ec, &c->id, c, RDMA_PS_TCP) ? -errno : 0;
	if (rc == 0)
		rc = rdma_resolve_addr(c->id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
				       (int)shim_cfg.cm_timeout_ms) ? -errno : 0;
	if (rc < 0) {
		SHIM_TRACE(SHIM_TRACE_INFO, "rdma.resolve_failed", fd, &s->tuple, SHIM_REASON_NONE, "\"errno\":%d", -rc);
		shim_rdma_give_up(s, fd, rc == -ENODEV || rc == -EADDRNOTAVAIL ? SHIM_REASON_NO_RDMA_DEVICE
								     : SHIM_REASON_CM_UNREACHABLE);
		return;
	}
	c->step = RDMA_S_ADDR;
	c->step_deadline_ns = shim_now_ns() + (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS;
}

static void s_route_resolved(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	struct shim_rdma_hello offer;
	struct rdma_conn_param param;
	int rc = make_qp(c);

	if (rc == 0 && new_nonce(s->rx_nonce) < 0)
		rc = -EIO;
	if (rc == 0) {
		fill_hello(c, &offer, SHIM_RDMA_OFFER, s->rx_nonce);
		conn_param(c, &param, &offer, sizeof(offer));
		rc = rdma_connect(c->id, &param) ? -errno : 0;
	}
	if (rc < 0) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.connect_failed", fd, &s->tuple, SHIM_REASON_NONE, "\"errno\":%d", -rc);
		shim_rdma_give_up(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	c->step = RDMA_S_CONNECT;
	c->step_deadline_ns = shim_now_ns() + (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.offer", fd, &s->tuple, SHIM_REASON_NONE, "\"transport\":\"rdma\"");
}

static void s_connect_response(struct shim_sock *s, int fd, struct rdma_conn *c, const void *pdata, size_t plen)
{
	int rc = take_hello(c, pdata, plen, SHIM_RDMA_ACCEPT, s->tx_nonce);

	if (rc == 0)
		rc = qp_to(c, IBV_QPS_RTR);
	if (rc == 0)
		rc = qp_to(c, IBV_QPS_RTS);
	/* The RTU: from here C may switch, and we never give up. */
	if (rc == 0)
		rc = rdma_establish(c->id) ? -errno : 0;
	if (rc < 0) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.establish_failed", fd, &s->tuple, SHIM_REASON_NONE, "\"errno\":%d", -rc);
		shim_rdma_give_up(s, fd, rc == -EPROTO ? SHIM_REASON_HANDSHAKE_MALFORMED : SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	shim_breaker_record(shim_breaker_global(), s->tuple.peer.addr, true, shim_breaker_now_ms());
	s->chan = &c->chan;
	c->installed = true;
	c->established = true;
	c->step = RDMA_CONNECTED;
}

/* S: nobody listened (C not there yet, or a plain peer): try again. */
static void s_retry(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	if (now >= s->deadline_ns) {
		shim_rdma_give_up(s, fd, SHIM_REASON_PEER_NO_SHIM);
		return;
	}
	drop_qp(c);
	if (c->id) {
		rdma_destroy_id(c->id);
		c->id = NULL;
	}
	s->retry_delay_ns = s->retry_delay_ns ? s->retry_delay_ns * 2 : RETRY_FIRST_NS;
	if (s->retry_delay_ns > RETRY_MAX_NS)
		s->retry_delay_ns = RETRY_MAX_NS;
	s->next_try_ns = now + s->retry_delay_ns;
	c->step = RDMA_S_RETRY;
}

/* ---- events ---- */

static enum shim_reason reason_of(enum rdma_cm_event_type e)
{
	switch (e) {
	case RDMA_CM_EVENT_REJECTED: return SHIM_REASON_CM_REJECTED;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR: return SHIM_REASON_CM_UNREACHABLE;
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return SHIM_REASON_NO_RDMA_DEVICE;
	default: return SHIM_REASON_PEER_CLOSED;
	}
}

/* One CM event, copied out so that it can be acked before we act on it:
 * rdma_destroy_id waits for the acks of its events, and acting may destroy. */
struct cm_ev {
	enum rdma_cm_event_type e;
	int status;
	struct rdma_cm_id *id;
	uint8_t pdata[SHIM_RDMA_REP_PRIVATE_MAX];
	size_t plen;
};

static void on_event(struct shim_sock *s, int fd, struct rdma_conn *c, const struct cm_ev *ev,
		     unsigned long long now)
{
	enum rdma_cm_event_type e = ev->e;

	SHIM_TRACE(SHIM_TRACE_DEBUG, "rdma.cm", fd, &s->tuple, SHIM_REASON_NONE,
		   "\"event\":\"%s\",\"status\":%d,\"step\":%d", rdma_event_str(e), ev->status, c->step);
	if (e == RDMA_CM_EVENT_CONNECT_REQUEST && c->step != RDMA_C_LISTEN) {
		/* A second request (a stranger, or a late retry): refuse it. */
		rdma_reject(ev->id, NULL, 0);
		rdma_destroy_id(ev->id);
		return;
	}
	switch (c->step) {
	case RDMA_C_LISTEN:
		if (e == RDMA_CM_EVENT_CONNECT_REQUEST)
			c_connect_request(s, fd, c, ev->id, ev->pdata, ev->plen);
		return;
	case RDMA_C_ACCEPTED:
		if (e == RDMA_CM_EVENT_ESTABLISHED) {
			c->established = true;
			return;
		}
		/* S's SWITCH_AT completes (its CQE is ours) before S can close
		 * and send the DREQ: look at the CQ once more before giving up. */
		shim_rdma_reap(c);
		if (!c->peer_at_known)
			shim_rdma_give_up(s, fd, reason_of(e));
		return;
	case RDMA_S_ADDR:
		if (e == RDMA_CM_EVENT_ADDR_RESOLVED) {
			if (rdma_resolve_route(c->id, (int)shim_cfg.cm_timeout_ms)) {
				shim_rdma_give_up(s, fd, SHIM_REASON_CM_UNREACHABLE);
				return;
			}
			c->step = RDMA_S_ROUTE;
			c->step_deadline_ns = now + (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS;
		} else {
			shim_rdma_give_up(s, fd, reason_of(e));
		}
		return;
	case RDMA_S_ROUTE:
		if (e == RDMA_CM_EVENT_ROUTE_RESOLVED)
			s_route_resolved(s, fd, c);
		else
			shim_rdma_give_up(s, fd, reason_of(e));
		return;
	case RDMA_S_CONNECT:
		if (e == RDMA_CM_EVENT_CONNECT_RESPONSE)
			s_connect_response(s, fd, c, ev->pdata, ev->plen);
		else if (e == RDMA_CM_EVENT_REJECTED && ev->status == REJ_INVALID_SERVICE_ID)
			s_retry(s, fd, c, now);
		else
			shim_rdma_give_up(s, fd, reason_of(e));
		return;
	case RDMA_WARMING:
	case RDMA_S_RETRY:
	case RDMA_CONNECTED:
		/* DISCONNECTED and the like: the data path notices on its own
		 * (completion errors, TCP EOF). */
		return;
	}
}

static void check_deadline(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	if (now < c->step_deadline_ns)
		return;
	switch (c->step) {
	case RDMA_C_LISTEN:
		shim_rdma_give_up(s, fd, SHIM_REASON_PEER_NO_SHIM);
		return;
	case RDMA_C_ACCEPTED:
		/* Stop any SWITCH_AT still in flight from completing, then
		 * look once more: one that got in commits us. */
		shim_rdma_qp_error(c);
		shim_rdma_reap(c);
		if (!c->peer_at_known)
			shim_rdma_give_up(s, fd, SHIM_REASON_CM_TIMEOUT);
		return;
	case RDMA_S_ADDR:
	case RDMA_S_ROUTE:
	case RDMA_S_CONNECT:
		shim_rdma_give_up(s, fd, SHIM_REASON_CM_TIMEOUT);
		return;
	default:
		return;
	}
}

static void warm_wait(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now);

void shim_rdma_progress(struct shim_sock *s, int fd, unsigned long long now)
{
	struct rdma_conn *c = s->rdma;
	struct rdma_cm_event *raw;

	if (!c) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	if (c->pid != getpid()) {
		/* Before any direction moved, the child ends on TCP; after, the
		 * connection is the parent's (README: a connection upgraded
		 * before fork is used by one process only). */
		if (s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP) {
			shim_rdma_forget_inherited(s);
			shim_upgrade_fail(s, fd, SHIM_REASON_RDMA_INHERITED);
		}
		return;
	}
	if (c->step == RDMA_WARMING) {
		warm_wait(s, fd, c, now);
		return;
	}
	/* Completions first: a SWITCH_AT from S proves it committed, even if
	 * its DISCONNECTED (a short connection) is already queued behind. */
	shim_rdma_reap(c);
	while (rdma_get_cm_event(c->ec, &raw) == 0) {
		struct cm_ev ev = { .e = raw->event, .status = raw->status, .id = raw->id };

		if (raw->param.conn.private_data) {
			ev.plen = raw->param.conn.private_data_len;
			if (ev.plen > sizeof(ev.pdata))
				ev.plen = sizeof(ev.pdata);
			memcpy(ev.pdata, raw->param.conn.private_data, ev.plen);
		}
		rdma_ack_cm_event(raw);
		on_event(s, fd, c, &ev, now);
		if (s->rdma != c)
			return; /* failed and torn down */
		if (c->listen_id && c->step != RDMA_C_LISTEN) {
			/* Accepted: free C's (IP, port) in the rdma_cm space (after
			 * the ack: destroying an id waits for its events' acks). */
			rdma_destroy_id(c->listen_id);
			c->listen_id = NULL;
		}
	}
	if (c->step == RDMA_S_RETRY) {
		if (now >= s->next_try_ns)
			s_resolve(s, fd, c);
		return;
	}
	shim_rdma_reap(c);
	if (c->step == RDMA_C_ACCEPTED && (c->established || c->peer_at_known)) {
		c->established = true;
		c->step = RDMA_CONNECTED;
	}
	if (c->step != RDMA_CONNECTED) {
		check_deadline(s, fd, c, now);
		return;
	}
	shim_rdma_connected(s, fd, c);
}

/* The first steps, once the process is warm (s->deadline_ns restarted). */
static void begin(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	c->ec = rdma_create_event_channel();
	if (!c->ec || REAL(fcntl)(c->ec->fd, F_SETFL, REAL(fcntl)(c->ec->fd, F_GETFL) | O_NONBLOCK) < 0) {
		shim_rdma_give_up(s, fd, SHIM_REASON_NO_RDMA_DEVICE);
		return;
	}
	REAL(fcntl)(c->ec->fd, F_SETFD, FD_CLOEXEC);
	if (s->role == SHIM_ROLE_CLIENT)
		c_listen(s, fd, c);
	else
		s_resolve(s, fd, c);
}

static void warm_wait(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	int st = shim_rdma_warm_poll();

	if (st == WARM_READY) {
		/* The upgrade's own time starts now. */
		s->deadline_ns = now + (unsigned long long)shim_cfg.upgrade_timeout_ms * MS_NS;
		begin(s, fd, c);
	} else if (shim_rdma_warm_verdict(st) != SHIM_REASON_NONE) {
		shim_rdma_give_up(s, fd, shim_rdma_warm_verdict(st));
	} else if (now >= c->step_deadline_ns) {
		shim_rdma_give_up(s, fd, SHIM_REASON_RDMA_WARMING);
	}
}

void shim_rdma_start(struct shim_sock *s, int fd, unsigned long long now)
{
	struct rdma_conn *c;
	int st = shim_rdma_warm_poll();

	if (shim_rdma_warm_verdict(st) != SHIM_REASON_NONE) {
		shim_upgrade_fail(s, fd, shim_rdma_warm_verdict(st));
		return;
	}
	if (s->role == SHIM_ROLE_SERVER) {
		enum shim_breaker_verdict v =
			shim_breaker_check(shim_breaker_global(), s->tuple.peer.addr, shim_breaker_now_ms());

		if (v == SHIM_BREAKER_SKIP) {
			shim_upgrade_fail(s, fd, SHIM_REASON_BREAKER_OPEN);
			return;
		}
		if (v == SHIM_BREAKER_PROBE)
			SHIM_TRACE(SHIM_TRACE_INFO, "breaker.probe", fd, &s->tuple, SHIM_REASON_NONE, NULL);
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	c->sock = s;
	c->fd = fd;
	c->ring_bytes = shim_cfg.ring_kb * 1024u;
	c->pid = getpid();
	c->step = RDMA_WARMING;
	c->step_deadline_ns = now + shim_rdma_warm_wait_ns();
	s->rdma = c;
	s->phase = SHIM_PHASE_RDMA;
	s->io_pid = getpid();
	s->deadline_ns = now + (unsigned long long)shim_cfg.upgrade_timeout_ms * MS_NS;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.start", fd, &s->tuple, SHIM_REASON_NONE,
		   "\"role\":\"%s\",\"transport\":\"rdma\"", shim_role_name(s->role));
	if (st == WARM_READY)
		begin(s, fd, c);
}
