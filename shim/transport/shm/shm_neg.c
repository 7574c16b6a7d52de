/*
 * The shared-memory transport's negotiation, over a unix-socket rendezvous
 * beside TCP (shim/PROTOCOL.md, "Upgrade handshake"): C listens, S connects
 * and OFFERs, C ACCEPTs with the memfd, S maps it and commits first.
 *
 * Point of no return: C switches its direction only after its ACCEPT went
 * out, and S never abandons the handshake once it has sent its OFFER except
 * when the rendezvous closes (then C can not have sent an ACCEPT, since S
 * reads the queued ACCEPT before it sees the close). So the two ends never
 * disagree about where a direction's bytes travel.
 *
 * Outcomes go through conn's upgrade services (upgrade.h); the state of one
 * negotiation is a struct shm_neg at s->neg, gone when it ends.
 */
#include "shm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frames.h"
#include "real.h"
#include "rendezvous.h"
#include "stats.h"
#include "trace.h"
#include "upgrade.h"
#include "wire.h"

/* Strangers C refuses on one connection's rendezvous before it gives the
 * upgrade up (the connection stays on TCP, reason rate_limited): another
 * local user can name the rendezvous of any connection (the 4-tuple is in
 * /proc/net/tcp), and each refusal costs us an accept and a credential
 * check, so the work one connection can be made to do stays bounded. */
#define RV_MAX_REFUSALS 16

/* rv.refused lines, per process: 20 at once, then 10 a second. */
static struct shim_trace_budget refused_lines = { .burst = 20, .per_sec = 10 };


enum shm_step {
	SHM_C_LISTENING, /* C: rendezvous open, waiting for S */
	SHM_C_CONNECTED, /* C: S connected and verified, OFFER awaited */
	SHM_C_ACCEPTED,  /* C: ACCEPT and ring sent, S's SWITCH_AT awaited; nothing switched */
	SHM_S_RETRY,     /* S: C had no rendezvous yet; retry later */
	SHM_S_OFFERED,   /* S: OFFER sent, ACCEPT awaited */
	SHM_S_AWAIT_C,   /* S: ring mapped, SWITCH_AT sent (switched); C's awaited */
};

struct shm_neg {
	enum shm_step step;
	int rv_listen_fd, rv_fd;
	struct shim_rv_owner rv_owner; /* the peer's TCP socket, asked once */
	unsigned rv_refusals;          /* strangers refused on our rendezvous */
	/* C: when it began to listen, and the bytes read by then (a peer
	 * without the shim answers over TCP, never on the rendezvous). */
	unsigned long long listen_ns;
	uint64_t rx_at_listen;
	/* S: the bytes read when C's rendezvous was not there, and whether the
	 * one early retry that new bytes allow was taken (s_retry_due()). */
	uint64_t rx_at_retry;
	bool early_retry_used;
};

/*
 * A peer with the shim connects to our rendezvous from its first call
 * after RDMASHIM_UPGRADE_AFTER_MS, before that call sends a byte. Bytes
 * that came over TCP while we listened, RDMASHIM_PLAIN_PEER_MS after we
 * began, say the peer has none: waiting out RDMASHIM_UPGRADE_TIMEOUT_MS
 * would only slow the connection (each call looks at the rendezvous). A
 * shim peer busy for longer than that between two calls loses the upgrade,
 * not a byte.
 */
static bool peer_answers_plain(const struct shim_sock *s, const struct shm_neg *ng, unsigned long long now)
{
	return shim_cfg.plain_peer_ms && s->rx_tcp_bytes > ng->rx_at_listen &&
	       now - ng->listen_ns >= shim_cfg.plain_peer_ms * 1000000ull;
}

/* Why a rendezvous socket could not be had: the fd limit the shim keeps
 * clear of (fdtable.h), or something unexpected. */
static enum shim_reason local_failure(int rc)
{
	return rc == -EMFILE || rc == -ENFILE ? SHIM_REASON_FD_LIMIT : SHIM_REASON_INTERNAL_ERROR;
}

static struct shm_neg *neg_of(const struct shim_sock *s)
{
	return s->neg;
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		REAL(close)(*fd);
		*fd = -1;
	}
}

