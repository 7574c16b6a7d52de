/*
 * The shared-memory transport's table and its named way of negotiating,
 * over a unix-socket rendezvous named by the 4-tuple (shim/PROTOCOL.md,
 * "Same-host handshake"): C listens, S connects and OFFERs, C ACCEPTs with
 * the memfd, S maps it and commits first. Between two processes that kept
 * a pair, the pair way (shm_pair_neg.c) is tried first; what both ways
 * share is neg_state.c.
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

#include "beacon.h"
#include "frames.h"
#include "neg_state.h"
#include "pair.h"
#include "self.h"
#include "shm_pair_neg.h"
#include "real.h"
#include "reaper.h"
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

/*
 * C's rendezvous was not there, again: does C run without the shim? We
 * look no sooner than RDMASHIM_UPGRADE_AFTER_MS after our accept, so C
 * (connected before us) was due by our first miss, and a C with the shim
 * opens its rendezvous, or sends its HINT, in its first data call once
 * due, before that call sends: bytes that came after a miss were sent by a
 * C that offered by then. Its HINT may have gone to another process of
 * ours (a prefork server), where it is missed, and C then takes the named
 * way within RDMASHIM_PLAIN_PEER_MS of bytes coming back. So: a miss finds
 * bytes that came since one SETTLE earlier (C is active and has offered,
 * if at all), and a later miss, another SETTLE on, finds more and still no
 * rendezvous: C has no shim. SETTLE is twice RDMASHIM_PLAIN_PEER_MS (0:
 * never conclude; wait out RDMASHIM_UPGRADE_TIMEOUT_MS, paying on every
 * call meanwhile). Bytes queued at a miss may be older than it and prove
 * nothing; a segment delivered late can cost an upgrade, never a byte.
 * Both ends must share RDMASHIM_UPGRADE_AFTER_MS (a C that waits longer
 * looks absent).
 */
static bool s_client_plain(struct shim_sock *s, int fd, struct shm_neg *ng, unsigned long long now)
{
	unsigned long long settle = 2ull * shim_cfg.plain_peer_ms * 1000000ull;
	bool measured = ng->arrived_at_miss != SHM_ARRIVED_UNKNOWN;
	uint64_t arrived;

	if (!settle || (measured && now - ng->miss_ns < settle))
		return false;
	if (shim_sock_tcp_arrived(s, fd, &arrived) < 0)
		arrived = SHM_ARRIVED_UNKNOWN;
	if (measured && arrived != SHM_ARRIVED_UNKNOWN && arrived > ng->arrived_at_miss) {
		if (ng->client_active)
			return true;
		ng->client_active = true;
	}
	ng->miss_ns = now;
	ng->arrived_at_miss = arrived;
	return false;
}

/* C's rendezvous is not there (yet): the next try after the back-off, or
 * at once when bytes come meanwhile (s_retry_due). */
static void s_retry_later(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = shm_neg_of(s);

	if (!shim_upgrade_retry_later(s, now)) {
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_NO_SHIM);
		return;
	}
	ng->step = SHM_S_RETRY;
	ng->rx_at_retry = s->rx_tcp_bytes;
}

