/* The rendezvous socket; see rendezvous.h. */
#include "rendezvous.h"

#include <errno.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "diag.h"
#include "fdtable.h"
#include "real.h"

/* "\0rdmashim1/" + hex of both endpoints: 10 + 2 * 2 * 18 bytes. */
static socklen_t rv_address(struct sockaddr_un *sun, const struct shim_endpoint *client,
			    const struct shim_endpoint *server)
{
	static const char hex[] = "0123456789abcdef";
	const struct shim_endpoint *eps[2] = { client, server };
	char *p = sun->sun_path + 1;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	p += sprintf(p, "rdmashim1/");
	for (int e = 0; e < 2; e++) {
		uint8_t raw[18];

		memcpy(raw, eps[e]->addr, 16);
		raw[16] = (uint8_t)(eps[e]->port >> 8);
		raw[17] = (uint8_t)eps[e]->port;
		for (size_t i = 0; i < sizeof(raw); i++) {
			*p++ = hex[raw[i] >> 4];
			*p++ = hex[raw[i] & 15];
		}
	}
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - sun->sun_path));
}

static int rv_socket(void)
{
	int fd = REAL(socket)(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	return fd < 0 ? -errno : shim_fd_own_checked(fd);
}

int shim_rv_listen(const struct shim_endpoint *client, const struct shim_endpoint *server)
{
	struct sockaddr_un sun;
	socklen_t len = rv_address(&sun, client, server);
	int fd = rv_socket(), rc;

	if (fd < 0)
		return fd;
	if (REAL(bind)(fd, (struct sockaddr *)&sun, len) < 0 || REAL(listen)(fd, 4) < 0) {
		rc = -errno;
		REAL(close)(fd);
		return rc;
	}
	return fd;
}

int shim_rv_accept(int listen_fd)
{
	int fd = REAL(accept4)(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return shim_fd_own_checked(fd);
}

int shim_rv_connect(const struct shim_endpoint *client, const struct shim_endpoint *server)
{
	struct sockaddr_un sun;
	socklen_t len = rv_address(&sun, client, server);
	int fd = rv_socket(), rc;

	if (fd < 0)
		return fd;
	if (REAL(connect)(fd, (struct sockaddr *)&sun, len) < 0) {
		rc = -errno;
		REAL(close)(fd);
		/* A full backlog means C is there but busy: worth a retry. */
		return rc == -EAGAIN ? -ECONNREFUSED : rc;
	}
	return fd;
}

/*
 * The user check alone would let any process of the owner's user take the
 * connection over: the peer must also hold the TCP socket itself. It names
 * the fd it holds it under; a wrong number simply fails the check. Reading
 * another process's fds needs ptrace-read rights: a peer we may not look at
 * passes only if it is root (who could take the socket anyway).
 */
static int process_holds_socket(pid_t pid, uid_t uid, int fd, ino_t inode)
{
	char path[64];
	struct stat st;

	if (fd < 0)
		return -EPERM;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	if (stat(path, &st) < 0) {
		if (errno == EACCES && uid == 0)
			return 0;
		/* No such fd (any more): the caller tells a peer that closed
		 * its connection meanwhile from a liar (rendezvous.h). */
		return errno == ENOENT ? -ENOENT : -EPERM;
	}
	return S_ISSOCK(st.st_mode) && st.st_ino == inode ? 0 : -EPERM;
}

int shim_rv_verify_peer(int rv_fd, const struct shim_endpoint *peer_local,
			const struct shim_endpoint *peer_remote, int peer_tcp_fd, struct shim_rv_owner *owner)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int rc;

	if (REAL(getsockopt)(rv_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	if (!owner->known) {
		rc = shim_diag_tcp_owner(peer_local, peer_remote, &owner->uid, &owner->inode);
		if (rc < 0)
			return rc;
		owner->known = true;
	}
	if (cred.uid != owner->uid)
		return -EPERM;
	if (peer_tcp_fd == SHIM_RV_USER_ONLY)
		return 0;
	return process_holds_socket(cred.pid, cred.uid, peer_tcp_fd, owner->inode);
}

int shim_rv_send(int rv_fd, const void *msg, size_t len, int pass_fd)
{
	struct iovec iov = { (void *)msg, len };
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} control;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (pass_fd >= 0) {
		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = sizeof(control.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	n = REAL(sendmsg)(rv_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EPROTO;
}

ssize_t shim_rv_recv(int rv_fd, void *buf, size_t len, int *fd_out)
{
	struct iovec iov = { buf, len };
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} control;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };
	ssize_t n = REAL(recvmsg)(rv_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int got = -1;

	if (fd_out)
		*fd_out = -1;
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		for (size_t i = 0; i < count; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			/* Keep the first fd only; extra ones are an attack or a bug. */
			if (got < 0 && fd_out)
				got = fd;
			else
				REAL(close)(fd);
		}
	}
	/* A truncated message is malformed, and so is an fd that came with
	 * one: close it here, or every such message would leak one of our fds
	 * (any local user can send them). */
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		if (got >= 0)
			REAL(close)(got);
		return -EPROTO;
	}
	if (fd_out)
		*fd_out = got >= 0 ? shim_fd_own_checked(got) : -1;
	if (fd_out && *fd_out == -EMFILE) {
		*fd_out = -1;
		return -EMFILE;
	}
	return n;
}
