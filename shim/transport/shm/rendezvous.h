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
#include <sys/types.h>

#include "tuple.h"

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

/* One message out, with an optional fd (-1: none). Nonblocking. */
int shim_rv_send(int rv_fd, const void *msg, size_t len, int pass_fd);
/*
 * One message in, nonblocking. Returns its length, 0 on EOF, -EAGAIN, or
 * -errno; a received fd goes to *fd_out (-1 if none; closed if fd_out NULL).
 */
ssize_t shim_rv_recv(int rv_fd, void *buf, size_t len, int *fd_out);

/* Whether the peer on rv_fd gave the handshake up (closed its end). rc:
 * the verification's result; after -ENOENT (the TCP fd it named is gone)
 * waits a moment for an exiting peer's rendezvous to close too. */
bool shim_rv_peer_gone(int rv_fd, int rc);

#endif
