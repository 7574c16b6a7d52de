/*
 * Exported readiness wrappers. They only dispatch: sets without a switched
 * fd go to the kernel as they are; the others to wait.c / epoll.c.
 */
#include <errno.h>
#include <stdbool.h>

#include "clock.h"
#include "compiler.h"
#include "fdtable.h"
#include "real.h"
#include "sock.h"
#include "wait.h"

extern void __chk_fail(void) __attribute__((noreturn));

/* glibc declares poll's array write-only (for _FORTIFY_SOURCE); a hook must
 * read the events the caller put there. */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

static long long timespec_ns(const struct timespec *ts)
{
	return ts ? (long long)ts->tv_sec * 1000000000ll + ts->tv_nsec : -1;
}

static long long ms_ns(int timeout)
{
	return timeout < 0 ? -1 : (long long)timeout * 1000000ll;
}

SHIM_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	if (likely(!shim_fd_slots) || !shim_wait_poll_needed(fds, nfds))
		return REAL(poll)(fds, nfds, timeout);
	return (int)shim_ret(shim_wait_poll(fds, nfds, ms_ns(timeout), NULL));
}

SHIM_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		      const sigset_t *sigmask)
{
	if (likely(!shim_fd_slots) || !shim_wait_poll_needed(fds, nfds))
		return REAL(ppoll)(fds, nfds, timeout, sigmask);
	return (int)shim_ret(shim_wait_poll(fds, nfds, timespec_ns(timeout), sigmask));
}

SHIM_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout)
{
	long long ns;
	int rc;

	if (likely(!shim_fd_slots) || !shim_wait_select_needed(nfds, r, w))
		return REAL(select)(nfds, r, w, e, timeout);
	ns = timeout ? (long long)timeout->tv_sec * 1000000000ll + timeout->tv_usec * 1000ll : -1;
	rc = (int)shim_ret(shim_wait_select(nfds, r, w, e, timeout ? &ns : NULL, NULL));
	if (timeout) {
		/* Linux select reports the time left. */
		timeout->tv_sec = ns / 1000000000ll;
		timeout->tv_usec = (ns % 1000000000ll) / 1000;
	}
	return rc;
}

SHIM_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
			const sigset_t *sigmask)
{
	long long ns = timespec_ns(timeout);

	if (likely(!shim_fd_slots) || !shim_wait_select_needed(nfds, r, w))
		return REAL(pselect)(nfds, r, w, e, timeout, sigmask);
	return (int)shim_ret(shim_wait_select(nfds, r, w, e, timeout ? &ns : NULL, sigmask));
}

SHIM_EXPORT int epoll_create(int size)
{
	return REAL(epoll_create)(size);
}

SHIM_EXPORT int epoll_create1(int flags)
{
	return REAL(epoll_create1)(flags);
}

SHIM_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	if (likely(!shim_fd_get(fd) && !shim_fd_get(epfd))) {
		if (op == EPOLL_CTL_ADD)
			shim_epoll_note_early(epfd, fd);
		return REAL(epoll_ctl)(epfd, op, fd, event);
	}
	if (shim_fd_ctl_is_kernels(fd))
		return REAL(epoll_ctl)(epfd, op, fd, event);
	return (int)shim_ret(shim_epoll_ctl(epfd, op, fd, event));
}

/* The set may have gained an intercepted fd while the kernel waited. An
 * event of a registration whose item went meanwhile, or the set's kick
 * (epoll_set.c: a registration change made an item on a channel ready), is
 * dropped; a wait that kept none goes round again, through the dispatch,
 * which now sees the item: the kernel never returns 0 before its time. */
static inline int kernel_epoll_result(int epfd, struct epoll_event *events, int n)
{
	if (likely(n <= 0 || !shim_fd_get(epfd)))
		return n;
	return shim_epoll_fixup(epfd, events, n);
}

/* One dispatch for the whole epoll_wait family. */
static int epoll_dispatch(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
			  const sigset_t *sigmask, int *handled)
{
	int rc = 0;

	*handled = 0;
	if (likely(!shim_fd_get(epfd)))
		return 0;
	*handled = shim_epoll_wait(epfd, events, maxevents, timeout_ns, sigmask, &rc);
	return (int)shim_ret(rc);
}

/* Whether a kernel wait that returned n, of which the shim kept none,
 * waits again: yes while time is left, unless the kernel itself timed
 * out (n is 0) or failed. */
static inline bool epoll_again(int n, long long deadline)
{
	return n > 0 && (deadline < 0 || shim_left_ns(deadline) > 0);
}

static struct timespec *ns_timespec(long long ns, struct timespec *ts)
{
	if (ns < 0)
		return NULL;
	ts->tv_sec = ns / 1000000000ll;
	ts->tv_nsec = ns % 1000000000ll;
	return ts;
}

SHIM_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	long long deadline = shim_deadline_ms(timeout);

	for (;;) {
		int handled, n, rc = epoll_dispatch(epfd, events, maxevents, shim_left_ns(deadline), NULL, &handled);

		if (handled)
			return rc;
		n = REAL(epoll_wait)(epfd, events, maxevents, shim_left_ms(deadline));
		rc = kernel_epoll_result(epfd, events, n);
		if (rc != 0 || !epoll_again(n, deadline))
			return rc;
	}
}

SHIM_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			    const sigset_t *sigmask)
{
	long long deadline = shim_deadline_ms(timeout);

	for (;;) {
		int handled, n,
			rc = epoll_dispatch(epfd, events, maxevents, shim_left_ns(deadline), sigmask, &handled);

		if (handled)
			return rc;
		n = REAL(epoll_pwait)(epfd, events, maxevents, shim_left_ms(deadline), sigmask);
		rc = kernel_epoll_result(epfd, events, n);
		if (rc != 0 || !epoll_again(n, deadline))
			return rc;
	}
}

SHIM_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
			     const struct timespec *timeout, const sigset_t *sigmask)
{
	long long deadline = shim_deadline_ns(timespec_ns(timeout));

	for (;;) {
		struct timespec left;
		int handled, n,
			rc = epoll_dispatch(epfd, events, maxevents, shim_left_ns(deadline), sigmask, &handled);

		if (handled)
			return rc;
		n = REAL(epoll_pwait2)(epfd, events, maxevents, ns_timespec(shim_left_ns(deadline), &left), sigmask);
		rc = kernel_epoll_result(epfd, events, n);
		if (rc != 0 || !epoll_again(n, deadline))
			return rc;
	}
}

SHIM_EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen)
{
	if (unlikely(fdslen / sizeof(*fds) < nfds))
		__chk_fail();
	return poll(fds, nfds, timeout);
}

SHIM_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
			    const sigset_t *sigmask, size_t fdslen)
{
	if (unlikely(fdslen / sizeof(*fds) < nfds))
		__chk_fail();
	return ppoll(fds, nfds, timeout, sigmask);
}
