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
#include <sys/socket.h>
#include <unistd.h>

#include <endian.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "breaker.h"
#include "faults.h"
#include "frames.h"
#include "real.h"
#include "self.h"
#include "stats.h"
#include "trace.h"
#include "rdma_post.h"
#include "rdma_qp.h"
#include "rdma_port.h"
#include "upgrade.h"

/* IB CM reject reason when nobody listens on the service id. */
#define REJ_INVALID_SERVICE_ID 8
#define MS_NS 1000000ull

/* A connection's memory that could not be had or registered (ENOMEM:
 * ibv_reg_mr past the memlock limit) is the ring's failure. */
static enum shim_reason reg_reason(int rc)
{
	return rc == -ENOMEM ? SHIM_REASON_RING_ALLOC_FAILED : SHIM_REASON_INTERNAL_ERROR;
}

/* ---- C: listen, accept ---- */

static void c_cm_listen(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	struct sockaddr_storage ss;
	int rc;

	shim_rdma_sockaddr(&s->tuple.local, s->tuple.local.port, &ss);
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
	c->listen_ns = shim_now_ns();
}

static void c_connect_request(struct shim_sock *s, int fd, struct rdma_conn *c, struct rdma_cm_id *child,
			      const void *pdata, size_t plen)
{
	struct shim_endpoint src;
	struct sockaddr *sa = rdma_get_peer_addr(child);
	struct shim_rdma_hello accept;
	struct rdma_conn_param param;
	int rc = -EPROTO;

	/* S took rdma_cm's way: an OFFER of ours on a link is left unanswered
	 * (before the hello below, which the link's state must not undo). */
	if (c->step == RDMA_C_LISTEN)
		shim_rdma_link_withdraw(c);
	/* The OFFER must come from the TCP peer's host (the trust unit). */
	if (c->step != RDMA_C_LISTEN ||
	    shim_endpoint_from_sockaddr(sa, sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
								       : sizeof(struct sockaddr_in6), &src) < 0 ||
	    memcmp(src.addr, s->tuple.peer.addr, 16) != 0 ||
	    shim_rdma_take_hello(c, pdata, plen, SHIM_RDMA_OFFER, s->tx_nonce) < 0) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rv.refused", fd, &s->tuple, SHIM_REASON_VERIFY_FAILED,
			   "\"side\":\"client\",\"transport\":\"rdma\"");
		shim_stats_count(SHIM_REASON_VERIFY_FAILED);
		rdma_reject(child, NULL, 0);
		rdma_destroy_id(child);
		return;
	}
	/* Shadow mode's cut on C: S proved it is the TCP peer's host and a
	 * shim (its OFFER); C withdraws before its ACCEPT, so S, which has
	 * committed nothing, stays on TCP (shim/PROTOCOL.md, "Shadow"). */
	if (shim_cfg.shadow) {
		shim_rdma_shadow_reject(child);
		rdma_destroy_id(child);
		shim_rdma_shadow_cut(s, fd);
		return;
	}
	/* Test-only (faults.h, cm_reject): refused as a peer out of QPs
	 * refuses; S reads REJECTED. Our attempt ends with it. */
	if (shim_fault_hit(SHIM_FAULT_CM_REJECT, fd, &s->tuple, "connect_request")) {
		rdma_reject(child, NULL, 0);
		rdma_destroy_id(child);
		shim_rdma_give_up(s, fd, SHIM_REASON_CM_REJECTED);
		return;
	}
	c->id = child;
	rc = shim_rdma_make_qp(c);
	if (rc == 0)
		rc = shim_rdma_qp_to(c, IBV_QPS_RTR);
	if (rc == 0)
		rc = shim_rdma_qp_to(c, IBV_QPS_RTS);
	if (rc == 0)
		rc = shim_upgrade_new_nonce(s->rx_nonce);
	if (rc == 0) {
		shim_rdma_fill_hello(c, &accept, SHIM_RDMA_ACCEPT, s->rx_nonce);
		shim_rdma_conn_param(c, &param, &accept, sizeof(accept));
		c->link_told_peer = true;
		rc = rdma_accept(child, &param) ? -errno : 0;
	}
	if (rc < 0) {
		/* A request that waited in our queue past the server's bound on
		 * its connect step (a loaded host: seen after 24 s) was given up
		 * by the server (cm_timeout there), and its CM's reject reached
		 * ours first: the kernel then refuses the child's QP attributes
		 * (EINVAL). The handshake's time ran out; nothing of ours broke. */
		bool late = rc == -EINVAL &&
			    shim_now_ns() - c->listen_ns >= (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS;

		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.accept_failed", fd, &s->tuple, SHIM_REASON_NONE,
			   "\"errno\":%d,\"late\":%s", -rc, late ? "true" : "false");
		rdma_reject(child, NULL, 0);
		shim_rdma_give_up(s, fd, late ? SHIM_REASON_CM_TIMEOUT : reg_reason(rc));
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

	shim_rdma_sockaddr(&s->tuple.local, 0, &src);
	shim_rdma_sockaddr(&s->tuple.peer, s->tuple.peer.port, &dst);
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
	int rc = shim_rdma_make_qp(c);

	if (rc == 0 && shim_upgrade_new_nonce(s->rx_nonce) < 0)
		rc = -EIO;
	if (rc == 0) {
		shim_rdma_fill_hello(c, &offer, SHIM_RDMA_OFFER, s->rx_nonce);
		shim_rdma_conn_param(c, &param, &offer, sizeof(offer));
		c->link_told_peer = true;
		rc = rdma_connect(c->id, &param) ? -errno : 0;
	}
	if (rc < 0) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.connect_failed", fd, &s->tuple, SHIM_REASON_NONE, "\"errno\":%d", -rc);
		shim_rdma_give_up(s, fd, reg_reason(rc));
		return;
	}
	c->step = RDMA_S_CONNECT;
	c->step_deadline_ns = shim_now_ns() + (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.offer", fd, &s->tuple, SHIM_REASON_NONE, "\"transport\":\"rdma\"");
}

