/*
 * Exported data-path wrappers. They only dispatch: a fd the shim does not
 * intercept costs one load from the fd table and goes to the kernel; an
 * intercepted one goes to io.c, whose negative errno becomes errno here.
 */
#include <errno.h>
#include <stdlib.h>

#include "compiler.h"
#include "fdtable.h"
#include "io.h"
#include "msgstamps.h"
#include "real.h"
#include "sock.h"

extern void __chk_fail(void) __attribute__((noreturn));

/* The intercepted sock behind fd, held, or NULL for the kernel's own path.
 * The reference is taken with the lookup (shim/LIFETIME.md) and given
 * back by done() when the call returns. */
static inline struct shim_sock *intercepted(int fd)
{
	/* The common answer, the kernel's path, with no call: the compiler
	 * does not inline the lookup with its reference loop. */
	if (likely(!shim_fd_may_intercept(fd)))
		return NULL;
	/* Test-only (msgstamps.h): a data call's time starts here. */
	SHIM_MSGSTAMP_BEGIN();
	return shim_sock_get_intercepted(fd);
}

/* Gives back intercepted()'s reference; returns rc as the call's result
 * (errno set from a negative one). */
static inline ssize_t done(struct shim_sock *s, ssize_t rc)
{
	shim_sock_put(s);
	SHIM_MSGSTAMP_END(rc);
	return shim_ret(rc);
}

static ssize_t send_one(struct shim_sock *s, int fd, const void *buf, size_t len, int flags)
{
	struct iovec iov = { (void *)buf, len };

	return done(s, shim_io_send(s, fd, &iov, 1, flags));
}

/* A read of the stream with the program's flags. MSG_TRUNC: TCP discards
 * the bytes and writes nothing into the buffer, which the data path would
 * take a SWITCH frame's bytes from (io_calls.c). */
static ssize_t recv_flags(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	size_t len = 0;

	if (likely(!(flags & MSG_TRUNC)))
		return shim_io_recv(s, fd, iov, iovcnt, flags);
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	return shim_io_recv_discard(s, fd, len, flags);
}

static ssize_t recv_one(struct shim_sock *s, int fd, void *buf, size_t len, int flags)
{
	struct iovec iov = { buf, len };

	return done(s, recv_flags(s, fd, &iov, 1, flags));
}

SHIM_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct shim_sock *s = intercepted(fd);

	if (likely(!s))
		return REAL(send)(fd, buf, len, flags);
	return send_one(s, fd, buf, len, flags);
}

SHIM_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			   const struct sockaddr *addr, socklen_t alen)
{
	struct shim_sock *s = intercepted(fd);

	/* A connected TCP socket ignores the address, as the kernel does. */
	if (likely(!s))
		return REAL(sendto)(fd, buf, len, flags, addr, alen);
	return send_one(s, fd, buf, len, flags);
}

SHIM_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct shim_sock *s = intercepted(fd);

	if (unlikely(msg->msg_controllen > 0 && shim_cfg.enabled))
		shim_sock_note_rights_sent(msg);
	if (likely(!s))
		return REAL(sendmsg)(fd, msg, flags);
	return done(s, shim_io_sendmsg(s, fd, msg, flags));
}

SHIM_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags)
{
	struct shim_sock *s = intercepted(fd);
	unsigned int i;

	if (likely(!s))
		return REAL(sendmmsg)(fd, vec, n, flags);
	for (i = 0; i < n; i++) {
		ssize_t rc = shim_io_send(s, fd, vec[i].msg_hdr.msg_iov, (int)vec[i].msg_hdr.msg_iovlen, flags);

		if (rc < 0)
			return i ? (int)done(s, (ssize_t)i) : (int)done(s, rc);
		vec[i].msg_len = (unsigned int)rc;
	}
	return (int)done(s, (ssize_t)i);
}

SHIM_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	struct shim_sock *s = intercepted(fd);

	if (likely(!s))
		return REAL(write)(fd, buf, len);
	return send_one(s, fd, buf, len, 0);
}

SHIM_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	struct shim_sock *s = intercepted(fd);

	if (likely(!s))
		return REAL(writev)(fd, iov, iovcnt);
	return done(s, shim_io_send(s, fd, iov, iovcnt, 0));
}