static void s_connect(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = shm_neg_of(s);
	struct shim_msg_offer offer;
	int rv, rc;

	rv = shim_rv_connect(shm_client_ep(s), shm_server_ep(s));
	if (rv == -ENOENT || rv == -ECONNREFUSED) {
		if (s_client_plain(s, fd, ng, now)) {
			SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.plain_client", fd, &s->tuple, SHIM_REASON_PEER_NO_SHIM,
				   "\"since_miss_ms\":%llu", (now - ng->miss_ns) / 1000000ull);
			shim_upgrade_fail_for_good(s, fd, SHIM_REASON_PEER_NO_SHIM);
			return;
		}
		s_retry_later(s, fd, now);
		return;
	}
	if (rv < 0) {
		shim_upgrade_fail(s, fd, shm_local_failure(rv));
		return;
	}
	ng->rv_fd = rv;
	/* The listener must belong to the user who owns C's end of the TCP
	 * connection; anything else is a squatter on the name. */
	rc = shm_verify_fault(s, fd, "server_user");
	if (!rc)
		rc = shim_rv_verify_peer(rv, shm_client_ep(s), shm_server_ep(s), SHIM_RV_USER_ONLY, &ng->rv_owner);
	if (rc == -ENOENT) {
		/* C's TCP socket is gone (sock_diag): nothing left to join. */
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	if (rc < 0) {
		shm_trace_refused(s, fd, "server", -rc);
		shim_upgrade_fail(s, fd, SHIM_REASON_VERIFY_FAILED);
		return;
	}
	/* Test-only (rv_silent): C, listening, gets no OFFER; we wait out
	 * our deadline as if sent (shm_progress). */
	if (shim_fault_hit(SHIM_FAULT_RV_SILENT, fd, &s->tuple, "server")) {
		ng->silent = true;
		ng->step = SHM_S_OFFERED;
		return;
	}
	memset(&offer, 0, sizeof(offer));
	shim_msg_init(&offer.hdr, SHIM_MSG_OFFER, sizeof(offer));
	offer.ring_bytes = shm_ring_bytes();
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

/*
 * The process on our rendezvous holds the peer's end of the TCP connection
 * as the fd its message names (local, remote: the peer's endpoints; where:
 * the check's name for verify_fail; side: ours, for the trace).
 * SHIM_REASON_NONE when it does; peer_closed for a peer that closed its
 * connection since, which closes its rendezvous first (its fd is then
 * gone or reused, and that is no spoofing); else verify_failed.
 */
static enum shim_reason verify_holder(struct shim_sock *s, int fd, const char *where, const char *side,
				      const struct shim_endpoint *local, const struct shim_endpoint *remote,
				      int32_t tcp_fd)
{
	struct shm_neg *ng = shm_neg_of(s);
	int rc = shm_verify_fault(s, fd, where);

	if (!rc)
		rc = shim_rv_verify_peer(ng->rv_fd, local, remote, tcp_fd, &ng->rv_owner);
	if (rc >= 0)
		return SHIM_REASON_NONE;
	if (shim_rv_peer_gone(ng->rv_fd, rc))
		return SHIM_REASON_PEER_CLOSED;
	shm_trace_refused(s, fd, side, -rc);
	return SHIM_REASON_VERIFY_FAILED;
}

/*
 * S maps C's ring (memfd) and commits: its SWITCH_AT, carrying whether the
 * bell line (line, -1: none) is taken. Both fds are consumed.
 * SHIM_REASON_NONE once committed, else why not; nothing switched then.
 */
static enum shim_reason s_commit(struct shim_sock *s, int fd, const struct shim_msg_accept *accept, int memfd,
				 int line)
{
	struct shim_chan *chan;
	uint32_t flags = 0;
	bool switching;

	if (shm_s_attach_ring(s, fd, memfd, accept->ring_bytes, &chan) < 0) {
		shim_reap(line);
		/* Nothing switched anywhere: C sees our rendezvous close. */
		return SHIM_REASON_RING_ALLOC_FAILED;
	}
	memcpy(s->tx_nonce, accept->nonce, SHIM_NONCE_LEN);
	/* Our offset first, then the frame, so that C learns it no later than
	 * the frame's bytes can reach it. */
	switching = shm_tx_may_switch(s);
	/* A line that is not C's own socketpair is refused: bells stay on TCP. */
	if (line >= 0 && shim_shm_line_take(chan, line, shm_neg_of(s)->rv_fd) == 0)
		flags |= SHIM_MSG_F_BELL_LINE;
	if (shm_send_switch_at(s, switching, flags) < 0) {
		chan->ops->destroy(chan);
		return SHIM_REASON_PEER_CLOSED;
	}
	shm_s_committed(s, fd, chan, switching, accept->ring_bytes);
	return SHIM_REASON_NONE;
}

/*
 * S has C's ring. C has not switched: S commits first (its SWITCH_AT, then
 * its frame), so S may still back out here and C simply stays on TCP.
 */
static void s_read_accept(struct shim_sock *s, int fd)
{
	struct shm_neg *ng = shm_neg_of(s);
	union shm_neg_msg msg;
	int fds[2]; /* the ring's memfd, then C's end of the bell line */
	enum shm_got got = shm_neg_recv(ng->rv_fd, &msg, SHIM_MSG_ACCEPT, fds, 2, NULL);
	enum shim_reason why;

	if (got == SHM_GOT_NONE)
		return;
	if (got == SHM_GOT_END || got == SHM_GOT_ERROR) {
		/* C gave up before its ACCEPT: both ends stay on TCP. */
		why = SHIM_REASON_PEER_CLOSED;
		goto fail;
	}
	if (got == SHM_GOT_OTHER || fds[0] < 0) {
		/* The ring came, and we are too near our fd limit to keep it. */
		why = fds[0] == -EMFILE ? SHIM_REASON_FD_LIMIT : SHIM_REASON_HANDSHAKE_MALFORMED;
		goto fail;
	}
	/* The bell line comes last, and only with the flag. */
	if (!(msg.accept.hdr.flags & SHIM_MSG_F_BELL_LINE)) {
		shim_reap(fds[1]);
		fds[1] = -1;
	}
	/*
	 * C's user was checked when we connected; now that it named its fd,
	 * the process on the rendezvous must hold C's TCP socket itself, as C
	 * checked us. This refuses a same-user process that bound C's name
	 * first. A C that closed its socket already (a short connection)
	 * fails it too and stays on TCP, which costs it nothing.
	 */
	why = verify_holder(s, fd, "server_holds", "server", shm_client_ep(s), shm_server_ep(s), msg.accept.tcp_fd);
	if (why != SHIM_REASON_NONE)
		goto fail;
	/* Shadow mode's cut on S: C proved itself and sent its ring; S would
	 * commit first (its SWITCH_AT) and withdraws instead: C, which has
	 * switched nothing before S's SWITCH_AT, sees the close and gives up. */
	if (shim_cfg.shadow) {
		shim_reap(fds[0]);
		shim_reap(fds[1]);
		shim_upgrade_shadow(s, fd, SHIM_TRANSPORT_SHM);
		return;
	}
	why = s_commit(s, fd, &msg.accept, fds[0], fds[1]);
	if (why == SHIM_REASON_NONE)
		return;
	fds[0] = fds[1] = -1; /* s_commit consumed them */
fail:
	shim_reap(fds[0]);
	shim_reap(fds[1]);
	shim_upgrade_fail(s, fd, why);
}

/* C's SWITCH_AT (its direction moves), or the rendezvous' end (it stays on
 * TCP: C's write side was shut, or it closed). */
static void s_read_c_switch_at(struct shim_sock *s, int fd)
{
	struct shm_neg *ng = shm_neg_of(s);
	union shm_neg_msg msg;
	ssize_t n;
	enum shm_got got = shm_neg_recv(ng->rv_fd, &msg, SHIM_MSG_SWITCH_AT, NULL, 0, &n);

	if (got == SHM_GOT_NONE)
		return;
	/* C saw the exchange through on a named rendezvous verified both
	 * ways: it carries C's next HINTs (pair.h). */
	shm_neg_bind_zc(s);
	if (got == SHM_GOT_IT && !ng->via_pair && shim_cfg.shm_pairs) {
		shim_pair_keep_server(ng->rv_fd);
		ng->rv_fd = -1;
	}
	shm_neg_end(s);
	shim_upgrade_done(s);
	if (got == SHM_GOT_IT)
		shm_take_peer_switch_at(s, fd, msg.at.switch_offset);
	else
		SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.half", fd, &s->tuple, SHIM_REASON_NONE,
			   "\"read\":%zd", n);
}

