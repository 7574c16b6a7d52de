/*
 * Calls that reduce to shim_io_send (io.h): sendmsg with ancillary data and
 * sendfile. Kept apart from io.c, which owns the byte stream itself.
 */
#include <errno.h>
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

ssize_t shim_io_sendfile(struct shim_sock *s, int out_fd, int in_fd, off64_t *offset, size_t count)
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
