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

#include "compiler.h"
#include "fdtable.h"
#include "io.h"
#include "real.h"
#include "sock.h"
#include "spin.h"
#include "trace.h"

#define WAIT_SLICE_MS 200
#define WAIT_STACK_FDS 64

/* The intercepted sock at fd, held (shim_sock_put()), or NULL. */
static struct shim_sock *switched_sock(int fd)
{
	return shim_sock_get_intercepted(fd);
}

static bool is_intercepted(int fd)
{
	struct shim_sock *s = switched_sock(fd);

	shim_sock_put(s);
	return s != NULL;
}

/* Gives back the references of one round's ours[]. */
static void put_ours(struct shim_sock **ours, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++) {
		shim_sock_put(ours[i]);
		ours[i] = NULL;
	}
}

long long shim_wait_deadline(long long timeout_ns)
{
	return timeout_ns < 0 ? -1 : (long long)shim_now_ns() + timeout_ns;
}

int shim_wait_slice_ms(long long deadline_ns)
{
	long long left;

	if (deadline_ns < 0)
		return WAIT_SLICE_MS;
	left = deadline_ns - (long long)shim_now_ns();
	if (left <= 0)
		return 0;
	left = (left + 999999) / 1000000;
	return left < WAIT_SLICE_MS ? (int)left : WAIT_SLICE_MS;
}

bool shim_wait_poll_needed(const struct pollfd *fds, nfds_t nfds)
{
	for (nfds_t i = 0; i < nfds; i++)
		if (unlikely(shim_fd_get(fds[i].fd) != NULL) && is_intercepted(fds[i].fd))
			return true;
	return false;
}

bool shim_wait_select_needed(int nfds, const fd_set *r, const fd_set *w)
{
	for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++) {
		if (!((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w))))
			continue;
		if (unlikely(shim_fd_get(fd) != NULL) && is_intercepted(fd))
			return true;
	}
	return false;
}

/* Fills revents of the switched fds from their channels; marks them in
 * ours[], each with a reference held until the next round or the end
 * (put_ours()), so that what a sleep armed is disarmed on the same socket
 * even if another thread closed the fd meanwhile. Returns how many have
 * revents. */
static int channel_round(struct pollfd *fds, nfds_t nfds, struct shim_sock **ours)
{
	int ready = 0;

	put_ours(ours, nfds);
	for (nfds_t i = 0; i < nfds; i++) {
		struct shim_sock *s = fds[i].fd >= 0 ? switched_sock(fds[i].fd) : NULL;
		int mask = s ? shim_io_poll_mask(s, fds[i].fd) : -1;

		if (mask < 0) {
			shim_sock_put(s);
			s = NULL;
		}
		ours[i] = s;
		if (!ours[i])
			continue;
		fds[i].revents = (short)(mask & (fds[i].events | POLLHUP | POLLERR | POLLNVAL));
		if (fds[i].revents)
			ready++;
	}
	return ready;
}

