/* A switched connection back to TCP before it changes hands; see handback.h. */
#include "handback.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>

#include "close_budget.h"
#include "failover.h"
#include "fdtable.h"
#include "frames.h"
#include "real.h"
#include "rxswitch.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"
#include "wire.h"

/* Both directions on TCP, and no switch announced by the peer. */
static bool directions_on_tcp(const struct shim_sock *s)
{
	return s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP && !s->rx_switch_known && !s->aborted;
}

static bool handed_back(const struct shim_sock *s)
{
	return s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP && !s->fo_replay && !s->tcp_out_len &&
	       !s->fo_ret;
}

/*
 * What the hand-back needs: a channel that can stop on purpose, a stream
 * not broken or ended, and a peer that can still answer (it has not closed
 * its sending side: the bytes it left in our ring would have no one to send
 * them again). A failover already under way qualifies once our ring holds
 * nothing the program has not read: it only has to end.
 */
static bool can_hand_back(const struct shim_sock *s)
{
	const struct shim_chan *ch = s->chan;

	if (!ch || !ch->ops->fail || !ch->ops->drop_unread || s->aborted || ch->ops->violated(ch) ||
	    (s->phase == SHIM_PHASE_COMMITTING && !shim_upgrade_stoppable(s)))
		return false;
	if (ch->ops->failed && ch->ops->failed(ch))
		return s->rx_dir == SHIM_DIR_TCP || !ch->ops->readable(ch);
	return !s->rx_tcp_eof && !(ch->ops->rx_fin && ch->ops->rx_fin(ch));
}

/*
 * The peer's SWITCH frame lies behind plain bytes the program has not
 * read: the next reader of the socket would read the frame after them.
 * Where the peer takes bytes back (transport.h, takes_return), they are
 * read off TCP here, up to the frame, and go back to the peer in our
 * RETURN, ahead of our RESUME; the peer sends them again right behind its
 * own RESUME, ahead of its replay, so that the stream the next reader
 * finds there is the one it would have found (PROTOCOL.md, "Hand-back").
 * Our direction must be switched (only then does it carry frames).
 * 1: read up to the frame; 0: more to come; -EOPNOTSUPP: not possible.
 */
