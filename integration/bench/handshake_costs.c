/*
 * handshake_costs.c: what the kernel calls of one shm upgrade cost on this
 * machine, each alone in a loop (handshake_costs.sh runs it). The upgrade
 * makes each of these a few times per connection (shim/PROTOCOL.md, "Pair
 * channel"); with the three one-way wake-ups its messages need (HINT, COMMIT,
 * the client's SWITCH frame), they are the floor under "first data call to
 * both directions switched". Prints one line per call: name and
 * microseconds per call (median of 5 runs).
 *
 * Then the floor itself (floor_run): two processes on one loopback
 * connection and one unix channel between them, no shim, run the least an
 * upgrade of the design can do, one message each way with each
 * end's TCP socket passed and checked against sock_diag, then both switch
 * frames, and print the span of each (median, p90) with the waits spinning
 * and sleeping. Whatever the shim's own bookkeeping costs comes on top.
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

struct diag_req {
	struct nlmsghdr h;
	struct inet_diag_req_v2 r;
};

/* A sock_diag request for the one TCP socket bound to src and connected to dst. */
static void diag_req_init(struct diag_req *req, const struct sockaddr_in *src, const struct sockaddr_in *dst)
{
	memset(req, 0, sizeof(*req));
	req->h.nlmsg_len = sizeof(*req);
	req->h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	req->h.nlmsg_flags = NLM_F_REQUEST;
	req->r.sdiag_family = AF_INET;
	req->r.sdiag_protocol = IPPROTO_TCP;
	req->r.idiag_states = ~0u;
	req->r.id.idiag_sport = src->sin_port;
	req->r.id.idiag_dport = dst->sin_port;
	req->r.id.idiag_src[0] = src->sin_addr.s_addr;
	req->r.id.idiag_dst[0] = dst->sin_addr.s_addr;
	req->r.id.idiag_cookie[0] = req->r.id.idiag_cookie[1] = ~0u;
}

/* The inode sock_diag names for req's socket, or 0. */
static unsigned diag_inode(int nl, const struct diag_req *req)
{
	char buf[512];
	const struct nlmsghdr *h = (const void *)buf;

	if (send(nl, req, sizeof(*req), 0) < 0 || recv(nl, buf, sizeof(buf), 0) < (ssize_t)NLMSG_LENGTH(sizeof(struct inet_diag_msg)) ||
	    h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
		return 0;
	return ((const struct inet_diag_msg *)NLMSG_DATA(h))->idiag_inode;
}

/* What one timed exchange does (floor_run). */
enum floor_shape {
	FLOOR_HOPS,	/* one bare message each way: the two wake-ups alone */
	FLOOR_PROVEN,	/* each message passes its end's TCP socket, checked by sock_diag */
	FLOOR_SWITCHED, /* that, then each end's switch frame on TCP, read by the other */
};

/* A wait that spins (MSG_DONTWAIT until something comes) or sleeps. */
static ssize_t floor_recvmsg(int fd, struct msghdr *m, int spin)
{
	ssize_t n;

	while ((n = recvmsg(fd, m, spin ? MSG_DONTWAIT : 0)) < 0 && spin)
		;
	return n;
}

static void floor_tcp_read(int fd, char *buf, size_t len, int spin)
{
	size_t got = 0;
	ssize_t n;

	while (got < len)
		if ((n = recv(fd, buf + got, len - got, spin ? MSG_DONTWAIT : 0)) > 0)
			got += (size_t)n;
		else if (n == 0 || !spin)
			die("frame");
}

/* Sends one byte on the unix channel, passing fd when fd >= 0. */
static void floor_send(int ch, int fd)
{
	char d = 'x', cb[CMSG_SPACE(sizeof(int))];
	struct iovec io = { &d, 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1 };

	if (fd >= 0) {
		m.msg_control = cb;
		m.msg_controllen = sizeof(cb);
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(h), &fd, sizeof(int));
	}
	if (sendmsg(ch, &m, 0) != 1)
		die("sendmsg");
}

/* Receives one one-byte message: the fd passed with it, or -1. */
static int floor_recv(int ch, int spin)
{
	char d, cb[CMSG_SPACE(sizeof(int))];
	struct iovec io = { &d, 1 };
	struct msghdr m = { .msg_iov = &io, .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof(cb) };
	struct cmsghdr *h;
	int got = -1;

	if (floor_recvmsg(ch, &m, spin) != 1)
		die("recvmsg");
	if ((h = CMSG_FIRSTHDR(&m)) && h->cmsg_type == SCM_RIGHTS)
		memcpy(&got, CMSG_DATA(h), sizeof(got));
	return got;
}

/*
 * Receives one message; when shape passes sockets, checks the one passed
 * against the inode sock_diag names for the peer's end of the connection
 * (the proof the issue names) and closes it.
 */
