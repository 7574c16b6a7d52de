/*
 * The receive side of the data path (io.h, shim_io_recv): TCP with byte
 * counting up to the peer's switch, the switch itself, then the channel.
 * A call is a series of rounds (shim_io_round(), io.c) until it is
 * answered; each round takes one step of the direction rx is in.
 */
#include "io.h"
#include "io_internal.h"

#include <errno.h>
#include <poll.h>
#include <sys/ioctl.h>

#include "config.h"
#include "faults.h"
#include "frames.h"
#include "msgstamps.h"
#include "real.h"
#include "sockstat.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"
#include "wire.h"

static const uint8_t space_bell = SHIM_FRAME_SPACE_BELL;

/* One recv call in progress. */
struct rx_call {
	struct shim_sock *s;
	int fd; /* the fd to use, -1 once it is gone */
	const struct iovec *iov;
	int iovcnt, flags;
	bool peek, waitall, nonblock;
	size_t want, got;
	/* A blocking read returns once it has SO_RCVLOWAT bytes (or all it
	 * asked for, or with MSG_WAITALL all of it), as the kernel's. */
	size_t enough;
	/* This call read TCP up to the peer's switch, or the ring up to the
	 * peer's RESUME: it goes on into the next for what is already there,
	 * without a wait, as one TCP read would return both. */
	bool crossing;
	long long deadline;
	int rc;
};

/* One nonblocking TCP read while rx is on TCP. Returns bytes for the app,
 * -EINPROGRESS when everything read was shim frames, 0 on EOF, or -errno. */
