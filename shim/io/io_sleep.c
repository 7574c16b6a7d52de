/*
 * The waits of the blocking data calls (io.c), on the wait engine behind
 * poll, select and epoll (waitloop.h): spin RDMASHIM_SPIN_US on the channel
 * without the lock, then arm, sleep on TCP for a bell (and on the
 * negotiation's fd: a program blocked in a call moves its upgrade on),
 * disarm. One round per call: the data call looks again and loops.
 */
#include "io.h"
#include "io_internal.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>

#include "clock.h"
#include "frames.h"
#include "msgstamps.h"
#include "real.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"
#include "spin.h"
#include "waitloop.h"

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

/* What woke a sleep (sleep_capped's *woke). */
#define WOKE_TCP 1
#define WOKE_LINE 2

/*
 * A wait of the handshake (its rendezvous fd is among p) looks before it
 * sleeps, by the spin policy (spin.h), as a wait on a channel does: the
 * peer's answer (a COMMIT, an ACCEPT) comes within tens of microseconds,
 * which a sleep and a wake-up on another core cost again. A look is a
 * poll that does not wait, then a yield (the peer may share our core).
 * The handshake waits of the process share one history apart (spin.h):
 * a connection has one or two, too few for a history of its own, and
 * where the answers do not come while we look (one core for both ends,
 * a loaded machine) the spins back off together. Returns poll's result
 * (0: nothing came).
 */
static struct shim_spin_hist handshake_hist = { .apart = 1 };

static int handshake_spin(int fd, struct pollfd *p, nfds_t n)
{
	struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
	int rc = 0;

	while (shim_spin_more(&run, &handshake_hist, fd)) {
		rc = REAL(poll)(p, n, 0);
		if (rc != 0)
			break;
		/* The peer may share our core: its answer is what we wait for. */
		sched_yield();
	}
	shim_spin_end(&run, &handshake_hist, rc > 0, fd);
	return rc;
}

/* Sleeps on the TCP fd (and on the bell line, when line is not -1) without
 * the lock, at most cap_ms if cap_ms > 0; *woke (if not NULL): which of the
 * two had events. Returns 0, -EAGAIN on the SO_*TIMEO deadline, or -EINTR. */
static int sleep_capped(struct shim_sock *s, int fd, short events, long long deadline, int cap_ms, int line,
			int *woke)
{
	/* The handshake's messages wake us too: a program blocked in a call
	 * moves its upgrade on while it waits, not only when bytes come. The
	 * rendezvous fd may close meanwhile (another thread's call ends the
	 * handshake): a wake-up for nothing, looked at again under the lock. */
	int rv = shim_upgrade_wait_fd(s);
	/* Same host only: an RDMA handshake's next message (rdma_cm's) comes
	 * milliseconds later, far past any spin's budget. Decided under the
	 * lock: s->xport is the lock's. */
	bool spin = rv >= 0 && s->xport && s->xport->kind == SHIM_TRANSPORT_SHM;
	struct pollfd p[3] = { { .fd = shim_io_fd(s, fd), .events = events },
			       { .fd = line, .events = POLLIN },
			       { .fd = rv, .events = POLLIN } };
	int slice = shim_slice_ms(deadline), rc;
	bool expired;

	if (p[0].fd < 0)
		return -EBADF;
	if (deadline >= 0 && slice == 0)
		return -EAGAIN;
	if (++s->sleepers > 1)
		s->shared_sleep = true;
	if (s->shared_sleep && slice > IO_SHARED_SLICE_MS)
		slice = IO_SHARED_SLICE_MS;
	/* A handshake step that no fd announces (S's next try) is due then. */
	shim_waitloop_cap_until(&cap_ms, shim_upgrade_due_ns(s));
	if (cap_ms > 0 && slice > cap_ms)
		slice = cap_ms;
	pthread_mutex_unlock(&s->lock);
	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	rc = spin ? handshake_spin(fd, p, 3) : 0;
	if (rc == 0)
		rc = REAL(poll)(p, rv >= 0 ? 3 : 2, slice); /* a fd of -1 is skipped */
	SHIM_MSGSTAMP_MARK(SHIM_MSG_SLEEP);
	SHIM_MSGSTAMP_NOTE(SHIM_MSG_WOKE);
	expired = rc == 0 && slice == SHIM_SLEEP_SLICE_MS;
	rc = rc < 0 ? -errno : 0;
	pthread_mutex_lock(&s->lock);
	if (woke)
		*woke = (p[0].revents ? WOKE_TCP : 0) | (rc == 0 && p[1].revents ? WOKE_LINE : 0);
	if (line >= 0 && rc == 0 && p[1].revents)
		shim_io_line_rang(s);
	s->sleepers--;
	/* Traced under the lock: the directions are the lock's to read. */
	if (expired)
		SHIM_TRACE(SHIM_TRACE_DEBUG, "wait.slice_expired", fd, NULL, SHIM_REASON_NONE,
			   "\"events\":%d,\"rx\":%d,\"tx\":%d", events, s->rx_dir, s->tx_dir);
	/* The program closed the fd while we slept: as with the kernel, the
	 * call goes on, with the copy close() made for it (io_fd); only when
	 * that copy could not be made does it end as on a closed socket. */
	if (shim_io_fd(s, fd) < 0)
		return -EBADF;
	/* No deadline means no SO_*TIMEO for this direction. */
	if (rc == -EINTR && deadline < 0 && handlers_restart())
		rc = 0;
	return rc == -EINTR ? -EINTR : 0;
}

