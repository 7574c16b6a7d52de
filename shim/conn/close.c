/*
 * Closing a connection the shim carried (close.h).
 *
 * The kernel answers bytes that sit unread in a socket at close, or reach
 * it after, with a reset, and a reset makes the peer drop what it had not
 * read yet. Over plain TCP, a program that read its request, wrote its
 * answer and closed leaves nothing unread, so its peer reads the whole
 * answer, then EOF. The shim must not change that with bytes of its own:
 *
 *  - our frames still queued (a SWITCH frame the send buffer had no room
 *    for at the switch, a bell) and a failover's replay leave first: the
 *    peer can not know where our bytes went without our SWITCH frame;
 *  - a handshake still running is stopped, so that the peer starts no new
 *    direction towards us (upgrade.c, shim_upgrade_stop_for_close);
 *  - the peer's frames that are on their way are read before the close:
 *    its SWITCH frame when it switched (we know its offset), and the bells
 *    it took an arm of ours for (bells_owed). Nothing else comes: we are
 *    no longer armed, and the channel is closed right after.
 *
 * Application bytes the program left unread make the close a reset, as the
 * kernel would: those still in the kernel socket by themselves, those in
 * the ring by an abortive close (abort_if_unread).
 */
#include "close.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "close_budget.h"
#include "failover.h"
#include "fdtable.h"
#include "frames.h"
#include "real.h"
#include "self.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"

/* One close's waiting, drawn from the process's budget at its first wait
 * (close_budget.h): a close that never waits draws nothing. */
struct close_wait {
	unsigned long long start_ns, end_ns, granted_ns;
	bool drawn;
};

/* Waits for fd to become ready for events, at most until the close's
 * grant runs out. Returns false once it has. */
static bool wait_until(const struct shim_sock *s, int fd, short events, struct close_wait *w)
{
	unsigned long long now = shim_now_ns();
	struct pollfd p = { .fd = fd, .events = events };

	if (!w->drawn) {
		w->drawn = true;
		w->start_ns = now;
		w->granted_ns = shim_close_budget_take(SHIM_CLOSE_WAIT_MS * 1000000ull, now);
		w->end_ns = now + w->granted_ns;
		if (!w->granted_ns)
			SHIM_TRACE(SHIM_TRACE_WARN, "close.budget_spent", fd, &s->tuple, SHIM_REASON_NONE,
				   "\"waiting_for\":\"%s\"", events == POLLOUT ? "send_room" : "peer_frames");
	}
	if (now >= w->end_ns)
		return false;
	REAL(poll)(&p, 1, (int)((w->end_ns - now + 999999) / 1000000));
	return true;
}

/* What the close's grant did not use goes back to the budget. */
static void wait_done(struct close_wait *w)
{
	unsigned long long used;

	if (!w->drawn || !w->granted_ns)
		return;
	used = shim_now_ns() - w->start_ns;
	if (used < w->granted_ns)
		shim_close_budget_refund(w->granted_ns - used);
}

/* Our queued frames, then a failover's replay (it goes behind our RESUME). */
static void send_ours(struct shim_sock *s, int fd, struct close_wait *w)
{
	while (s->tcp_out_len || shim_failover_replaying(s)) {
		int rc = s->tcp_out_len ? shim_frames_flush(s, fd) : shim_failover_flush(s, fd);

		if (rc < 0 && rc != -EAGAIN)
			break;
		if (rc == -EAGAIN && !wait_until(s, fd, POLLOUT, w))
			break;
	}
	if (s->tcp_out_len)
		SHIM_TRACE(SHIM_TRACE_WARN, "close.unflushed", fd, &s->tuple, SHIM_REASON_NONE, "\"bytes\":%zu",
			   s->tcp_out_len);
}

/* True while a frame of the peer's is still to come. */
static bool frames_owed(const struct shim_sock *s)
{
	if (s->aborted || s->rx_tcp_eof)
		return false;
	/* A failover of ours under way: the peer answers our RESUME with its
	 * own, which, reaching a closed socket, would make the kernel reset
	 * the connection under bytes the peer has not read yet. A channel
	 * that can tell says whether the peer committed to it; one that has
	 * not learns from our end's close that it must not send it. */
	if (s->fo_started && !s->fo_peer_known && !s->fo_peer_rx_nothing && s->rx_dir == SHIM_DIR_CHAN)
		return !s->chan->ops->close_before_resume || s->chan->ops->close_before_resume(s->chan);
	switch (s->rx_dir) {
	case SHIM_DIR_TCP:
		/* Its frame follows the bytes before its offset; with some of
		 * those unread, the kernel resets anyway, as without us. */
		return false;
	case SHIM_DIR_SWITCHING:
		return true;
	case SHIM_DIR_CHAN:
		return s->bells_owed > 0;
	}
	return false;
}

static void take_theirs(struct shim_sock *s, int fd, struct close_wait *w)
{
	while (frames_owed(s)) {
		if (s->rx_dir == SHIM_DIR_SWITCHING) {
			int rc = shim_frames_read_switch(s, fd);

			if (rc == 1) {
				s->rx_dir = SHIM_DIR_CHAN;
				continue;
			}
			if (rc < 0)
				break; /* not its frame, or EOF: nothing more of ours comes */
		} else {
			shim_frames_drain(s, fd);
			if (!frames_owed(s))
				break;
		}
		if (!wait_until(s, fd, POLLIN, w)) {
			SHIM_TRACE(SHIM_TRACE_WARN, "close.frames_late", fd, &s->tuple, SHIM_REASON_NONE,
				   "\"rx\":%d,\"bells_owed\":%u", s->rx_dir, s->bells_owed);
			break;
		}
	}
	/* Bells that came unasked (a peer's arm race) go too. */
	if (s->rx_dir == SHIM_DIR_CHAN && !s->aborted && !s->rx_tcp_eof)
		shim_frames_drain(s, fd);
}

