/* Small helpers of the hostile peer: output, names, addresses, waits. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"

struct opts o = { .mode = "honest", .payload = 64 * 1024, .seconds = 2, .wait_ms = 4000, .procs = 4 };
struct state st = { .tcp = -1, .rv = -1 };

int is_mode(const char *m)
{
	return !strcmp(o.mode, m);
}

long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void say(const char *fmt, const char *arg)
{
	printf("hostile_shm: ");
	printf(fmt, arg);
	printf("\n");
}

void result(void)
{
	printf("RESULT role=%s mode=%s reached=%s sent=%llu echoed=%llu good=%llu never_sent=%llu foreign=%llu "
	       "oob=%llu parked=%llu end=%s\n",
	       o.role, o.mode, st.reached ? "yes" : "no", (unsigned long long)st.sent,
	       (unsigned long long)st.echoed, (unsigned long long)st.good, (unsigned long long)st.never_sent,
	       (unsigned long long)st.foreign, (unsigned long long)st.oob, (unsigned long long)st.parked,
	       st.reset ? "reset" : st.eof ? "eof" : "open");
	exit(st.foreign || st.never_sent || st.oob ? 3 : 0);
}

void fail_setup(const char *what)
{
	printf("hostile_shm: setup: %s (%s)\n", what, errno ? strerror(errno) : "-");
	printf("RESULT role=%s mode=%s reached=no setup_failed\n", o.role, o.mode);
	exit(1);
}

void random_bytes(void *buf, size_t n)
{
	if (getrandom(buf, n, 0) != (ssize_t)n)
		memset(buf, 0x5a, n);
}

/* The rendezvous name (shim/rendezvous.c): both endpoints, v4-mapped. */
/* ---- endpoints and the rendezvous name (shim/rendezvous.c) ---- */
socklen_t rv_name(struct sockaddr_un *sun, const struct sockaddr_in *c, const struct sockaddr_in *s)
{
	static const char hex[] = "0123456789abcdef";
	const struct sockaddr_in *eps[2] = { c, s };
	char *p = sun->sun_path + 1;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	p += sprintf(p, "rdmashim1/");
	for (int e = 0; e < 2; e++) {
		uint8_t raw[18] = { [10] = 0xff, [11] = 0xff };

		memcpy(raw + 12, &eps[e]->sin_addr, 4);
		memcpy(raw + 16, &eps[e]->sin_port, 2); /* already big-endian */
		for (size_t i = 0; i < sizeof(raw); i++) {
			*p++ = hex[raw[i] >> 4];
			*p++ = hex[raw[i] & 15];
		}
	}
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - sun->sun_path));
}

/* ---- the port beacon (shim/PROTOCOL.md "Port beacon") ---- */
int hold_beacon(uint16_t port)
{
	struct sockaddr_un sun;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), n;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	n = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "rdmashim1/port/%04x", port);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sun, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

int parse_addr(const char *text, struct sockaddr_in *sin)
{
	char host[64];
	const char *colon = strrchr(text, ':');

	if (!colon || (size_t)(colon - text) >= sizeof(host))
		return -1;
	memcpy(host, text, (size_t)(colon - text));
	host[colon - text] = '\0';
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)atoi(colon + 1));
	return inet_pton(AF_INET, host, &sin->sin_addr) == 1 ? 0 : -1;
}

/* ---- blocking-with-deadline helpers ---- */
int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };

	return poll(&p, 1, ms) > 0;
}

/*
 * One rendezvous message carrying fd (and, if lie, by mode extra fds or padding):
 * trunc pads it to 100 bytes (more than any receiver's buffer: MSG_TRUNC),
 * ctrunc attaches 8 fds (more than its control buffer: MSG_CTRUNC),
 * extra_fds 3. The extra fds are memfds named "hostile-extra", so a leak
 * shows in the victim's /proc/<pid>/fd.
 */
static int silent_listener(void);
static int lingering_fd(void);

