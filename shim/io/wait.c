/*
 * poll/select emulation for switched fds; see wait.h.
 *
 * One round: compute the switched fds' readiness from their channels; if
 * none is ready, busy-poll (spin.h: at most RDMASHIM_SPIN_US), then arm them (so a peer
 * that makes them ready rings a bell on TCP), re-check, and sleep in the
 * kernel's poll with the switched fds asking for POLLIN (bells) only.
 */
#include "wait.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "compiler.h"
#include "fdtable.h"
#include "io.h"
#include "real.h"
#include "sock.h"
#include "spin.h"
#include "trace.h"
#include "waitloop.h"

#define WAIT_STACK_FDS 64

/* The intercepted sock at fd, held (shim_sock_put()), or NULL. */
static struct shim_sock *switched_sock(int fd)
{
	return shim_sock_get_intercepted(fd);
}

/* Whether a wait must look at fd itself: its connection moved or is
 * moving (a channel, a handshake). A young one is the kernel's to report,
 * and its upgrade starts at its next data call (io.c), as with epoll
 * (epoll_young.c): a poll over connections that never upgrade is one
 * system call, as without the shim. */
static bool needs_us(int fd)
{
	struct shim_sock *s = switched_sock(fd);
	bool needed = s && !shim_io_young(s);

	shim_sock_put(s);
	return needed;
}

/* Gives back the references of one round's ours[] and outer[] (the
 * tracked epoll sets among the fds, a cascaded wait; NULL: none looked
 * for). */
static void put_ours(struct shim_sock **ours, struct shim_ep_outer **outer, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++) {
		shim_sock_put(ours[i]);
		ours[i] = NULL;
		if (outer) {
			shim_epoll_outer_put(outer[i]);
			outer[i] = NULL;
		}
	}
}

bool shim_wait_poll_needed(const struct pollfd *fds, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++)
		if (unlikely(shim_fd_get(fds[i].fd) != NULL) && (needs_us(fds[i].fd) || shim_epoll_outer_needed(fds[i].fd)))
			return true;
	return false;
}

bool shim_wait_select_needed(int nfds, const fd_set *r, const fd_set *w)
{
	for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++) {
		if (!((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w))))
			continue;
		if (unlikely(shim_fd_get(fd) != NULL) && (needs_us(fd) || shim_epoll_outer_needed(fd)))
			return true;
	}
	return false;
}

/* Fills revents of the switched fds from their channels; marks them in
 * ours[], each with a reference held until the next round or the end
 * (put_ours()), so that what a sleep armed is disarmed on the same socket
 * even if another thread closed the fd meanwhile. Returns how many have
 * revents. */
static int poll_channel_round(struct pollfd *fds, nfds_t nfds, struct shim_sock **ours,
			      struct shim_ep_outer **outer)
{
	int ready = 0;

	put_ours(ours, outer, nfds);
	for (nfds_t i = 0; i < nfds; i++) {
		struct shim_sock *s = fds[i].fd >= 0 ? switched_sock(fds[i].fd) : NULL;
		int mask = s ? shim_io_poll_mask(s, fds[i].fd) : -1;

		if (mask < 0) {
			shim_sock_put(s);
			s = NULL;
		}
		ours[i] = s;
		if (!s && outer && fds[i].fd >= 0 && (outer[i] = shim_epoll_outer_get(fds[i].fd))) {
			/* A cascaded set: its switched items' readiness beside
			 * the kernel's of the set (kernel_round), which a
			 * look's kernel round sets first and an after's
			 * round set last. */
			mask = shim_epoll_outer_mask(outer[i]);
			if (mask < 0) {
				shim_epoll_outer_put(outer[i]);
				outer[i] = NULL;
			} else if (mask & fds[i].events) {
				fds[i].revents |= (short)(mask & fds[i].events);
				ready++;
			}
			continue;
		}
		if (!ours[i])
			continue;
		fds[i].revents = (short)(mask & (fds[i].events | POLLHUP | POLLERR | POLLNVAL));
		if (fds[i].revents)
			ready++;
	}
	return ready;
}