SHIM_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct shim_sock *s = intercepted(fd);

	/* Urgent data and the error queue are outside the stream. */
	if (likely(!s))
		return REAL(recv)(fd, buf, len, flags);
	if (flags & (MSG_ERRQUEUE | MSG_OOB)) {
		shim_sock_put(s);
		return REAL(recv)(fd, buf, len, flags);
	}
	return recv_one(s, fd, buf, len, flags);
}

SHIM_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
			     socklen_t *alen)
{
	struct shim_sock *s = intercepted(fd);

	if (likely(!s))
		return REAL(recvfrom)(fd, buf, len, flags, addr, alen);
	if (flags & (MSG_ERRQUEUE | MSG_OOB)) {
		shim_sock_put(s);
		return REAL(recvfrom)(fd, buf, len, flags, addr, alen);
	}
	/* TCP reports no source address: Linux sets the length to 0. */
	if (addr && alen)
		*alen = 0;
	return recv_one(s, fd, buf, len, flags);
}

/* Sockets passed with SCM_RIGHTS arrive untracked; look at them once. */
static void adopt_passed_fds(const struct msghdr *msg, ssize_t rc)
{
	if (unlikely(rc >= 0 && msg->msg_controllen > 0 && shim_cfg.enabled))
		shim_sock_adopt_rights(msg);
}

SHIM_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct shim_sock *s = intercepted(fd);
	ssize_t rc;

	/* MSG_ERRQUEUE reads the socket's error queue and MSG_OOB the urgent
	 * byte, never the stream. */
	if (likely(!s) || (flags & (MSG_ERRQUEUE | MSG_OOB))) {
		shim_sock_put(s);
		rc = REAL(recvmsg)(fd, msg, flags);
		adopt_passed_fds(msg, rc);
		return rc;
	}
	msg->msg_namelen = 0;
	msg->msg_controllen = 0;
	msg->msg_flags = 0;
	return done(s, recv_flags(s, fd, msg->msg_iov, (int)msg->msg_iovlen, flags));
}

SHIM_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags,
			 struct timespec *timeout)
{
	struct shim_sock *s = intercepted(fd);
	int rc;

	if (likely(!s)) {
		rc = REAL(recvmmsg)(fd, vec, n, flags, timeout);
		for (int i = 0; i < rc; i++)
			adopt_passed_fds(&vec[i].msg_hdr, 0);
		return rc;
	}
	/* A stream socket fills one message per call, like the kernel's
	 * recvmmsg on TCP usually does. */
	if (n == 0)
		return (int)done(s, 0);
	vec[0].msg_hdr.msg_namelen = 0;
	vec[0].msg_hdr.msg_controllen = 0;
	vec[0].msg_hdr.msg_flags = 0;
	ssize_t got = recv_flags(s, fd, vec[0].msg_hdr.msg_iov, (int)vec[0].msg_hdr.msg_iovlen, flags);

	shim_sock_put(s);
	if (got < 0)
		return (int)shim_ret(got);
	vec[0].msg_len = (unsigned int)got;
	return 1;
}

SHIM_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	struct shim_sock *s = intercepted(fd);

	if (likely(!s))
		return REAL(read)(fd, buf, len);
	return recv_one(s, fd, buf, len, 0);
}

SHIM_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
	struct shim_sock *s = intercepted(fd);

	if (likely(!s))
		return REAL(readv)(fd, iov, iovcnt);
	return done(s, shim_io_recv(s, fd, iov, iovcnt, 0));
}

/* sendfile into an intercepted socket: read the file and send what was read,
 * so the bytes follow the connection wherever it travels now. */
static ssize_t sendfile_through(struct shim_sock *s, int out_fd, int in_fd, off64_t *offset, size_t count)
{
	return shim_ret(shim_io_sendfile(s, out_fd, in_fd, offset, count));
}

SHIM_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	struct shim_sock *s = intercepted(out_fd);

	if (likely(!s))
		return REAL(sendfile)(out_fd, in_fd, offset, count);
	off64_t off = offset ? *offset : 0;
	ssize_t rc = sendfile_through(s, out_fd, in_fd, offset ? &off : NULL, count);

	shim_sock_put(s);
	if (offset)
		*offset = (off_t)off;
	return rc;
}

SHIM_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *offset, size_t count)
{
	struct shim_sock *s = intercepted(out_fd);

	if (likely(!s))
		return REAL(sendfile64)(out_fd, in_fd, offset, count);
	ssize_t rc = sendfile_through(s, out_fd, in_fd, offset, count);

	shim_sock_put(s);
	return rc;
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
