/* A switched connection back to TCP before it changes hands; see handback.h. */
#include "handback.h"

#include <errno.h>
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

/* Both directions on TCP, and no switch announced by the peer. */
static bool directions_on_tcp(const struct shim_sock *s)
{
	return s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP && !s->rx_switch_known && !s->aborted;
}

static bool handed_back(const struct shim_sock *s)
{
	return s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP && !s->fo_replay && !s->tcp_out_len;
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
	if (s->rx_switch_known && s->rx_dir == SHIM_DIR_TCP && s->rx_tcp_bytes < s->rx_switch_at)
		return -EOPNOTSUPP;
	if (s->rx_dir == SHIM_DIR_SWITCHING) {
		rc = shim_rxswitch_finish(s, fd);
		if (rc < 0)
			return rc;
	}
	if (s->tx_dir == SHIM_DIR_CHAN && s->rx_dir == SHIM_DIR_CHAN)
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
		if (s->tcp_out_len || s->fo_replay)
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
