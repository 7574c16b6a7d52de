/* Exported readiness wrappers. */
#include <errno.h>

#include "compiler.h"
#include "fdtable.h"
#include "real.h"
#include "sock.h"

extern void __chk_fail(void) __attribute__((noreturn));

SHIM_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return REAL(poll)(fds, nfds, timeout);
}

SHIM_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *timeout,
		      const sigset_t *sigmask)
{
	return REAL(ppoll)(fds, nfds, timeout, sigmask);
}

SHIM_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout)
{
	return REAL(select)(nfds, r, w, e, timeout);
}

SHIM_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *timeout,
			const sigset_t *sigmask)
{
	return REAL(pselect)(nfds, r, w, e, timeout, sigmask);
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
	return REAL(epoll_ctl)(epfd, op, fd, event);
}

SHIM_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
	return REAL(epoll_wait)(epfd, events, maxevents, timeout);
}

SHIM_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int maxevents, int timeout,
			    const sigset_t *sigmask)
{
	return REAL(epoll_pwait)(epfd, events, maxevents, timeout, sigmask);
}

SHIM_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int maxevents,
			     const struct timespec *timeout, const sigset_t *sigmask)
{
	return REAL(epoll_pwait2)(epfd, events, maxevents, timeout, sigmask);
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
