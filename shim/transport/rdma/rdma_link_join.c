/*
 * A connection set up over a link that is up already (shim/PROTOCOL.md,
 * "Links"): C sends OFFER {the four addresses, its hello} on the link it
 * holds to the server's endpoint; the server process that holds the TCP
 * connection takes it (shim_rdma_link_claim) and answers ACCEPT {its
 * hello}. One message each way, no rdma_cm step, no QP. The switch and its
 * proof are then those of any RDMA connection (rdma_switch.c): the nonces
 * travelled only on the link, to the process at its other end, and each
 * end posts nothing before the peer's SWITCH frame on TCP carried them.
 *
 * The process at the link's far end may not hold the connection (a
 * prefork server's other process), so C also listens with rdma_cm as
 * always, and follows whichever way S takes: S takes exactly one (an OFFER
 * it claimed, or rdma_cm's connect). S waits for an OFFER only while a link
 * to C's host exists, at most 200 ms, then takes rdma_cm's way.
 *
 * A burst: once SHIM_LINK_MAKING_MAX connections of S's make links toward
 * C's host by rdma_cm, the next ones wait (half the CM bound at most) for
 * those and then for C's OFFER on one, instead of making a link each,
 * while the links up and on their way have room for every waiter
 * (shim_rdma_link_room_coming); C, still listening, sends its OFFER once
 * a link to the server's endpoint is there (at most one OFFER).
 */
#include "rdma.h"

#include <string.h>

#include <endian.h>

#include "rdma_post.h"
#include "rdma_qp.h"
#include "trace.h"
#include "upgrade.h"

#define MS_NS 1000000ull

/* S waits for an OFFER a quarter of the CM bound, at most 200 ms, and
 * takes none older than the CM bound (C listens that long at least). */
