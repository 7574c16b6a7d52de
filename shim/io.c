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

#include "failover.h"
#include "fdtable.h"
#include "frames.h"
#include "real.h"
#include "spin.h"
#include "stats.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"
#include "wire.h"

/* Longest single sleep; a wait re-checks its state at least this often. */
#define IO_SLEEP_SLICE_MS 200
/*
 * Bells of both directions share the TCP stream, and a thread that drains
 * them may take the one another thread sleeping on the same fd waits for
 * (poll(2) re-checks readiness after a wake-up). Once two threads have
 * slept on one connection at the same time, its sleeps are cut to this.
 */
#define IO_SHARED_SLICE_MS 1
/* The first sleep after an rx arm on a channel with arm_grace (transport.h):
 * far longer than a write's flight, far shorter than a sleep slice. */
#define IO_GRACE_MS 1
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

/* Copies bytes [from, to) of what a read put into iov to the frame buffer. */
static void absorb_from_iov(struct shim_sock *s, const struct iovec *iov, int iovcnt, size_t from, size_t to)
{
	struct iovec part[IO_MAX_IOV];
	int n = iov_window(iov, iovcnt, from, to - from, part);

	for (int i = 0; i < n; i++)
		shim_frames_absorb(s, part[i].iov_base, part[i].iov_len);
}

static long long deadline_after(long long timeout_ms)
{
	return timeout_ms < 0 ? -1 : (long long)(shim_now_ns() / 1000000ull) + timeout_ms;
}

/* Milliseconds left until deadline (-1: none), capped at one sleep slice. */
static int slice_until(long long deadline)
{
	long long left;

	if (deadline < 0)
		return IO_SLEEP_SLICE_MS;
	left = deadline - (long long)(shim_now_ns() / 1000000ull);
	if (left <= 0)
		return 0;
	return left < IO_SLEEP_SLICE_MS ? (int)left : IO_SLEEP_SLICE_MS;
}

/* The fd to use for TCP: the program's, or ours after it closed its own
 * while a call was in progress (see shim_sock_on_close); -1 when that close
 * could not make ours (the number may name another file by now). */
static inline int io_fd(const struct shim_sock *s, int fd)
{
	if (s->tcp_keep >= 0)
		return s->tcp_keep;
	return s->fd_lost ? -1 : fd;
}

/*
 * A signal handler interrupted our sleep. The kernel restarts a blocking
 * socket call after a handler installed with SA_RESTART, unless the socket
 * has a timeout for that direction (signal(7)); the program would never
 * see EINTR there. Which signal came is not ours to know, so restart only
 * when every handler the program installed has SA_RESTART (a program with
 * a handler without it handles EINTR anyway).
 */
static bool handlers_restart(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;

		/* A fault (SEGV, BUS, FPE, ILL) comes from the faulting thread's
		 * own instruction, never to a thread asleep in poll: its handler
		 * (a crash reporter, a sanitizer's) says nothing about restarts. */
		if (sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE ||
		    sig == SIGILL || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN && !(sa.sa_flags & SA_RESTART))
			return false;
	}
	return true;
}

/* Sleeps on the TCP fd without the lock, at most cap_ms if cap_ms > 0.
 * Returns 0, -EAGAIN on the SO_*TIMEO deadline, or -EINTR. */