/* The kernel's poll over the fds that are not ours (ours ask for bells),
 * and the bell lines of those armed for them (lines: -1 where none, NULL:
 * no arms), after the nfds entries of tmp (2 * nfds long). */
static int kernel_round(struct pollfd *fds, nfds_t nfds, struct shim_sock **ours, struct shim_ep_outer **outer,
			struct pollfd *tmp, const int *lines, int timeout_ms, const sigset_t *sigmask)
{
	int rc, ready = 0;
	nfds_t all = nfds;

	for (nfds_t i = 0; i < nfds; i++) {
		tmp[i] = fds[i];
		if (ours[i])
			tmp[i].events = POLLIN;
		tmp[i].revents = 0;
		if (lines && lines[i] >= 0)
			tmp[all++] = (struct pollfd){ .fd = lines[i], .events = POLLIN };
	}
	if (sigmask) {
		struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };

		rc = REAL(ppoll)(tmp, all, &ts, sigmask);
	} else {
		rc = REAL(poll)(tmp, all, timeout_ms);
	}
	if (rc < 0)
		return -errno;
	for (nfds_t i = 0, k = nfds; i < nfds; i++) {
		/* A bell on the line wakes its entry as one on TCP would; the
		 * disarm took it off the line already. */
		bool line_rang = lines && lines[i] >= 0 && tmp[k++].revents;

		if (ours[i]) {
			if (line_rang)
				shim_io_note_line_rang(ours[i]);
			if (tmp[i].revents || line_rang) {
				if (tmp[i].revents)
					shim_io_drain_bells(ours[i], fds[i].fd);
				/* What the bells' TCP said (EOF, a reset) changes
				 * what the channel round reports: look again. */
				fds[i].revents = 0;
				int mask = shim_io_poll_mask(ours[i], fds[i].fd);

				if (mask >= 0) {
					fds[i].revents = (short)(mask & (fds[i].events | POLLHUP | POLLERR | POLLNVAL));
				} else {
					/* Back on TCP both ways (those bytes were
					 * the peer's RESUME): the readiness is the
					 * kernel's, POLLPRI too, and due now (a
					 * poll with no time left ends this round). */
					struct pollfd k = { .fd = fds[i].fd, .events = fds[i].events };

					if (REAL(poll)(&k, 1, 0) > 0)
						fds[i].revents = k.revents;
				}
				if (fds[i].revents)
					ready++;
			}
			continue;
		}
		fds[i].revents = tmp[i].revents;
		if (outer && outer[i] && (fds[i].events & POLLIN) && shim_epoll_outer_mask(outer[i]) > 0)
			fds[i].revents |= POLLIN;
		if (fds[i].revents)
			ready++;
	}
	return ready;
}

/*
 * What poll returns: the number of entries with revents. Counted from the
 * entries, never summed from the rounds: a fd whose upgrade completes
 * between the kernel's round and the channel's was filled by both (poll(2)
 * over one fd must not say 2).
 */
int shim_wait_count_ready(const struct pollfd *fds, nfds_t nfds)
{
	int ready = 0;

	for (nfds_t i = 0; i < nfds; i++)
		ready += fds[i].revents != 0;
	return ready;
}

/* One poll's state across the engine's rounds (waitloop.h). */
struct poll_wait {
	struct pollfd *fds;
	nfds_t nfds;
	const sigset_t *sigmask;
	struct shim_sock **ours; /* held for one round (poll_channel_round()) */
	struct shim_ep_outer **outer; /* the same for tracked epoll sets */
	struct pollfd *tmp;
	int armed_stack[2 * WAIT_STACK_FDS], *armed; /* then the lines watched */
	struct shim_spin_run spin;
};

/* poll and select have no object that outlives the call: the spin history
 * of their waits is the thread's (spin.h). */
static __thread struct shim_spin_hist poll_spin_hist;

