/* sock_diag lookup of one TCP socket by its 4-tuple; see diag.h. */
#include "diag.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdtable.h"
#include "real.h"
#include "self.h"

struct diag_request {
	struct nlmsghdr nlh;
	struct inet_diag_req_v2 req;
};

static void fill_id(struct inet_diag_sockid *id, int family, const struct shim_endpoint *src,
		    const struct shim_endpoint *dst)
{
	memset(id, 0, sizeof(*id));
	id->idiag_sport = htons(src->port);
	id->idiag_dport = htons(dst->port);
	if (family == AF_INET) {
		memcpy(id->idiag_src, src->addr + 12, 4);
		memcpy(id->idiag_dst, dst->addr + 12, 4);
	} else {
		memcpy(id->idiag_src, src->addr, 16);
		memcpy(id->idiag_dst, dst->addr, 16);
	}
	id->idiag_cookie[0] = INET_DIAG_NOCOOKIE;
	id->idiag_cookie[1] = INET_DIAG_NOCOOKIE;
}

/*
 * One netlink socket per process, kept (a socket() and a close() were a
 * third of a query's cost, and each upgrade asks at both ends). One query
 * at a time, under diag_lock; each carries its own sequence number, so an
 * answer left behind by one that timed out is skipped. A fork's child
 * opens its own: its copy shares the parent's socket, and an answer would
 * go to whichever process read first.
 */
static pthread_mutex_t diag_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_owned_fd kept = { .fd = -1 };
static pid_t kept_pid;
static uint32_t kept_seq;

/* Under diag_lock: the kept socket, opened when there is none. One whose
 * number the shim may not keep (near the fd limit: fdtable.h) serves this
 * query only: *transient, the caller closes it. */
