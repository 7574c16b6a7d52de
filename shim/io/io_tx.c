/*
 * The send side of the data path (io.h, shim_io_send): TCP with byte
 * counting until our direction switches, then the channel, and the
 * judgment of whether the channel pays. A call is a series of rounds
 * (shim_io_round(), io.c) until it is answered; each round takes one step
 * of the direction tx is in.
 */
#include "io.h"
#include "io_internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>

#include "clock.h"
#include "config.h"
#include "failover.h"
#include "frames.h"
#include "real.h"
#include "sockstat.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"
#include "wire.h"

/*
 * A blocking send that found the ring full for this long, the peer taking
 * nothing, returns the connection to TCP (failover.c, shim_failover_spill):
 * the peer may be in no call at all (a program that writes a large request
 * before it reads, to a peer that reads only once it is all there), and
 * TCP's buffers, several MB, would have taken what one ring can not. A
 * peer that reads at all gives room well within a second, even on a loaded
 * machine; the connection stays on TCP afterwards, so this is not early.
 */
#define IO_SPILL_AFTER_MS 1000

static const uint8_t data_bell = SHIM_FRAME_DATA_BELL;

/* One send call in progress. */
struct tx_call {
	struct shim_sock *s;
	int fd; /* the fd to use, -1 once it is gone */
	const struct iovec *iov;
	int iovcnt;
	int flags; /* MSG_OOB is dropped where the channel can not carry it */
	bool nonblock;
	size_t total, done;
	bool on_chan; /* bytes of this call went on the channel */
	bool rang;    /* ... and rang the peer for them */
	unsigned long long stalled_since; /* the ring was found full, not since emptied */
	long long deadline;
	int rc;
};

static void raise_sigpipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
}

/*
 * Whether the channel pays (transport.h, bell_bound_costs), counted once
 * per send that moved bytes on it: the exchange is unpaid when this send
 * had to wake the peer with a bell and the peer's bytes since our last
 * send had to wake us with one. Judged over windows of IO_PAY_WINDOW
 * exchanges: two windows in a row with RDMASHIM_UNPAID_PERCENT of them
 * unpaid, and the connection is due to go back to TCP for good: at the
 * first send that finds the channel quiet (hand_back_if_quiet). A stream
 * one way only never counts: its receiver sends nothing. The window's
 * length and the default share sit between the unpaid counts of
 * connections that pay and of those that do not (io.exchanges, traced at
 * debug; the figures: docs/BENCHMARKS.md, "The pay judgment").
 */
#define IO_PAY_WINDOW 64

/* Another process may reach this channel (a fork, SCM_RIGHTS), at our end
 * or at the peer's: its sends and cursors are not ours to count, nor its
 * failover ours to start (a RESUME reaches one process only). */
static bool either_end_shared(const struct shim_sock *s)
{
	const struct shim_chan *ch = s->chan;

	return s->shared || (ch->ops->peer_shared && ch->ops->peer_shared(ch));
}

static void count_exchange(struct shim_sock *s, int fd, bool rang)
{
	unsigned limit = (shim_cfg.unpaid_percent * IO_PAY_WINDOW + 99) / 100;
	const struct shim_chan *ch = s->chan;

	/* A channel that pays whatever its bells (rdma) is never judged. */
	if (!ch->ops->bell_bound_costs)
		return;
	/* The peer's bells on the line count as those on TCP do: where system
	 * calls are dear, an exchange woken by line bells both ways costs more
	 * than TCP's (docs/BENCHMARKS.md, "The pay judgment"). */
	unsigned bells = s->rx_bells + (ch->ops->line_bells_in ? ch->ops->line_bells_in(ch) : 0);
	bool woken = bells != s->rx_bells_at_send;

	s->rx_bells_at_send = bells;
	if (s->unpaid_due || either_end_shared(s))
		return;
	if (unlikely(shim_cfg.test_handback_after) && ++s->chan_sends >= shim_cfg.test_handback_after) {
		SHIM_TRACE(SHIM_TRACE_INFO, "io.unpaid", fd, &s->tuple, SHIM_REASON_UNPAID, "\"test_after\":%u",
			   s->chan_sends);
		s->unpaid_due = true;
		return;
	}
	s->unpaid += rang && woken;
	if (++s->exchanges < IO_PAY_WINDOW)
		return;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "io.exchanges", fd, &s->tuple, SHIM_REASON_NONE, "\"unpaid\":%u,\"of\":%u",
		   s->unpaid, s->exchanges);
	s->unpaid_windows = limit && s->unpaid >= limit ? s->unpaid_windows + 1 : 0;
	s->unpaid = 0;
	s->exchanges = 0;
	if (s->unpaid_windows < 2)
		return;
	SHIM_TRACE(SHIM_TRACE_INFO, "io.unpaid", fd, &s->tuple, SHIM_REASON_UNPAID, "\"windows\":%u,\"of\":%u",
		   s->unpaid_windows, IO_PAY_WINDOW);
	s->unpaid_due = true;
}

