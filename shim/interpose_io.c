/*
 * Exported data-path wrappers. A fd the shim does not track costs one load
 * from the fd table and nothing else.
 */
#include <errno.h>
#include <stdlib.h>

#include "compiler.h"
#include "fdtable.h"
#include "real.h"
#include "sock.h"

extern void __chk_fail(void) __attribute__((noreturn));

SHIM_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	return REAL(send)(fd, buf, len, flags);
}

SHIM_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			   const struct sockaddr *addr, socklen_t alen)
{
	return REAL(sendto)(fd, buf, len, flags, addr, alen);
}

SHIM_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	return REAL(sendmsg)(fd, msg, flags);
}

SHIM_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags)
{
	return REAL(sendmmsg)(fd, vec, n, flags);
}

SHIM_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	return REAL(write)(fd, buf, len);
}

SHIM_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	return REAL(writev)(fd, iov, iovcnt);
}

SHIM_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	return REAL(recv)(fd, buf, len, flags);
}

SHIM_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
			     socklen_t *alen)
{
	return REAL(recvfrom)(fd, buf, len, flags, addr, alen);
}

/* Sockets passed with SCM_RIGHTS arrive untracked; look at them once. */
static void adopt_passed_fds(const struct msghdr *msg, ssize_t rc)
{
	if (unlikely(rc >= 0 && msg->msg_controllen > 0 && shim_cfg.enabled))
		shim_sock_adopt_rights(msg);
}

SHIM_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	ssize_t rc = REAL(recvmsg)(fd, msg, flags);

	adopt_passed_fds(msg, rc);
	return rc;
}

SHIM_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags,
			 struct timespec *timeout)
{
	int rc = REAL(recvmmsg)(fd, vec, n, flags, timeout);

	for (int i = 0; i < rc; i++)
		adopt_passed_fds(&vec[i].msg_hdr, 0);
	return rc;
}

SHIM_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	return REAL(read)(fd, buf, len);
}

SHIM_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	return REAL(readv)(fd, iov, iovcnt);
}

SHIM_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	return REAL(sendfile)(out_fd, in_fd, offset, count);
}

SHIM_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	return REAL(sendfile64)(out_fd, in_fd, offset, count);
}

/* _FORTIFY_SOURCE entry points: check the object size as glibc does, then
 * take the same path as the plain call. */
SHIM_EXPORT ssize_t __read_chk(int fd, void *buf, size_t len, size_t buflen)
{
	if (unlikely(len > buflen))
		__chk_fail();
	return read(fd, buf, len);
}

SHIM_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags)
{
	if (unlikely(len > buflen))
		__chk_fail();
	return recv(fd, buf, len, flags);
}

SHIM_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
				   struct sockaddr *addr, socklen_t *alen)
{
	if (unlikely(len > buflen))
		__chk_fail();
	return recvfrom(fd, buf, len, flags, addr, alen);
}