/*
 * The program leaves bytes unread. The kernel answers such a close with a
 * reset, but ours are in the ring, where it can not see them: an abortive
 * close (SO_LINGER 0) makes it send the reset all the same. A close the
 * program made abortive itself resets too. Either way the channel then
 * ends without a clean end of our stream, which the peer would otherwise
 * read first (and take the reset behind it for an answer to a frame of
 * ours: frames.c).
 */
static void abort_if_unread(struct shim_sock *s, int fd)
{
	struct linger abortive = { .l_onoff = 1, .l_linger = 0 }, set = { 0 };
	socklen_t len = sizeof(set);

	if (!s->chan || s->aborted)
		return;
	if (s->rx_dir == SHIM_DIR_CHAN && s->chan->ops->readable(s->chan)) {
		SHIM_TRACE(SHIM_TRACE_DEBUG, "close.unread", fd, &s->tuple, SHIM_REASON_NONE, "\"bytes\":%zu",
			   s->chan->ops->readable(s->chan));
		REAL(setsockopt)(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive));
	} else if (REAL(getsockopt)(fd, SOL_SOCKET, SO_LINGER, &set, &len) < 0 || !set.l_onoff || set.l_linger) {
		return;
	}
	if (s->chan->ops->abortive)
		s->chan->ops->abortive(s->chan);
}

/* Bytes still in the kernel socket now make the close a reset. The
 * program's own are its business (TCP does the same); a frame of ours
 * there is a shim bug or a race with the peer, and the first byte tells
 * which (a bell that came after the drain, a RESUME): say so. */
static void trace_tcp_unread(const struct shim_sock *s, int fd)
{
	int unread = 0;
	uint8_t first = 0;

	if (!shim_trace_enabled(SHIM_TRACE_INFO) || REAL(ioctl)(fd, FIONREAD, &unread) < 0 || unread <= 0)
		return;
	if (REAL(recv)(fd, &first, 1, MSG_DONTWAIT | MSG_PEEK) != 1)
		first = 0;
	SHIM_TRACE(SHIM_TRACE_INFO, "close.tcp_unread", fd, &s->tuple, SHIM_REASON_NONE,
		   "\"bytes\":%d,\"first\":%u,\"rx\":%d", unread, first, s->rx_dir);
}

void shim_close_prepare(struct shim_sock *s, int fd)
{
	struct close_wait w = { 0 };

	/* A sandboxed process gave its connections to the kernel before its
	 * filter came (io/bypass.c): their close is the kernel's alone, with
	 * no call of ours the filter could refuse. */
	if (s->closed || s->aborted || (!s->intercept && (!s->chan || shim_upgrade_barred())))
		return;
	shim_upgrade_stop_for_close(s, fd);
	send_ours(s, fd, &w);
	take_theirs(s, fd, &w);
	wait_done(&w);
	abort_if_unread(s, fd);
	trace_tcp_unread(s, fd);
}

static void settle_at_exit(int fd, void *ctx)
{
	struct shim_sock *s = shim_sock_get(fd);

	(void)ctx;
	if (!s)
		return;
	/* trylock: a thread of ours may hold it while the process exits
	 * under it; that connection is left to the kernel. So is one another
	 * process may hold (shim/LIFETIME.md): its bytes are not ours to read. */
	if ((s->role == SHIM_ROLE_CLIENT || s->role == SHIM_ROLE_SERVER) && pthread_mutex_trylock(&s->lock) == 0) {
		if (!s->active && !s->sleepers && !s->shared && (!s->io_pid || s->io_pid == shim_self_pid()) &&
		    shim_sock_fd_locked(s, fd) == fd)
			shim_close_prepare(s, fd);
		pthread_mutex_unlock(&s->lock);
	}
	shim_sock_put(s);
}

void shim_close_at_exit(void)
{
	shim_fd_each_open(settle_at_exit, NULL);
}

/* The fd we started with, if it still names this connection (the program
 * may have dup'ed and closed it since). */
bool shim_close_fd_is_ours(const struct shim_sock *s, int fd)
{
	struct sockaddr_storage ss;
	struct shim_endpoint local, peer;
	socklen_t len = sizeof(ss);

	if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0 ||
	    shim_endpoint_from_sockaddr((struct sockaddr *)&ss, len, &local) < 0)
		return false;
	len = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0 ||
	    shim_endpoint_from_sockaddr((struct sockaddr *)&ss, len, &peer) < 0)
		return false;
	return shim_endpoint_equal(&local, &s->tuple.local) && shim_endpoint_equal(&peer, &s->tuple.peer);
}

/*
 * Frames still queued for TCP (our SWITCH frame when the send buffer was
 * full at the switch, or a bell) must leave before the socket closes:
 * without its SWITCH frame the peer can never read what we put on the
 * channel. Bounded by the close budget (close_budget.h); the peer is
 * reading TCP up to that frame.
 */
void shim_close_flush(struct shim_sock *s, int fd)
{
	struct close_wait w = { 0 };

	if ((!s->tcp_out_len && !shim_failover_replaying(s)) || !shim_close_fd_is_ours(s, fd))
		return;
	send_ours(s, fd, &w);
	wait_done(&w);
}
