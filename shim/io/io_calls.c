/*
 * Calls that reduce to shim_io_send and shim_io_recv (io.h): sendmsg with
 * ancillary data, sendfile, and splice on a connection that moved. Kept
 * apart from io_rx.c and io_tx.c, which own the byte stream itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "io.h"
#include "real.h"

ssize_t shim_io_sendmsg(struct shim_sock *s, int fd, const struct msghdr *msg, int flags)
{
	if (msg->msg_controllen) {
		/*
		 * TCP takes only a few control messages (SO_MARK, timestamping)
		 * and fails the others with EINVAL before it sends a byte. Let
		 * the kernel judge them on a send of no bytes, which puts
		 * nothing on the stream: the bytes themselves must follow the
		 * connection (the channel after a switch), never go raw to TCP.
		 */
		struct msghdr probe = { .msg_control = msg->msg_control, .msg_controllen = msg->msg_controllen };

		if (REAL(sendmsg)(fd, &probe, (flags & ~(MSG_MORE | MSG_OOB)) | MSG_DONTWAIT | MSG_NOSIGNAL) < 0 &&
		    errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
	}
	return shim_io_send(s, fd, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

/* A discarding read of up to this much goes through the stack (lighttpd's
 * are this size); a longer one through memory of its own, at most
 * DISCARD_MAX at a time, more than TCP's largest receive buffer by
 * default holds: one call takes all that is queued, as the kernel's. */
#define DISCARD_STACK 16384
#define DISCARD_MAX (8u << 20)

ssize_t shim_io_recv_discard(struct shim_sock *s, int fd, size_t len, int flags)
{
	uint8_t stack[DISCARD_STACK], *buf = stack;
	size_t size = len < DISCARD_MAX ? len : DISCARD_MAX, done = 0;
	ssize_t n = 0;

	if (size > sizeof(stack) && !(buf = malloc(size))) {
		buf = stack;
		size = sizeof(stack); /* a shorter read, which a stream allows */
	}
	flags &= ~MSG_TRUNC;
	do {
		size_t want = len - done < size ? len - done : size;

		n = shim_io_recv(s, fd, &(struct iovec){ buf, want }, 1, flags);
		if (n > 0)
			done += (size_t)n;
		/* Beyond one buffer only for MSG_WAITALL, which shim_io_recv
		 * answers the same way within a buffer. */
	} while (n > 0 && (flags & MSG_WAITALL) && !(flags & MSG_PEEK) && done < len);
	if (buf != stack)
		free(buf);
	return done ? (ssize_t)done : n;
}

/* One buffer's worth of sendfile (below); returns as sendfile(2). */
static ssize_t sendfile_chunk(struct shim_sock *s, int out_fd, int in_fd, off64_t *offset, size_t count)
{
	char buf[65536];
	size_t want = count < sizeof(buf) ? count : sizeof(buf);
	off64_t pos = offset ? *offset : lseek64(in_fd, 0, SEEK_CUR);
	ssize_t n, sent;

	/* Read at a position and move the file's own only by what was sent:
	 * a send that fails part way must leave the rest where a retry finds
	 * it. A file that can not seek (a pipe) is read as it comes. */
	n = pos >= 0 ? pread64(in_fd, buf, want, pos) : REAL(read)(in_fd, buf, want);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	sent = shim_io_send(s, out_fd, &(struct iovec){ buf, (size_t)n }, 1, 0);
	if (sent < 0)
		return sent;
	if (offset)
		*offset += sent;
	else if (pos >= 0)
		lseek64(in_fd, pos + sent, SEEK_SET);
	return sent;
}

ssize_t shim_io_sendfile(struct shim_sock *s, int out_fd, int in_fd, off64_t *offset, size_t count)
{
	size_t done = 0;

	/* As the kernel's: as much as the connection takes now, not one
	 * buffer per call (a nonblocking sender would see a writable socket
	 * after every chunk). */
	while (done < count) {
		ssize_t n = sendfile_chunk(s, out_fd, in_fd, offset, count - done);

		if (n <= 0) {
			if (done)
				break;
			return n;
		}
		done += (size_t)n;
		if ((size_t)n < 65536 && done < count)
			break; /* the connection or the file gave less: done for now */
	}
	return (ssize_t)done;
}

/* Room left in a pipe (F_GETPIPE_SZ less what is queued), 0 if none. */
static size_t pipe_room(int pipe_fd)
{
	int size = REAL(fcntl)(pipe_fd, F_GETPIPE_SZ), queued = 0;

	if (size <= 0 || REAL(ioctl)(pipe_fd, FIONREAD, &queued) < 0)
		return 4096; /* the least a pipe ever holds */
	return size > queued ? (size_t)(size - queued) : 0;
}

/* Waits until fd is ready for events (a pipe end of a blocking splice). */
static int wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };

	return REAL(poll)(&p, 1, -1) < 0 ? -errno : 0;
}