static void floor_take(int ch, int nl, const struct diag_req *peer, enum floor_shape shape, int spin)
{
	struct stat st;
	int got = floor_recv(ch, spin);

	if (shape == FLOOR_HOPS)
		return;
	if (got < 0)
		die("no socket passed");
	if (fstat(got, &st) || st.st_ino != diag_inode(nl, peer))
		die("the socket passed is not the peer's end");
	close(got);
}

#define FLOOR_ROUNDS 3000

/*
 * C and S (a child) run FLOOR_ROUNDS exchanges of each shape, with spinning
 * and with sleeping waits. C stamps the start before its message; each end
 * stamps when its last step is done (its answer sent or taken, or the
 * other's frame read: each writes its own frame as soon as it may, before
 * it reads the other's); S's stamp goes through a shared page and S says it
 * is done on the channel, outside the span. The span ends at the later.
 */
static void floor_run(int c, int s, const struct sockaddr_in *cl, const struct sockaddr_in *sv)
{
	static const char *const shape_name[] = { "one message each way", "each passing its TCP socket, checked",
						  "that and both switch frames" };
	volatile double *end = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int ch[2], nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	struct diag_req c_end, s_end;
	char frame[24] = { 0 };
	pid_t pid;

	if (end == MAP_FAILED || nl < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, ch))
		die("floor set-up");
	diag_req_init(&c_end, cl, sv);
	diag_req_init(&s_end, sv, cl);
	if ((pid = fork()) < 0)
		die("fork");
	if (pid == 0) {
		close(c);
		for (int spin = 1; spin >= 0; spin--)
			for (enum floor_shape shape = FLOOR_HOPS; shape <= FLOOR_SWITCHED; shape++)
				for (int i = 0; i < FLOOR_ROUNDS; i++) {
					floor_take(ch[1], nl, &c_end, shape, spin);
					floor_send(ch[1], shape == FLOOR_HOPS ? -1 : s);
					if (shape == FLOOR_SWITCHED) {
						if (send(s, frame, sizeof(frame), 0) != sizeof(frame))
							die("frame");
						floor_tcp_read(s, frame, sizeof(frame), spin);
					}
					*end = now_us();
					floor_send(ch[1], -1);
				}
		_exit(0);
	}
	static double span[FLOOR_ROUNDS];
	for (int spin = 1; spin >= 0; spin--)
		for (enum floor_shape shape = FLOOR_HOPS; shape <= FLOOR_SWITCHED; shape++) {
			for (int i = 0; i < FLOOR_ROUNDS; i++) {
				double t0 = now_us();

				floor_send(ch[0], shape == FLOOR_HOPS ? -1 : c);
				floor_take(ch[0], nl, &s_end, shape, spin);
				if (shape == FLOOR_SWITCHED) {
					if (send(c, frame, sizeof(frame), 0) != sizeof(frame))
						die("frame");
					floor_tcp_read(c, frame, sizeof(frame), spin);
				}
				double c_end = now_us();

				floor_take(ch[0], nl, NULL, FLOOR_HOPS, spin);
				span[i] = (*end > c_end ? *end : c_end) - t0;
			}
			qsort(span, FLOOR_ROUNDS, sizeof(span[0]), cmp);
			printf("bench upgrade_floor %-38s %s median %6.2f us p90 %6.2f us\n", shape_name[shape],
			       spin ? "spinning" : "sleeping", span[FLOOR_ROUNDS / 2], span[FLOOR_ROUNDS * 9 / 10]);
		}
	if (waitpid(pid, NULL, 0) != pid)
		die("waitpid");
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
	struct diag_req req;
	char buf[512];

	diag_req_init(&req, &cl, &sv);
	if (nl < 0)
		die("netlink");
	TIME("sock_diag lookup of one socket", 20000, send(nl, &req, sizeof(req), 0); recv(nl, buf, sizeof(buf), 0));

	struct ucred uc;

	TIME("SO_PEERCRED", 200000, sl = sizeof(uc); getsockopt(sp[0], SOL_SOCKET, SO_PEERCRED, &uc, &sl));
	TIME("socketpair, both ends closed", 20000, int q[2]; if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, q) == 0) {
		close(q[0]);
		close(q[1]);
	});

	char d = 'x';

	TIME("message with one fd, received, fd closed", 20000, floor_send(sp[0], c); int got = floor_recv(sp[1], 0);
	     if (got >= 0) close(got));
	TIME("message without fds, received", 50000, send(sp[0], &d, 1, 0); recv(sp[1], &d, 1, 0));
	TIME("TCP send of 24 bytes, received (a frame)", 50000, send(c, buf, 24, 0); recv(s, buf, 24, MSG_WAITALL));
	floor_run(c, s, &cl, &sv);
	return 0;
}