/* The negotiation ends (failed, done or released): its fds and state go. */
static void neg_end(struct shim_sock *s)
{
	struct shm_neg *ng = neg_of(s);

	if (!ng)
		return;
	close_fd(&ng->rv_listen_fd);
	close_fd(&ng->rv_fd);
	free(ng);
	s->neg = NULL;
}

static uint32_t ring_bytes(void)
{
	return shim_cfg.ring_kb * 1024u;
}

/* The endpoints as C sees them: C's own first. */
static const struct shim_endpoint *client_ep(const struct shim_sock *s)
{
	return s->role == SHIM_ROLE_CLIENT ? &s->tuple.local : &s->tuple.peer;
}

static const struct shim_endpoint *server_ep(const struct shim_sock *s)
{
	return s->role == SHIM_ROLE_CLIENT ? &s->tuple.peer : &s->tuple.local;
}

/* A refused rendezvous peer, traced within the budget (any local user can
 * make these lines; the stats still count every refusal). */
static void trace_refused(struct shim_sock *s, int fd, const char *side, int err)
{
	unsigned held = 0;

	if (shim_trace_enabled(SHIM_TRACE_WARN) && shim_trace_budget_take(&refused_lines, shim_now_ns(), &held))
		shim_trace_emit(SHIM_TRACE_WARN, "rv.refused", fd, &s->tuple, SHIM_REASON_VERIFY_FAILED,
				"\"side\":\"%s\",\"errno\":%d,\"held_back\":%u", side, err, held);
}