ssize_t shim_io_splice_from(struct shim_sock *s, int sock_fd, int pipe_fd, size_t len, unsigned flags)
{
	bool nonblock = flags & SPLICE_F_NONBLOCK;
	uint8_t buf[65536];
	size_t want, done = 0;
	ssize_t n;
	int rc;

	/* Take from the connection no more than the pipe takes at once, so
	 * that nothing read is ever left without a place to go. */
	while (!(want = pipe_room(pipe_fd))) {
		if (nonblock)
			return -EAGAIN;
		if ((rc = wait_fd(pipe_fd, POLLOUT)) < 0)
			return rc;
	}
	want = want < len ? want : len;
	want = want < sizeof(buf) ? want : sizeof(buf);
	n = shim_io_recv(s, sock_fd, &(struct iovec){ buf, want }, 1, nonblock ? MSG_DONTWAIT : 0);
	if (n <= 0)
		return n;
	while (done < (size_t)n) {
		ssize_t w = REAL(write)(pipe_fd, buf + done, (size_t)n - done);

		if (w > 0)
			done += (size_t)w;
		else if (w < 0 && errno == EAGAIN)
			wait_fd(pipe_fd, POLLOUT); /* another writer took the room */
		else
			break; /* the pipe's reader is gone: so are these bytes, as the kernel's would */
	}
	return n;
}

ssize_t shim_io_splice_to(struct shim_sock *s, int sock_fd, int pipe_fd, size_t len, unsigned flags)
{
	bool nonblock = flags & SPLICE_F_NONBLOCK;
	uint8_t buf[65536];
	int copy[2];
	ssize_t n, sent;

	/*
	 * tee() copies the pipe's bytes without taking them; only what the
	 * connection took is then taken from the pipe. A send that moves
	 * less than it was given leaves the rest in the pipe, as splice does.
	 */
	if (pipe2(copy, O_NONBLOCK | O_CLOEXEC) < 0)
		return -errno;
	len = len < sizeof(buf) ? len : sizeof(buf);
	while ((n = tee(pipe_fd, copy[1], len, SPLICE_F_NONBLOCK)) < 0 && errno == EAGAIN && !nonblock) {
		/* Empty: wait for a writer (tee says EAGAIN, not EOF, while one
		 * may still write; poll tells EOF as POLLHUP). */
		struct pollfd p = { .fd = pipe_fd, .events = POLLIN };

		if (REAL(poll)(&p, 1, -1) < 0 || (p.revents & POLLHUP && !(p.revents & POLLIN))) {
			n = 0;
			break;
		}
	}
	if (n <= 0) {
		int err = n < 0 ? -errno : 0;

		REAL(close)(copy[0]);
		REAL(close)(copy[1]);
		return err;
	}
	n = REAL(read)(copy[0], buf, (size_t)n);
	REAL(close)(copy[0]);
	REAL(close)(copy[1]);
	if (n <= 0)
		return n < 0 ? -errno : 0;
	sent = shim_io_send(s, sock_fd, &(struct iovec){ buf, (size_t)n }, 1, nonblock ? MSG_DONTWAIT : 0);
	if (sent > 0 && REAL(read)(pipe_fd, buf, (size_t)sent) != sent)
		return -EIO; /* another reader took them from the pipe meanwhile */
	return sent;
}