static int sleep_capped(struct shim_sock *s, int fd, short events, long long deadline, int cap_ms)
{
	/* The handshake's messages wake us too: a program blocked in a call
	 * moves its upgrade on while it waits, not only when bytes come. The
	 * rendezvous fd may close meanwhile (another thread's call ends the
	 * handshake): a wake-up for nothing, looked at again under the lock. */
	int rv = s->rv_fd >= 0 ? s->rv_fd : s->rv_listen_fd;
	struct pollfd p[2] = { { .fd = io_fd(s, fd), .events = events }, { .fd = rv, .events = POLLIN } };
	int slice = slice_until(deadline), rc;
	bool expired;

	if (p[0].fd < 0)
		return -EBADF;
	if (deadline >= 0 && slice == 0)
		return -EAGAIN;
	if (++s->sleepers > 1)
		s->shared_sleep = true;
	if (s->shared_sleep && slice > IO_SHARED_SLICE_MS)
		slice = IO_SHARED_SLICE_MS;
	if (cap_ms > 0 && slice > cap_ms)
		slice = cap_ms;
	pthread_mutex_unlock(&s->lock);
	rc = REAL(poll)(p, rv >= 0 ? 2 : 1, slice);
	expired = rc == 0 && slice == IO_SLEEP_SLICE_MS;
	rc = rc < 0 ? -errno : 0;
	pthread_mutex_lock(&s->lock);
	s->sleepers--;
	/* Traced under the lock: the directions are the lock's to read. */
	if (expired)
		SHIM_TRACE(SHIM_TRACE_DEBUG, "wait.slice_expired", fd, NULL, SHIM_REASON_NONE,
			   "\"events\":%d,\"rx\":%d,\"tx\":%d", events, s->rx_dir, s->tx_dir);
	/* The program closed the fd while we slept: as with the kernel, the
	 * call goes on, with the copy close() made for it (io_fd); only when
	 * that copy could not be made does it end as on a closed socket. */
	if (io_fd(s, fd) < 0)
		return -EBADF;
	/* No deadline means no SO_*TIMEO for this direction. */
	if (rc == -EINTR && deadline < 0 && handlers_restart())
		rc = 0;
	return rc == -EINTR ? -EINTR : 0;
}

static int sleep_on_tcp(struct shim_sock *s, int fd, short events, long long deadline)
{
	return sleep_capped(s, fd, events, deadline, 0);
}

/* Nothing can move until the peer acts: -EAGAIN for a nonblocking call,
 * else a sleep on TCP for events (its result, as sleep_on_tcp's). */
static int wait_for_peer(struct shim_sock *s, int fd, short events, bool nonblock, long long deadline)
{
	return nonblock ? -EAGAIN : sleep_on_tcp(s, fd, events, deadline);
}

/* An rx arm whose sleep must be short (transport.h, arm_grace): the first
 * of a run of arms that found nothing. */
bool shim_io_grace_needed(struct shim_sock *s)
{
	return s->chan->ops->arm_grace && s->rx_idle_arms++ == 0;
}


/*
 * A data call starts: from here until io_leave() it is counted in
 * s->active, so a close of fd on another thread, spinning or sleeping
 * alike, makes the copy io_fd() then uses, and nothing here ever acts on
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
	return fd;
}

static void io_leave(struct shim_sock *s)
{
	/* The last call that may have been on a closed number ends: new calls
	 * check their number against the table (io_enter). */
	if (--s->active == 0)
		s->fd_lost = false;
}

/*
 * Busy-polls cond without the lock for as long as spin.h allows (at most
 * RDMASHIM_SPIN_US; not at all when every CPU already has a spinner or this
 * socket's spins keep finding nothing). run carries the decision on to the
 * sleep that follows, whose outcome shim_spin_end() learns from.
 */
static bool spin_for(struct shim_sock *s, int fd, struct shim_spin_run *run,
		     bool (*cond)(const struct shim_sock *))
{
	bool hit = false;

	if (!shim_spin_more(run, &s->spin_hist, fd))
		return false;
	pthread_mutex_unlock(&s->lock);
	do {
		for (int i = 0; i < 64 && !hit; i++) {
			hit = cond(s);
			__builtin_ia32_pause();
		}
		/* The peer may share our core (more runnable threads than
		 * cores): let it run, or the spin only burns its time. */
		if (!hit)
			sched_yield();
	} while (!hit && shim_spin_more(run, &s->spin_hist, fd));
	pthread_mutex_lock(&s->lock);
	if (hit)
		shim_spin_end(run, &s->spin_hist, true, fd);
	return hit;
}

/* The peer broke the channel's rules (transport.h): lock-free, for the
 * busy-poll loops too, which must stop at once rather than spin on it. */
static bool chan_violated(const struct shim_chan *ch)
{
	return ch->ops->violated && ch->ops->violated(ch);
}

static bool rx_ready(const struct shim_sock *s)
{
	const struct shim_chan *ch = s->chan;

	return ch->ops->readable(ch) || ch->ops->rx_eof(ch) || chan_violated(ch);
}

bool shim_io_tx_ready(const struct shim_sock *s)
{
	const struct shim_chan *ch = s->chan;

	return ch->ops->writable(ch) >= ch->ops->space_lowat(ch) || ch->ops->peer_rx_gone(ch) ||
	       chan_violated(ch);
}

