/*
 * The data path of intercepted connections; see io.h.
 *
 * Locking: s->lock is held for every state change and every ring access,
 * and dropped around every wait, so one thread blocked in recv never holds
 * up another thread's send on the same fd. TCP calls made under the lock
 * are always MSG_DONTWAIT; blocking is emulated by waiting outside it.
 */
#include "io.h"
#include "io_internal.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>

#include "clock.h"
#include "config.h"
#include "failover.h"
#include "faults.h"
#include "fdtable.h"
#include "frames.h"
#include "real.h"
#include "spin.h"
#include "sockstat.h"
#include "stats.h"
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
/* iovec elements handled per call; beyond this a call moves fewer bytes,
 * which stream sockets allow. */
#define IO_MAX_IOV 64

static const uint8_t data_bell = SHIM_FRAME_DATA_BELL;
static const uint8_t space_bell = SHIM_FRAME_SPACE_BELL;

static size_t iov_total(const struct iovec *iov, int iovcnt)
{
	size_t total = 0;

	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	return total;
}

/* out = the part of iov from byte skip, at most max bytes long. */
static int iov_window(const struct iovec *iov, int iovcnt, size_t skip, size_t max, struct iovec *out)
{
	int n = 0;

	for (int i = 0; i < iovcnt && n < IO_MAX_IOV && max; i++) {
		size_t len = iov[i].iov_len;

		if (skip >= len) {
			skip -= len;
			continue;
		}
		out[n].iov_base = (char *)iov[i].iov_base + skip;
		out[n].iov_len = len - skip < max ? len - skip : max;
		max -= out[n].iov_len;
		skip = 0;
		n++;
	}
	return n;
}

/*
 * A data call starts: from here until io_leave() it is counted in
 * s->active, so a close of fd on another thread, spinning or sleeping
 * alike, makes the copy shim_io_fd() then uses, and nothing here ever acts on
 * the number once the program closed it (it may name another file by
 * then). Returns the fd to use, or -EBADF (in *rc) when fd was closed
 * before the call began.
 */
static int io_enter(struct shim_sock *s, int fd, int *rc)
{
	s->active++;
	fd = shim_sock_fd_locked(s, fd);
	if (fd < 0 || s->closed) {
		*rc = -EBADF;
		return -1;
	}
	shim_failover_look_elsewhere(s, fd);
	return fd;
}

static void io_leave(struct shim_sock *s)
{
	/* The last call that may have been on a closed number ends: new calls
	 * check their number against the table (io_enter). */
	if (--s->active == 0)
		s->fd_lost = false;
}