static int read_before_switch(struct shim_sock *s, int fd)
{
	uint64_t need = s->rx_switch_at - s->rx_tcp_bytes;

	if (!s->fo_ret) {
		struct shim_frame_return hdr = { .type = SHIM_FRAME_RETURN, .length = htobe64(need) };

		if (!s->chan->ops->takes_return || s->tx_dir != SHIM_DIR_CHAN || s->fo_started ||
		    need > SHIM_FRAME_RETURN_MAX)
			return -EOPNOTSUPP;
		s->fo_ret = malloc(sizeof(hdr) + (size_t)need);
		if (!s->fo_ret)
			return -EOPNOTSUPP;
		memcpy(s->fo_ret, &hdr, sizeof(hdr));
		s->fo_ret_len = sizeof(hdr) + (size_t)need;
		s->fo_ret_got = sizeof(hdr);
		s->fo_ret_off = 0;
	}
	while (s->fo_ret_got < s->fo_ret_len) {
		/* Never past the frame: the count stops at its offset. */
		ssize_t n = REAL(recv)(fd, s->fo_ret + s->fo_ret_got, s->fo_ret_len - s->fo_ret_got, MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return 0;
		if (n <= 0)
			return -EOPNOTSUPP; /* the stream ended before the frame */
		s->fo_ret_got += (size_t)n;
		s->rx_tcp_bytes += (size_t)n;
	}
	s->rx_dir = SHIM_DIR_SWITCHING;
	return 1;
}

/* Our RETURN joins the frames' queue when it is complete and nothing is
 * half-sent there (flush sends it ahead of the queue). 0, or -EAGAIN. */
static int queue_return(struct shim_sock *s, int fd)
{
	if (!s->fo_ret || s->fo_ret_queued)
		return 0;
	if (s->tcp_out_len && shim_frames_flush(s, fd) < 0)
		return -EAGAIN;
	s->fo_ret_queued = true;
	SHIM_TRACE(SHIM_TRACE_INFO, "conn.handback_return", fd, &s->tuple, SHIM_REASON_HANDED_OFF,
		   "\"bytes\":%zu", s->fo_ret_len - sizeof(struct shim_frame_return));
	shim_frames_flush(s, fd);
	return 0;
}

/*
 * A switch under way is driven to its end, both directions on the channel
 * (our RESUME needs our direction switched, and the peer's frames must end
 * with its RESUME), rather than given up: the peer may have committed, its
 * SWITCH frame already in the stream. 0: both switched; -EAGAIN: still
 * under way; -EOPNOTSUPP: a direction stays on TCP for good, or plain
 * bytes the program never read sit before the peer's SWITCH frame (no one
 * could take the frame out before the next process reads it).
 */
static int finish_switch(struct shim_sock *s, int fd)
{
	int rc;

	if (s->tx_dir == SHIM_DIR_CHAN && s->rx_dir == SHIM_DIR_CHAN)
		return 0;
	shim_upgrade_progress(s, fd);
	if (s->rx_switch_known && s->rx_dir == SHIM_DIR_TCP && s->rx_tcp_bytes < s->rx_switch_at) {
		rc = read_before_switch(s, fd);
		if (rc <= 0)
			return rc ? rc : -EAGAIN;
	}
	if (s->rx_dir == SHIM_DIR_SWITCHING) {
		rc = shim_rxswitch_finish(s, fd);
		if (rc < 0)
			return rc;
	}
	if (s->tx_dir == SHIM_DIR_CHAN && s->rx_dir == SHIM_DIR_CHAN)
		return 0;
	/* The peer's direction stays on TCP for good (the handshake ended
	 * without its SWITCH_AT): it writes no frame, its bytes are plain, and
	 * it answers our RESUME with none (failover.c, fo_peer_stays). */
	if (!s->aborted && shim_upgrade_settled(s) && s->tx_dir == SHIM_DIR_CHAN && s->rx_dir == SHIM_DIR_TCP &&
	    !s->rx_switch_known && s->chan->ops->tx_offset)
		return 0;
	if (s->aborted || (shim_upgrade_settled(s) && (s->tx_dir != SHIM_DIR_CHAN || !s->rx_switch_known)))
		return -EOPNOTSUPP;
	return -EAGAIN;
}

static bool same_endpoint(const struct shim_endpoint *a, const struct shim_endpoint *b)
{
	return a->port == b->port && !memcmp(a->addr, b->addr, sizeof(a->addr));
}

/*
 * The peer may be a socket of this very process (a program that talks to
 * itself): its side answers only from a call of ours, and the thread that
 * would make it may be the one waiting here. Found once, by its tuple
 * (set before the sock is published, and the memory is type-stable, so
 * reading it without a reference is safe; a stale match is checked again
 * under a reference and the lock).
 */
static int local_peer_fd(const struct shim_sock *s)
{
	for (size_t fd = 0; fd < shim_fd_capacity; fd++) {
		const struct shim_sock *o = shim_fd_get((int)fd);

		if (o && o != s && same_endpoint(&o->tuple.local, &s->tuple.peer) &&
		    same_endpoint(&o->tuple.peer, &s->tuple.local))
			return (int)fd;
	}
	return -1;
}

/* Moves the local peer's side on, as its own next call would: reads our
 * RESUME, sends its own and its replay. Called with no sock lock held. */
static void move_local_peer(int peer_fd, const struct shim_tuple *ours)
{
	struct shim_sock *p = shim_sock_get(peer_fd);
	int fd;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	fd = shim_sock_fd_locked(p, peer_fd);
	if (fd >= 0 && !p->closed && p->chan && same_endpoint(&p->tuple.peer, &ours->local)) {
		if (p->rx_dir == SHIM_DIR_CHAN)
			shim_frames_drain(p, fd);
		shim_failover_progress(p, fd);
	}
	pthread_mutex_unlock(&p->lock);
	shim_sock_put(p);
}

/* How long a hand-back may wait for the peer's RESUME: drawn from the
 * process's budget of waits on peers' promises (close_budget.h) at its
 * first wait, so that an exec with many connections to silent peers waits
 * SHIM_HANDBACK_WAIT_MS in all, not that long for each. */
struct handback_wait {
	unsigned long long granted_ms;
	bool drawn;
};

static int hand_back(struct shim_sock *s, int fd, unsigned long long start, struct handback_wait *w)
{
	unsigned long long waited_ms;
	struct shim_tuple tuple = s->tuple;
	struct shim_chan *ch = s->chan;
	int peer_fd, rc;

	/* Another process of ours may have taken it back already (a fork's). */
	if (ch && fd >= 0)
		shim_failover_look_elsewhere(s, fd);
	if (ch && s->fo_started && !s->aborted && handed_back(s))
		return 0; /* an earlier failover already ended on TCP */
	if (!can_hand_back(s))
		return -EOPNOTSUPP;
	peer_fd = local_peer_fd(s);
	SHIM_TRACE(SHIM_TRACE_INFO, "conn.handback", fd, &s->tuple, SHIM_REASON_HANDED_OFF,
		   "\"tx\":%d,\"rx\":%d,\"failover\":%s", s->tx_dir, s->rx_dir, s->fo_started ? "true" : "false");
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = shim_upgrade_wait_fd(s), .events = POLLIN } };
		int slice;

		/* The handshake may end meanwhile (its channel released): a
		 * peer that backed out leaves the stream plain. */
		ch = s->chan;
		if (!ch)
			return directions_on_tcp(s) ? 0 : -EOPNOTSUPP;
		if (!ch->ops->failed(ch)) {
			rc = finish_switch(s, fd);
			if (rc < 0 && rc != -EAGAIN)
				return rc;
			if (rc == 0)
				rc = queue_return(s, fd);
			if (rc == 0) {
				/* Our RESUME will name the bytes the program read: the
				 * rest of our ring is the peer's to send again. */
				ch->ops->fail(ch);
				ch->ops->drop_unread(ch);
			}
		}
		if (ch->ops->failed(ch)) {
			shim_failover_progress(s, fd);
			if (s->aborted)
				return -ECONNRESET;
			if (handed_back(s))
				break;
			if (s->rx_tcp_eof)
				return -ECONNRESET; /* the peer went before its RESUME */
		}
		if (!w->drawn) {
			w->drawn = true;
			w->granted_ms =
				shim_close_budget_take(SHIM_HANDBACK_WAIT_MS * 1000000ull, start) / 1000000ull;
		}
		waited_ms = (shim_now_ns() - start) / 1000000ull;
		if (waited_ms >= w->granted_ms)
			return -ETIMEDOUT;
		if (s->tcp_out_len || s->fo_replay || s->fo_ret_queued)
			p[0].events |= POLLOUT;
		/* Short slices: a half-arrived frame keeps TCP readable. */
		slice = (int)(w->granted_ms - waited_ms);
		slice = slice > 10 ? 10 : slice;
		pthread_mutex_unlock(&s->lock);
		if (peer_fd >= 0)
			move_local_peer(peer_fd, &tuple);
		REAL(poll)(p, p[1].fd >= 0 ? 2 : 1, slice);
		pthread_mutex_lock(&s->lock);
		if (s->closed)
			return -ECONNRESET;
	}
	SHIM_TRACE(SHIM_TRACE_INFO, "conn.handed_back", fd, &s->tuple, SHIM_REASON_HANDED_OFF,
		   "\"us\":%llu", (shim_now_ns() - start) / 1000ull);
	return 0;
}

int shim_handback(struct shim_sock *s, int fd)
{
	unsigned long long start = shim_now_ns(), used_ns;
	struct handback_wait w = { 0 };
	int rc = hand_back(s, fd, start, &w);

	used_ns = shim_now_ns() - start;
	if (w.drawn && used_ns < w.granted_ms * 1000000ull)
		shim_close_budget_refund(w.granted_ms * 1000000ull - used_ns);
	return rc;
}