/* After a channel op moved nothing: if the reason is a peer that broke the
 * rules, the connection ends here (frames.h, shim_frames_abort). */
bool shim_io_aborted_by_peer(struct shim_sock *s, int fd)
{
	if (!s->aborted && s->chan && chan_violated(s->chan))
		shim_frames_abort(s, fd, SHIM_REASON_PEER_VIOLATION, "ring");
	return s->aborted;
}

/* A taken arm means one bell (shm: exactly one, ring.c). It may already have
 * been drained: a close must not then wait for it (close.c). RDMA never
 * reports a taken arm, so its stray bells pile up in bells_early unused. */
void shim_io_note_disarm(struct shim_sock *s, bool bell_coming)
{
	if (!bell_coming)
		return;
	if (s->bells_early)
		s->bells_early--;
	else
		s->bells_owed++;
}

/* rx on the channel found nothing: spin, then arm and sleep for a bell. */
static int wait_rx(struct shim_sock *s, int fd, long long deadline)
{
	struct shim_chan *ch = s->chan;
	struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
	int rc = 0;

	if (spin_for(s, fd, &run, rx_ready))
		return 0;
	if (ch->ops->rx_arm(ch))
		rc = sleep_capped(s, fd, POLLIN, deadline, shim_io_grace_needed(s) ? IO_GRACE_MS : 0);
	shim_spin_end(&run, &s->spin_hist, rc == 0, fd);
	shim_io_note_disarm(s, !ch->ops->rx_disarm(ch));
	if (io_fd(s, fd) >= 0)
		shim_frames_drain(s, io_fd(s, fd));
	return rc;
}


/* tx on the channel found it full: spin, then arm and sleep for a bell. */
static int wait_tx(struct shim_sock *s, int fd, long long deadline)
{
	struct shim_chan *ch = s->chan;
	struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
	int rc = 0;

	if (spin_for(s, fd, &run, shim_io_tx_ready))
		return 0;
	/* Room may wait for the peer's SWITCH frame (rdma: its proof), when
	 * that frame is what TCP holds next. */
	if (s->rx_dir == SHIM_DIR_SWITCHING) {
		rc = shim_io_finish_rx_switch(s, fd);
		if (rc)
			return rc < 0 ? rc : 0;
	}
	if (ch->ops->tx_arm(ch)) {
		/* Before our rx switched, TCP still holds application bytes we
		 * must not consume: sleep a short while instead of on POLLIN. */
		if (s->rx_dir == SHIM_DIR_CHAN) {
			rc = sleep_on_tcp(s, fd, POLLIN, deadline);
		} else {
			pthread_mutex_unlock(&s->lock);
			REAL(poll)(NULL, 0, 1);
			pthread_mutex_lock(&s->lock);
		}
	}
	shim_io_note_disarm(s, !ch->ops->tx_disarm(ch));
	if (s->rx_dir == SHIM_DIR_CHAN && io_fd(s, fd) >= 0)
		shim_frames_drain(s, io_fd(s, fd));
	return rc;
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

		if (!(flags & MSG_PEEK))
			absorb_from_iov(s, win, (int)mh.msg_iovlen, keep, (size_t)n);
		n = (ssize_t)keep;
	}
	if (!(flags & MSG_PEEK)) {
		s->rx_tcp_bytes += (size_t)n;
		if (s->rx_switch_known && s->rx_tcp_bytes == s->rx_switch_at)
			s->rx_dir = SHIM_DIR_SWITCHING;
	}
	return n ? n : -EINPROGRESS;
}

/* 1: rx moved on (to the channel, or refused and back to TCP); 0: the
 * frame is not all there yet; -errno: the connection was reset. */