static ssize_t recv_tcp(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct iovec win[SHIM_IO_MAX_IOV];
	struct msghdr mh = { 0 };
	size_t max = (size_t)-1;
	ssize_t n;

	if (s->rx_switch_known)
		max = (size_t)(s->rx_switch_at - s->rx_tcp_bytes);
	mh.msg_iov = win;
	mh.msg_iovlen = (size_t)shim_io_iov_window(iov, iovcnt, 0, max, win);
	n = REAL(recvmsg)(fd, &mh, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if (n == 0)
		return 0;
	if (shim_upgrade_rx_pending(s))
		/* The peer announces its offset before its frame can arrive, so
		 * looking now tells us whether these bytes crossed it. */
		shim_upgrade_progress(s, fd);
	if (s->rx_switch_known && s->rx_tcp_bytes + (size_t)n > s->rx_switch_at) {
		size_t keep = (size_t)(s->rx_switch_at - s->rx_tcp_bytes);
		struct iovec past[SHIM_IO_MAX_IOV];
		int npast = shim_io_iov_window(win, (int)mh.msg_iovlen, keep, (size_t)n - keep, past);

		if ((flags & MSG_PEEK) || !shim_rxswitch_crossed(s, fd, past, npast))
			n = (ssize_t)keep;
	}
	if (!(flags & MSG_PEEK)) {
		s->rx_tcp_bytes += (size_t)n;
		shim_upgrade_note_moved(s, false);
		if (s->rx_switch_known && s->rx_tcp_bytes == s->rx_switch_at)
			s->rx_dir = SHIM_DIR_SWITCHING;
	}
	return n ? n : -EINPROGRESS;
}

/* The kernel's blocking read (shim_io_young_not_due() said so), without
 * the lock; bytes or -errno. */
static ssize_t recv_raw(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct msghdr mh = { .msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt };
	ssize_t n;

	s->raw_reads++;
	pthread_mutex_unlock(&s->lock);
	n = REAL(recvmsg)(fd, &mh, flags);
	if (n < 0)
		n = errno == EWOULDBLOCK ? -EAGAIN : -errno;
	pthread_mutex_lock(&s->lock);
	s->raw_reads--;
	if (n > 0 && !(flags & MSG_PEEK)) {
		s->rx_tcp_bytes += (size_t)n;
		shim_upgrade_progress(s, fd); /* the first byte moved: a deferred attempt may start */
		shim_upgrade_note_moved(s, false);
	}
	return n;
}

/* Waits (the call is blocking) on TCP for events; the call is answered
 * when the wait fails (its deadline, a signal, the fd gone). */
static enum shim_io_next rx_sleep_on_tcp(struct rx_call *c)
{
	c->rc = shim_io_sleep_on_tcp(c->s, c->fd, POLLIN, c->deadline);
	return c->rc < 0 ? SHIM_IO_ANSWERED : SHIM_IO_AGAIN;
}

/* The kernel's urgent mark is the next byte to read. */
static bool tcp_at_mark(int fd)
{
	int at = 0;

	return REAL(ioctl)(fd, SIOCATMARK, &at) == 0 && at;
}

/* A read on from the ring takes TCP's bytes only: with none queued, a
 * reset or end there stays the kernel's to report at the next call, as
 * its read that returned bytes leaves them. */
static bool tcp_bytes_queued(int fd)
{
	int queued = 0;

	return REAL(ioctl)(fd, FIONREAD, &queued) == 0 && queued > 0;
}

/*
 * rx on TCP: one read. The first round of a young call (young_round) is
 * the kernel's read and no more: the bytes are counted and nothing of
 * ours follows them (no upgrade to move on, no switch to cross); the
 * rounds after it, if it did not answer the call, take the steps.
 */
static enum shim_io_next rx_tcp(struct rx_call *c, const struct iovec *win, int wincnt, bool young_round)
{
	struct shim_sock *s = c->s;
	ssize_t n;

	/* Come from the ring: nothing behind the RESUME yet, or an urgent
	 * byte sent us back to TCP (failover.oob) and its mark is next, where
	 * the kernel's read stops once it has bytes. */
	if (c->crossing && c->got &&
	    ((c->got >= c->enough && !tcp_bytes_queued(c->fd)) || tcp_at_mark(c->fd))) {
		c->rc = 0;
		return SHIM_IO_ANSWERED;
	}
	n = recv_tcp(s, c->fd, win, wincnt, c->flags);
	if (n == -EINPROGRESS)
		return SHIM_IO_AGAIN;
	if (n == -EAGAIN && c->crossing && c->got >= c->enough) {
		c->rc = 0; /* nothing behind the RESUME yet: the ring's bytes go */
		return SHIM_IO_ANSWERED;
	}
	if (n == -EAGAIN && !c->nonblock)
		return rx_sleep_on_tcp(c);
	if (n <= 0) {
		c->rc = (int)n;
		return SHIM_IO_ANSWERED;
	}
	/* Test-only (msgstamps.h): bytes read off TCP ahead of the switch
	 * are this call's data too, found here if not on the channel. */
	SHIM_MSGSTAMP_SEEN();
	c->got += (size_t)n;
	/* A peek consumed nothing: another round would find the same bytes
	 * and hand them out twice (SO_RCVLOWAT above what is queued). */
	if (c->peek)
		return SHIM_IO_ANSWERED;
	if (young_round)
		return SHIM_IO_AGAIN;
	if (s->phase == SHIM_PHASE_IDLE)
		shim_upgrade_progress(s, c->fd); /* the first byte moved: a deferred attempt may start */
	c->crossing = s->rx_dir == SHIM_DIR_SWITCHING;
	return SHIM_IO_AGAIN;
}

/* rx has read TCP up to the peer's switch: its frame, then the channel. */
static enum shim_io_next rx_switching(struct rx_call *c)
{
	struct shim_sock *s = c->s;

	c->rc = shim_rxswitch_finish(s, c->fd);
	if (c->rc < 0 || s->rx_tcp_eof)
		return SHIM_IO_ANSWERED;
	if (c->rc == 0) {
		/* The frame is not all here. The TCP bytes go now when they
		 * are enough for this call; a blocking one short of them
		 * (MSG_WAITALL, SO_RCVLOWAT) waits for the frame as for any
		 * byte, as the kernel's read waits for bytes. */
		if ((c->got && (c->got >= c->enough || c->nonblock)) || s->rd_shut)
			return SHIM_IO_ANSWERED;
		if (c->nonblock) {
			c->rc = -EAGAIN;
			return SHIM_IO_ANSWERED;
		}
		if (rx_sleep_on_tcp(c) == SHIM_IO_ANSWERED)
			return SHIM_IO_ANSWERED;
	}
	/* shim_rxswitch_finish() returned 1 ("switched"), not a byte count:
	 * it must not reach the call's return. */
	c->rc = 0;
	return SHIM_IO_AGAIN;
}

/*
 * A blocking read with a large buffer, its channel empty: the buffer is
 * offered to the peer's sends for the wait (one copy, transport.h
 * rx_offer), and whatever ended the wait, the offer ends before the call
 * goes on: the bytes that landed are the call's, even when the wait
 * failed (a signal, SO_RCVTIMEO), as a kernel read that got bytes
 * returns them.
 */
static enum shim_io_next rx_wait_offering(struct rx_call *c, const struct iovec *win)
{
	struct shim_sock *s = c->s;
	struct shim_chan *ch = s->chan;
	size_t n;

	if (ch->ops->rx_offer(ch, win[0].iov_base, win[0].iov_len) < 0) {
		c->rc = shim_io_wait_rx(s, c->fd, c->deadline);
		return c->rc < 0 ? SHIM_IO_ANSWERED : SHIM_IO_AGAIN;
	}
	c->rc = shim_io_wait_rx_offering(s, c->fd, c->deadline);
	/* The wait may have handed the channel back (a failover stops it
	 * and settles the offer first): the offer's bytes were taken then. */
	n = s->chan == ch ? ch->ops->rx_offer_end(ch) : 0;
	if (n) {
		SHIM_MSGSTAMP_SEEN();
		c->got += n;
		s->rx_idle_arms = 0;
		c->rc = 0;
		/* The call goes back to the program now, maybe for long: a
		 * sender that waits for room the ring made meanwhile gets
		 * its bell, as after any read. */
		if (ch->ops->rx_should_bell(ch))
			shim_frames_queue(s, c->fd, &space_bell, 1);
		return SHIM_IO_AGAIN;
	}
	return c->rc < 0 ? SHIM_IO_ANSWERED : SHIM_IO_AGAIN;
}

/* The channel had nothing for us: the peer's end, ours, or a wait. */
static enum shim_io_next rx_chan_empty(struct rx_call *c, const struct iovec *win)
{
	struct shim_sock *s = c->s;
	struct shim_chan *ch = s->chan;

	if (shim_io_aborted_by_peer(s, c->fd)) {
		c->rc = -ECONNRESET;
		return SHIM_IO_ANSWERED;
	}
	if (s->rx_tcp_reset) {
		/* Reset, not closed: the kernel reports that, once. */
		s->rx_tcp_reset = false;
		c->rc = -ECONNRESET;
		return SHIM_IO_ANSWERED;
	}
	/* After shutdown(SHUT_RD), as Linux's TCP: what is queued, or comes
	 * later, is still read; an empty queue reads as EOF. */
	if (ch->ops->rx_eof(ch) || s->rx_tcp_eof || s->rd_shut)
		return SHIM_IO_ANSWERED;
	if (c->nonblock) {
		c->rc = -EAGAIN;
		return SHIM_IO_ANSWERED;
	}
	/* Failed and drained: the rest follows the peer's RESUME. */
	if (s->fo_started)
		return rx_sleep_on_tcp(c);
	/* Large reads only: a small one pays one compare for it. */
	if (unlikely(win[0].iov_len >= (size_t)shim_cfg.zerocopy_shm_min_kb * 1024u) && ch->ops->rx_offer && !c->peek)
		return rx_wait_offering(c, win);
	c->rc = shim_io_wait_rx(s, c->fd, c->deadline);
	return c->rc < 0 ? SHIM_IO_ANSWERED : SHIM_IO_AGAIN;
}

/*
 * A read emptied the ring with room left: when the peer went back to TCP
 * (its spill once this ring stayed full, a hand-back, a failure), the
 * bytes it sent since follow its RESUME there, readable now, and FIONREAD
 * counts them (io_ready.c). The call goes on for them as one TCP read
 * would, without a wait. Cheap where nothing says so: no system call.
 */
static void rx_look_behind_ring(struct rx_call *c)
{
	struct shim_sock *s = c->s;
	const struct shim_chan *ch = s->chan;

	if (c->got >= c->want)
		return;
	/* The loads first: a channel's readable may cost more (rdma reaps). */
	if (!s->fo_peer_known && !(ch->ops->failed && ch->ops->failed(ch)) &&
	    !(ch->ops->peer_resuming && ch->ops->peer_resuming(ch)))
		return;
	/* Not all of the ring was taken (a peek leaves it there): the
	 * RESUME's offset is not reached yet. */
	if (ch->ops->readable(ch) > (c->peek ? c->got : 0))
		return;
	/* The announced RESUME is on TCP before the peer's send returned;
	 * reading it lets the next round's failover step move rx there. */
	if (!s->fo_peer_known)
		shim_frames_drain(s, c->fd);
	if (!c->peek) {
		c->crossing = true;
		return;
	}
	/* A peek stays in this round, rx on the channel: it looks at what
	 * follows the RESUME itself, up to the urgent mark (rx_tcp). */
	if (s->fo_peer_known && tcp_bytes_queued(c->fd) && !tcp_at_mark(c->fd)) {
		struct iovec win[SHIM_IO_MAX_IOV];
		struct msghdr mh = { .msg_iov = win };
		ssize_t n;

		mh.msg_iovlen = (size_t)shim_io_iov_window(c->iov, c->iovcnt, c->got, (size_t)-1, win);
		n = REAL(recvmsg)(c->fd, &mh, (c->flags & ~MSG_WAITALL) | MSG_PEEK | MSG_DONTWAIT);
		if (n > 0)
			c->got += (size_t)n;
	}
}

/* rx on the channel: what its ring holds. */
static enum shim_io_next rx_chan(struct rx_call *c, const struct iovec *win, int wincnt)
{
	struct shim_sock *s = c->s;
	struct shim_chan *ch = s->chan;
	ssize_t n;

	/* Test-only (faults.h, peer_stall): this reader stops taking for a
	 * while, as a busy program would; without the lock, so that the
	 * connection's other calls go on meanwhile. */
	if (unlikely(shim_fault_hit(SHIM_FAULT_PEER_STALL, c->fd, &s->tuple, "recv"))) {
		pthread_mutex_unlock(&s->lock);
		shim_fault_sleep_ms(SHIM_FAULT_STALL_MS);
		pthread_mutex_lock(&s->lock);
		return SHIM_IO_AGAIN;
	}
	if (s->bells_owed)
		shim_frames_drain(s, c->fd);
	n = (ssize_t)ch->ops->recv(ch, win, wincnt, c->peek);
	if (c->crossing) {
		c->crossing = false;
		if (n <= 0 && c->got && !c->waitall)
			return SHIM_IO_ANSWERED;
	}
	if (n <= 0)
		return rx_chan_empty(c, win);
	/* Test-only (msgstamps.h): the transport marked where it saw the
	 * bytes; this step marks it for any way it did not (first mark wins),
	 * so that every receive with data is counted by how it found it. */
	SHIM_MSGSTAMP_SEEN();
	c->got += (size_t)n;
	s->rx_idle_arms = 0;
	if (!c->peek && ch->ops->rx_should_bell(ch))
		shim_frames_queue(s, c->fd, &space_bell, 1);
	rx_look_behind_ring(c);
	return c->peek ? SHIM_IO_ANSWERED : SHIM_IO_AGAIN;
}

/* Round after round until the call has its bytes or its answer; a young
 * call's first round takes no step of shim_io_round()'s. */
static void rx_rounds(struct rx_call *c, bool young)
{
	struct shim_sock *s = c->s;
	bool young_round = young;

	while (c->fd >= 0 && c->want && !(c->got >= c->enough && !c->crossing)) {
		struct iovec win[SHIM_IO_MAX_IOV];
		int wincnt = shim_io_iov_window(c->iov, c->iovcnt, c->got, (size_t)-1, win);
		enum shim_io_next next;

		if (!young_round) {
			c->rc = shim_io_round(s, &c->fd);
			if (c->rc < 0)
				return;
		}
		if (s->rx_dir == SHIM_DIR_TCP)
			next = rx_tcp(c, win, wincnt, young_round);
		else if (s->rx_dir == SHIM_DIR_SWITCHING)
			next = rx_switching(c);
		else
			next = rx_chan(c, win, wincnt);
		if (next == SHIM_IO_ANSWERED)
			return;
		young_round = false;
	}
}

/* The call's end: its counts, its trace line, and the program's next
 * edge-triggered EPOLLIN. */
static void rx_finish(struct rx_call *c)
{
	struct shim_sock *s = c->s;

	if (c->got && !c->peek)
		shim_sockstat_received(s, c->got);
	SHIM_TRACE(SHIM_TRACE_TRACE, "io.recv", c->fd, NULL, SHIM_REASON_NONE,
		   "\"want\":%zu,\"got\":%zu,\"rc\":%d,\"flags\":%d,\"rx\":%d,\"tcp\":%llu", c->want, c->got, c->rc,
		   c->flags, s->rx_dir, (unsigned long long)s->rx_tcp_bytes);
	/* The program found nothing more to read: its next edge-triggered
	 * EPOLLIN is due at the next bytes (epoll.c). A short peek leaves
	 * them all there, and the kernel sees no edge in it. */
	if ((c->rc == -EAGAIN && !c->got) || (c->got && c->got < c->want && c->nonblock && !c->peek))
		__atomic_add_fetch(&s->rx_starved, 1, __ATOMIC_RELAXED);
}

ssize_t shim_io_recv(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct rx_call c = {
		.s = s, .fd = fd, .iov = iov, .iovcnt = iovcnt, .flags = flags,
		.peek = flags & MSG_PEEK,
		.waitall = (flags & MSG_WAITALL) && !(flags & MSG_PEEK),
		.nonblock = (flags & MSG_DONTWAIT) != 0,
		.want = shim_io_iov_total(iov, iovcnt),
	};
	unsigned long long now = shim_io_begin(s, &c.fd, &c.rc);
	size_t lowat;
	bool young;

	c.nonblock |= s->nonblocking;
	c.deadline = shim_deadline_ms(s->rcv_timeout_ms);
	lowat = s->rcv_lowat > 1 ? (size_t)s->rcv_lowat : 1;
	c.enough = c.waitall || lowat > c.want ? c.want : lowat;
	young = c.fd >= 0 && c.want && shim_io_young_not_due(s, now);
	if (young && !c.nonblock) {
		/* The kernel's own read answers the whole call. */
		ssize_t n = recv_raw(s, c.fd, iov, iovcnt, flags);

		if (n > 0)
			c.got = (size_t)n;
		else
			c.rc = (int)n;
	} else {
		rx_rounds(&c, young);
	}
	rx_finish(&c);
	shim_io_end(s);
	return c.got ? (ssize_t)c.got : c.rc;
}
