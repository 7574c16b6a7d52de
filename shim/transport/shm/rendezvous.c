/* The rendezvous socket; see rendezvous.h. */
#include "rendezvous.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "diag.h"
#include "fdtable.h"
#include "real.h"
#include "reaper.h"

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

/*
 * C looks here at every data call while it waits, and mostly finds nobody.
 * An accept4() that finds nobody still makes and frees a socket and its
 * file in the kernel (several microseconds, most of a waiting client's
 * CPU in a plain-server run); a look at the queue first costs none of it.
 */
int shim_rv_accept(int listen_fd)
{
	struct pollfd p = { .fd = listen_fd, .events = POLLIN };
	int fd;

	if (REAL(poll)(&p, 1, 0) == 0)
		return -EAGAIN;
	fd = REAL(accept4)(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

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

/* st is the TCP socket sock_diag named (its inode): 0, else -EPERM. */
static int is_that_socket(const struct stat *st, ino_t inode)
{
	return S_ISSOCK(st->st_mode) && st->st_ino == inode ? 0 : -EPERM;
}

/*
 * SO_PEERPIDFD (Linux 6.5): the asm-generic value, where older headers lack
 * it. Other architectures number it differently: there the pidfd check is
 * simply not made.
 */
#if !defined(SO_PEERPIDFD) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || \
			       defined(__riscv))
#define SO_PEERPIDFD 77
#endif

/*
 * Whether the process that connected rv_fd has not exited (been reaped)
 * since: a pidfd of it (SO_PEERPIDFD) names that very process whatever
 * became of its number, and signal 0 only checks it (EPERM: it is there,
 * we may not signal it). It is gone when the kernel can make no pidfd of
 * it any more (ESRCH; EINVAL on some kernels) or the signal finds nobody.
 * Where no pidfd can be had (a kernel before 6.5, no fd to spare, no
 * rv_fd), nothing is known: true, as before the check.
 */
static bool peer_still_there(int rv_fd)
{
#ifdef SO_PEERPIDFD
	socklen_t len = sizeof(int);
	bool there;
	int pidfd;

	if (rv_fd < 0)
		return true;
	if (REAL(getsockopt)(rv_fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0)
		return errno != ESRCH && errno != EINVAL;
	there = REAL(syscall)(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0 || errno == EPERM;
	REAL(close)(pidfd);
	return there;
#else
	(void)rv_fd;
	return true;
#endif
}

int shim_rv_peer_pidfd(int rv_fd)
{
#ifdef SO_PEERPIDFD
	socklen_t len = sizeof(int);
	int pidfd;

	if (rv_fd < 0)
		return -EBADF;
	if (REAL(getsockopt)(rv_fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0)
		return -errno;
	return shim_fd_own_checked(pidfd);
#else
	(void)rv_fd;
	return -EOPNOTSUPP;
#endif
}

/*
 * The user check alone would let any process of the owner's user take the
 * connection over: the peer must also hold the TCP socket itself. It names
 * the fd it holds it under; a wrong number simply fails the check. Reading
 * another process's fds needs ptrace-read rights: a peer we may not look at
 * passes only if it is root (who could take the socket anyway).
 *
 * The number is the peer's choice, so its /proc link leads wherever the
 * peer likes: stat() would follow it into that file, and one on FUSE or NFS
 * can block the caller without bound. readlink() only reads the link's
 * text, which the kernel writes from the open file's own name without
 * asking its file system; a socket's reads "socket:[INODE]".
 *
 * The pid is SO_PEERCRED's, taken when the peer connected: it could have
 * exited since and its number gone to another process that holds the
 * socket under that number. The peer still being there after the readlink
 * (rv_fd's pidfd) proves the number was its own all along: a number is not
 * given again while its process lives. Three system calls more, on a
 * verification that passed only. Without SO_PEERPIDFD the race stays open,
 * and only to a process of the user the first check let through.
 */
/* Whether the /proc fd link link_fd names (under dir, or absolute when
 * dir is AT_FDCWD) reads "socket:[inode]": 0, -EPERM, or -errno of the
 * readlink. Never followed (see below). */
static int link_is_socket(int dir, const char *link_path, ino_t inode)
{
	char want[32], link[64];
	ssize_t n = readlinkat(dir, link_path, link, sizeof(link));
	int w;

	if (n < 0)
		return -errno;
	w = snprintf(want, sizeof(want), "socket:[%llu]", (unsigned long long)inode);
	return n == w && memcmp(link, want, (size_t)n) == 0 ? 0 : -EPERM;
}

static int process_holds_socket(pid_t pid, uid_t uid, int fd, ino_t inode, int rv_fd)
{
	char path[64];
	int rc;

	if (fd < 0)
		return -EPERM;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, fd);
	rc = link_is_socket(AT_FDCWD, path, inode);
	if (rc == -EACCES && uid == 0)
		rc = 0;
	/* No such fd (any more): the caller tells a peer that closed its
	 * connection meanwhile from a liar (rendezvous.h). */
	else if (rc < 0 && rc != -EPERM)
		rc = rc == -ENOENT ? -ENOENT : -EPERM;
	/* Gone: its fds went with it, as -ENOENT says. */
	if (rc == 0 && !peer_still_there(rv_fd))
		rc = -ENOENT;
	return rc;
}

/*
 * The same proof without the fd's number: some fd of process pid is the
 * socket. Only for a peer of another user than the socket's owner, so a
 * stranger costs one listing of its fds. A peer we may not look at (a
 * non-dumpable child, another user's process) passes only if it is root.
 * Each link is read, never followed, as above: the peer chose what its
 * fds are.
 */
static int process_holds_inode(pid_t pid, uid_t uid, ino_t inode, int rv_fd)
{
	char path[64];
	struct dirent *de;
	DIR *dir;
	int rc = -EPERM;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return errno == EACCES && uid == 0 ? 0 : -EPERM;
	while (rc && (de = readdir(dir)) != NULL)
		if (de->d_name[0] != '.')
			rc = link_is_socket(dirfd(dir), de->d_name, inode) == 0 ? 0 : -EPERM;
	closedir(dir);
	if (rc == 0 && !peer_still_there(rv_fd))
		rc = -ENOENT;
	return rc;
}

/* What sock_diag says of the peer's TCP socket, asked once (rendezvous.h). */
static int owner_known(const struct shim_endpoint *peer_local, const struct shim_endpoint *peer_remote,
		       struct shim_rv_owner *owner)
{
	int rc;

	if (owner->known)
		return 0;
	rc = shim_diag_tcp_owner(peer_local, peer_remote, &owner->uid, &owner->inode);
	if (rc < 0)
		return rc;
	owner->known = true;
	return 0;
}

int shim_rv_verify_peer(int rv_fd, const struct shim_endpoint *peer_local,
			const struct shim_endpoint *peer_remote, int peer_tcp_fd, struct shim_rv_owner *owner)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int rc;

	if (REAL(getsockopt)(rv_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	rc = owner_known(peer_local, peer_remote, owner);
	if (rc < 0)
		return rc;
	/* Another user than the socket's owner may hold it all the same: a
	 * daemon's per-connection child that dropped to its own user after
	 * the accept (rsyncd's nobody, sshd's session), or a process it was
	 * passed to. Holding the very socket proves it, before the peer names
	 * its fd too: one of its fds is that socket. */
	if (peer_tcp_fd == SHIM_RV_USER_ONLY)
		return cred.uid == owner->uid ? 0 : process_holds_inode(cred.pid, cred.uid, owner->inode, rv_fd);
	return process_holds_socket(cred.pid, cred.uid, peer_tcp_fd, owner->inode, rv_fd);
}

int shim_rv_verify_socket(int sock_fd, pid_t pid, int peer_tcp_fd, const struct shim_endpoint *peer_local,
			  const struct shim_endpoint *peer_remote, struct shim_rv_owner *owner)
{
	struct stat st;
	int rc = owner_known(peer_local, peer_remote, owner);

	if (rc < 0)
		return rc;
	if (sock_fd < 0)
		return process_holds_socket(pid, (uid_t)-1, peer_tcp_fd, owner->inode, -1);
	if (fstat(sock_fd, &st) < 0)
		return -errno;
	return is_that_socket(&st, owner->inode);
}

int shim_rv_send_fds(int rv_fd, const void *msg, size_t len, const int *fds, unsigned nfds)
{
	struct iovec iov = { (void *)msg, len };
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(SHIM_RV_MAX_FDS * sizeof(int))];
	} control;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds > SHIM_RV_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	n = REAL(sendmsg)(rv_fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EPROTO;
}

int shim_rv_send(int rv_fd, const void *msg, size_t len, int pass_fd)
{
	return shim_rv_send_fds(rv_fd, msg, len, &pass_fd, pass_fd >= 0 ? 1 : 0);
}

/* Room for the most fds one message can carry: any fewer, and the kernel
 * itself would release the ones that did not fit, in our thread, where
 * one that blocks on release would stall the program (reaper.h). */
union rv_control {
	struct cmsghdr align;
	char buf[SHIM_SCM_SPACE];
};

/*
 * The fds one received message brought (mh, whose read returned n): the
 * first max_fds in fds_out (the rest -1), extra ones released. A truncated
 * message is malformed, and so is an fd that came with one: released
 * here, or every such message would leak one of our fds (any local user
 * can send them). Every release goes through the reaper: a peer's file may
 * block whoever drops it last. Returns n, or -EPROTO for a truncated
 * message.
 */
static ssize_t take_fds(struct msghdr *mh, ssize_t n, int *fds_out, unsigned max_fds)
{
	unsigned got = 0;

	for (unsigned i = 0; i < max_fds; i++)
		fds_out[i] = -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		for (size_t i = 0; i < count; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			/* Keep the ones asked for; extra ones are an attack or a bug. */
			if (got < max_fds)
				fds_out[got++] = fd;
			else
				shim_reap(fd);
		}
	}
	if (mh->msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		for (unsigned i = 0; i < got; i++) {
			shim_reap(fds_out[i]);
			fds_out[i] = -1;
		}
		return -EPROTO;
	}
	for (unsigned i = 0; i < got; i++)
		fds_out[i] = shim_rv_own_checked(fds_out[i]);
	return n;
}

ssize_t shim_rv_recv_fds(int rv_fd, void *buf, size_t len, int *fds_out, unsigned max_fds)
{
	struct iovec iov = { buf, len };
	union rv_control control;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };
	ssize_t n = REAL(recvmsg)(rv_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (n < 0) {
		for (unsigned i = 0; i < max_fds; i++)
			fds_out[i] = -1;
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
	return take_fds(&mh, n, fds_out, max_fds);
}

int shim_rv_recv_batch(int rv_fd, struct shim_rv_msg *msgs, unsigned count)
{
	struct mmsghdr mm[SHIM_RV_BATCH_MAX];
	struct iovec iov[SHIM_RV_BATCH_MAX];
	union rv_control control[SHIM_RV_BATCH_MAX];
	int n;

	if (count > SHIM_RV_BATCH_MAX)
		count = SHIM_RV_BATCH_MAX;
	memset(mm, 0, sizeof(mm[0]) * count);
	for (unsigned i = 0; i < count; i++) {
		iov[i] = (struct iovec){ msgs[i].raw, sizeof(msgs[i].raw) };
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
		mm[i].msg_hdr.msg_control = control[i].buf;
		mm[i].msg_hdr.msg_controllen = sizeof(control[i].buf);
	}
	/* MSG_DONTWAIT: what is queued, never a wait for the rest. */
	n = REAL(recvmmsg)(rv_fd, mm, count, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	for (int i = 0; i < n; i++)
		msgs[i].len = take_fds(&mm[i].msg_hdr, (ssize_t)mm[i].msg_len, msgs[i].fds, SHIM_RV_MAX_FDS);
	return n;
}

ssize_t shim_rv_recv(int rv_fd, void *buf, size_t len, int *fd_out)
{
	int fd;
	ssize_t n = shim_rv_recv_fds(rv_fd, buf, len, &fd, fd_out ? 1 : 0);

	if (!fd_out)
		return n;
	*fd_out = fd;
	if (fd == -EMFILE) {
		*fd_out = -1;
		return -EMFILE;
	}
	return n;
}

bool shim_rv_is_seqpacket(int fd)
{
	int type = 0, domain = 0;
	socklen_t len = sizeof(type);

	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET)
		return false;
	len = sizeof(domain);
	return REAL(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
}

#define RV_EXIT_WAIT_MS 100

/* The other end closed its rendezvous (it gave the handshake up). */
static bool peer_hung_up(int rv_fd)
{
	uint8_t b;

	return REAL(recv)(rv_fd, &b, 1, MSG_DONTWAIT | MSG_PEEK) == 0;
}

/*
 * A failed check of the fd the peer named: a liar, or a peer that is gone.
 * A peer that closes its connection closes the rendezvous first. One that
 * exits with the connection open (redis-server on SHUTDOWN) leaves that to
 * the kernel, which closes its fds in their order: its TCP socket's number
 * can be gone (-ENOENT) a moment before its rendezvous closes (the sockets
 * are released after the whole fd table is gone, and a busy host may run
 * the exiting process late). Wait for that hang-up, RV_EXIT_WAIT_MS at
 * most and only after -ENOENT: a live liar costs its own connection that
 * long once, a peer that went away much less.
 */
bool shim_rv_peer_gone(int rv_fd, int rc)
{
	struct pollfd p = { .fd = rv_fd, .events = POLLIN | POLLRDHUP };

	if (peer_hung_up(rv_fd))
		return true;
	if (rc != -ENOENT)
		return false;
	REAL(poll)(&p, 1, RV_EXIT_WAIT_MS);
	return peer_hung_up(rv_fd);
}

int shim_rv_own_checked(int fd)
{
	if (fd < 0 || !shim_fd_in_reserve(fd))
		return fd;
	shim_reap(fd);
	return -EMFILE;
}