/*
 * A connection judged unpaid goes back to TCP at the start of the first
 * send that finds the channel quiet: nothing of the peer's unread in our
 * ring, nothing of ours the peer has not taken. Its failover then moves no
 * byte in either direction (no replay, no ring to read out behind the
 * RESUME), the plainest moment for one; a request/answer connection has
 * it at its next request. One that is never quiet stays on the channel.
 */
static bool hand_back_if_quiet(struct shim_sock *s, int fd)
{
	const struct shim_chan *ch = s->chan;

	if (either_end_shared(s)) {
		s->unpaid_due = false; /* shared since it was judged: it stays */
		return false;
	}
	if (ch->ops->readable(ch) || (ch->ops->tx_unread && ch->ops->tx_unread(ch)))
		return false;
	s->unpaid_due = false;
	return shim_failover_unpaid(s, fd) == 0;
}

/* One nonblocking TCP send of iov from done on, tx on TCP: the bytes that
 * went (counted in tx_tcp_bytes), 0 for none asked, -EAGAIN for no room,
 * or the error this call reports. */
static ssize_t send_tcp(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags, size_t done)
{
	struct iovec win[SHIM_IO_MAX_IOV];
	struct msghdr mh = { .msg_iov = win };
	ssize_t n;
	int rc;

	mh.msg_iovlen = (size_t)shim_io_iov_window(iov, iovcnt, done, (size_t)-1, win);
	n = REAL(sendmsg)(fd, &mh, flags | MSG_DONTWAIT);
	if (n >= 0) {
		s->tx_tcp_bytes += (size_t)n;
		return n;
	}
	rc = errno == EWOULDBLOCK ? -EAGAIN : -errno;
	/* A reset our own read of frames took off the socket (frames.c) is
	 * this send's to report, as the kernel would have; after bytes
	 * moved, the next call's. */
	if (rc == -EPIPE && s->rx_tcp_reset)
		rc = -ECONNRESET;
	if (rc == -ECONNRESET) {
		s->rx_tcp_reset = done != 0;
		s->peer_gone_told = true;
	}
	return rc;
}

/* A wait for the peer (its RESUME, or room for what we owe it), or
 * -EAGAIN for a nonblocking call; the call is answered when it fails. */
static enum shim_io_next tx_wait_for_peer(struct tx_call *c, short events)
{
	c->rc = shim_io_wait_for_peer(c->s, c->fd, events, c->nonblock, c->deadline);
	return c->rc < 0 ? SHIM_IO_ANSWERED : SHIM_IO_AGAIN;
}

/*
 * tx on TCP: one send of what is left. The first round of a young call
 * (young_round) is the kernel's send and no more: nothing of ours is
 * queued or owed, no upgrade is due, and a socket with no room is left to
 * the next round, which takes the steps before it waits.
 */
static enum shim_io_next tx_tcp(struct tx_call *c, bool young_round)
{
	struct shim_sock *s = c->s;
	ssize_t n;

	/* Our bytes the peer never got go first, and before them our RESUME. */
	if (!young_round && (shim_failover_replaying(s) ||
			     (s->fo_started && s->tcp_out_len && shim_frames_flush(s, c->fd) == -EAGAIN)))
		return tx_wait_for_peer(c, POLLOUT);
	n = send_tcp(s, c->fd, c->iov, c->iovcnt, c->flags, c->done);
	if (n > 0) {
		c->done += (size_t)n;
		if (!young_round && s->phase == SHIM_PHASE_IDLE)
			shim_upgrade_progress(s, c->fd); /* the first byte moved: a deferred attempt may start */
		shim_upgrade_note_moved(s, true);
		return SHIM_IO_AGAIN;
	}
	if (n == -EAGAIN && !c->nonblock) {
		if (young_round)
			return SHIM_IO_AGAIN;
		c->rc = shim_io_sleep_on_tcp(s, c->fd, POLLOUT, c->deadline);
		return c->rc < 0 ? SHIM_IO_ANSWERED : SHIM_IO_AGAIN;
	}
	c->rc = (int)n;
	return SHIM_IO_ANSWERED;
}