static void raise_sigpipe(int flags)
{
	if (!(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
}

/* One nonblocking TCP read while rx is on TCP. Returns bytes for the app,
 * -EINPROGRESS when everything read was shim frames, 0 on EOF, or -errno. */
static ssize_t recv_tcp(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	struct iovec win[IO_MAX_IOV];
	struct msghdr mh = { 0 };
	size_t max = (size_t)-1;
	ssize_t n;

	if (s->rx_switch_known)
		max = (size_t)(s->rx_switch_at - s->rx_tcp_bytes);
	mh.msg_iov = win;
	mh.msg_iovlen = (size_t)iov_window(iov, iovcnt, 0, max, win);
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
		struct iovec past[IO_MAX_IOV];
		int npast = iov_window(win, (int)mh.msg_iovlen, keep, (size_t)n - keep, past);

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


/*
 * A young idle connection: no handshake begun, none due yet
 * (RDMASHIM_UPGRADE_AFTER_MS), nothing off TCP, no switch of the peer's
 * known. Nothing in-band can reach it (the peer writes a shim byte only
 * after our side's handshake began, PROTOCOL.md), and a call has no step
 * of ours to take: a blocking read may be the kernel's own (one system
 * call where the shim's would be a try, a poll and a retry, with the
 * kernel's SO_RCVLOWAT, SO_RCVTIMEO, MSG_WAITALL and restart rules; while
 * it runs, no handshake starts in this process: raw_reads, upgrade.c),
 * and a nonblocking read or any send is one kernel call, counted.
 */
static bool young_not_due(const struct shim_sock *s, unsigned long long now)
{
	return shim_io_young_locked(s) && !s->neg && !s->tcp_out_len && !s->aborted && !s->rx_tcp_reset &&
	       !shim_upgrade_due(s, now);
}

/*
 * A data call's first step, under s->lock, before io_enter(): the time,
 * looked at once for the call's young_not_due() (0 when the connection is
 * past its idle phase, which asks nothing of the clock), and, when the
 * upgrade is due while a young epoll registration of the connection is
 * still the kernel's, that registration taken over first, so that the
 * upgrade can start in this call (epoll_young.c; the lock is let go
 * meanwhile: the set's lock comes before the sock's).
 */
static unsigned long long young_look(struct shim_sock *s)
{
	unsigned long long now;

	if (s->phase != SHIM_PHASE_IDLE)
		return 0;
	now = shim_now_ns();
	if (unlikely(__atomic_load_n(&s->ep_young_set, __ATOMIC_RELAXED)) && shim_upgrade_due(s, now)) {
		pthread_mutex_unlock(&s->lock);
		shim_io_young_take_over(s);
		pthread_mutex_lock(&s->lock);
	}
	return now;
}

/* The kernel's blocking read (young_not_due() said so), without the lock;
 * bytes or -errno. */
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

/* The start of each round of a data call: the fd to use now, our queued
 * frames out, the upgrade and a failover moved on. -EBADF when the fd is
 * gone, -ECONNRESET once the connection was ended. */
static int io_round(struct shim_sock *s, int *fd)
{
	*fd = shim_io_fd(s, *fd);
	if (*fd < 0)
		return -EBADF;
	shim_failover_look_elsewhere(s, *fd);
	if (s->tcp_out_len)
		shim_frames_flush(s, *fd);
	shim_upgrade_progress(s, *fd);
	shim_failover_progress(s, *fd);
	return s->aborted ? -ECONNRESET : 0;
}

ssize_t shim_io_recv(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	bool peek = flags & MSG_PEEK;
	bool waitall = (flags & MSG_WAITALL) && !peek;
	bool nonblock = (flags & MSG_DONTWAIT) != 0;
	size_t want = iov_total(iov, iovcnt), got = 0;
	/* This call read TCP up to the peer's switch: it goes on into the ring
	 * for what is already there, as one TCP read would return both. */
	bool crossing = false;
	unsigned long long now;
	long long deadline;
	ssize_t n;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	now = young_look(s);
	fd = io_enter(s, fd, &rc);
	nonblock |= s->nonblocking;
	deadline = shim_deadline_ms(s->rcv_timeout_ms);
	/* A blocking read returns once it has SO_RCVLOWAT bytes (or all it
	 * asked for, or with MSG_WAITALL all of it), as the kernel's. */
	size_t lowat = s->rcv_lowat > 1 ? (size_t)s->rcv_lowat : 1;
	size_t enough = waitall || lowat > want ? want : lowat;

	/* The kernel's own read answers the whole call. */
	bool young = fd >= 0 && want && young_not_due(s, now);
	bool raw = young && !nonblock, answered = raw;

	if (raw) {
		n = recv_raw(s, fd, iov, iovcnt, flags);
		if (n > 0)
			got = (size_t)n;
		else
			rc = (int)n;
	} else if (young) {
		/* Nonblocking, young: the loop's first round without its
		 * steps (nothing to flush, no handshake to move on, no switch
		 * to cross). What only more rounds answer goes on below. */
		n = recv_tcp(s, fd, iov, iovcnt, flags);
		if (n > 0)
			got = (size_t)n;
		else
			rc = (int)n;
		answered = got >= enough || n <= 0;
	}
	while (!answered && fd >= 0 && want && !(got >= enough && !crossing)) {
		struct iovec win[IO_MAX_IOV];
		int wincnt = iov_window(iov, iovcnt, got, (size_t)-1, win);

		rc = io_round(s, &fd);
		if (rc < 0)
			break;
		if (s->rx_dir == SHIM_DIR_TCP) {
			n = recv_tcp(s, fd, win, wincnt, flags);
			if (n == -EINPROGRESS)
				continue;
			if (n == -EAGAIN && !nonblock) {
				rc = shim_io_sleep_on_tcp(s, fd, POLLIN, deadline);
				if (rc < 0)
					break;
				continue;
			}
			if (n <= 0) {
				rc = (int)n;
				break;
			}
			got += (size_t)n;
			if (s->phase == SHIM_PHASE_IDLE)
				shim_upgrade_progress(s, fd); /* the first byte moved: a deferred attempt may start */
			if (peek)
				break;
			crossing = s->rx_dir == SHIM_DIR_SWITCHING;
			continue;
		}
		if (s->rx_dir == SHIM_DIR_SWITCHING) {
			rc = shim_rxswitch_finish(s, fd);
			if (rc < 0 || s->rx_tcp_eof)
				break;
			if (rc == 0) {
				/* The frame is not all here. The TCP bytes go now when
				 * they are enough for this call; a blocking one short of
				 * them (MSG_WAITALL, SO_RCVLOWAT) waits for the frame as
				 * for any byte, as the kernel's read waits for bytes. */
				if ((got && (got >= enough || nonblock)) || s->rd_shut)
					break;
				if (nonblock) {
					rc = -EAGAIN;
					break;
				}
				rc = shim_io_sleep_on_tcp(s, fd, POLLIN, deadline);
				if (rc < 0)
					break;
			}
			/* shim_rxswitch_finish() returned 1 ("switched"), not a byte
			 * count: it must not reach the return below. */
			rc = 0;
			continue;
		}
		struct shim_chan *ch = s->chan;

		/* Test-only (faults.h, peer_stall): this reader stops taking
		 * for a while, as a busy program would; without the lock, so
		 * that the connection's other calls go on meanwhile. */
		if (unlikely(shim_fault_hit(SHIM_FAULT_PEER_STALL, fd, &s->tuple, "recv"))) {
			pthread_mutex_unlock(&s->lock);
			shim_fault_sleep_ms(SHIM_FAULT_STALL_MS);
			pthread_mutex_lock(&s->lock);
			continue;
		}
		if (s->bells_owed)
			shim_frames_drain(s, fd);
		n = (ssize_t)ch->ops->recv(ch, win, wincnt, peek);
		if (crossing) {
			crossing = false;
			if (n <= 0 && got && !waitall)
				break;
		}
		if (n > 0) {
			got += (size_t)n;
			s->rx_idle_arms = 0;
			if (!peek && ch->ops->rx_should_bell(ch))
				shim_frames_queue(s, fd, &space_bell, 1);
			if (peek)
				break;
			continue;
		}
		if (shim_io_aborted_by_peer(s, fd)) {
			rc = -ECONNRESET;
			break;
		}
		if (s->rx_tcp_reset) {
			/* Reset, not closed: the kernel reports that, once. */
			s->rx_tcp_reset = false;
			rc = -ECONNRESET;
			break;
		}
		/* After shutdown(SHUT_RD), as Linux's TCP: what is queued, or
		 * comes later, is still read; an empty queue reads as EOF. */
		if (ch->ops->rx_eof(ch) || s->rx_tcp_eof || s->rd_shut)
			break;
		if (nonblock) {
			rc = -EAGAIN;
			break;
		}
		if (s->fo_started) {
			/* Failed and drained: the rest follows the peer's RESUME. */
			rc = shim_io_sleep_on_tcp(s, fd, POLLIN, deadline);
			if (rc < 0)
				break;
			continue;
		}
		rc = shim_io_wait_rx(s, fd, deadline);
		if (rc < 0)
			break;
	}
	if (got && !peek)
		shim_sockstat_received(s, got);
	SHIM_TRACE(SHIM_TRACE_TRACE, "io.recv", fd, NULL, SHIM_REASON_NONE,
		   "\"want\":%zu,\"got\":%zu,\"rc\":%d,\"flags\":%d,\"rx\":%d,\"tcp\":%llu",
		   want, got, rc, flags, s->rx_dir, (unsigned long long)s->rx_tcp_bytes);
	/* The program found nothing more to read: its next edge-triggered
	 * EPOLLIN is due at the next bytes (epoll.c). A short peek leaves
	 * them all there, and the kernel sees no edge in it. */
	if ((rc == -EAGAIN && !got) || (got && got < want && nonblock && !peek))
		__atomic_add_fetch(&s->rx_starved, 1, __ATOMIC_RELAXED);
	io_leave(s);
	pthread_mutex_unlock(&s->lock);
	return got ? (ssize_t)got : rc;
}

/*
 * Whether the channel pays (transport.h, bell_bound_costs), counted once
 * per send that moved bytes on it: the exchange is unpaid when this send
 * had to wake the peer with a bell and the peer's bytes since our last
 * send had to wake us with one. Judged over windows of IO_PAY_WINDOW
 * exchanges: two windows in a row with RDMASHIM_UNPAID_PERCENT of them
 * unpaid, and the connection is due to go back to TCP for good: at the
 * first send that finds the channel quiet (hand_back_if_quiet). A stream
 * one way only never counts: its receiver sends nothing.
 *
 * Measured (io.exchanges, debug): sockperf and redis-benchmark (1 and 50
 * clients) on an idle machine, at most 4 unpaid of 64; pgbench -S, 8
 * clients on 2 cores, 15 to 64, half of the windows above 40.
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
	/* The peer's bells on the line count as those on TCP do: where a
	 * system call costs 1 us, an exchange woken by line bells both ways
	 * costs more than TCP's (pgbench -S, 0.78-0.89x when such connections
	 * stayed on shm, 1.0x handed back). */
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
	struct iovec win[IO_MAX_IOV];
	struct msghdr mh = { .msg_iov = win };
	ssize_t n;
	int rc;

	mh.msg_iovlen = (size_t)iov_window(iov, iovcnt, done, (size_t)-1, win);
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

ssize_t shim_io_send(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	bool nonblock = (flags & MSG_DONTWAIT) != 0;
	bool on_chan = false, rang = false;
	size_t total = iov_total(iov, iovcnt), done = 0;
	unsigned long long stalled_since = 0, now;
	long long deadline;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	now = young_look(s);
	fd = io_enter(s, fd, &rc);
	/* Urgent data: the receiver keeps its byte out of the stream (or, with
	 * SO_OOBINLINE, in it), which our byte counts can not know; such a
	 * connection stays on TCP. One that moved goes back (below). */
	if (unlikely(flags & MSG_OOB) && fd >= 0 && !s->pinned && !s->closed)
		shim_upgrade_pin_tcp(s, fd, SHIM_REASON_BYPASS);
	nonblock |= s->nonblocking;
	deadline = shim_deadline_ms(s->snd_timeout_ms);
	bool answered = false;

	if (fd >= 0 && !(flags & MSG_OOB) && young_not_due(s, now)) {
		/* Young: the loop's first round without its steps (nothing
		 * to flush or replay, no handshake to move on). What only
		 * more rounds answer (a blocking send the socket can not take
		 * all of) goes on below. */
		ssize_t n = send_tcp(s, fd, iov, iovcnt, flags, 0);

		if (n > 0) {
			done = (size_t)n;
			shim_upgrade_note_moved(s, true);
		} else if (n != -EAGAIN || nonblock) {
			rc = (int)n;
		}
		answered = done == total || (nonblock && done) || (n <= 0 && (n != -EAGAIN || nonblock));
	}
	if (fd >= 0 && !answered) do {
		rc = io_round(s, &fd);
		if (rc < 0)
			break;
		if (s->tx_dir == SHIM_DIR_TCP) {
			ssize_t n;

			if (shim_failover_replaying(s) ||
			    (s->fo_started && s->tcp_out_len && shim_frames_flush(s, fd) == -EAGAIN)) {
				/* Our bytes the peer never got go first, and
				 * before them our RESUME. */
				rc = shim_io_wait_for_peer(s, fd, POLLOUT, nonblock, deadline);
				if (rc < 0)
					break;
				continue;
			}

			n = send_tcp(s, fd, iov, iovcnt, flags, done);
			if (n > 0) {
				done += (size_t)n;
				if (s->phase == SHIM_PHASE_IDLE)
					shim_upgrade_progress(s, fd); /* the first byte moved: a deferred attempt may start */
				shim_upgrade_note_moved(s, true);
				continue;
			}
			if (n == -EAGAIN && !nonblock) {
				rc = shim_io_sleep_on_tcp(s, fd, POLLOUT, deadline);
				if (rc < 0)
					break;
				continue;
			}
			rc = (int)n;
			break;
		}
		struct shim_chan *ch = s->chan;

		if (!total)
			break;
		if (s->bells_owed && s->rx_dir == SHIM_DIR_CHAN)
			shim_frames_drain(s, fd);
		if (!s->wr_shut && !s->rx_tcp_reset && !s->rx_reset_seen &&
		    (ch->ops->peer_rx_gone(ch) || s->rx_tcp_eof) && !s->peer_gone_told) {
			/* TCP takes the first write after the peer closed (the
			 * reset comes back later) and fails the next ones. A
			 * peer that went with our bytes unread was reset by its
			 * kernel at once: that write fails ECONNRESET. */
			if (ch->ops->tx_unread && ch->ops->tx_unread(ch)) {
				/* What this call moved counts; the reset is the
				 * next call's, as the kernel reports it once. */
				if (done)
					break;
				s->peer_gone_told = true;
				rc = -ECONNRESET;
				break;
			}
			s->peer_gone_told = true;
			/* Over TCP that write reached the closed peer, whose
			 * kernel answered with a reset: SO_ERROR says EPIPE
			 * and later sends fail. One bell draws the same answer
			 * from it (a peer still there takes it as a bell). */
			shim_frames_queue(s, fd, &data_bell, 1);
			done = total;
			break;
		}
		if (s->rx_tcp_reset && !s->wr_shut) {
			/* The peer's reset, not yet reported: this send's error,
			 * or, once bytes moved, the next call's. */
			if (done)
				break;
			s->rx_tcp_reset = false;
			s->peer_gone_told = true;
			rc = -ECONNRESET;
			break;
		}
		if (s->wr_shut || ch->ops->peer_rx_gone(ch) || s->rx_tcp_eof) {
			rc = -EPIPE;
			if (!done)
				raise_sigpipe(flags);
			break;
		}
		if (shim_failover_waiting(s)) {
			/* Where to resume is the peer's to say (its RESUME). */
			rc = shim_io_wait_for_peer(s, fd, POLLIN, nonblock, deadline);
			if (rc < 0)
				break;
			continue;
		}
		if (unlikely(flags & MSG_OOB)) {
			/* Only TCP carries the urgent mark: back to it first.
			 * Where the channel can not (no tx_offset), the bytes
			 * go as plain data. */
			if (shim_failover_oob(s, fd) == 0)
				continue;
			SHIM_TRACE(SHIM_TRACE_WARN, "io.oob_inline", fd, &s->tuple, SHIM_REASON_OOB,
				   "\"transport\":%d", (int)ch->ops->kind);
			flags &= ~MSG_OOB;
		}
		if (unlikely(s->unpaid_due) && !done && hand_back_if_quiet(s, fd))
			continue; /* on TCP from here, this call's bytes too */
		size_t n = ch->ops->send(ch, iov, iovcnt, done);

		if (n) {
			done += n;
			stalled_since = 0;
			on_chan = true;
			unsigned bells = ch->ops->tx_bell(ch);

			if (bells & SHIM_BELL_TCP)
				shim_frames_queue(s, fd, &data_bell, 1);
			rang |= bells != 0; /* on TCP or on the line */
			continue;
		}
		if (shim_io_aborted_by_peer(s, fd)) {
			rc = -ECONNRESET;
			break;
		}
		if (nonblock) {
			rc = -EAGAIN;
			break;
		}
		if (!stalled_since) {
			stalled_since = shim_now_ns();
		} else if (shim_now_ns() - stalled_since >= IO_SPILL_AFTER_MS * 1000000ull &&
			   shim_failover_spill(s, fd) == 0) {
			continue; /* on TCP from here: the kernel buffers the rest */
		}
		rc = shim_io_wait_tx(s, fd, deadline);
		if (rc < 0)
			break;
	} while (done < total && !(nonblock && done));
	if (on_chan && s->tx_dir == SHIM_DIR_CHAN && !s->fo_started && fd >= 0)
		count_exchange(s, fd, rang);
	if (done)
		shim_sockstat_sent(s, done);
	SHIM_TRACE(SHIM_TRACE_TRACE, "io.send", fd, NULL, SHIM_REASON_NONE,
		   "\"total\":%zu,\"done\":%zu,\"rc\":%d,\"flags\":%d,\"tx\":%d,\"tcp\":%llu", total, done,
		   rc, flags, s->tx_dir, (unsigned long long)s->tx_tcp_bytes);
	/* ... and found no more room: its next EPOLLOUT is due. */
	if ((rc == -EAGAIN && !done) || (done && done < total))
		__atomic_add_fetch(&s->tx_starved, 1, __ATOMIC_RELAXED);
	io_leave(s);
	pthread_mutex_unlock(&s->lock);
	return done ? (ssize_t)done : rc;
}
