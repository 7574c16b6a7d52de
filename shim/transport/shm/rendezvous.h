/*
 * The rendezvous: a short-lived SOCK_SEQPACKET abstract UNIX socket, named
 * by the TCP connection's 4-tuple, that C listens on and S connects to.
 * Abstract names live in the network namespace, like the 4-tuple itself.
 * Anyone in the namespace can bind or connect to a name, so neither side
 * trusts the other until shim_rv_verify_peer() has passed.
 */
#ifndef RDMASHIM_RENDEZVOUS_H
#define RDMASHIM_RENDEZVOUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "real.h"
#include "tuple.h"
#include "wire.h"

/* C: listens on the name of (client endpoint, server endpoint). */
int shim_rv_listen(const struct shim_endpoint *client, const struct shim_endpoint *server);
/* C: takes one pending connection, or -EAGAIN. */
int shim_rv_accept(int listen_fd);
/* S: connects to the name; -ENOENT/-ECONNREFUSED when C has no listener. */
int shim_rv_connect(const struct shim_endpoint *client, const struct shim_endpoint *server);

/*
 * Checks that the process at the other end of rv_fd runs as the user that
 * owns the TCP socket bound to peer_local and connected to peer_remote and,
 * unless peer_tcp_fd is SHIM_RV_USER_ONLY, that its fd peer_tcp_fd is that
 * very socket (same inode as sock_diag reports). The user check comes first,
 * before the peer has said anything; the socket check once it named its fd.
 * A peer of another user passes the first only if one of its fds is that
 * socket (a daemon's child that dropped privileges after the accept).
 * Returns 0, or -EPERM on a mismatch (a spoofing attempt), -ENOENT when the
 * peer holds no fd of that number (it may have closed the connection just
 * now), or -errno.
 */
#define SHIM_RV_USER_ONLY (-2)
/*
 * What sock_diag said of the peer's TCP socket. Its owner and inode can not
 * change while our end of the connection lives, so it is asked once per
 * connection: a flood of strangers on the rendezvous costs no netlink query
 * each (zero-initialise; filled by the first verification).
 */
struct shim_rv_owner {
	bool known;
	uid_t uid;
	ino_t inode;
};
int shim_rv_verify_peer(int rv_fd, const struct shim_endpoint *peer_local,
			const struct shim_endpoint *peer_remote, int peer_tcp_fd, struct shim_rv_owner *owner);

/*
 * The same check of a socket the peer passed us (SCM_RIGHTS): sock_fd must
 * be the TCP socket bound to peer_local and connected to peer_remote (same
 * inode). With no sock_fd (none came: we are near our fd limit), process
 * pid's fd peer_tcp_fd must be. 0, -EPERM, or -errno as above.
 */
int shim_rv_verify_socket(int sock_fd, pid_t pid, int peer_tcp_fd, const struct shim_endpoint *peer_local,
			  const struct shim_endpoint *peer_remote, struct shim_rv_owner *owner);

/* A peer's fd kept for its number: released through the reaper (reaper.h)
 * and -EMFILE when the process is near its fd limit (fdtable.h). */
int shim_rv_own_checked(int fd);

/* One message out, with an optional fd (-1: none). Nonblocking. */
int shim_rv_send(int rv_fd, const void *msg, size_t len, int pass_fd);
/* The same with up to SHIM_RV_MAX_FDS fds, in order. */
#define SHIM_RV_MAX_FDS 2
int shim_rv_send_fds(int rv_fd, const void *msg, size_t len, const int *fds, unsigned nfds);
/*
 * One message in, nonblocking. Returns its length, 0 on EOF, -EAGAIN, or
 * -errno; a received fd goes to *fd_out (-1 if none; closed if fd_out NULL).
 */
ssize_t shim_rv_recv(int rv_fd, void *buf, size_t len, int *fd_out);
/* The same keeping up to max_fds fds, in order (-1 where none came, -EMFILE
 * where one came but the process is near its fd limit: closed). */
ssize_t shim_rv_recv_fds(int rv_fd, void *buf, size_t len, int *fds_out, unsigned max_fds);

/* One message of a batch: its bytes (len: as shim_rv_recv_fds returns,
 * -EPROTO for a truncated one) and its fds (-1: none; -EMFILE: one came
 * but the process is near its fd limit: closed). */
struct shim_rv_msg {
	uint8_t raw[SHIM_MSG_MAX + 1];
	ssize_t len;
	int fds[SHIM_RV_MAX_FDS];
};
#define SHIM_RV_BATCH_MAX 8
/* Up to count (at most SHIM_RV_BATCH_MAX) messages queued on rv_fd, in
 * one system call that never waits: how many came, or -EAGAIN (none), or
 * -errno. A message of 0 bytes is the peer's end (EOF); the messages
 * after it in the batch are too. */
int shim_rv_recv_batch(int rv_fd, struct shim_rv_msg *msgs, unsigned count);

/* Whether fd is a unix SEQPACKET socket: what a rendezvous, a pair's
 * socketpair end or a bell line must be (a stream socket would merge and
 * split the messages; another family's, connect our bells elsewhere). */
bool shim_rv_is_seqpacket(int fd);

/* Whether the peer on rv_fd gave the handshake up (closed its end). rc:
 * the verification's result; after -ENOENT (the TCP fd it named is gone)
 * waits a moment for an exiting peer's rendezvous to close too. */
bool shim_rv_peer_gone(int rv_fd, int rc);

/* A pidfd of the process that connected (or listened on) rv_fd
 * (SO_PEERPIDFD, Linux 6.5), or -errno. */
int shim_rv_peer_pidfd(int rv_fd);

#endif