/*
 * The peer's end, or our own write side, shut before this send on the
 * channel: what TCP would have made of it. True when that answers the
 * call.
 */
static bool tx_chan_closed(struct tx_call *c)
{
	struct shim_sock *s = c->s;
	struct shim_chan *ch = s->chan;

	if (!s->wr_shut && !s->rx_tcp_reset && !s->rx_reset_seen && (ch->ops->peer_rx_gone(ch) || s->rx_tcp_eof) &&
	    !s->peer_gone_told) {
		/* TCP takes the first write after the peer closed (the reset
		 * comes back later) and fails the next ones. A peer that went
		 * with our bytes unread was reset by its kernel at once: that
		 * write fails ECONNRESET. */
		if (ch->ops->tx_unread && ch->ops->tx_unread(ch)) {
			/* What this call moved counts; the reset is the next
			 * call's, as the kernel reports it once. */
			if (c->done)
				return true;
			s->peer_gone_told = true;
			c->rc = -ECONNRESET;
			return true;
		}
		s->peer_gone_told = true;
		/* Over TCP that write reached the closed peer, whose kernel
		 * answered with a reset: SO_ERROR says EPIPE and later sends
		 * fail. One bell draws the same answer from it (a peer still
		 * there takes it as a bell). */
		shim_frames_queue(s, c->fd, &data_bell, 1);
		c->done = c->total;
		return true;
	}
	if (s->rx_tcp_reset && !s->wr_shut) {
		/* The peer's reset, not yet reported: this send's error, or,
		 * once bytes moved, the next call's. */
		if (c->done)
			return true;
		s->rx_tcp_reset = false;
		s->peer_gone_told = true;
		c->rc = -ECONNRESET;
		return true;
	}
	if (s->wr_shut || ch->ops->peer_rx_gone(ch) || s->rx_tcp_eof) {
		c->rc = -EPIPE;
		if (!c->done)
			raise_sigpipe(c->flags);
		return true;
	}
	return false;
}

/* The ring had no room: the peer's end, a nonblocking call's EAGAIN, a
 * spill to TCP once it stays full, or a wait for room. */
static enum shim_io_next tx_chan_full(struct tx_call *c)
{
	struct shim_sock *s = c->s;

	if (shim_io_aborted_by_peer(s, c->fd)) {
		c->rc = -ECONNRESET;
		return SHIM_IO_ANSWERED;
	}
	if (c->nonblock) {
		c->rc = -EAGAIN;
		return SHIM_IO_ANSWERED;
	}
	if (!c->stalled_since) {
		c->stalled_since = shim_now_ns();
	} else if (shim_now_ns() - c->stalled_since >= IO_SPILL_AFTER_MS * 1000000ull &&
		   shim_failover_spill(s, c->fd) == 0) {
		return SHIM_IO_AGAIN; /* on TCP from here: the kernel buffers the rest */
	}
	c->rc = shim_io_wait_tx(s, c->fd, c->deadline);
	return c->rc < 0 ? SHIM_IO_ANSWERED : SHIM_IO_AGAIN;
}

/* tx on the channel: what its ring takes, unless something sends this
 * call back to TCP first (urgent data, an unpaid connection gone quiet). */
static enum shim_io_next tx_chan(struct tx_call *c)
{
	struct shim_sock *s = c->s;
	struct shim_chan *ch = s->chan;
	size_t n;