static int diag_socket(bool *transient)
{
	struct timeval tv = { .tv_sec = 1 };
	int fd;

	*transient = false;
	if (kept.fd >= 0 && kept_pid == shim_self_pid() && shim_owned_still(&kept))
		return kept.fd;
	kept.fd = -1;
	fd = REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	if (REAL(setsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
		int rc = -errno;

		REAL(close)(fd);
		return rc;
	}
	*transient = !shim_fd_keepable(fd) || shim_owned_take(&kept, fd) < 0;
	if (!*transient)
		kept_pid = shim_self_pid();
	return fd;
}

/* Under diag_lock, after a failed exchange: no later answer to it may be
 * taken for the next query's. */
static void diag_forget(int fd, bool transient)
{
	if (transient)
		REAL(close)(fd);
	else
		shim_owned_close(&kept);
}

/*
 * The states of a socket a live process holds for a connection that got as
 * far as an upgrade: the upgrade starts at a data call on an accepted or
 * connected socket, so the handshake is over, and either end may have shut
 * its writing side since (the shim upgrades half-closed connections too):
 * FIN_WAIT1 and FIN_WAIT2 after its own shutdown, CLOSE_WAIT after the
 * other's, LAST_ACK and CLOSING when both did. Everything else names no
 * such socket: LISTEN is what the kernel answers with when no connection
 * has the tuple (any user may listen on the port); TIME_WAIT and a
 * SYN_RECV request are the kernel's own leftovers with no owner (uid and
 * inode 0); a connect still in SYN_SENT has no peer to upgrade with. A TCP
 * Fast Open child is accepted in SYN_RECV before the last ACK of the
 * handshake: refusing it costs that connection an upgrade tried within its
 * first round trip, and it stays on TCP.
 */
static bool connection_state(uint8_t state)
{
	switch (state) {
	case TCP_ESTABLISHED:
	case TCP_FIN_WAIT1:
	case TCP_FIN_WAIT2:
	case TCP_CLOSE_WAIT:
	case TCP_LAST_ACK:
	case TCP_CLOSING:
		return true;
	default:
		return false;
	}
}

static void answer_endpoint(int family, const __be32 *addr, __be16 port, struct shim_endpoint *ep)
{
	memset(ep, 0, sizeof(*ep));
	if (family == AF_INET) {
		ep->addr[10] = ep->addr[11] = 0xff;
		memcpy(ep->addr + 12, addr, 4);
	} else {
		memcpy(ep->addr, addr, 16);
	}
	ep->port = ntohs(port);
}

/*
 * Whether the kernel's answer is a connection with exactly the tuple asked
 * for. Its exact lookup is not exact: with no connection on the tuple it
 * falls back to the listener on the local port, whoever owns it, so the
 * state alone is not trusted either: the answer's own addresses must be
 * the ones asked for. The answer's family says how they are laid out (a
 * v4-mapped query can name an AF_INET socket, an AF_INET one a dual-stack
 * AF_INET6 socket). An inode of 0 is a socket no process holds any more.
 */
static bool is_the_connection(const struct inet_diag_msg *msg, const struct shim_endpoint *src,
			      const struct shim_endpoint *dst)
{
	struct shim_endpoint got_src, got_dst;

	if (!connection_state(msg->idiag_state) || msg->idiag_inode == 0)
		return false;
	if (msg->idiag_family != AF_INET && msg->idiag_family != AF_INET6)
		return false;
	answer_endpoint(msg->idiag_family, msg->id.idiag_src, msg->id.idiag_sport, &got_src);
	answer_endpoint(msg->idiag_family, msg->id.idiag_dst, msg->id.idiag_dport, &got_dst);
	return shim_endpoint_equal(&got_src, src) && shim_endpoint_equal(&got_dst, dst);
}

static int query(int family, const struct shim_endpoint *src, const struct shim_endpoint *dst,
		 uid_t *uid, ino_t *inode)
{
	struct diag_request rq = { 0 };
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	union {
		struct nlmsghdr nlh;
		char raw[8192];
	} answer;
	int fd, rc = -ENOENT;
	bool transient;

	pthread_mutex_lock(&diag_lock);
	fd = diag_socket(&transient);
	if (fd < 0) {
		rc = fd;
		goto out;
	}
	rq.nlh.nlmsg_len = sizeof(rq);
	rq.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	rq.nlh.nlmsg_flags = NLM_F_REQUEST;
	rq.nlh.nlmsg_seq = ++kept_seq;
	rq.req.sdiag_family = (uint8_t)family;
	rq.req.sdiag_protocol = IPPROTO_TCP;
	rq.req.idiag_states = ~0u;
	fill_id(&rq.req.id, family, src, dst);
	if (REAL(sendto)(fd, &rq, sizeof(rq), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		rc = -errno;
		diag_forget(fd, transient);
		goto out;
	}
	for (bool answered = false; !answered;) {
		ssize_t n = REAL(recv)(fd, &answer, sizeof(answer), 0);

		if (n < 0) {
			rc = -errno;
			diag_forget(fd, transient);
			goto out;
		}
		for (struct nlmsghdr *h = &answer.nlh; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_seq != rq.nlh.nlmsg_seq)
				continue; /* an answer to an earlier query */
			answered = true;
			if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY ||
			    h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
				break;
			const struct inet_diag_msg *msg = NLMSG_DATA(h);

			if (!is_the_connection(msg, src, dst))
				break; /* -ENOENT: no connection has the tuple */
			*uid = msg->idiag_uid;
			*inode = msg->idiag_inode;
			rc = 0;
			break;
		}
	}
	if (transient)
		REAL(close)(fd);
out:
	pthread_mutex_unlock(&diag_lock);
	return rc;
}

void shim_diag_atfork_prepare(void)
{
	pthread_mutex_lock(&diag_lock);
}

void shim_diag_atfork_parent(void)
{
	pthread_mutex_unlock(&diag_lock);
}

void shim_diag_atfork_child(void)
{
	/* The parent's socket: this process's copy goes, its own comes when
	 * it first asks. */
	shim_owned_close(&kept);
	pthread_mutex_unlock(&diag_lock);
}

int shim_diag_tcp_owner(const struct shim_endpoint *src, const struct shim_endpoint *dst, uid_t *uid,
			ino_t *inode)
{
	int rc = -ENOENT;

	/* The peer's socket may be AF_INET, or AF_INET6 holding v4-mapped
	 * addresses; ask both ways for an IPv4 tuple. */
	if (shim_endpoint_is_v4(src) && shim_endpoint_is_v4(dst))
		rc = query(AF_INET, src, dst, uid, inode);
	if (rc == -ENOENT)
		rc = query(AF_INET6, src, dst, uid, inode);
	return rc;
}
