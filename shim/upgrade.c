/*
 * The upgrade handshake; see upgrade.h and shim/PROTOCOL.md.
 *
 * Point of no return: C switches its direction only after its ACCEPT went
 * out, and S never abandons the handshake once it has sent its OFFER except
 * when the rendezvous closes (then C can not have sent an ACCEPT, since S
 * reads the queued ACCEPT before it sees the close). So the two ends never
 * disagree about where a direction's bytes travel.
 */
#include "upgrade.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "frames.h"
#include "rdma.h"
#include "real.h"
#include "rendezvous.h"
#include "shm.h"
#include "stats.h"
#include "trace.h"
#include "transport.h"
#include "wire.h"

/* S retries a missing rendezvous after these delays, doubling, capped. */
/* Strangers C refuses on one connection's rendezvous before it gives the
 * upgrade up (the connection stays on TCP, reason rate_limited): another
 * local user can name the rendezvous of any connection (the 4-tuple is in
 * /proc/net/tcp), and each refusal costs us an accept and a credential
 * check, so the work one connection can be made to do stays bounded. */
#define RV_MAX_REFUSALS 16
#define RV_EXIT_WAIT_MS 100

/* rv.refused lines, per process: 20 at once, then 10 a second. */
static struct shim_trace_budget refused_lines = { .burst = 20, .per_sec = 10 };

#define RETRY_FIRST_NS (1ull * 1000 * 1000)
#define RETRY_MAX_NS (200ull * 1000 * 1000)

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		REAL(close)(*fd);
		*fd = -1;
	}
}

void shim_upgrade_release(struct shim_sock *s)
{
	close_fd(&s->rv_listen_fd);
	close_fd(&s->rv_fd);
	/* The RDMA release may still flush a queued frame through our copy of
	 * the socket: it goes before that copy is closed. */
	shim_rdma_release(s);
	if (s->chan) {
		/* Not the process that owns the upgrade, or one whose socket
		 * another process may still hold (fork, SCM_RIGHTS): this close
		 * is not the connection's end, which the kernel tells the peer
		 * with TCP's FIN when the last descriptor anywhere goes. */
		if (s->chan->ops->forget && (s->shared || s->io_pid != getpid()))
			s->chan->ops->forget(s->chan);
		else
			s->chan->ops->destroy(s->chan);
		s->chan = NULL;
	}
	if (s->fo_replay) {
		/* Closed before TCP took all of a failover's replay: the kernel
		 * would have kept sending; we can not without blocking close. */
		SHIM_TRACE(SHIM_TRACE_ERROR, "failover.replay_dropped", -1, &s->tuple, SHIM_REASON_CHAN_FAILED,
			   "\"bytes\":%zu", s->fo_replay_len - s->fo_replay_off);
		free(s->fo_replay);
		s->fo_replay = NULL;
	}
	close_fd(&s->tcp_keep);
}

/*
 * An attempt that timed out while the connection had not carried a byte
 * either way most likely met a peer that was idle, not one without the shim
 * (a client that connects and waits, a pool): a process runs the handshake
 * only from its own calls. Such a connection tries once more, when its first
 * byte moves and both ends are busy with it.
 */
static bool retry_when_bytes_move(struct shim_sock *s, int fd, enum shim_reason reason)
{
	bool quiet = !s->rx_tcp_bytes && !s->tx_tcp_bytes && s->tx_dir == SHIM_DIR_TCP &&
		     s->rx_dir == SHIM_DIR_TCP && !s->chan;

	if (!quiet || s->await_bytes_used ||
	    (reason != SHIM_REASON_PEER_NO_SHIM && reason != SHIM_REASON_TIMEOUT && reason != SHIM_REASON_CM_TIMEOUT))
		return false;
	s->await_bytes_used = true;
	s->phase = SHIM_PHASE_IDLE;
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.deferred", fd, &s->tuple, reason, "\"role\":\"%s\"",
		   shim_role_name(s->role));
	return true;
}

void shim_upgrade_fail(struct shim_sock *s, int fd, enum shim_reason reason)
{
	close_fd(&s->rv_listen_fd);
	close_fd(&s->rv_fd);
	if (retry_when_bytes_move(s, fd, reason))
		return;
	s->phase = SHIM_PHASE_FAILED;
	s->reason = reason;
	if (s->closing) {
		/* The program closed the connection mid-handshake: no failure,
		 * the connection simply ended before it could move. */
		SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.closed", fd, &s->tuple, reason, "\"role\":\"%s\"",
			   shim_role_name(s->role));
		return;
	}
	shim_stats_count(reason);
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.fail", fd, &s->tuple, reason, "\"role\":\"%s\"",
		   shim_role_name(s->role));
	/* Nothing moved yet: the data path can go straight to the kernel again. */
	if (s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP && !s->chan)
		__atomic_store_n(&s->intercept, false, __ATOMIC_RELAXED);
}