	if (!c->total)
		return SHIM_IO_ANSWERED;
	if (s->bells_owed && s->rx_dir == SHIM_DIR_CHAN)
		shim_frames_drain(s, c->fd);
	if (tx_chan_closed(c))
		return SHIM_IO_ANSWERED;
	/* Where to resume is the peer's to say (its RESUME). */
	if (shim_failover_waiting(s))
		return tx_wait_for_peer(c, POLLIN);
	if (unlikely(c->flags & MSG_OOB)) {
		/* Only TCP carries the urgent mark: back to it first. Where the
		 * channel can not (no tx_offset), the bytes go as plain data. */
		if (shim_failover_oob(s, c->fd) == 0)
			return SHIM_IO_AGAIN;
		SHIM_TRACE(SHIM_TRACE_WARN, "io.oob_inline", c->fd, &s->tuple, SHIM_REASON_OOB, "\"transport\":%d",
			   (int)ch->ops->kind);
		c->flags &= ~MSG_OOB;
	}
	if (unlikely(s->unpaid_due) && !c->done && hand_back_if_quiet(s, c->fd))
		return SHIM_IO_AGAIN; /* on TCP from here, this call's bytes too */
	n = ch->ops->send(ch, c->iov, c->iovcnt, c->done);
	if (!n)
		return tx_chan_full(c);
	c->done += n;
	c->stalled_since = 0;
	c->on_chan = true;
	unsigned bells = ch->ops->tx_bell(ch);

	if (bells & SHIM_BELL_TCP)
		shim_frames_queue(s, c->fd, &data_bell, 1);
	c->rang |= bells != 0; /* on TCP or on the line */
	return SHIM_IO_AGAIN;
}

/* Round after round until the call moved its bytes (a nonblocking one:
 * any) or has its answer; a young call's first round takes no step of
 * shim_io_round()'s. At least one round, even for no bytes. */
static void tx_rounds(struct tx_call *c, bool young)
{
	struct shim_sock *s = c->s;
	bool young_round = young;

	if (c->fd < 0)
		return;
	do {
		enum shim_io_next next;

		if (!young_round) {
			c->rc = shim_io_round(s, &c->fd);
			if (c->rc < 0)
				return;
		}
		if (s->tx_dir == SHIM_DIR_TCP)
			next = tx_tcp(c, young_round);
		else
			next = tx_chan(c);
		if (next == SHIM_IO_ANSWERED)
			return;
		young_round = false;
	} while (c->done < c->total && !(c->nonblock && c->done));
}

/* The call's end: the pay judgment, its counts, its trace line, and the
 * program's next EPOLLOUT. */
static void tx_finish(struct tx_call *c)
{
	struct shim_sock *s = c->s;

	if (c->on_chan && s->tx_dir == SHIM_DIR_CHAN && !s->fo_started && c->fd >= 0)
		count_exchange(s, c->fd, c->rang);
	if (c->done)
		shim_sockstat_sent(s, c->done);
	SHIM_TRACE(SHIM_TRACE_TRACE, "io.send", c->fd, NULL, SHIM_REASON_NONE,
		   "\"total\":%zu,\"done\":%zu,\"rc\":%d,\"flags\":%d,\"tx\":%d,\"tcp\":%llu", c->total, c->done,
		   c->rc, c->flags, s->tx_dir, (unsigned long long)s->tx_tcp_bytes);
	/* ... and found no more room: its next EPOLLOUT is due. */
	if ((c->rc == -EAGAIN && !c->done) || (c->done && c->done < c->total))
		__atomic_add_fetch(&s->tx_starved, 1, __ATOMIC_RELAXED);
}

ssize_t shim_io_send(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct tx_call c = {
		.s = s, .fd = fd, .iov = iov, .iovcnt = iovcnt, .flags = flags,
		.nonblock = (flags & MSG_DONTWAIT) != 0,
		.total = shim_io_iov_total(iov, iovcnt),
	};
	unsigned long long now = shim_io_begin(s, &c.fd, &c.rc);

	/* Urgent data: the receiver keeps its byte out of the stream (or, with
	 * SO_OOBINLINE, in it), which our byte counts can not know; such a
	 * connection stays on TCP. One that moved goes back (tx_chan). */
	if (unlikely(flags & MSG_OOB) && c.fd >= 0 && !s->pinned && !s->closed)
		shim_upgrade_pin_tcp(s, c.fd, SHIM_REASON_BYPASS);
	c.nonblock |= s->nonblocking;
	/* For the transport's send: a call that may not wait takes no zero
	 * copy, which returns only when its writes completed (rdma_zc.c). */
	s->tx_dontwait = c.nonblock;
	c.deadline = shim_deadline_ms(s->snd_timeout_ms);
	tx_rounds(&c, c.fd >= 0 && !(flags & MSG_OOB) && shim_io_young_not_due(s, now));
	tx_finish(&c);
	shim_io_end(s);
	return c.done ? (ssize_t)c.done : c.rc;
}