int shim_io_finish_rx_switch(struct shim_sock *s, int fd)
{
	int rc = shim_frames_read_switch(s, fd);

	if (rc == 1) {
		s->rx_dir = SHIM_DIR_CHAN;
		SHIM_TRACE(SHIM_TRACE_INFO, "rx.switch", fd, &s->tuple, SHIM_REASON_UPGRADED,
			   "\"offset\":%llu", (unsigned long long)s->rx_switch_at);
		/* The frame proved the peer (rdma): bytes held for it go now. */
		shim_upgrade_progress(s, fd);
		return 1;
	}
	if (rc == -EPROTO && !s->rx_frame_len && s->tx_dir == SHIM_DIR_TCP) {
		/* Not our nonce, nothing of it consumed, and our direction is
		 * on TCP (never moved, or back after a failover): the channel's
		 * peer is not the TCP peer, or the TCP peer did not switch after
		 * all. The bytes are plain: deliver them. */
		SHIM_TRACE(SHIM_TRACE_WARN, "rx.switch_refused", fd, &s->tuple, SHIM_REASON_SWITCH_MISMATCH, NULL);
		s->rx_dir = SHIM_DIR_TCP;
		s->rx_switch_known = false;
		if (!s->fo_started) {
			shim_upgrade_release(s);
			shim_upgrade_fail(s, fd, SHIM_REASON_SWITCH_MISMATCH);
			/* Still ours to watch: an epoll set may hold this fd in
			 * its switched registration until it sees it on TCP. */
			__atomic_store_n(&s->intercept, true, __ATOMIC_RELAXED);
		}
		return 1;
	}
	if (rc == -EPROTO) {
		/* Not our peer's frame: someone else wrote into this stream. */
		shim_stats_count(SHIM_REASON_SWITCH_MISMATCH);
		SHIM_TRACE(SHIM_TRACE_ERROR, "rx.switch_mismatch", fd, &s->tuple, SHIM_REASON_SWITCH_MISMATCH, NULL);
		REAL(shutdown)(fd, SHUT_RDWR);
		return -ECONNRESET;
	}
	if (rc == -ECONNRESET) {
		s->rx_tcp_eof = true;
		return 0;
	}
	return 0;
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
	long long deadline;
	ssize_t n;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	fd = io_enter(s, fd, &rc);
	nonblock |= s->nonblocking;
	deadline = deadline_after(s->rcv_timeout_ms);
	/* A blocking read returns once it has SO_RCVLOWAT bytes (or all it
	 * asked for, or with MSG_WAITALL all of it), as the kernel's. */
	size_t lowat = s->rcv_lowat > 1 ? (size_t)s->rcv_lowat : 1;
	size_t enough = waitall || lowat > want ? want : lowat;

	while (fd >= 0 && want && !(got >= enough && !crossing)) {
		struct iovec win[IO_MAX_IOV];
		int wincnt = iov_window(iov, iovcnt, got, (size_t)-1, win);

		fd = io_fd(s, fd);
		if (fd < 0) {
			rc = -EBADF;
			break;
		}
		if (s->tcp_out_len)
			shim_frames_flush(s, fd);
		shim_upgrade_progress(s, fd);
		shim_failover_progress(s, fd);
		if (s->aborted) {
			rc = -ECONNRESET;
			break;
		}
		if (s->rd_shut)
			break;
		if (s->rx_dir == SHIM_DIR_TCP) {
			n = recv_tcp(s, fd, win, wincnt, flags);
			if (n == -EINPROGRESS)
				continue;
			if (n == -EAGAIN && !nonblock) {
				rc = sleep_on_tcp(s, fd, POLLIN, deadline);
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
			rc = shim_io_finish_rx_switch(s, fd);
			if (rc < 0 || s->rx_tcp_eof)
				break;
			if (rc == 0) {
				if (got)
					break; /* the frame is not all here: the TCP bytes go now */
				if (nonblock) {
					rc = -EAGAIN;
					break;
				}
				rc = sleep_on_tcp(s, fd, POLLIN, deadline);
				if (rc < 0)
					break;
			}
			/* shim_io_finish_rx_switch() returned 1 ("switched"), not a byte
			 * count: it must not reach the return below. */
			rc = 0;
			continue;
		}
		struct shim_chan *ch = s->chan;

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
		if (ch->ops->rx_eof(ch) || s->rx_tcp_eof)
			break;
		if (nonblock) {
			rc = -EAGAIN;
			break;
		}
		if (s->fo_started) {
			/* Failed and drained: the rest follows the peer's RESUME. */
			rc = sleep_on_tcp(s, fd, POLLIN, deadline);
			if (rc < 0)
				break;
			continue;
		}
		rc = wait_rx(s, fd, deadline);
		if (rc < 0)
			break;
	}
	SHIM_TRACE(SHIM_TRACE_TRACE, "io.recv", fd, NULL, SHIM_REASON_NONE,
		   "\"want\":%zu,\"got\":%zu,\"rc\":%d,\"flags\":%d,\"rx\":%d,\"tcp\":%llu",
		   want, got, rc, flags, s->rx_dir, (unsigned long long)s->rx_tcp_bytes);
	/* The program found nothing more to read: its next edge-triggered
	 * EPOLLIN is due at the next bytes (epoll.c). */
	if ((rc == -EAGAIN && !got) || (got && got < want && nonblock))
		__atomic_add_fetch(&s->rx_starved, 1, __ATOMIC_RELAXED);
	io_leave(s);
	pthread_mutex_unlock(&s->lock);
	return got ? (ssize_t)got : rc;
}

ssize_t shim_io_send(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	bool nonblock = (flags & MSG_DONTWAIT) != 0;
	size_t total = iov_total(iov, iovcnt), done = 0;
	unsigned long long stalled_since = 0;
	long long deadline;
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	fd = io_enter(s, fd, &rc);
	/* Urgent data: the receiver keeps its byte out of the stream (or, with
	 * SO_OOBINLINE, in it), which our byte counts can not know; such a
	 * connection stays on TCP. Once moved, the bytes go as plain data. */
	if (unlikely(flags & MSG_OOB) && fd >= 0 && !s->pinned && !s->closed)
		shim_upgrade_pin_tcp(s, fd, SHIM_REASON_BYPASS);
	if (s->tx_dir != SHIM_DIR_TCP)
		flags &= ~MSG_OOB;
	nonblock |= s->nonblocking;
	deadline = deadline_after(s->snd_timeout_ms);
	if (fd >= 0) do {
		fd = io_fd(s, fd);
		if (fd < 0) {
			rc = -EBADF;
			break;
		}
		if (s->tcp_out_len)
			shim_frames_flush(s, fd);
		shim_upgrade_progress(s, fd);
		shim_failover_progress(s, fd);
		if (s->aborted) {
			rc = -ECONNRESET;
			break;
		}
		if (s->tx_dir == SHIM_DIR_TCP) {
			struct iovec win[IO_MAX_IOV];
			struct msghdr mh = { .msg_iov = win };
			ssize_t n;

			if (shim_failover_replaying(s)) {
				/* Our bytes the peer never got go first. */
				rc = wait_for_peer(s, fd, POLLOUT, nonblock, deadline);
				if (rc < 0)
					break;
				continue;
			}

			mh.msg_iovlen = (size_t)iov_window(iov, iovcnt, done, (size_t)-1, win);
			n = REAL(sendmsg)(fd, &mh, flags | MSG_DONTWAIT);
			if (n > 0) {
				done += (size_t)n;
				s->tx_tcp_bytes += (size_t)n;
				if (s->phase == SHIM_PHASE_IDLE)
					shim_upgrade_progress(s, fd); /* the first byte moved: a deferred attempt may start */
				continue;
			}
			if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !nonblock) {
				rc = sleep_on_tcp(s, fd, POLLOUT, deadline);
				if (rc < 0)
					break;
				continue;
			}
			rc = n < 0 ? (errno == EWOULDBLOCK ? -EAGAIN : -errno) : 0;
			/* A reset our own read of frames took off the socket
			 * (frames.c) is this send's to report, as the kernel
			 * would have; after bytes moved, the next call's. */
			if (rc == -EPIPE && s->rx_tcp_reset)
				rc = -ECONNRESET;
			if (rc == -ECONNRESET) {
				s->rx_tcp_reset = done != 0;
				s->peer_gone_told = true;
			}
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
			done = total;
			break;
		}
		if (s->rx_tcp_reset && !s->wr_shut) {
			/* The peer's reset, not yet reported: this send's error. */
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
			rc = wait_for_peer(s, fd, POLLIN, nonblock, deadline);
			if (rc < 0)
				break;
			continue;
		}
		size_t n = ch->ops->send(ch, iov, iovcnt, done);

		if (n) {
			done += n;
			stalled_since = 0;
			if (ch->ops->tx_should_bell(ch))
				shim_frames_queue(s, fd, &data_bell, 1);
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
		rc = wait_tx(s, fd, deadline);
		if (rc < 0)
			break;
	} while (done < total && !(nonblock && done));
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