static void c_rv_listen(struct shim_sock *s, int fd)
{
	struct shm_neg *ng = shm_neg_of(s);
	int rv = shim_rv_listen(shm_client_ep(s), shm_server_ep(s));

	if (rv == -EADDRINUSE) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rv.name_taken", fd, &s->tuple, SHIM_REASON_RENDEZVOUS_BUSY, NULL);
		shim_upgrade_fail(s, fd, SHIM_REASON_RENDEZVOUS_BUSY);
		return;
	}
	if (rv < 0) {
		shim_upgrade_fail(s, fd, shm_local_failure(rv));
		return;
	}
	ng->rv_listen_fd = rv;
	ng->step = SHM_C_LISTENING;
	ng->listen_ns = shim_now_ns();
	ng->rx_at_listen = s->rx_tcp_bytes;
}

static void c_accept(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = shm_neg_of(s);
	for (;;) {
		int rv = shim_rv_accept(ng->rv_listen_fd), rc;

		if (rv == -EAGAIN) {
			if (now >= s->deadline_ns || shm_peer_answers_plain(s, ng, now))
				shim_upgrade_fail(s, fd, SHIM_REASON_PEER_NO_SHIM);
			return;
		}
		if (rv < 0) {
			shim_upgrade_fail(s, fd, shm_local_failure(rv));
			return;
		}
		rc = shm_verify_fault(s, fd, "client_user");
		if (!rc)
			rc = shim_rv_verify_peer(rv, shm_server_ep(s), shm_client_ep(s), SHIM_RV_USER_ONLY,
						 &ng->rv_owner);
		if (rc == 0) {
			ng->rv_fd = rv;
			shm_close_fd(&ng->rv_listen_fd);
			ng->step = SHM_C_CONNECTED;
			/* Test-only (rv_silent): S's OFFER is left unread. */
			ng->silent = shim_fault_hit(SHIM_FAULT_RV_SILENT, fd, &s->tuple, "client");
			return;
		}
		/* No TCP socket of S's any more (sock_diag): the connection
		 * is gone at that end, there is no one to refuse. */
		if (rc == -ENOENT) {
			shim_reap(rv);
			shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
			return;
		}
		/* A stranger: refuse it and keep waiting for the real S, up
		 * to a bound. */
		shm_trace_refused(s, fd, "client", -rc);
		shim_stats_count(SHIM_REASON_VERIFY_FAILED);
		shim_reap(rv);
		if (++ng->rv_refusals >= RV_MAX_REFUSALS) {
			shim_upgrade_fail(s, fd, SHIM_REASON_RATE_LIMITED);
			return;
		}
	}
}