/* The kernel's poll over the fds that are not ours (ours ask for bells). */
static int kernel_round(struct pollfd *fds, nfds_t nfds, struct shim_sock **ours, struct pollfd *tmp,
			int timeout_ms, const sigset_t *sigmask)
{
	int rc, ready = 0;

	for (nfds_t i = 0; i < nfds; i++) {
		tmp[i] = fds[i];
		if (ours[i])
			tmp[i].events = POLLIN;
		tmp[i].revents = 0;
	}
	if (sigmask) {
		struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };

		rc = REAL(ppoll)(tmp, nfds, &ts, sigmask);
	} else {
		rc = REAL(poll)(tmp, nfds, timeout_ms);
	}
	if (rc < 0)
		return -errno;
	for (nfds_t i = 0; i < nfds; i++) {
		if (ours[i]) {
			if (tmp[i].revents) {
				shim_io_drain_bells(ours[i], fds[i].fd);
				/* What the bells' TCP said (EOF, a reset) changes
				 * what the channel round reports: look again. */
				fds[i].revents = 0;
				int mask = shim_io_poll_mask(ours[i], fds[i].fd);

				if (mask >= 0)
					fds[i].revents = (short)(mask & (fds[i].events | POLLHUP | POLLERR | POLLNVAL));
				if (fds[i].revents)
					ready++;
			}
			continue;
		}
		fds[i].revents = tmp[i].revents;
		if (tmp[i].revents)
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
static int count_ready(const struct pollfd *fds, nfds_t nfds)
{
	int ready = 0;

	for (nfds_t i = 0; i < nfds; i++)
		ready += fds[i].revents != 0;
	return ready;
}

/* poll and select have no object that outlives the call: the spin history
 * of their waits is the thread's (spin.h). */
static __thread struct shim_spin_hist poll_spin_hist;

int shim_wait_poll(struct pollfd *fds, nfds_t nfds, long long timeout_ns, const sigset_t *sigmask)
{
	struct shim_sock *ours_stack[WAIT_STACK_FDS], **ours = ours_stack;
	struct pollfd tmp_stack[WAIT_STACK_FDS], *tmp = tmp_stack;
	long long deadline = shim_wait_deadline(timeout_ns);
	struct shim_spin_run spin = SHIM_SPIN_RUN_INIT;
	int rc;

	memset(ours_stack, 0, sizeof(ours_stack));
	if (nfds > WAIT_STACK_FDS) {
		ours = calloc(nfds, sizeof(*ours));
		tmp = calloc(nfds, sizeof(*tmp));
		if (!ours || !tmp) {
			free(ours);
			free(tmp);
			return -ENOMEM;
		}
	}
	for (;;) {
		int mine = channel_round(fds, nfds, ours), theirs;

		theirs = kernel_round(fds, nfds, ours, tmp, 0, NULL);
		if (theirs < 0 || timeout_ns == 0 || (mine + theirs > 0 && count_ready(fds, nfds))) {
			rc = theirs < 0 ? theirs : count_ready(fds, nfds);
			break;
		}
		/* Busy-poll while spin.h allows (at most RDMASHIM_SPIN_US). */
		if (shim_spin_more(&spin, &poll_spin_hist, nfds ? fds[0].fd : -1)) {
			sched_yield(); /* the peer may share our core */
			continue;
		}
		/* Arm every switched fd, then look once more before sleeping. */
		int armed_stack[WAIT_STACK_FDS], *armed = nfds > WAIT_STACK_FDS ? (int *)tmp : armed_stack;
		bool sleep = true;

		if (nfds > WAIT_STACK_FDS)
			armed = calloc(nfds, sizeof(int));
		if (!armed) {
			rc = -ENOMEM;
			break;
		}
		for (nfds_t i = 0; i < nfds; i++) {
			armed[i] = ours[i] ? shim_io_arm(ours[i], fds[i].fd, fds[i].events) : 0;
			if (armed[i] & SHIM_ARM_READY)
				sleep = false;
		}
		int slice = shim_wait_slice_ms(deadline);

		for (nfds_t i = 0; i < nfds; i++)
			if ((armed[i] & SHIM_ARM_SHORT) && slice > 1)
				slice = 1;
		theirs = sleep ? kernel_round(fds, nfds, ours, tmp, slice, sigmask) : 0;
		if (sleep && slice == WAIT_SLICE_MS && shim_trace_enabled(SHIM_TRACE_DEBUG)) {
			int any = 0;

			for (nfds_t i = 0; i < nfds; i++)
				any |= tmp[i].revents;
			if (!any)
				SHIM_TRACE(SHIM_TRACE_DEBUG, "wait.slice_expired", fds[0].fd, NULL, SHIM_REASON_NONE,
					   "\"nfds\":%d,\"armed0\":%d,\"ev0\":%d", (int)nfds, armed[0], fds[0].events);
		}
		for (nfds_t i = 0; i < nfds; i++)
			if (armed[i])
				shim_io_disarm(ours[i], fds[i].fd, armed[i]);
		if (armed != armed_stack)
			free(armed);
		mine = channel_round(fds, nfds, ours);
		if (theirs < 0 || (mine + theirs > 0 && count_ready(fds, nfds))) {
			rc = theirs < 0 ? theirs : count_ready(fds, nfds);
			break;
		}
		if (deadline >= 0 && (long long)shim_now_ns() >= deadline) {
			rc = 0;
			break;
		}
	}
	shim_spin_end(&spin, &poll_spin_hist, rc > 0, nfds ? fds[0].fd : -1);
	put_ours(ours, nfds);
	if (ours != ours_stack) {
		free(ours);
		free(tmp);
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