/* One message with nfds (at most 8) fds, in order; 0 or -1. */
static int send_fds(int sock, const void *msg, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(8 * sizeof(int))];
	} control;
	struct iovec iov = { (void *)msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds) {
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		memset(control.buf, 0, sizeof(control.buf));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

int send_fd_pair(int sock, const void *msg, size_t len, int fd0, int fd1)
{
	int fds[2] = { fd0, fd1 };

	return send_fds(sock, msg, len, fds, 2);
}

/*
 * The message, with lingering sockets (made first: it takes a while) in
 * the LINGERING places, sent by a thread of ours that closes its copies
 * right after the send, as an attacker would: the message in flight holds
 * them then, and the victim's release is the last. Should the victim be
 * quicker, that thread's close is the last and blocks it alone (our exit
 * ends it: the kernel never lingers for an exiting process). We wait for
 * the send, not the close. 0 or -1.
 */
struct lingering_send {
	int sock, nfds, fds[8], rc;
	const void *msg;
	size_t len;
	int sent[2]; /* a pipe: the send's result comes through it */
};

static void *lingering_sender(void *arg)
{
	struct lingering_send *ls = arg;
	int made[8], rc;

	for (int i = 0; i < ls->nfds; i++)
		made[i] = ls->fds[i] == LINGERING ? lingering_fd() : ls->fds[i];
	rc = send_fds(ls->sock, ls->msg, ls->len, made, ls->nfds);
	if (rc < 0)
		fprintf(stderr, "hostile_shm: a message with blocking fds could not be sent: %s\n", strerror(errno));
	if (write(ls->sent[1], &rc, sizeof(rc)) != sizeof(rc))
		rc = -1;
	for (int i = 0; i < ls->nfds; i++)
		if (ls->fds[i] == LINGERING)
			close(made[i]);
	return NULL;
}

static int send_fds_lingering(int sock, const void *msg, size_t len, const int *fds, int nfds)
{
	/* Lives as long as the process: a sender may still sit in its close. */
	struct lingering_send *ls = calloc(1, sizeof(*ls));
	pthread_t t;
	int rc = -1;

	if (!ls || pipe(ls->sent) < 0)
		return -1;
	silent_listener(); /* one receiver, made here, for all senders */
	ls->sock = sock;
	ls->msg = msg;
	ls->len = len;
	ls->nfds = nfds;
	memcpy(ls->fds, fds, sizeof(int) * (size_t)nfds);
	if (pthread_create(&t, NULL, lingering_sender, ls) != 0)
		return -1;
	pthread_detach(t);
	/* The result comes before the sender's closes: one that blocks is a
	 * victim that released first (the attack missed), never our wait. */
	if (read(ls->sent[0], &rc, sizeof(rc)) != sizeof(rc))
		rc = -1;
	return rc;
}

int send_with_fds(int sock, const void *msg, size_t len, int fd, int lie)
{
	uint8_t buf[100];
	int fds[8] = { fd, -1, -1, -1, -1, -1, -1, -1 }, nfds = fd >= 0 || fd == LINGERING ? 1 : 0, rc;

	if (len > sizeof(buf))
		return -1;
	memset(buf, 0, sizeof(buf));
	memcpy(buf, msg, len);
	if (lie && is_mode("trunc"))
		len = sizeof(buf);
	if (lie && is_mode("ctrunc"))
		nfds = 8;
	if (lie && (is_mode("extra_fds") || is_mode("offer_fds")))
		nfds = 3;
	if (o.blocking) {
		for (int i = 0; i < nfds; i++)
			if (fds[i] == -1)
				fds[i] = LINGERING;
		return send_fds_lingering(sock, buf, len, fds, nfds);
	}
	for (int i = 0; i < nfds; i++)
		if (fds[i] < 0)
			fds[i] = memfd_create("hostile-extra", MFD_CLOEXEC);
	rc = send_fds(sock, buf, len, fds, nfds);
	for (int i = 0; i < nfds; i++)
		if (fds[i] != fd)
			close(fds[i]);
	return rc;
}

int connect_passing_lingering(const struct sockaddr *sa, socklen_t len)
{
	int status;
	pid_t child;

	silent_listener();
	child = fork();
	if (child < 0)
		return -1;
	if (child == 0) {
		/* The socket first (it takes a while): the victim may refuse us
		 * a moment after our connect, the message must be in by then. */
		int lfd = lingering_fd(), fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

		if (fd < 0 || connect(fd, sa, len) < 0)
			_exit(2);
		_exit(send_fds(fd, "b", 1, &lfd, 1) == 0 ? 0 : 1);
	}
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status) == 0 ? 0 : WEXITSTATUS(status) == 2 ? -1 : -2;
}

int send_lingering(int sock)
{
	int fd = LINGERING;

	return send_fds_lingering(sock, "b", 1, &fd, 1);
}

/* The silent receiver: a listener that never accepts, held by a child of
 * ours for --blocking seconds (so it outlives this process's exit), with a
 * receive buffer its connections inherit as small as can be. */
static int silent_listener(void)
{
	static int fd = -1;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int small = 1024;
	pid_t holder;

	if (fd >= 0)
		return fd;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4096) < 0)
		fail_setup("silent listener");
	/* A grandchild holds it: no wait() of ours (flood.c) meets it. */
	holder = fork();
	if (holder < 0)
		fail_setup("fork");
	if (holder == 0) {
		if (fork() != 0)
			_exit(0);
		/* Only the listener: the test's pipes must see our parent's end. */
		for (int i = 0; i < 1024; i++)
			if (i != fd)
				close(i);
		sleep((unsigned)o.blocking);
		_exit(0);
	}
	waitpid(holder, NULL, 0);
	return fd;
}

static int lingering_fd(void)
{
	struct sockaddr_in a;
	socklen_t alen = sizeof(a);
	struct linger lg = { .l_onoff = 1, .l_linger = 3600 };
	static char junk[65536];
	int l = silent_listener(), fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 4096;

	if (fd < 0 || getsockname(l, (struct sockaddr *)&a, &alen) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) < 0 ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		fail_setup("lingering socket");
	/* Until the peer's window and our queue are full. */
	for (int quiet = 0; quiet < 10;) {
		if (send(fd, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
			quiet = 0;
			continue;
		}
		quiet++;
		usleep(2000);
	}
	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		fail_setup("SO_LINGER");
	return fd;
}

int send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	while (len) {
		ssize_t n = send(fd, b, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EAGAIN && wait_fd(fd, POLLOUT, 1000))
				continue;
			return -1;
		}
		b += n;
		len -= (size_t)n;
	}
	return 0;
}
