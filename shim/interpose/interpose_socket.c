/*
 * Exported socket-lifecycle wrappers. They only dispatch: call the real
 * function, then hand the outcome to the tracking policy in sock.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/ioctl.h>

#include "compiler.h"
#include <stdint.h>

#include "bypass.h"
#include "fdtable.h"
#include "io.h"
#include "real.h"
#include "wait.h"
#include "sock.h"

SHIM_EXPORT int socket(int domain, int type, int protocol)
{
	return REAL(socket)(domain, type, protocol);
}

SHIM_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	return REAL(bind)(fd, addr, len);
}

SHIM_EXPORT int listen(int fd, int backlog)
{
	int rc = REAL(listen)(fd, backlog);

	if (rc == 0)
		shim_sock_on_listen(fd);
	return rc;
}

SHIM_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	if (likely(shim_fd_get(fd) == NULL))
		return REAL(accept)(fd, addr, len);
	return (int)shim_ret(shim_sock_accept(fd, addr, len, 0));
}

SHIM_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	if (likely(shim_fd_get(fd) == NULL))
		return REAL(accept4)(fd, addr, len, flags);
	return (int)shim_ret(shim_sock_accept(fd, addr, len, flags));
}

SHIM_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int rc = REAL(connect)(fd, addr, len);
	int err = errno;

	shim_sock_on_connect(fd, addr, len, rc, rc < 0 ? err : 0);
	shim_epoll_adopt_early(fd);
	errno = err;
	return rc;
}

SHIM_EXPORT int close(int fd)
{
	if (unlikely(shim_fd_get(fd) != NULL))
		shim_sock_on_close(fd);
	return REAL(close)(fd);
}

SHIM_EXPORT int shutdown(int fd, int how)
{
	struct shim_sock *s;
	int rc;

	if (likely(!shim_fd_get(fd)))
		return REAL(shutdown)(fd, how);
	s = shim_sock_get(fd);
	if (s && __atomic_load_n(&s->intercept, __ATOMIC_RELAXED))
		rc = shim_io_shutdown(s, fd, how);
	else
		rc = REAL(shutdown)(fd, how) < 0 ? -errno : 0;
	shim_sock_put(s);
	if (rc == 0)
		shim_sock_on_shutdown(fd, how);
	return (int)shim_ret(rc);
}

/* After a successful dup-like call: newfd now names oldfd's socket. */
static int after_dup(int oldfd, int newfd)
{
	int err = errno;

	if (newfd >= 0 && (shim_fd_get(oldfd) || shim_fd_get(newfd)))
		shim_sock_on_dup(oldfd, newfd);
	errno = err;
	return newfd;
}

SHIM_EXPORT int dup(int fd)
{
	return after_dup(fd, REAL(dup)(fd));
}

/* dup2/dup3 close newfd first: that close must be seen as close's is,
 * before the number names the other file (shim_sock_before_replace()). */
static int replaced(int oldfd, int newfd, struct shim_sock *old, int rc)
{
	int err = errno;

	shim_sock_after_replace(newfd, old, rc);
	errno = err;
	return after_dup(oldfd, rc);
}

SHIM_EXPORT int dup2(int oldfd, int newfd)
{
	struct shim_sock *old = unlikely(shim_fd_get(newfd) != NULL) ? shim_sock_before_replace(oldfd, newfd) : NULL;

	return replaced(oldfd, newfd, old, REAL(dup2)(oldfd, newfd));
}

SHIM_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	struct shim_sock *old = unlikely(shim_fd_get(newfd) != NULL) ? shim_sock_before_replace(oldfd, newfd) : NULL;

	return replaced(oldfd, newfd, old, REAL(dup3)(oldfd, newfd, flags));
}

/* The one fcntl argument is an int or a pointer; both travel in one
 * register of the x86-64 and aarch64 ABIs, so passing it on as a
 * pointer-sized value is exact. */
static int after_fcntl(int fd, int cmd, void *arg, int rc)
{
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		return after_dup(fd, rc);
	if (cmd == F_SETFL && rc == 0 && unlikely(shim_fd_get(fd) != NULL))
		shim_sock_on_fcntl_setfl(fd, (int)(intptr_t)arg);
	return rc;
}

SHIM_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return after_fcntl(fd, cmd, arg, REAL(fcntl)(fd, cmd, arg));
}

SHIM_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return after_fcntl(fd, cmd, arg, REAL(fcntl64)(fd, cmd, arg));
}

SHIM_EXPORT int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (likely(!shim_fd_get(fd)))
		return REAL(ioctl)(fd, request, arg);
	return (int)shim_ret(shim_io_ioctl(fd, request, arg));
}

SHIM_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	if (unlikely(shim_fd_get(fd) != NULL) && shim_sock_getsockopt(fd, level, name, val, len))
		return 0;
	return REAL(getsockopt)(fd, level, name, val, len);
}

SHIM_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	int rc = REAL(setsockopt)(fd, level, name, val, len);

	if (rc == 0 && unlikely(shim_fd_get(fd) != NULL))
		shim_bypass_on_setsockopt(fd, level, name, val, len);
	return rc;
}