/*
 * C answers S's OFFER with its ring and its ACCEPT: the point of no return
 * is S's, which maps the ring and commits first. SHIM_REASON_NONE once the
 * ACCEPT went (the ring is then the connection's), else why not; nothing
 * of the ring is left then.
 */
static enum shim_reason c_send_accept(struct shim_sock *s, int fd, const struct shim_msg_offer *offer)
{
	struct shm_neg *ng = shm_neg_of(s);
	struct shim_msg_accept accept;
	struct shim_chan *chan;
	enum shim_reason why;
	int memfd, rc;

	rc = shim_fault_hit(SHIM_FAULT_RING_ALLOC, fd, &s->tuple, "client_ring") ? -ENOMEM
		: shim_shm_create(shm_ring_bytes(), &chan, &memfd);
	if (rc < 0)
		return SHIM_REASON_RING_ALLOC_FAILED;
	memset(&accept, 0, sizeof(accept));
	shim_msg_init(&accept.hdr, SHIM_MSG_ACCEPT, sizeof(accept));
	accept.tcp_fd = fd;
	accept.ring_bytes = shm_ring_bytes();
	memcpy(s->tx_nonce, offer->nonce, SHIM_NONCE_LEN);
	if (shim_upgrade_new_nonce(s->rx_nonce) < 0) {
		why = SHIM_REASON_INTERNAL_ERROR;
		goto fail;
	}
	memcpy(accept.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	/* S's end of the bell line, when one could be made (else bells on TCP). */
	int fds[2] = { memfd, shim_cfg.shm_bell_line ? shim_shm_line_make(chan) : -1 };

	if (fds[1] >= 0)
		accept.hdr.flags |= SHIM_MSG_F_BELL_LINE;
	rc = shim_rv_send_fds(ng->rv_fd, &accept, sizeof(accept), fds, fds[1] >= 0 ? 2 : 1);
	REAL(close)(memfd);
	memfd = -1;
	shim_reap(fds[1]);
	if (rc < 0) {
		why = SHIM_REASON_PEER_CLOSED;
		goto fail;
	}
	/* Nothing switched yet: S maps the ring and commits first. */
	s->chan = chan;
	ng->step = SHM_C_ACCEPTED;
	shim_upgrade_committing(s);
	return SHIM_REASON_NONE;
fail:
	chan->ops->destroy(chan);
	if (memfd >= 0)
		REAL(close)(memfd);
	return why;
}

static void c_read_offer(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = shm_neg_of(s);
	union shm_neg_msg msg;
	enum shim_reason why;

	/* A shut write side can carry no SWITCH frame and no bells. */
	if (s->wr_shut) {
		why = SHIM_REASON_SHUTDOWN;
		goto fail;
	}
	switch (shm_neg_recv(ng->rv_fd, &msg, SHIM_MSG_OFFER, NULL, 0, NULL)) {
	case SHM_GOT_NONE:
		if (now < s->deadline_ns)
			return;
		why = SHIM_REASON_TIMEOUT;
		goto fail;
	case SHM_GOT_END:
	case SHM_GOT_ERROR:
		why = SHIM_REASON_PEER_CLOSED;
		goto fail;
	case SHM_GOT_OTHER:
		why = SHIM_REASON_HANDSHAKE_MALFORMED;
		goto fail;
	case SHM_GOT_IT:
		break;
	}
	/* An S that answered and closed (a short connection) closed its
	 * rendezvous before its socket: that is no spoofing. */
	why = verify_holder(s, fd, "client_holds", "client", shm_server_ep(s), shm_client_ep(s), msg.offer.tcp_fd);
	if (why != SHIM_REASON_NONE)
		goto fail;
	/* Shadow mode's cut on C: S proved it holds the connection's other
	 * end; C withdraws before its ACCEPT, the point of no return, so S
	 * (in either mode) sees the rendezvous close and stays on TCP. */
	if (shim_cfg.shadow) {
		shim_upgrade_shadow(s, fd, SHIM_TRANSPORT_SHM);
		return;
	}
	why = c_send_accept(s, fd, &msg.offer);
	if (why == SHIM_REASON_NONE)
		return;
fail:
	shim_upgrade_fail(s, fd, why);
}

/* S's SWITCH_AT: S committed (its direction moves at that offset, or
 * stays on TCP); ours follows the same way. */
static void c_read_switch_at(struct shim_sock *s, int fd)
{
	struct shm_neg *ng = shm_neg_of(s);
	union shm_neg_msg msg;

	/* No deadline here: S is a verified shim that reads our ACCEPT at its
	 * next call on the connection; until then the connection is idle at
	 * its end, and waiting costs only the ring's pages. */
	switch (shm_neg_recv(ng->rv_fd, &msg, SHIM_MSG_SWITCH_AT, NULL, 0, NULL)) {
	case SHM_GOT_NONE:
		return;
	case SHM_GOT_END:
	case SHM_GOT_ERROR:
		shm_c_give_up(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	case SHM_GOT_OTHER:
		shm_c_give_up(s, fd, SHIM_REASON_HANDSHAKE_MALFORMED);
		return;
	case SHM_GOT_IT:
		break;
	}
	if (msg.at.hdr.flags & SHIM_MSG_F_BELL_LINE)
		shim_shm_line_rung(s->chan);
	shm_c_follow(s, fd, msg.at.switch_offset);
}


/* ---- the transport table's negotiation ops ---- */

static enum shim_reason shm_fits(const struct shim_tuple *t)
{
	return shim_tuple_same_host(t) ? SHIM_REASON_NONE : SHIM_REASON_NOT_SAME_HOST;
}

static void shm_serving(const struct shim_tuple *t)
{
	/* A sandboxed process makes no socket of ours (its filter may kill
	 * it for one): its clients lose the upgrade, never the process. */
	if (!shim_upgrade_barred())
		shim_beacon_serve(t->local.port);
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
	ng->arrived_at_miss = SHM_ARRIVED_UNKNOWN;
	shim_upgrade_negotiating(s, ng);
	s->io_pid = shim_self_pid();
	shim_upgrade_arm_deadline(s, now);
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.start", fd, &s->tuple, SHIM_REASON_NONE, "\"role\":\"%s\"",
		   shim_role_name(s->role));
	/* The pair way first: when it fits, it costs no name and no retry. */
	if (s->role == SHIM_ROLE_CLIENT) {
		if (shm_c_hint(s, fd, now))
			return;
		/* No process with the shim serves the port here: nobody would
		 * take the offer, and every call until we gave up would pay. */
		if (!shim_beacon_seen(shm_server_ep(s)->port)) {
			SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.no_beacon", fd, &s->tuple, SHIM_REASON_PEER_NO_SHIM, NULL);
			shim_upgrade_fail_for_good(s, fd, SHIM_REASON_PEER_NO_SHIM);
			return;
		}
		c_rv_listen(s, fd);
	} else if (!shm_s_claim(s, fd, now)) {
		/* A client that keeps a pair with us HINTs in its first data
		 * call, and the HINT wakes us (shm_wait_fd): a named try now
		 * would find nobody and cost a socket, a connect and a close.
		 * A client without a pair listens before its first bytes, which
		 * make the first try come at once (s_retry_due). */
		if (shim_cfg.shm_pairs && shim_pair_hub_fd() >= 0)
			s_retry_later(s, fd, now);
		else
			s_connect(s, fd, now);
	}
}

static void shm_progress(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = shm_neg_of(s);

	if (!ng) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	/* Test-only (rv_silent): nothing said or read until the deadline,
	 * which bounds every negotiation; a stop (a close, a pin) ends it. */
	if (unlikely(ng->silent)) {
		if (ng->stopped)
			shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		else if (now >= s->deadline_ns)
			shim_upgrade_fail(s, fd, SHIM_REASON_TIMEOUT);
		return;
	}
	switch (ng->step) {
	case SHM_C_LISTENING:
		c_accept(s, fd, now);
		/* Unless it ended (ng is gone then) or went silent: the OFFER
		 * may be there. */
		if (s->neg == ng && ng->step == SHM_C_CONNECTED && !ng->silent)
			c_read_offer(s, fd, now);
		break;
	case SHM_C_CONNECTED:
		c_read_offer(s, fd, now);
		break;
	case SHM_C_ACCEPTED:
		c_read_switch_at(s, fd);
		break;
	case SHM_C_HINTED:
		if (shm_c_read_commit(s, fd, now) == SHM_HINT_FALLBACK)
			c_rv_listen(s, fd);
		break;
	case SHM_S_RETRY:
		/* A HINT may have come (a sleeping call waits on the pairs too). */
		if (shm_s_claim(s, fd, now))
			break;
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
	shm_neg_of(s)->stopped = true;
	REAL(shutdown)(shm_neg_of(s)->rv_fd, SHUT_RD);
	shim_upgrade_progress(s, fd);
}

/* Only C has anything to stop (C_ACCEPTED, C_HINTED); S, once it sent
 * its SWITCH_AT or COMMIT, has committed. */
static void shm_stop_commit(struct shim_sock *s, int fd)
{
	enum shm_step step = shm_neg_of(s)->step;

	if (step == SHM_C_ACCEPTED || step == SHM_C_HINTED)
		shm_stop_peer(s, fd);
}

static int shm_wait_fd(const struct shim_sock *s)
{
	const struct shm_neg *ng = shm_neg_of(s);

	/* Silent (rv_silent): the rendezvous is not looked at, and must not
	 * keep a wait awake; the deadline ends the sleep (shm_due_ns). */
	if (ng->silent)
		return -1;
	/* S between tries: C's HINT wakes it, so S commits while C's first
	 * bytes are still on their way. */
	if (ng->step == SHM_S_RETRY)
		return shim_pair_hub_fd();
	/* S committed and waits for C's SWITCH_AT, which C sends just before
	 * its frame on TCP: the frame wakes a call that waits for bytes, and
	 * is what that call needs (our rx reads TCP up to it). A wake on the
	 * SWITCH_AT as well would come first and find no frame yet, one more
	 * sleep and wake-up for both processes. */
	if (ng->step == SHM_S_AWAIT_C)
		return -1;
	return ng->rv_fd >= 0 ? ng->rv_fd : ng->rv_listen_fd;
}

/* S between tries: C may be listening by then. Without pairs nothing else
 * wakes an event loop's S, and C takes a peer that answers over TCP
 * meanwhile for one without the shim (RDMASHIM_PLAIN_PEER_MS). */
static unsigned long long shm_due_ns(const struct shim_sock *s)
{
	if (shm_neg_of(s)->silent)
		return s->deadline_ns;
	return shm_neg_of(s)->step == SHM_S_RETRY ? s->next_try_ns : 0;
}

const struct shim_transport_type shim_shm_transport = {
	.kind = SHIM_TRANSPORT_SHM,
	.fits = shm_fits,
	.serving = shm_serving,
	.start = shm_start,
	.progress = shm_progress,
	.stop_peer = shm_stop_peer,
	.stop_commit = shm_stop_commit,
	.abandon = shm_neg_end,
	.wait_fd = shm_wait_fd,
	.due_ns = shm_due_ns,
	.release = shm_neg_end,
	.chan_ops = &shim_shm_ops,
};