static bool is_loopback(const struct shim_endpoint *ep)
{
	static const uint8_t v6_loopback[16] = { [15] = 1 };

	if (shim_endpoint_is_v4(ep))
		return ep->addr[12] == 127;
	return memcmp(ep->addr, v6_loopback, 16) == 0;
}

static bool peer_on_this_host(const struct shim_sock *s)
{
	return is_loopback(&s->tuple.peer) || memcmp(s->tuple.peer.addr, s->tuple.local.addr, 16) == 0;
}

static bool transport_wanted(enum shim_transport t)
{
	for (unsigned i = 0; i < shim_cfg.n_transports; i++)
		if (shim_cfg.transports[i] == t)
			return true;
	return false;
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

static int new_nonce(uint8_t nonce[SHIM_NONCE_LEN])
{
	return getrandom(nonce, SHIM_NONCE_LEN, GRND_NONBLOCK) == SHIM_NONCE_LEN ? 0 : -EIO;
}

/* Our direction moves to the channel: SWITCH frame in-band at tx_tcp_bytes. */
void shim_upgrade_switch_tx(struct shim_sock *s, int fd)
{
	struct shim_frame_switch frame = { .type = SHIM_FRAME_SWITCH };

	memcpy(frame.nonce, s->tx_nonce, SHIM_NONCE_LEN);
	/* From here TCP carries one-byte bells: Nagle would hold one back
	 * behind the peer's delayed ACK (40 ms). The program still reads its
	 * own TCP_NODELAY setting (sock.c). */
	int one = 1;

	REAL(setsockopt)(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	s->tx_dir = SHIM_DIR_CHAN;
	shim_frames_queue(s, fd, &frame, sizeof(frame));
	SHIM_TRACE(SHIM_TRACE_INFO, "tx.switch", fd, &s->tuple, SHIM_REASON_UPGRADED,
		   "\"transport\":\"%s\",\"offset\":%llu", shim_transport_name(s->chan->ops->kind),
		   (unsigned long long)s->tx_tcp_bytes);
}

/* The peer's direction moves at offset: everything before it stays TCP data. */
int shim_upgrade_learn_rx_switch(struct shim_sock *s, int fd, uint64_t offset)
{
	if (s->rx_tcp_bytes > offset) {
		SHIM_TRACE(SHIM_TRACE_ERROR, "rx.switch_behind", fd, &s->tuple, SHIM_REASON_HANDSHAKE_MALFORMED,
			   "\"offset\":%llu,\"read\":%llu", (unsigned long long)offset,
			   (unsigned long long)s->rx_tcp_bytes);
		return -EPROTO;
	}
	s->rx_switch_known = true;
	s->rx_switch_at = offset;
	if (s->rx_tcp_bytes == offset)
		s->rx_dir = SHIM_DIR_SWITCHING;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "rx.switch_at", fd, &s->tuple, SHIM_REASON_NONE, "\"offset\":%llu",
		   (unsigned long long)offset);
	return 0;
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
	struct shim_msg_offer offer;
	int rv, rc;

	rv = shim_rv_connect(client_ep(s), server_ep(s));
	if (rv == -ENOENT || rv == -ECONNREFUSED) {
		if (now >= s->deadline_ns) {
			shim_upgrade_fail(s, fd, SHIM_REASON_PEER_NO_SHIM);
			return;
		}
		s->retry_delay_ns = s->retry_delay_ns ? s->retry_delay_ns * 2 : RETRY_FIRST_NS;
		if (s->retry_delay_ns > RETRY_MAX_NS)
			s->retry_delay_ns = RETRY_MAX_NS;
		s->next_try_ns = now + s->retry_delay_ns;
		s->phase = SHIM_PHASE_S_RETRY;
		return;
	}
	if (rv < 0) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	s->rv_fd = rv;
	/* The listener must belong to the user who owns C's end of the TCP
	 * connection; anything else is a squatter on the name. */
	rc = shim_rv_verify_peer(rv, client_ep(s), server_ep(s), SHIM_RV_USER_ONLY, &s->rv_owner);
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
	if (new_nonce(s->rx_nonce) < 0) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	memcpy(offer.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	if (shim_rv_send(rv, &offer, sizeof(offer), -1) < 0) {
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	s->phase = SHIM_PHASE_S_OFFERED;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.offer", fd, &s->tuple, SHIM_REASON_NONE, NULL);
}

/* The other end closed its rendezvous (it gave the handshake up). */
static bool rv_peer_gone(int rv_fd)
{
	uint8_t b;

	return REAL(recv)(rv_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK) == 0;
}

/*
 * A failed check of the fd the peer named: a liar, or a peer that is gone.
 * A peer that closes its connection closes the rendezvous first. One that
 * exits with the connection open (redis-server on SHUTDOWN) leaves that to
 * the kernel, which closes its fds in their order: its TCP socket's number
 * can be gone (-ENOENT) a moment before its rendezvous closes (the sockets
 * are released after the whole fd table is gone, and a busy host may run
 * the exiting process late). Wait for that hang-up, RV_EXIT_WAIT_MS at
 * most and only after -ENOENT: a live liar costs its own connection that
 * long once, a peer that went away much less.
 */
static bool rv_peer_gone_after(int rv_fd, int rc)
{
	struct pollfd p = { .fd = rv_fd, .events = POLLIN | POLLRDHUP };

	if (rv_peer_gone(rv_fd))
		return true;
	if (rc != -ENOENT)
		return false;
	REAL(poll)(&p, 1, RV_EXIT_WAIT_MS);
	return rv_peer_gone(rv_fd);
}

/* Our direction's offset for the peer: where our SWITCH frame will sit, or
 * SHIM_SWITCH_NEVER when our direction stays on TCP. -errno if it could
 * not go out (then we must not switch: the peer would not know where). */
static int send_switch_at(struct shim_sock *s, bool switching)
{
	struct shim_msg_switch_at at;

	memset(&at, 0, sizeof(at));
	shim_msg_init(&at.hdr, SHIM_MSG_SWITCH_AT, sizeof(at));
	at.switch_offset = switching ? s->tx_tcp_bytes : SHIM_SWITCH_NEVER;
	return shim_rv_send(s->rv_fd, &at, sizeof(at), -1);
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

static void upgrade_done(struct shim_sock *s, int fd, uint32_t ring)
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
	union {
		struct shim_msg_accept accept;
		uint8_t raw[SHIM_MSG_MAX + 1];
	} msg;
	struct shim_chan *chan;
	int memfd, rc;
	ssize_t n = shim_rv_recv(s->rv_fd, &msg, sizeof(msg), &memfd);

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
	rc = shim_rv_verify_peer(s->rv_fd, client_ep(s), server_ep(s), msg.accept.tcp_fd, &s->rv_owner);
	if (rc < 0) {
		REAL(close)(memfd);
		/* A C that closes its connection closes the rendezvous first:
		 * its fd is then gone or reused, and that is no spoofing. */
		if (rv_peer_gone_after(s->rv_fd, rc)) {
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
	s->phase = SHIM_PHASE_S_AWAIT_C;
	upgrade_done(s, fd, msg.accept.ring_bytes);
}

/* C's SWITCH_AT (its direction moves), or the rendezvous' end (it stays on
 * TCP: C's write side was shut, or it closed). */
static void s_read_c_switch_at(struct shim_sock *s, int fd)
{
	union {
		struct shim_msg_switch_at at;
		uint8_t raw[SHIM_MSG_MAX + 1];
	} msg;
	ssize_t n = shim_rv_recv(s->rv_fd, &msg, sizeof(msg), NULL);

	if (n == -EAGAIN)
		return;
	close_fd(&s->rv_fd);
	s->phase = SHIM_PHASE_DONE;
	if (n > 0 && shim_msg_check(&msg, (size_t)n) == SHIM_MSG_SWITCH_AT)
		take_peer_switch_at(s, fd, &msg.at);
	else
		SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.half", fd, &s->tuple, SHIM_REASON_NONE,
			   "\"read\":%zd", n);
}

static void c_listen(struct shim_sock *s, int fd)
{
	int rv = shim_rv_listen(client_ep(s), server_ep(s));

	if (rv == -EADDRINUSE) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rv.name_taken", fd, &s->tuple, SHIM_REASON_RENDEZVOUS_BUSY, NULL);
		shim_upgrade_fail(s, fd, SHIM_REASON_RENDEZVOUS_BUSY);
		return;
	}
	if (rv < 0) {
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	s->rv_listen_fd = rv;
	s->phase = SHIM_PHASE_C_LISTENING;
}

static void c_accept(struct shim_sock *s, int fd, unsigned long long now)
{
	for (;;) {
		int rv = shim_rv_accept(s->rv_listen_fd), rc;

		if (rv == -EAGAIN) {
			if (now >= s->deadline_ns)
				shim_upgrade_fail(s, fd, SHIM_REASON_PEER_NO_SHIM);
			return;
		}
		if (rv < 0) {
			shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
			return;
		}
		rc = shim_rv_verify_peer(rv, server_ep(s), client_ep(s), SHIM_RV_USER_ONLY, &s->rv_owner);
		if (rc == 0) {
			s->rv_fd = rv;
			close_fd(&s->rv_listen_fd);
			s->phase = SHIM_PHASE_C_CONNECTED;
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
		if (++s->rv_refusals >= RV_MAX_REFUSALS) {
			shim_upgrade_fail(s, fd, SHIM_REASON_RATE_LIMITED);
			return;
		}
	}
}

static void c_read_offer(struct shim_sock *s, int fd, unsigned long long now)
{
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
	n = shim_rv_recv(s->rv_fd, &msg, sizeof(msg), NULL);
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
	rc = shim_rv_verify_peer(s->rv_fd, server_ep(s), client_ep(s), msg.offer.tcp_fd, &s->rv_owner);
	if (rc < 0) {
		/* An S that answered and closed (a short connection) closed its
		 * rendezvous before its socket: that is no spoofing. */
		if (rv_peer_gone_after(s->rv_fd, rc)) {
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
	if (new_nonce(s->rx_nonce) < 0) {
		chan->ops->destroy(chan);
		REAL(close)(memfd);
		shim_upgrade_fail(s, fd, SHIM_REASON_INTERNAL_ERROR);
		return;
	}
	memcpy(accept.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	rc = shim_rv_send(s->rv_fd, &accept, sizeof(accept), memfd);
	REAL(close)(memfd);
	if (rc < 0) {
		chan->ops->destroy(chan);
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_CLOSED);
		return;
	}
	/* Nothing switched yet: S maps the ring and commits first. */
	s->chan = chan;
	s->phase = SHIM_PHASE_C_ACCEPTED;
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
	union {
		struct shim_msg_switch_at at;
		uint8_t raw[SHIM_MSG_MAX + 1];
	} msg;
	ssize_t n = shim_rv_recv(s->rv_fd, &msg, sizeof(msg), NULL);

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
	close_fd(&s->rv_fd);
	s->phase = SHIM_PHASE_DONE;
	upgrade_done(s, fd, ring_bytes());
}

static void start(struct shim_sock *s, int fd, unsigned long long now)
{
	bool same_host = peer_on_this_host(s);
	enum shim_transport pick = SHIM_TRANSPORT_TCP;

	/* The first configured transport that fits the peer: shm only on this
	 * host, rdma anywhere (even here, when listed before shm). Both ends
	 * see the same facts, so they pick the same one. */
	for (unsigned i = 0; i < shim_cfg.n_transports && pick == SHIM_TRANSPORT_TCP; i++)
		if (shim_cfg.transports[i] == SHIM_TRANSPORT_RDMA ||
		    (shim_cfg.transports[i] == SHIM_TRANSPORT_SHM && same_host))
			pick = shim_cfg.transports[i];
	if (pick == SHIM_TRANSPORT_RDMA) {
		shim_rdma_start(s, fd, now);
		return;
	}
	if (!transport_wanted(SHIM_TRANSPORT_SHM)) {
		shim_upgrade_fail(s, fd, SHIM_REASON_NO_TRANSPORT);
		return;
	}
	if (!same_host) {
		shim_upgrade_fail(s, fd, SHIM_REASON_NOT_SAME_HOST);
		return;
	}
	s->io_pid = getpid();
	s->deadline_ns = now + (unsigned long long)shim_cfg.upgrade_timeout_ms * 1000000ull;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.start", fd, &s->tuple, SHIM_REASON_NONE, "\"role\":\"%s\"",
		   shim_role_name(s->role));
	if (s->role == SHIM_ROLE_CLIENT)
		c_listen(s, fd);
	else
		s_connect(s, fd, now);
}

/* A nonblocking connect finished once the kernel knows the peer. */
static bool connected(struct shim_sock *s, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (s->state != SHIM_STATE_CONNECTING)
		return true;
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return false;
	s->state = SHIM_STATE_TCP;
	return true;
}

/* Why no handshake may run in this process any more (NONE: they may). */
static enum shim_reason upgrades_barred = SHIM_REASON_NONE;

void shim_upgrade_bar(enum shim_reason reason)
{
	/* Relaxed: a handshake step that misses it by a moment is one the
	 * program's own thread ordered before its seccomp call. */
	__atomic_store_n(&upgrades_barred, reason, __ATOMIC_RELAXED);
}

/*
 * The peer may be about to send its SWITCH_AT (we wait for it in these
 * phases). After SHUT_RD its send fails (EPIPE) and its direction stays on
 * TCP; one that got in before is read by this progress step, which does
 * not switch our own direction (the caller set pinned or closing).
 */
static void stop_peer_commit(struct shim_sock *s, int fd)
{
	REAL(shutdown)(s->rv_fd, SHUT_RD);
	shim_upgrade_progress(s, fd);
}

int shim_upgrade_pin_tcp(struct shim_sock *s, int fd, enum shim_reason reason)
{
	s->pinned = true;
	switch (s->phase) {
	case SHIM_PHASE_C_ACCEPTED:
	case SHIM_PHASE_S_AWAIT_C:
		stop_peer_commit(s, fd);
		break;
	case SHIM_PHASE_DONE:
	case SHIM_PHASE_FAILED:
		break;
	default:
		s->await_bytes_used = true; /* no second attempt either */
		shim_upgrade_fail(s, fd, reason);
		break;
	}
	if (s->tx_dir != SHIM_DIR_TCP || s->rx_dir != SHIM_DIR_TCP || s->rx_switch_known || s->phase == SHIM_PHASE_RDMA) {
		SHIM_TRACE(SHIM_TRACE_WARN, "upgrade.pin_late", fd, &s->tuple, reason, "\"tx\":%d,\"rx\":%d",
			   s->tx_dir, s->rx_dir);
		return -EBUSY;
	}
	return 0;
}

void shim_upgrade_stop_commit(struct shim_sock *s, int fd)
{
	if (s->phase == SHIM_PHASE_C_ACCEPTED)
		stop_peer_commit(s, fd);
}

void shim_upgrade_stop_for_close(struct shim_sock *s, int fd)
{
	s->closing = true;
	switch (s->phase) {
	case SHIM_PHASE_C_ACCEPTED:
	case SHIM_PHASE_S_AWAIT_C:
		stop_peer_commit(s, fd);
		break;
	default:
		/* Nobody committed (or all is settled): the release closes our
		 * rendezvous, and without it the peer stays on TCP. The RDMA
		 * handshake stops in rdma_close.c. */
		break;
	}
}

void shim_upgrade_progress(struct shim_sock *s, int fd)
{
	unsigned long long now;

	if (shim_upgrade_settled(s) || !connected(s, fd))
		return;
	enum shim_reason barred = __atomic_load_n(&upgrades_barred, __ATOMIC_RELAXED);

	if (unlikely(barred != SHIM_REASON_NONE) && s->phase != SHIM_PHASE_RDMA &&
	    s->phase != SHIM_PHASE_C_ACCEPTED && s->phase != SHIM_PHASE_S_AWAIT_C) {
		/* Nobody committed: end it without another system call that a
		 * sandbox might punish (closing our rendezvous fds is all). */
		s->await_bytes_used = true;
		shim_upgrade_fail(s, fd, barred);
		return;
	}
	now = shim_now_ns();
	switch (s->phase) {
	case SHIM_PHASE_IDLE:
		/* A short connection never pays for a handshake: it starts once
		 * the connection is RDMASHIM_UPGRADE_AFTER_MS old (both ends use
		 * the same rule, so they start close together). A second
		 * attempt waits for the first byte (retry_when_bytes_move()). */
		if (now - s->born_ns < shim_cfg.upgrade_after_ms * 1000000ull)
			break;
		if (!s->await_bytes_used || s->rx_tcp_bytes || s->tx_tcp_bytes)
			start(s, fd, now);
		break;
	case SHIM_PHASE_C_LISTENING:
		c_accept(s, fd, now);
		if (s->phase == SHIM_PHASE_C_CONNECTED)
			c_read_offer(s, fd, now);
		break;
	case SHIM_PHASE_C_CONNECTED:
		c_read_offer(s, fd, now);
		break;
	case SHIM_PHASE_C_ACCEPTED:
		c_read_switch_at(s, fd);
		break;
	case SHIM_PHASE_S_RETRY:
		if (now >= s->next_try_ns)
			s_connect(s, fd, now);
		break;
	case SHIM_PHASE_S_OFFERED:
		s_read_accept(s, fd);
		break;
	case SHIM_PHASE_RDMA:
		shim_rdma_progress(s, fd, now);
		break;
	case SHIM_PHASE_S_AWAIT_C:
		s_read_c_switch_at(s, fd);
		break;
	case SHIM_PHASE_DONE:
	case SHIM_PHASE_FAILED:
		break;
	}
}