static unsigned long long s_wait_ns(void)
{
	unsigned long long w = (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS / 4;

	return w < 200 * MS_NS ? w : 200 * MS_NS;
}

/* S waits for a link being made at most half the CM bound: rdma_cm's way
 * still fits in the upgrade's time after it (when that link fails, or
 * goes to another process of C's host). */
static unsigned long long s_link_wait_ns(void)
{
	return (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS / 2;
}

static void trace_join(struct shim_sock *s, int fd, const struct rdma_conn *c, const char *event)
{
	SHIM_TRACE(SHIM_TRACE_INFO, "rdma.link", fd, &s->tuple, SHIM_REASON_NONE,
		   "\"state\":\"%s\",\"link\":%u,\"conns\":%u,\"id\":%u", event, c->link ? c->link->num : 0,
		   c->link ? c->link->live : 0, c->link_id);
}

static void fill_msg(struct shim_rdma_link_msg *m, uint8_t type, uint32_t to_id)
{
	memset(m, 0, sizeof(*m));
	m->magic = htobe32(SHIM_RDMA_MAGIC);
	m->version = SHIM_RDMA_VERSION;
	m->type = type;
	m->to_id = htobe32(to_id);
}

/* Leaves the link (our memory stays with it until the peer released it)
 * and resets what the rdma_cm way starts from. */
static void drop_link(struct rdma_conn *c)
{
	if (c->on_link)
		shim_rdma_link_leave(c);
	/* A break of that link (its peer process exited while our OFFER
	 * waited) is no break of the channel rdma_cm's way makes next; after
	 * leave, the link's reaper no longer reaches us. */
	__atomic_store_n(&c->broken, false, __ATOMIC_RELAXED);
	__atomic_store_n(&c->violated, false, __ATOMIC_RELAXED);
	c->peer_id_known = c->link_told_peer = false;
	c->remote_addr = 0;
	c->recv_posted = c->recv_reported = 0;
	__atomic_store_n(&c->accept_in, false, __ATOMIC_RELAXED);
}

/* Our memory on the link's PD and a place on it; the caller's reference to
 * l is handed to the place. */
static int join(struct rdma_conn *c, struct rdma_link *l)
{
	int rc = shim_rdma_conn_memory(c, l->pd);

	if (rc == 0)
		rc = shim_rdma_link_attach(l, c);
	shim_rdma_link_put(l);
	return rc;
}

/*
 * C: an OFFER that never went out (no place on the link, no memory on its
 * PD, the post failed) is tried again, on whichever link has room then.
 * Marking it sent for good left C listening while S, told a link had room
 * for it, waited for the OFFER (a burst: one connection of 32 stayed on
 * TCP, its server waiting until the program's last call on it).
 */
#define OFFER_AGAIN_NS (20 * MS_NS)

static void offer_failed(struct shim_sock *s, int fd, struct rdma_conn *c, const char *stage)
{
	drop_link(c);
	c->offered = false;
	c->offer_again_ns = shim_now_ns() + OFFER_AGAIN_NS;
	SHIM_TRACE(SHIM_TRACE_WARN, "rdma.link", fd, &s->tuple, SHIM_REASON_NONE, "\"state\":\"offer_failed\",\"stage\":\"%s\"",
		   stage);
}

void shim_rdma_link_offer(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	struct shim_rdma_link_msg m;
	struct rdma_link *l;

	/* A shut write side carries no SWITCH frame: rdma_cm's way says so. */
	if (!shim_rdma_links_on() || s->wr_shut || c->offered)
		return;
	if (c->offer_again_ns && shim_now_ns() < c->offer_again_ns)
		return;
	l = shim_rdma_link_for_server(&s->tuple.peer);
	if (!l)
		return;
	c->offered = true;
	if (join(c, l) < 0) {
		offer_failed(s, fd, c, "join");
		return;
	}
	if (shim_upgrade_new_nonce(s->rx_nonce) < 0) {
		offer_failed(s, fd, c, "nonce");
		return;
	}
	fill_msg(&m, SHIM_RDMA_LINK_OFFER, 0);
	memcpy(m.client_addr, s->tuple.local.addr, 16);
	memcpy(m.server_addr, s->tuple.peer.addr, 16);
	m.client_port = htobe16(s->tuple.local.port);
	m.server_port = htobe16(s->tuple.peer.port);
	shim_rdma_fill_hello(c, &m.hello, SHIM_RDMA_OFFER, s->rx_nonce);
	c->link_told_peer = true;
	if (!shim_rdma_link_send(c->link, &m, sizeof(m))) {
		offer_failed(s, fd, c, "send");
		return;
	}
	trace_join(s, fd, c, "offer");
}

void shim_rdma_link_withdraw(struct rdma_conn *c)
{
	if (c->on_link && !c->installed)
		drop_link(c);
}

/* Both ends: the hello checked, the channel installed, as after rdma_cm's
 * ESTABLISHED. */
static void joined(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	s->chan = &c->chan;
	c->installed = true;
	c->established = true;
	c->step = RDMA_CONNECTED;
	trace_join(s, fd, c, "join");
}

/* S: an OFFER for this connection, taken: our ACCEPT, and we are set.
 * false: none, or the link could take no more connections (then C's
 * memory is released to it, and rdma_cm's way follows, which C listens
 * for too). */
static bool s_take_offer(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	struct shim_rdma_link_msg offer, m;
	struct rdma_link *l;
	int rc;

	if (!shim_rdma_link_claim(&s->tuple, (unsigned long long)shim_cfg.cm_timeout_ms * MS_NS, &l, &offer))
		return false;
	if (shim_rdma_take_hello(c, &offer.hello, sizeof(offer.hello), SHIM_RDMA_OFFER, s->tx_nonce) < 0) {
		shim_rdma_link_release_to(l, be32toh(offer.hello.conn_id));
		shim_rdma_link_put(l);
		shim_rdma_give_up(s, fd, SHIM_REASON_HANDSHAKE_MALFORMED);
		return true;
	}
	rc = shim_rdma_conn_memory(c, l->pd);
	if (rc == 0)
		rc = shim_rdma_link_attach(l, c);
	if (rc == 0)
		rc = shim_upgrade_new_nonce(s->rx_nonce);
	if (rc < 0) {
		uint32_t peer_id = c->peer_id;

		drop_link(c);
		shim_rdma_link_release_to(l, peer_id);
		shim_rdma_link_put(l);
		return false;
	}
	shim_rdma_link_put(l); /* the place holds its own */
	fill_msg(&m, SHIM_RDMA_LINK_ACCEPT, c->peer_id);
	shim_rdma_fill_hello(c, &m.hello, SHIM_RDMA_ACCEPT, s->rx_nonce);
	c->link_told_peer = true;
	if (!shim_rdma_link_send(c->link, &m, sizeof(m))) {
		shim_rdma_give_up(s, fd, SHIM_REASON_CHAN_FAILED);
		return true;
	}
	joined(s, fd, c);
	return true;
}

bool shim_rdma_link_begin(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	enum shim_link_toward toward;

	if (!shim_rdma_links_on() || s->role != SHIM_ROLE_SERVER)
		return false;
	if (s_take_offer(s, fd, c))
		return true;
	toward = shim_rdma_link_toward(&s->tuple.peer);
	if (toward == SHIM_LINK_ROOM) {
		c->link_wait_ns = now + s_wait_ns();
		c->step = RDMA_S_LINK_WAIT;
		return true;
	}
	/* None with room. With none up at all (the start of a burst, or a
	 * few connections at once), ours is made now beside up to 3 others:
	 * they do not wait for one link's rdma_cm round trips (seconds under
	 * emulation). Past that, or once links to C's host are up and full,
	 * we wait for those on their way while they have room for every
	 * waiter, this one counted (room_coming holds while 4 are on their
	 * way). */
	if (toward == SHIM_LINK_NONE && shim_rdma_link_makings(&s->tuple.peer) < SHIM_LINK_MAKING_MAX)
		return false;
	shim_rdma_link_waiting_mark(s, c);
	if (toward == SHIM_LINK_FULL && !shim_rdma_link_room_coming(&s->tuple.peer)) {
		shim_rdma_link_waiting_done(c);
		return false;
	}
	c->waits_for_link = true;
	c->link_wait_ns = now + s_link_wait_ns();
	trace_join(s, fd, c, "wait_link");
	c->step = RDMA_S_LINK_WAIT;
	return true;
}

bool shim_rdma_link_accepted(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	struct shim_rdma_link_msg m;

	/* Acquire: pairs with the reaper's release in take_accept(). */
	if (!c->on_link || !__atomic_load_n(&c->accept_in, __ATOMIC_ACQUIRE))
		return false;
	m = c->accept_msg;
	if (shim_rdma_take_hello(c, &m.hello, sizeof(m.hello), SHIM_RDMA_ACCEPT, s->tx_nonce) < 0) {
		shim_rdma_give_up(s, fd, SHIM_REASON_HANDSHAKE_MALFORMED);
		return true;
	}
	joined(s, fd, c);
	return true;
}

bool shim_rdma_link_progress(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now)
{
	bool waits;

	if (s_take_offer(s, fd, c)) {
		shim_rdma_link_waiting_done(c);
		return true;
	}
	/* While the links with room and those on their way can take every
	 * waiter, C's OFFER comes at C's next step on this connection, which
	 * the program's calls carry (served in turn, a round later): a short
	 * wait here made a link of its own for each connection whose C had
	 * not stepped yet, 61 links for 1000 connections. Less room than
	 * waiters (a link failed, or came up full): ours now. */
	if (c->waits_for_link && now < c->link_wait_ns)
		waits = shim_rdma_link_room_coming(&s->tuple.peer);
	else
		waits = now < c->link_wait_ns;
	if (!waits) {
		shim_rdma_link_waiting_done(c);
		/* No offer came in time, or the links coming have no room
		 * for us: this connection makes a link of its own, rdma_cm's
		 * way. Traced, so that each link beyond what the connections
		 * needed is explained (a loaded host cuts many waits short). */
		trace_join(s, fd, c, now >= c->link_wait_ns ? "wait_over" : "wait_no_room");
	}
	return waits;
}
