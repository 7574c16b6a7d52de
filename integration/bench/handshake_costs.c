/*
 * handshake_costs.c: what the kernel calls of one shm upgrade cost on this
 * machine, each alone in a loop (handshake_costs.sh runs it). The upgrade
 * makes each of these a few times per connection (shim/PROTOCOL.md, "Pair
 * channel"); with the three one-way wake-ups its messages need (HINT, COMMIT,
 * the client's SWITCH frame), they are the floor under "first data call to
 * both directions switched". Prints one line per call: name and
 * microseconds per call (median of 5 runs).
 */
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Runs BODY n times, 5 rounds; prints the median per call. */
#define TIME(name, n, ...)                                                    \
	do {                                                                  \
		double r[5];                                                  \
		for (int k = 0; k < 5; k++) {                                 \
			double t0 = now_us();                                 \
			for (int i_ = 0; i_ < (n); i_++) {                    \
				__VA_ARGS__;                                  \
			}                                                     \
			r[k] = (now_us() - t0) / (n);                         \
		}                                                             \
		qsort(r, 5, sizeof(r[0]), cmp);                               \
		printf("bench handshake_cost %-34s %6.2f us\n", name, r[2]); \
	} while (0)

static void die(const char *what)
{
	perror(what);
	exit(1);
}

int main(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) }, cl, sv;
	socklen_t sl = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0), s, sp[2];

	if (l < 0 || c < 0 || bind(l, (void *)&sa, sizeof(sa)) || listen(l, 4) || getsockname(l, (void *)&sa, &sl) ||
	    connect(c, (void *)&sa, sizeof(sa)) || (s = accept(l, NULL, NULL)) < 0)
		die("loopback connection");
	sl = sizeof(cl);
	getsockname(c, (void *)&cl, &sl);
	sl = sizeof(sv);
	getpeername(c, (void *)&sv, &sl);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp))
		die("socketpair");

	struct stat st;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/fd/0", (int)getppid());
	TIME("getppid (a bare system call)", 200000, syscall(SYS_getppid));
	TIME("fstat (the kept-fd check)", 200000, fstat(c, &st));
	TIME("stat /proc/<peer>/fd/<n> (S's proof)", 20000, stat(path, &st));

	int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} req;
	char buf[512];

	memset(&req, 0, sizeof(req));
	req.h.nlmsg_len = sizeof(req);
	req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req.h.nlmsg_flags = NLM_F_REQUEST;
	req.r.sdiag_family = AF_INET;
	req.r.sdiag_protocol = IPPROTO_TCP;
	req.r.idiag_states = ~0u;
	req.r.id.idiag_sport = cl.sin_port;
	req.r.id.idiag_dport = sv.sin_port;
	req.r.id.idiag_src[0] = cl.sin_addr.s_addr;
	req.r.id.idiag_dst[0] = sv.sin_addr.s_addr;
	req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = ~0u;
	if (nl < 0)
		die("netlink");
	TIME("sock_diag lookup of one socket", 20000, send(nl, &req, sizeof(req), 0); recv(nl, buf, sizeof(buf), 0));

	struct ucred uc;

	TIME("SO_PEERCRED", 200000, sl = sizeof(uc); getsockopt(sp[0], SOL_SOCKET, SO_PEERCRED, &uc, &sl));
	TIME("socketpair, both ends closed", 20000, int q[2]; if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, q) == 0) {
		close(q[0]);
		close(q[1]);
	});

	char d = 'x', cb[CMSG_SPACE(sizeof(int))];
	struct iovec io = { &d, 1 };

	TIME("message with one fd, received, fd closed", 20000, struct msghdr m = { 0 }; m.msg_iov = &io;
	     m.msg_iovlen = 1; m.msg_control = cb; m.msg_controllen = sizeof(cb);
	     struct cmsghdr *h = CMSG_FIRSTHDR(&m); h->cmsg_level = SOL_SOCKET; h->cmsg_type = SCM_RIGHTS;
	     h->cmsg_len = CMSG_LEN(sizeof(int)); memcpy(CMSG_DATA(h), &c, sizeof(int)); sendmsg(sp[0], &m, 0);
	     m.msg_controllen = sizeof(cb); recvmsg(sp[1], &m, 0); int got; h = CMSG_FIRSTHDR(&m);
	     if (h) { memcpy(&got, CMSG_DATA(h), sizeof(got)); close(got); });
	TIME("message without fds, received", 50000, send(sp[0], &d, 1, 0); recv(sp[1], &d, 1, 0));
	TIME("TCP send of 24 bytes, received (a frame)", 50000, send(c, buf, 24, 0); recv(s, buf, 24, MSG_WAITALL));
	return 0;
}