int shim_io_sleep_on_tcp(struct shim_sock *s, int fd, short events, long long deadline)
{
	return sleep_capped(s, fd, events, deadline, 0, -1, NULL);
}

/* Nothing can move until the peer acts: -EAGAIN for a nonblocking call,
 * else a sleep on TCP for events (its result, as sleep_on_tcp's). */
int shim_io_wait_for_peer(struct shim_sock *s, int fd, short events, bool nonblock, long long deadline)
{
	return nonblock ? -EAGAIN : shim_io_sleep_on_tcp(s, fd, events, deadline);
}

/* An rx arm whose sleep must be short (transport.h, arm_grace): the first
 * of a run of arms that found nothing. */
bool shim_io_grace_needed(struct shim_sock *s)
{
	return s->chan->ops->arm_grace && s->rx_idle_arms++ == 0;
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

/* The offering call's: its offer settled by another call's read is its
 * bytes, which no ring or word announces any more. */
static bool rx_offering_ready(const struct shim_sock *s)
{
	const struct shim_chan *ch = s->chan;

	return rx_ready(s) || !ch->ops->rx_offer_out(ch);
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

/*
 * One round of the wait engine (waitloop.h) for a data call: look at the
 * channel without the lock (RDMASHIM_SPIN_US), then, locked again, arm,
 * sleep, disarm; the data call looks again and loops. The caller holds
 * s->lock before and after.
 */
struct call_wait {
	struct shim_sock *s;
	struct shim_chan *ch;
	int fd;
	long long deadline;
	bool (*ready)(const struct shim_sock *s);
	bool locked, armed;
	int cap_ms; /* rx: the arm's grace (transport.h, arm_grace) */
	int line;   /* the bell line the arm asked the peer to ring, or -1 */
	int woke;   /* what woke the sleep (WOKE_*) */
	int rc;     /* what the round ends with */
	/* The spin policy (spin.h): asked before the first look and after
	 * each; a hit, and rx's sleep, are its to learn from. */
	struct shim_spin_run run;
	bool asked, spinning, hit, learn_sleep;
};

/* Whether to (go on) spinning; asked once per look. */
static bool call_spin_more(void *ctx)
{
	struct call_wait *w = ctx;

	if (!w->asked) {
		w->asked = true;
		w->spinning = shim_spin_more(&w->run, &w->s->spin_hist, w->fd);
		return w->spinning;
	}
	return w->spinning && (w->spinning = shim_spin_more(&w->run, &w->s->spin_hist, w->fd));
}

static void call_spin_end(void *ctx, int rc)
{
	struct call_wait *w = ctx;

	(void)rc;
	if (w->hit)
		shim_spin_end(&w->run, &w->s->spin_hist, true, w->fd);
	else if (w->learn_sleep && w->armed)
		shim_spin_end(&w->run, &w->s->spin_hist, w->rc == 0, w->fd);
}

/* Busy-polls the channel without the lock: 64 looks between yields. */
static int call_look(void *ctx)
{
	struct call_wait *w = ctx;

	/* The policy is asked before the first look, then by the engine
	 * after each (call_spin_more). */
	if (!w->asked) {
		SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
		SHIM_MSGSTAMP_NOTE(SHIM_MSG_WAITED);
		call_spin_more(w);
	}
	if (!w->spinning)
		return 0; /* no spin: straight to the arm, still locked */
	if (w->locked) {
		pthread_mutex_unlock(&w->s->lock);
		w->locked = false;
	}
	for (int i = 0; i < 64; i++) {
		if (w->ready(w->s)) {
			w->hit = true;
			SHIM_MSGSTAMP_MARK(SHIM_MSG_SPIN);
			SHIM_MSGSTAMP_NOTE(SHIM_MSG_SPIN_HIT);
			return 1;
		}
		__builtin_ia32_pause();
	}
	SHIM_MSGSTAMP_MARK(SHIM_MSG_SPIN);
	return 0;
}

static void relock(struct call_wait *w)
{
	if (!w->locked) {
		pthread_mutex_lock(&w->s->lock);
		w->locked = true;
	}
}

/* After a sleep: whether TCP may hold bells or news (EOF, a reset, a
 * RESUME) to take. Armed for TCP bells: always, as before. Armed for the
 * line: when TCP woke us or bells are owed there (a peer that fell back to
 * TCP), so that a bell on the line costs no look at TCP. */
static bool tcp_may_hold_bells(const struct call_wait *w)
{
	if (shim_io_fd(w->s, w->fd) < 0)
		return false;
	return w->line < 0 || (w->woke & WOKE_TCP) || w->s->bells_owed || w->s->bells_early;
}

static int rx_arm(void *ctx, int *cap_ms)
{
	struct call_wait *w = ctx;

	/* The grace caps the sleep in rx_sleep (sleep_capped takes it with
	 * the SO_RCVTIMEO deadline), not through the engine's cap. */
	(void)cap_ms;
	relock(w);
	w->armed = true;
	w->line = shim_io_bell_line(w->s);
	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	if (!w->ch->ops->rx_arm(w->ch, shim_io_bell_how(w->line))) {
		SHIM_MSGSTAMP_MARK(SHIM_MSG_ARM);
		return 0;
	}
	SHIM_MSGSTAMP_MARK(SHIM_MSG_ARM);
	/* Under the lock, after the arm: another call's settle (under the
	 * lock too) either ran before, and nothing else would wake us for
	 * it, or runs later, for a DONE that came after our arm, whose bell
	 * the producer rings. */
	if (w->ready == rx_offering_ready && !w->ch->ops->rx_offer_out(w->ch))
		return 0;
	w->cap_ms = shim_io_grace_needed(w->s) ? IO_GRACE_MS : 0;
	return 1;
}

static int rx_sleep(void *ctx, int ms)
{
	struct call_wait *w = ctx;

	(void)ms; /* the SO_RCVTIMEO deadline and the grace are sleep_capped()'s */
	return sleep_capped(w->s, w->fd, POLLIN, w->deadline, w->cap_ms, w->line, &w->woke);
}

static void rx_disarm(void *ctx)
{
	struct call_wait *w = ctx;

	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	shim_io_note_disarm(w->s, !w->ch->ops->rx_disarm(w->ch));
	SHIM_MSGSTAMP_MARK(SHIM_MSG_DISARM);
	if (tcp_may_hold_bells(w))
		shim_frames_drain(w->s, shim_io_fd(w->s, w->fd));
}

/* One round only: the data call decides what comes next. */
static int call_after(void *ctx, int theirs)
{
	struct call_wait *w = ctx;

	w->rc = theirs;
	return 1;
}

static const struct shim_waitloop_ops rx_ops = {
	.look = call_look,
	.arm = rx_arm,
	.sleep = rx_sleep,
	.disarm = rx_disarm,
	.after = call_after,
	.spin_more = call_spin_more,
	.spin_end = call_spin_end,
};

static int tx_arm(void *ctx, int *cap_ms)
{
	struct call_wait *w = ctx;
	int rc;

	(void)cap_ms;
	relock(w);
	/* Room may wait for the peer's SWITCH frame (rdma: its proof), when
	 * that frame is what TCP holds next. */
	if (w->s->rx_dir == SHIM_DIR_SWITCHING) {
		rc = shim_rxswitch_finish(w->s, w->fd);
		if (rc) {
			w->rc = rc < 0 ? rc : 0;
			return 0; /* nothing armed: the round ends here */
		}
	}
	w->armed = true;
	w->line = shim_io_bell_line(w->s);
	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	rc = w->ch->ops->tx_arm(w->ch, shim_io_bell_how(w->line)) ? 1 : 0;
	SHIM_MSGSTAMP_MARK(SHIM_MSG_ARM);
	return rc;
}

static int tx_sleep(void *ctx, int ms)
{
	struct call_wait *w = ctx;

	(void)ms;
	/* Before our rx switched, TCP still holds application bytes we must
	 * not consume: sleep a short while instead of on POLLIN. */
	if (w->s->rx_dir == SHIM_DIR_CHAN)
		return sleep_capped(w->s, w->fd, POLLIN, w->deadline, 0, w->line, &w->woke);
	struct pollfd line = { .fd = w->line, .events = POLLIN };

	pthread_mutex_unlock(&w->s->lock);
	REAL(poll)(&line, 1, 1);
	pthread_mutex_lock(&w->s->lock);
	/* As in sleep_capped: a stray message is taken at the disarm. */
	if (line.fd >= 0 && line.revents)
		shim_io_line_rang(w->s);
	return 0;
}

static void tx_disarm(void *ctx)
{
	struct call_wait *w = ctx;

	if (!w->armed)
		return;
	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	shim_io_note_disarm(w->s, !w->ch->ops->tx_disarm(w->ch));
	SHIM_MSGSTAMP_MARK(SHIM_MSG_DISARM);
	if (w->s->rx_dir == SHIM_DIR_CHAN && tcp_may_hold_bells(w))
		shim_frames_drain(w->s, shim_io_fd(w->s, w->fd));
}

static int tx_after(void *ctx, int theirs)
{
	struct call_wait *w = ctx;

	if (w->armed)
		w->rc = theirs;
	return 1;
}

static const struct shim_waitloop_ops tx_ops = {
	.look = call_look,
	.arm = tx_arm,
	.sleep = tx_sleep,
	.disarm = tx_disarm,
	.after = tx_after,
	.spin_more = call_spin_more,
	.spin_end = call_spin_end,
};

static int call_round(const struct shim_waitloop_ops *ops, struct shim_sock *s, int fd, long long deadline,
		      bool (*ready)(const struct shim_sock *s))
{
	struct call_wait w = { .s = s, .ch = s->chan, .fd = fd, .deadline = deadline, .ready = ready, .locked = true, .line = -1,
			       .run = SHIM_SPIN_RUN_INIT, .learn_sleep = ops == &rx_ops };

	/* A ready look ends the round before any arm: 0, look again. */
	shim_waitloop_run(ops, &w, -1);
	relock(&w);
	return w.rc;
}

/* rx on the channel found nothing: spin, then arm and sleep for a bell. */
int shim_io_wait_rx(struct shim_sock *s, int fd, long long deadline)
{
	return call_round(&rx_ops, s, fd, deadline, rx_ready);
}

int shim_io_wait_rx_offering(struct shim_sock *s, int fd, long long deadline)
{
	return call_round(&rx_ops, s, fd, deadline, rx_offering_ready);
}

/* tx on the channel found it full: spin, then arm and sleep for a bell. */
int shim_io_wait_tx(struct shim_sock *s, int fd, long long deadline)
{
	return call_round(&tx_ops, s, fd, deadline, shim_io_tx_ready);
}