/* Busy-poll while spin.h allows (at most RDMASHIM_SPIN_US). */
static bool poll_spin_more(void *ctx)
{
	struct poll_wait *w = ctx;

	return shim_spin_more(&w->spin, &poll_spin_hist, w->nfds ? w->fds[0].fd : -1);
}

static void poll_spin_end(void *ctx, int rc)
{
	struct poll_wait *w = ctx;

	shim_spin_end(&w->spin, &poll_spin_hist, rc > 0, w->nfds ? w->fds[0].fd : -1);
}

static int poll_look(void *ctx)
{
	struct poll_wait *w = ctx;
	int mine = poll_channel_round(w->fds, w->nfds, w->ours, w->outer);
	int theirs = kernel_round(w->fds, w->nfds, w->ours, w->outer, w->tmp, NULL, 0, NULL);

	if (theirs < 0)
		return theirs;
	return mine + theirs > 0 ? shim_wait_count_ready(w->fds, w->nfds) : 0;
}

/* A connection at fd that negotiates: its handshake's wait fd, which the
 * sleep watches beside it (a message that comes with no TCP byte wakes the
 * poll, whose next look moves the handshake on), or -1. The number may be
 * closed and reused before the sleep: a wake-up for nothing at worst. */
static int handshake_fd(int fd, int *cap_ms)
{
	struct shim_sock *s = fd >= 0 ? switched_sock(fd) : NULL;
	int wait = s ? shim_io_handshake_fd(s, cap_ms) : -1;

	shim_sock_put(s);
	return wait;
}

/* Arms every switched fd, and watches the handshakes of the others; the
 * look after the sleep tells what came. */
static int poll_arm(void *ctx, int *cap_ms)
{
	struct poll_wait *w = ctx;
	int sleep = 1;

	w->armed = w->nfds > WAIT_STACK_FDS ? calloc(2 * w->nfds, sizeof(int)) : w->armed_stack;
	if (!w->armed)
		return -ENOMEM;
	for (nfds_t i = 0; i < w->nfds; i++) {
		int line = w->ours[i] ? shim_io_line(w->ours[i]) : -1;

		w->armed[i] = w->ours[i] ? shim_io_arm(w->ours[i], w->fds[i].fd, w->fds[i].events, line) : 0;
		w->armed[w->nfds + i] = w->armed[i] & SHIM_ARM_LINE ? line
					: w->ours[i]			? -1
									: handshake_fd(w->fds[i].fd, cap_ms);
		if (w->outer[i]) {
			/* Not armed (no memory): this round looks again
			 * instead of sleeping, and the fds armed before it are
			 * disarmed as usual. */
			if (shim_epoll_outer_arm(w->outer[i], cap_ms) <= 0)
				sleep = 0;
		}
		if (w->armed[i] & SHIM_ARM_READY)
			sleep = 0;
		if (w->armed[i] & SHIM_ARM_SHORT)
			shim_waitloop_cap(cap_ms, 1);
	}
	return sleep;
}

static int poll_sleep(void *ctx, int ms)
{
	struct poll_wait *w = ctx;
	int theirs = kernel_round(w->fds, w->nfds, w->ours, w->outer, w->tmp, w->armed + w->nfds, ms, w->sigmask);

	if (ms == SHIM_SLEEP_SLICE_MS && shim_trace_enabled(SHIM_TRACE_DEBUG)) {
		int any = 0;

		for (nfds_t i = 0; i < w->nfds; i++)
			any |= w->tmp[i].revents;
		if (!any)
			SHIM_TRACE(SHIM_TRACE_DEBUG, "wait.slice_expired", w->fds[0].fd, NULL, SHIM_REASON_NONE,
				   "\"nfds\":%d,\"armed0\":%d,\"ev0\":%d", (int)w->nfds, w->armed[0],
				   w->fds[0].events);
	}
	return theirs;
}

static void poll_disarm(void *ctx)
{
	struct poll_wait *w = ctx;

	for (nfds_t i = 0; i < w->nfds; i++) {
		if (w->armed[i])
			shim_io_disarm(w->ours[i], w->fds[i].fd, w->armed[i]);
		if (w->outer[i])
			shim_epoll_outer_disarm(w->outer[i]);
	}
	if (w->armed != w->armed_stack)
		free(w->armed);
	w->armed = NULL;
}