static void s_connect_response(struct shim_sock *s, int fd, struct rdma_conn *c, const void *pdata, size_t plen)
{
	int rc = shim_rdma_take_hello(c, pdata, plen, SHIM_RDMA_ACCEPT, s->tx_nonce);

	/* Shadow mode's cut on S: C proved itself (its ACCEPT); S withdraws
	 * before the RTU, the last point where it may, and C, which switches
	 * nothing before it, stays on TCP. C answered: the breaker counts a
	 * success. */
	if (rc == 0 && shim_cfg.shadow) {
		shim_breaker_record(shim_breaker_global(), s->tuple.peer.addr, true, shim_breaker_now_ms());
		shim_rdma_shadow_reject(c->id);
		shim_rdma_shadow_cut(s, fd);
		return;
	}
	if (rc == 0)
		rc = shim_rdma_qp_to(c, IBV_QPS_RTR);
	if (rc == 0)
		rc = shim_rdma_qp_to(c, IBV_QPS_RTS);
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
	shim_rdma_link_up(c->link);
}

/* S: nobody listened (C not there yet, or a plain peer): try again. */
static void s_retry(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	if (!shim_upgrade_retry_later(s, now)) {
		shim_rdma_give_up(s, fd, SHIM_REASON_PEER_NO_SHIM);
		return;
	}
	shim_rdma_drop_qp(c);
	if (c->id) {
		rdma_destroy_id(c->id);
		c->id = NULL;
	}
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

/* A peer in shadow mode rejects with its marker: reason shadow, which
 * the breaker does not count (the peer answered). */
static enum shim_reason reason_of_rej(const struct cm_ev *ev)
{
	if (ev->e == RDMA_CM_EVENT_REJECTED && shim_rdma_rej_is_shadow(ev->pdata, ev->plen))
		return SHIM_REASON_SHADOW;
	return reason_of(ev->e);
}

static void on_event(struct shim_sock *s, int fd, struct rdma_conn *c, const struct cm_ev *ev,
		     unsigned long long now)
{
	enum rdma_cm_event_type e = ev->e;

	SHIM_TRACE(SHIM_TRACE_DEBUG, "rdma.cm", fd, &s->tuple, SHIM_REASON_NONE,
		   "\"event\":\"%s\",\"status\":%d,\"step\":%d", rdma_event_str(e), ev->status, c->step);
	/* Test-only (faults.h, cm_timeout): the answer is lost; the step's
	 * deadline ends it (check_deadline), as a resolution that timed out. */
	if (((c->step == RDMA_S_ADDR && e == RDMA_CM_EVENT_ADDR_RESOLVED) ||
	     (c->step == RDMA_S_ROUTE && e == RDMA_CM_EVENT_ROUTE_RESOLVED)) &&
	    shim_fault_hit(SHIM_FAULT_CM_TIMEOUT, fd, &s->tuple, c->step == RDMA_S_ADDR ? "addr" : "route"))
		return;
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
		if (!shim_rdma_peer_at_known(c))
			shim_rdma_give_up(s, fd, reason_of_rej(ev));
		else if (e == RDMA_CM_EVENT_DISCONNECTED || e == RDMA_CM_EVENT_TIMEWAIT_EXIT)
			c->peer_disconnected = true; /* see RDMA_CONNECTED */
		return;
	case RDMA_S_ADDR:
		if (e == RDMA_CM_EVENT_ADDR_RESOLVED) {
			/* The port the address maps to is down (rdma_port.h):
			 * no round trip that can only time out. */
			if (shim_rdma_port_down(c->id->verbs, c->id->port_num)) {
				shim_rdma_give_up(s, fd, SHIM_REASON_RDMA_PORT_DOWN);
				return;
			}
			/* Its fault counters are over their limits: the breaker
			 * is open for the port until they are quiet. */
			if (shim_rdma_port_faulty(c->id->verbs, c->id->port_num)) {
				shim_rdma_give_up(s, fd, SHIM_REASON_RDMA_PORT_FAULTY);
				return;
			}
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
	case RDMA_S_CONNECT: {
		enum shim_reason why = reason_of_rej(ev);

		if (e == RDMA_CM_EVENT_CONNECT_RESPONSE)
			s_connect_response(s, fd, c, ev->pdata, ev->plen);
		else if (why == SHIM_REASON_SHADOW && shim_cfg.shadow)
			/* Both ends in shadow: C proved itself by its marker,
			 * from the TCP peer's address we connected to. */
			shim_rdma_shadow_cut(s, fd);
		else if (why != SHIM_REASON_SHADOW && e == RDMA_CM_EVENT_REJECTED && ev->status == REJ_INVALID_SERVICE_ID)
			s_retry(s, fd, c, now);
		else
			shim_rdma_give_up(s, fd, why);
		return;
	}
	case RDMA_CONNECTED:
		/* The peer stopped its channel (a failover, a close) while ours
		 * still settles: the data path notices on its own (completion
		 * errors, TCP EOF), but a wait for a completion (our SWITCH_AT's)
		 * looks for this event, which this loop took: keep it, or that
		 * wait lasts until its timeout (rdma_post.c, cm_disconnected). */
		if (e == RDMA_CM_EVENT_DISCONNECTED || e == RDMA_CM_EVENT_TIMEWAIT_EXIT)
			c->peer_disconnected = true;
		return;
	case RDMA_WARMING:
	case RDMA_S_RETRY:
	case RDMA_S_LINK_WAIT:
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
		if (!shim_rdma_peer_at_known(c))
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
static void link_step(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now);

void shim_rdma_progress(struct shim_sock *s, int fd, unsigned long long now)
{
	struct rdma_conn *c = s->neg;
	struct rdma_cm_event *raw;

	if (!c) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	if (c->pid != shim_self_pid()) {
		/* Before any direction moved, the child ends on TCP; after, the
		 * connection is the parent's (docs/LIMITS.md: a connection upgraded
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
	if (c->step == RDMA_S_LINK_WAIT) {
		link_step(s, fd, c, now);
		return;
	}
	/* A link to the server's endpoint came up while we listen (a burst:
	 * S waits for it rather than make another): offer on it now. */
	if (c->step == RDMA_C_LISTEN)
		shim_rdma_link_offer(s, fd, c);
	if (c->step == RDMA_C_LISTEN && shim_rdma_link_accepted(s, fd, c)) {
		/* S took our OFFER on the link: our listener goes, what it
		 * queued acked first (rdma_destroy_id waits for that). */
		if (s->neg != c)
			return;
		shim_rdma_drain_cm_events(c);
		rdma_destroy_id(c->listen_id);
		c->listen_id = NULL;
	}
	/* Once the link is up its CM events are its own (rdma_link.c). A
	 * listener of ours beside an OFFER on a link has its own channel: S
	 * may take rdma_cm's way all the same, and its connect request must
	 * be seen (it was not: such an upgrade waited out its bounds). */
	while (c->ec && !(c->link && c->link->cm_owned && c->link->ec == c->ec) && rdma_get_cm_event(c->ec, &raw) == 0) {
		struct cm_ev ev = { .e = raw->event, .status = raw->status, .id = raw->id };

		if (raw->param.conn.private_data) {
			ev.plen = raw->param.conn.private_data_len;
			if (ev.plen > sizeof(ev.pdata))
				ev.plen = sizeof(ev.pdata);
			memcpy(ev.pdata, raw->param.conn.private_data, ev.plen);
		}
		rdma_ack_cm_event(raw);
		on_event(s, fd, c, &ev, now);
		if (s->neg != c)
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
	if (c->step == RDMA_C_ACCEPTED && (c->established || shim_rdma_peer_at_known(c))) {
		c->established = true;
		c->step = RDMA_CONNECTED;
		shim_rdma_link_up(c->link);
	}
	if (c->step != RDMA_CONNECTED) {
		check_deadline(s, fd, c, now);
		return;
	}
	shim_rdma_connected(s, fd, c);
}

static bool make_ec(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	if (c->ec)
		return true;
	c->ec = rdma_create_event_channel();
	if (!c->ec || REAL(fcntl)(c->ec->fd, F_SETFL, REAL(fcntl)(c->ec->fd, F_GETFL) | O_NONBLOCK) < 0) {
		shim_rdma_give_up(s, fd, SHIM_REASON_NO_RDMA_DEVICE);
		return false;
	}
	REAL(fcntl)(c->ec->fd, F_SETFD, FD_CLOEXEC);
	return true;
}

/* The rdma_cm way: a rendezvous of this connection's own, and a new link. */
static void begin_cm(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	if (!make_ec(s, fd, c))
		return;
	if (s->role == SHIM_ROLE_CLIENT) {
		c_cm_listen(s, fd, c);
		return;
	}
	shim_rdma_link_making_mark(s, c);
	s_resolve(s, fd, c);
}

/* The first steps, once the process is warm (s->deadline_ns restarted):
 * S takes an OFFER on a link (or waits for one while a link goes to C's
 * host), else rdma_cm; C listens with rdma_cm and also offers on a link to
 * the server's endpoint if it has one (rdma_link_join.c). */
static void begin(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	if (shim_rdma_link_begin(s, fd, c, now))
		return;
	begin_cm(s, fd, c);
	if (s->neg == c && c->step == RDMA_C_LISTEN)
		shim_rdma_link_offer(s, fd, c);
}

/* S waits for C's OFFER on the link; when none comes in time, the
 * rdma_cm way. */
static void link_step(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	if (!shim_rdma_link_progress(s, fd, c, now))
		begin_cm(s, fd, c);
	else if (s->neg == c && c->step == RDMA_CONNECTED)
		shim_rdma_connected(s, fd, c);
}

static void warm_wait(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	int st = shim_rdma_warm_poll();

	if (st == WARM_READY) {
		/* The upgrade's own time starts now. */
		shim_upgrade_arm_deadline(s, now);
		begin(s, fd, c, now);
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
	c->pid = shim_self_pid();
	c->step = RDMA_WARMING;
	c->step_deadline_ns = now + shim_rdma_warm_wait_ns();
	/* The peer may commit from its first step on (S once it has sent its
	 * SWITCH_AT, which can come before our ESTABLISHED): every TCP read
	 * looks for its offset, and close or pin can not stop it (the
	 * release does). */
	shim_upgrade_negotiating(s, c);
	shim_upgrade_committing(s);
	s->io_pid = shim_self_pid();
	shim_upgrade_arm_deadline(s, now);
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.start", fd, &s->tuple, SHIM_REASON_NONE,
		   "\"role\":\"%s\",\"transport\":\"rdma\"", shim_role_name(s->role));
	if (st == WARM_READY)
		begin(s, fd, c, now);
}

/* RDMA reaches any peer (even one on this host, when listed before shm). */
static enum shim_reason rdma_transport_fits(const struct shim_tuple *t)
{
	(void)t;
	return SHIM_REASON_NONE;
}

const struct shim_transport_type shim_rdma_transport = {
	.kind = SHIM_TRANSPORT_RDMA,
	.fits = rdma_transport_fits,
	.warm = shim_rdma_warm_kick,
	.start = shim_rdma_start,
	.progress = shim_rdma_progress,
	.release = shim_rdma_release,
	.neg_is_chan = true,
	.chan_ops = &shim_rdma_ops,
};
