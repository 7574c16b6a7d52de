/* sock_diag lookup of one TCP socket by its 4-tuple; see diag.h. */
#include "diag.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "real.h"

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

static int query(int family, const struct shim_endpoint *src, const struct shim_endpoint *dst,
		 uid_t *uid, ino_t *inode)
{
	struct diag_request rq = { 0 };
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	union {
		struct nlmsghdr nlh;
		char raw[8192];
	} answer;
	ssize_t n;
	int fd, rc = -ENOENT;

	fd = REAL(socket)(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	rq.nlh.nlmsg_len = sizeof(rq);
	rq.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	rq.nlh.nlmsg_flags = NLM_F_REQUEST;
	rq.req.sdiag_family = (uint8_t)family;
	rq.req.sdiag_protocol = IPPROTO_TCP;
	rq.req.idiag_states = ~0u;
	fill_id(&rq.req.id, family, src, dst);
	if (REAL(sendto)(fd, &rq, sizeof(rq), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		rc = -errno;
		goto out;
	}
	struct timeval tv = { .tv_sec = 1 };

	REAL(setsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = REAL(recv)(fd, &answer, sizeof(answer), 0);
	if (n < 0) {
		rc = -errno;
		goto out;
	}
	for (struct nlmsghdr *h = &answer.nlh; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
		if (h->nlmsg_type == NLMSG_ERROR || h->nlmsg_type == NLMSG_DONE)
			break;
		if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
			continue;
		const struct inet_diag_msg *msg = NLMSG_DATA(h);

		*uid = msg->idiag_uid;
		*inode = msg->idiag_inode;
		rc = 0;
		break;
	}
out:
	REAL(close)(fd);
	return rc;
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