static int poll_after(void *ctx, int theirs)
{
	struct poll_wait *w = ctx;
	int mine = poll_channel_round(w->fds, w->nfds, w->ours, w->outer);

	if (theirs < 0)
		return theirs;
	return mine + theirs > 0 ? shim_wait_count_ready(w->fds, w->nfds) : 0;
}

static const struct shim_waitloop_ops poll_ops = {
	.look = poll_look,
	.arm = poll_arm,
	.sleep = poll_sleep,
	.disarm = poll_disarm,
	.after = poll_after,
	.spin_more = poll_spin_more,
	.spin_end = poll_spin_end,
};

int shim_wait_poll(struct pollfd *fds, nfds_t nfds, long long timeout_ns, const sigset_t *sigmask)
{
	struct shim_sock *ours_stack[WAIT_STACK_FDS];
	struct shim_ep_outer *outer_stack[WAIT_STACK_FDS];
	struct pollfd tmp_stack[2 * WAIT_STACK_FDS];
	struct poll_wait w = { .fds = fds, .nfds = nfds, .sigmask = sigmask, .ours = ours_stack,
			       .outer = outer_stack, .tmp = tmp_stack, .spin = SHIM_SPIN_RUN_INIT };
	int rc;

	memset(ours_stack, 0, sizeof(ours_stack));
	memset(outer_stack, 0, sizeof(outer_stack));
	if (nfds > WAIT_STACK_FDS) {
		w.ours = calloc(nfds, sizeof(*w.ours));
		w.outer = calloc(nfds, sizeof(*w.outer));
		w.tmp = calloc(2 * nfds, sizeof(*w.tmp));
		if (!w.ours || !w.outer || !w.tmp) {
			free(w.ours);
			free(w.outer);
			free(w.tmp);
			return -ENOMEM;
		}
	}
	rc = shim_waitloop_run(&poll_ops, &w, timeout_ns);
	put_ours(w.ours, w.outer, nfds);
	if (w.ours != ours_stack) {
		free(w.ours);
		free(w.outer);
		free(w.tmp);
	}
	return rc;
}

int shim_wait_select(int nfds, fd_set *r, fd_set *w, fd_set *e, long long *timeout_ns,
		     const sigset_t *sigmask)
{
	struct pollfd *fds = calloc((size_t)nfds, sizeof(*fds));
	nfds_t n = 0;
	long long start = (long long)shim_now_ns();
	int rc, count = 0;

	if (!fds)
		return -ENOMEM;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (r && FD_ISSET(fd, r))
			ev |= POLLIN;
		if (w && FD_ISSET(fd, w))
			ev |= POLLOUT;
		if (e && FD_ISSET(fd, e))
			ev |= POLLPRI;
		if (ev) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	rc = shim_wait_poll(fds, n, timeout_ns ? *timeout_ns : -1, sigmask);
	if (rc >= 0) {
		if (r)
			FD_ZERO(r);
		if (w)
			FD_ZERO(w);
		if (e)
			FD_ZERO(e);
		for (nfds_t i = 0; i < n; i++) {
			short re = fds[i].revents;

			if (re & POLLNVAL) {
				rc = -EBADF;
				break;
			}
			if (r && (fds[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR)))
				FD_SET(fds[i].fd, r), count++;
			if (w && (fds[i].events & POLLOUT) && (re & (POLLOUT | POLLERR)))
				FD_SET(fds[i].fd, w), count++;
			if (e && (fds[i].events & POLLPRI) && (re & POLLPRI))
				FD_SET(fds[i].fd, e), count++;
		}
		if (rc >= 0)
			rc = count;
	}
	if (timeout_ns && *timeout_ns > 0) {
		long long left = *timeout_ns - ((long long)shim_now_ns() - start);

		*timeout_ns = left > 0 ? left : 0;
	}
	free(fds);
	return rc;
}