static void s_connect(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = neg_of(s);
	struct shim_msg_offer offer;
	int rv, rc;

	rv = shim_rv_connect(client_ep(s), server_ep(s));
	if (rv == -ENOENT || rv == -ECONNREFUSED) {
		if (!shim_upgrade_retry_later(s, now)) {
			shim_upgrade_fail(s, fd, SHIM_REASON_PEER_NO_SHIM);
			return;
		}
		ng->step = SHM_S_RETRY;
		ng->rx_at_retry = s->rx_tcp_bytes;
		return;
	}
	if (rv < 0) {
		shim_upgrade_fail(s, fd, local_failure(rv));
		return;
	}
	ng->rv_fd = rv;
	/* The listener must belong to the user who owns C's end of the TCP
	 * connection; anything else is a squatter on the name. */
	rc = shim_rv_verify_peer(rv, client_ep(s), server_ep(s), SHIM_RV_USER_ONLY, &ng->rv_owner);
	if (rc == -ENOENT) {
		/* C's TCP socket is gone (sock_diag): nothing left to join. */
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	if (rc < 0) {
		trace_refused(s, fd, "server", -rc);
		shim_upgrade_fail(s, fd, SHIM_REASON_VERIFY_FAILED);
		return;
	}
	memset(&offer, 0, sizeof(offer));
	shim_msg_init(&offer.hdr, SHIM_MSG_OFFER, sizeof(offer));
	offer.ring_bytes = ring_bytes();
	offer.tcp_fd = fd;
	if (shim_upgrade_new_nonce(s->rx_nonce) < 0) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	memcpy(offer.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	if (shim_rv_send(rv, &offer, sizeof(offer), -1) < 0) {
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	ng->step = SHM_S_OFFERED;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.offer", fd, &s->tuple, SHIM_REASON_NONE, NULL);
}

/*
 * S tries C's rendezvous again after the back-off, or once at once when
 * bytes came since the last try: a C with the shim opens its rendezvous in
 * its first data call once due, before that call sends, so bytes that
 * arrive after our miss were most likely sent by such a call (a C older
 * than us is due no later than we are). Once only: a peer without the
 * shim sends on and must not cost a connect per read.
 */
static bool s_retry_due(struct shim_sock *s, struct shm_neg *ng, unsigned long long now)
{
	if (now >= s->next_try_ns)
		return true;
	if (ng->early_retry_used || s->rx_tcp_bytes == ng->rx_at_retry)
		return false;
	ng->early_retry_used = true;
	return true;
}

/* Our direction's offset for the peer: where our SWITCH frame will sit, or
 * SHIM_SWITCH_NEVER when our direction stays on TCP. -errno if it could
 * not go out (then we must not switch: the peer would not know where). */
static int send_switch_at(struct shim_sock *s, bool switching)
{
	struct shm_neg *ng = neg_of(s);
	struct shim_msg_switch_at at;

	memset(&at, 0, sizeof(at));
	shim_msg_init(&at.hdr, SHIM_MSG_SWITCH_AT, sizeof(at));
	at.switch_offset = switching ? s->tx_tcp_bytes : SHIM_SWITCH_NEVER;
	return shim_rv_send(ng->rv_fd, &at, sizeof(at), -1);
}

/* May our direction move? Not with our write side shut (no SWITCH frame,
 * no bells can follow), nor while the program closes the connection. */
static bool tx_may_switch(const struct shim_sock *s)
{
	return !s->wr_shut && !s->closing && !s->pinned;
}

/*
 * The peer's SWITCH_AT: its direction moves at that offset (or stays on
 * TCP). Returns false when the offset lies behind what we already read as
 * plain bytes: a peer that breaks the protocol (the connection is reset).
 */
static bool take_peer_switch_at(struct shim_sock *s, int fd, const struct shim_msg_switch_at *at)
{
	if (at->switch_offset == SHIM_SWITCH_NEVER)
		return true;
	if (shim_upgrade_learn_rx_switch(s, fd, at->switch_offset) == 0)
		return true;
	shim_frames_abort(s, fd, SHIM_REASON_PEER_VIOLATION, "switch_offset");
	return false;
}

static void trace_done(struct shim_sock *s, int fd, uint32_t ring)
{
	shim_stats_count(SHIM_REASON_UPGRADED);
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.done", fd, &s->tuple, SHIM_REASON_UPGRADED,
		   "\"role\":\"%s\",\"transport\":\"shm\",\"ring_bytes\":%u,\"tx\":%d,\"rx\":%s",
		   s->role == SHIM_ROLE_CLIENT ? "client" : "server", ring, s->tx_dir,
		   s->rx_switch_known ? "true" : "false");
}

/*
 * S has C's ring. C has not switched: S commits first (its SWITCH_AT, then
 * its frame), so S may still back out here and C simply stays on TCP.
 */
static void s_read_accept(struct shim_sock *s, int fd)
{
	struct shm_neg *ng = neg_of(s);
	union {
		struct shim_msg_accept accept;
		uint8_t raw[SHIM_MSG_MAX + 1];
	} msg;
	struct shim_chan *chan;
	int memfd, rc;
	ssize_t n = shim_rv_recv(ng->rv_fd, &msg, sizeof(msg), &memfd);

	if (n == -EAGAIN)
		return;
	if (n <= 0) {
		/* C gave up before its ACCEPT: both ends stay on TCP. */
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	if (shim_msg_check(&msg, (size_t)n) != SHIM_MSG_ACCEPT || memfd < 0) {
		if (memfd >= 0)
			REAL(close)(memfd);
		shim_upgrade_fail(s, fd, SHIM_REASON_HANDSHAKE_MALFORMED);
		return;
	}
	/*
	 * C's user was checked when we connected; now that it named its fd,
	 * the process on the rendezvous must hold C's TCP socket itself, as C
	 * checked us. This refuses a same-user process that bound C's name
	 * first. A C that closed its socket already (a short connection)
	 * fails it too and stays on TCP, which costs it nothing.
	 */
	rc = shim_rv_verify_peer(ng->rv_fd, client_ep(s), server_ep(s), msg.accept.tcp_fd, &ng->rv_owner);
	if (rc < 0) {
		REAL(close)(memfd);
		/* A C that closes its connection closes the rendezvous first:
		 * its fd is then gone or reused, and that is no spoofing. */
		if (shim_rv_peer_gone(ng->rv_fd, rc)) {
			shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
			return;
		}
		trace_refused(s, fd, "server", -rc);
		shim_upgrade_fail(s, fd, SHIM_REASON_VERIFY_FAILED);
		return;
	}
	/* The ring size is C's choice only up to ours: a larger one would let
	 * the peer park more of our memory than a TCP peer can. */
	if (msg.accept.ring_bytes > ring_bytes()) {
		REAL(close)(memfd);
		SHIM_TRACE(SHIM_TRACE_WARN, "upgrade.ring_refused", fd, &s->tuple, SHIM_REASON_RING_ALLOC_FAILED,
			   "\"ring_bytes\":%u,\"ours\":%u", msg.accept.ring_bytes, ring_bytes());
		shim_upgrade_fail(s, fd, SHIM_REASON_RING_ALLOC_FAILED);
		return;
	}
	rc = shim_shm_attach(memfd, msg.accept.ring_bytes, &chan);
	REAL(close)(memfd);
	if (rc < 0) {
		/* Nothing switched anywhere: C sees our rendezvous close. */
		shim_upgrade_fail(s, fd, SHIM_REASON_RING_ALLOC_FAILED);
		return;
	}
	memcpy(s->tx_nonce, msg.accept.nonce, SHIM_NONCE_LEN);
	/* Our offset first, then the frame, so that C learns it no later than
	 * the frame's bytes can reach it. */
	bool switching = tx_may_switch(s);

	if (send_switch_at(s, switching) < 0) {
		chan->ops->destroy(chan);
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	s->chan = chan;
	if (switching)
		shim_upgrade_switch_tx(s, fd);
	ng->step = SHM_S_AWAIT_C;
	shim_upgrade_committing(s);
	trace_done(s, fd, msg.accept.ring_bytes);
}

/* C's SWITCH_AT (its direction moves), or the rendezvous' end (it stays on
 * TCP: C's write side was shut, or it closed). */
static void s_read_c_switch_at(struct shim_sock *s, int fd)
{
	struct shm_neg *ng = neg_of(s);
	union {
		struct shim_msg_switch_at at;
		uint8_t raw[SHIM_MSG_MAX + 1];
	} msg;
	ssize_t n = shim_rv_recv(ng->rv_fd, &msg, sizeof(msg), NULL);

	if (n == -EAGAIN)
		return;
	neg_end(s);
	shim_upgrade_done(s);
	if (n > 0 && shim_msg_check(&msg, (size_t)n) == SHIM_MSG_SWITCH_AT)
		take_peer_switch_at(s, fd, &msg.at);
	else
		SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.half", fd, &s->tuple, SHIM_REASON_NONE,
			   "\"read\":%zd", n);
}

static void c_rv_listen(struct shim_sock *s, int fd)
{
	struct shm_neg *ng = neg_of(s);
	int rv = shim_rv_listen(client_ep(s), server_ep(s));

	if (rv == -EADDRINUSE) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rv.name_taken", fd, &s->tuple, SHIM_REASON_RENDEZVOUS_BUSY, NULL);
		shim_upgrade_fail(s, fd, SHIM_REASON_RENDEZVOUS_BUSY);
		return;
	}
	if (rv < 0) {
		shim_upgrade_fail(s, fd, local_failure(rv));
		return;
	}
	ng->rv_listen_fd = rv;
	ng->step = SHM_C_LISTENING;
	ng->listen_ns = shim_now_ns();
	ng->rx_at_listen = s->rx_tcp_bytes;
}

static void c_accept(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = neg_of(s);
	for (;;) {
		int rv = shim_rv_accept(ng->rv_listen_fd), rc;

		if (rv == -EAGAIN) {
			if (now >= s->deadline_ns || peer_answers_plain(s, ng, now))
				shim_upgrade_fail(s, fd, SHIM_REASON_PEER_NO_SHIM);
			return;
		}
		if (rv < 0) {
			shim_upgrade_fail(s, fd, local_failure(rv));
			return;
		}
		rc = shim_rv_verify_peer(rv, server_ep(s), client_ep(s), SHIM_RV_USER_ONLY, &ng->rv_owner);
		if (rc == 0) {
			ng->rv_fd = rv;
			close_fd(&ng->rv_listen_fd);
			ng->step = SHM_C_CONNECTED;
			return;
		}
		/* No TCP socket of S's any more (sock_diag): the connection
		 * is gone at that end, there is no one to refuse. */
		if (rc == -ENOENT) {
			REAL(close)(rv);
			shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
			return;
		}
		/* A stranger: refuse it and keep waiting for the real S, up
		 * to a bound. */
		trace_refused(s, fd, "client", -rc);
		shim_stats_count(SHIM_REASON_VERIFY_FAILED);
		REAL(close)(rv);
		if (++ng->rv_refusals >= RV_MAX_REFUSALS) {
			shim_upgrade_fail(s, fd, SHIM_REASON_RATE_LIMITED);
			return;
		}
	}
}

static void c_read_offer(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = neg_of(s);
	union {
		struct shim_msg_offer offer;
		uint8_t raw[SHIM_MSG_MAX + 1];
	} msg;
	struct shim_msg_accept accept;
	struct shim_chan *chan;
	int memfd, rc;
	ssize_t n;

	/* A shut write side can carry no SWITCH frame and no bells. */
	if (s->wr_shut) {
		shim_upgrade_fail(s, fd, SHIM_REASON_SHUTDOWN);
		return;
	}
	n = shim_rv_recv(ng->rv_fd, &msg, sizeof(msg), NULL);
	if (n == -EAGAIN) {
		if (now >= s->deadline_ns)
			shim_upgrade_fail(s, fd, SHIM_REASON_TIMEOUT);
		return;
	}
	if (n <= 0) {
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	if (shim_msg_check(&msg, (size_t)n) != SHIM_MSG_OFFER) {
		shim_upgrade_fail(s, fd, SHIM_REASON_HANDSHAKE_MALFORMED);
		return;
	}
	rc = shim_rv_verify_peer(ng->rv_fd, server_ep(s), client_ep(s), msg.offer.tcp_fd, &ng->rv_owner);
	if (rc < 0) {
		/* An S that answered and closed (a short connection) closed its
		 * rendezvous before its socket: that is no spoofing. */
		if (shim_rv_peer_gone(ng->rv_fd, rc)) {
			shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
			return;
		}
		trace_refused(s, fd, "client", -rc);
		shim_upgrade_fail(s, fd, SHIM_REASON_VERIFY_FAILED);
		return;
	}
	rc = shim_shm_create(ring_bytes(), &chan, &memfd);
	if (rc < 0) {
		shim_upgrade_fail(s, fd, SHIM_REASON_RING_ALLOC_FAILED);
		return;
	}
	memset(&accept, 0, sizeof(accept));
	shim_msg_init(&accept.hdr, SHIM_MSG_ACCEPT, sizeof(accept));
	accept.tcp_fd = fd;
	accept.ring_bytes = ring_bytes();
	memcpy(s->tx_nonce, msg.offer.nonce, SHIM_NONCE_LEN);
	if (shim_upgrade_new_nonce(s->rx_nonce) < 0) {
		chan->ops->destroy(chan);
		REAL(close)(memfd);
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	memcpy(accept.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	rc = shim_rv_send(ng->rv_fd, &accept, sizeof(accept), memfd);
	REAL(close)(memfd);
	if (rc < 0) {
		chan->ops->destroy(chan);
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	/* Nothing switched yet: S maps the ring and commits first. */
	s->chan = chan;
	ng->step = SHM_C_ACCEPTED;
	shim_upgrade_committing(s);
}

/* C without S's answer: S did not map the ring (it failed, refused us,
 * or never came back). Nothing switched: both ends stay on TCP. */
static void c_give_up(struct shim_sock *s, int fd, enum shim_reason reason)
{
	s->chan->ops->destroy(s->chan);
	s->chan = NULL;
	shim_upgrade_fail(s, fd, reason);
}

/* S's SWITCH_AT: S committed (its direction moves at that offset, or
 * stays on TCP); ours follows the same way. */
static void c_read_switch_at(struct shim_sock *s, int fd)
{
	struct shm_neg *ng = neg_of(s);
	union {
		struct shim_msg_switch_at at;
		uint8_t raw[SHIM_MSG_MAX + 1];
	} msg;
	ssize_t n = shim_rv_recv(ng->rv_fd, &msg, sizeof(msg), NULL);

	/* No deadline here: S is a verified shim that reads our ACCEPT at its
	 * next call on the connection; until then the connection is idle at
	 * its end, and waiting costs only the ring's pages. */
	if (n == -EAGAIN)
		return;
	if (n <= 0 || shim_msg_check(&msg, (size_t)n) != SHIM_MSG_SWITCH_AT) {
		c_give_up(s, fd, n <= 0 ? SHIM_REASON_PEER_CLOSED : SHIM_REASON_HANDSHAKE_MALFORMED);
		return;
	}
	if (!take_peer_switch_at(s, fd, &msg.at))
		return;
	/* Our offset first, then our frame. */
	if (tx_may_switch(s) && send_switch_at(s, true) == 0)
		shim_upgrade_switch_tx(s, fd);
	neg_end(s);
	shim_upgrade_done(s);
	trace_done(s, fd, ring_bytes());
}


/* ---- the transport table's negotiation ops ---- */

static enum shim_reason shm_fits(const struct shim_tuple *t)
{
	return shim_tuple_same_host(t) ? SHIM_REASON_NONE : SHIM_REASON_NOT_SAME_HOST;
}

static void shm_start(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = calloc(1, sizeof(*ng));

	if (!ng) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	ng->rv_listen_fd = -1;
	ng->rv_fd = -1;
	shim_upgrade_negotiating(s, ng);
	s->io_pid = getpid();
	shim_upgrade_arm_deadline(s, now);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.start", fd, &s->tuple, SHIM_REASON_NONE, "\"role\":\"%s\"",
		   shim_role_name(s->role));
	if (s->role == SHIM_ROLE_CLIENT)
		c_rv_listen(s, fd);
	else
		s_connect(s, fd, now);
}

static void shm_progress(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = neg_of(s);

	if (!ng) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	switch (ng->step) {
	case SHM_C_LISTENING:
		c_accept(s, fd, now);
		/* Unless it ended (ng is gone then): the OFFER may be there. */
		if (s->neg == ng && ng->step == SHM_C_CONNECTED)
			c_read_offer(s, fd, now);
		break;
	case SHM_C_CONNECTED:
		c_read_offer(s, fd, now);
		break;
	case SHM_C_ACCEPTED:
		c_read_switch_at(s, fd);
		break;
	case SHM_S_RETRY:
		if (s_retry_due(s, ng, now))
			s_connect(s, fd, now);
		break;
	case SHM_S_OFFERED:
		s_read_accept(s, fd);
		break;
	case SHM_S_AWAIT_C:
		s_read_c_switch_at(s, fd);
		break;
	}
}

/*
 * The peer may be about to send its SWITCH_AT (we wait for it in the
 * committing steps). After SHUT_RD its send fails (EPIPE) and its direction
 * stays on TCP; one that got in before is read by this progress step, which
 * does not switch our own direction (the caller set pinned or closing).
 */
static void shm_stop_peer(struct shim_sock *s, int fd)
{
	REAL(shutdown)(neg_of(s)->rv_fd, SHUT_RD);
	shim_upgrade_progress(s, fd);
}

/* Only C has anything to stop (C_ACCEPTED); S, once it sent its
 * SWITCH_AT, has committed. */
static void shm_stop_commit(struct shim_sock *s, int fd)
{
	if (neg_of(s)->step == SHM_C_ACCEPTED)
		shm_stop_peer(s, fd);
}

static int shm_wait_fd(const struct shim_sock *s)
{
	const struct shm_neg *ng = neg_of(s);

	return ng->rv_fd >= 0 ? ng->rv_fd : ng->rv_listen_fd;
}

const struct shim_transport_type shim_shm_transport = {
	.kind = SHIM_TRANSPORT_SHM,
	.fits = shm_fits,
	.start = shm_start,
	.progress = shm_progress,
	.stop_peer = shm_stop_peer,
	.stop_commit = shm_stop_commit,
	.abandon = neg_end,
	.wait_fd = shm_wait_fd,
	.release = neg_end,
	.chan_ops = &shim_shm_ops,
};
