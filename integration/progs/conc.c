/*
 * conc: concurrency scenarios for the shim's socket lifetime, one per mode,
 * every one bounded in time. Both ends of every connection live in this
 * process (or its children), so under the shim both are intercepted.
 *
 *   conc MODE --port P [--rounds N]
 *
 * Modes:
 *   close-race   readers, a writer and poll() on one fd while another thread
 *                closes it (every other round by dup2 onto it first); the
 *                peer then closes. Every thread must end.
 *   reuse        a reader waits in recv() while the fd is closed and its
 *                number reused by a new connection: the reader must get the
 *                byte its peer sends afterwards (as with the kernel) and the
 *                new connection must carry its bytes intact.
 *   epoll-close  a thread waits in epoll_wait() while another closes the
 *                epoll fd.
 *   epoll-two    two threads wait in epoll_wait() on one set, many times,
 *                while the connection upgrades; then the set must still
 *                report a byte at once.
 *   fork-storm   threads ping-pong on upgraded connections while the main
 *                thread forks children that close their copies and exit: no
 *                child may hang, the ping-pong must stay byte-exact, no EOF.
 *   fork-close   no threads: a child closes its copies of an upgraded
 *                connection and exits; the parent's connection carries on
 *                (the kernel ends a connection when its last descriptor in
 *                any process goes, not at a child's close); then the
 *                parent's close of one end gives the other end its last
 *                byte, then EOF.
 *   scm          connections handed to a worker process with SCM_RIGHTS, the
 *                sender's copy closed at once, the worker echoes them.
 *   scm-upgraded the same after the sender moved bytes both ways (under the
 *                shim: upgraded). Whatever the receiver reads must be bytes
 *                the peer sent, in order, never anything else; every end
 *                must finish in time. (The shim can not hand a switched
 *                connection on; it ends it: shim/LIFETIME.md.) The receiver
 *                echoes; the echo must be a prefix of what was sent.
 *   scm-early    the same, handed over right after the first byte moved,
 *                while the handshake is under way (the shim gives it up:
 *                plain TCP at a clean offset, so most are served in full).
 *
 * Prints "OK <mode> ..." and exits 0, or "FAIL <mode>: why" and exits 1; a
 * thread that does not end within its bound is a FAIL (hang), not a wait.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *mode;
static int port, rounds = 100;

static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL %s: ", mode);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	_exit(1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

static int lfd;

static void listen_on_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 128) < 0)
		fail("listen on %d: %s", port, strerror(errno));
}

static void pair(int *c, int *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*c = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(*c, (struct sockaddr *)&a, sizeof(a)) < 0)
		fail("connect: %s", strerror(errno));
	*s = accept(lfd, NULL, NULL);
	if (*s < 0)
		fail("accept: %s", strerror(errno));
}

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n <= 0)
			fail("send on %d: %s", fd, n < 0 ? strerror(errno) : "0");
		p += n;
		len -= (size_t)n;
	}
}

static void read_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n <= 0)
			fail("recv on %d: %s", fd, n < 0 ? strerror(errno) : "EOF");
		p += n;
		len -= (size_t)n;
	}
}

static void fill(unsigned char *buf, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
}

/* Moves bytes both ways for a while, so the upgrade (a few hundred
 * microseconds) has happened by the end; checks every byte. */
static void warm_for(int c, int s, unsigned seed, double secs)
{
	unsigned char out[4096], in[4096];
	double end = now() + secs;

	for (unsigned i = 0; now() < end || i < 8; i++) {
		fill(out, sizeof(out), seed + i);
		write_all(c, out, sizeof(out));
		read_all(s, in, sizeof(in));
		if (memcmp(in, out, sizeof(in)))
			fail("bytes differ c->s");
		write_all(s, in, sizeof(in));
		read_all(c, out, sizeof(out));
		if (memcmp(in, out, sizeof(in)))
			fail("bytes differ s->c");
	}
}

static void warm(int c, int s, unsigned seed)
{
	warm_for(c, s, seed, 0.02);
}

/* Joins t within secs, or fails: a thread that does not end is a hang. */
static void join_within(pthread_t t, double secs, const char *what)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)secs;
	if (pthread_timedjoin_np(t, NULL, &ts) != 0)
		fail("%s did not end within %.0f s (hang)", what, secs);
}

/* ---- close-race ---- */

struct race {
	int fd;
	volatile int stop;
};

static void *race_reader(void *arg)
{
	struct race *r = arg;
	char buf[512];

	for (;;) {
		ssize_t n = recv(r->fd, buf, sizeof(buf), 0);

		if (n <= 0)
			return NULL;
	}
}

static void *race_writer(void *arg)
{
	struct race *r = arg;
	char buf[2048] = { 0 };

	while (!r->stop)
		if (send(r->fd, buf, sizeof(buf), MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN)
			return NULL;
	return NULL;
}

static void *race_poller(void *arg)
{
	struct race *r = arg;

	while (!r->stop) {
		struct pollfd p = { .fd = r->fd, .events = POLLIN | POLLOUT };

		if (poll(&p, 1, 5) < 0 || (p.revents & POLLNVAL))
			return NULL;
		sched_yield();
	}
	return NULL;
}

static void close_race(void)
{
	for (int i = 0; i < rounds; i++) {
		struct race r = { 0 };
		pthread_t t[4];
		int c, s;

		pair(&c, &s);
		warm(c, s, (unsigned)i);
		r.fd = c;
		pthread_create(&t[0], NULL, race_reader, &r);
		pthread_create(&t[1], NULL, race_reader, &r);
		pthread_create(&t[2], NULL, race_writer, &r);
		pthread_create(&t[3], NULL, race_poller, &r);
		sleep_us(rand() % 2000);
		if (i % 2) {
			/* dup2 onto the fd closes it as close() does. */
			int nul = open("/dev/null", O_RDWR);

			if (nul < 0 || dup2(nul, c) != c)
				fail("dup2: %s", strerror(errno));
			close(nul);
		}
		close(c);
		r.stop = 1;
		/* The readers' socket is still open through their calls (as with
		 * the kernel): the peer's close ends them with EOF. */
		close(s);
		for (int k = 0; k < 4; k++)
			join_within(t[k], 10, "a thread on the closed fd");
	}
	printf("OK close-race rounds=%d\n", rounds);
}

/* ---- reuse ---- */

struct reader {
	int fd;
	volatile int started;
	ssize_t n;
	int err;
	char byte;
};

static void *one_byte_reader(void *arg)
{
	struct reader *r = arg;

	r->started = 1;
	r->n = recv(r->fd, &r->byte, 1, 0);
	r->err = r->n < 0 ? errno : 0;
	return NULL;
}

static void reuse(void)
{
	int reused = 0;

	for (int i = 0; i < rounds; i++) {
		struct reader r = { 0 };
		unsigned char out[65536], in[65536];
		pthread_t t;
		int c1, s1, c2, s2;

		pair(&c1, &s1);
		warm(c1, s1, (unsigned)i);
		r.fd = c1;
		pthread_create(&t, NULL, one_byte_reader, &r);
		/* The reader must be inside recv() when the fd closes (else it
		 * would read the new socket, as it would without the shim). */
		while (!r.started)
			sched_yield();
		sleep_us(3000 + rand() % 2000);
		close(c1);
		pair(&c2, &s2);
		reused += c2 == r.fd;
		/* The new connection, on the old number, carries its bytes,
		 * for longer than the reader's busy-poll (the test runs with a
		 * long RDMASHIM_SPIN_US): the reader must wake and go on while
		 * they flow. */
		warm_for(c2, s2, (unsigned)i, 0.05);
		fill(out, sizeof(out), (unsigned)i + 1000);
		write_all(s2, out, sizeof(out));
		read_all(c2, in, sizeof(in));
		if (memcmp(in, out, sizeof(in)))
			fail("round %d: the new connection's bytes differ", i);
		write_all(c2, in, sizeof(in));
		read_all(s2, out, sizeof(out));
		if (memcmp(in, out, sizeof(in)))
			fail("round %d: the new connection's bytes differ (back)", i);
		/* The old reader still waits on the old socket: it gets this. */
		write_all(s1, "Z", 1);
		join_within(t, 10, "the reader of the closed fd");
		if (r.n != 1 || r.byte != 'Z')
			fail("round %d: the reader of the closed fd got n=%zd (%s), not the peer's byte", i, r.n,
			     strerror(r.err));
		close(s1);
		close(c2);
		close(s2);
	}
	printf("OK reuse rounds=%d reused=%d\n", rounds, reused);
}

/* ---- epoll-close ---- */

struct waiter {
	int epfd;
	int rc, err;
};

static void *epoll_waiter(void *arg)
{
	struct waiter *w = arg;
	struct epoll_event ev[4];

	for (int k = 0; k < 3; k++) {
		w->rc = epoll_wait(w->epfd, ev, 4, 30);
		w->err = w->rc < 0 ? errno : 0;
	}
	return NULL;
}

static void epoll_close(void)
{
	int c, s;

	pair(&c, &s);
	warm(c, s, 1);
	for (int i = 0; i < rounds; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = c };
		struct waiter w = { 0 };
		pthread_t t;

		w.epfd = epoll_create1(0);
		if (epoll_ctl(w.epfd, EPOLL_CTL_ADD, c, &ev) < 0)
			fail("epoll_ctl: %s", strerror(errno));
		pthread_create(&t, NULL, epoll_waiter, &w);
		sleep_us(rand() % 3000);
		close(w.epfd);
		join_within(t, 10, "the epoll waiter");
	}
	/* The connection is unharmed. */
	warm(c, s, 2);
	close(c);
	close(s);
	printf("OK epoll-close rounds=%d\n", rounds);
}

/* ---- epoll-two ---- */

static void *epoll_twice(void *arg)
{
	struct waiter *w = arg;
	struct epoll_event ev[4];

	for (int k = 0; k < rounds; k++)
		w->rc = epoll_wait(w->epfd, ev, 4, 1);
	return NULL;
}

static void epoll_two(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = 0 };
	struct waiter w = { 0 };
	pthread_t t[2];
	int c, s, n;
	char b;

	pair(&c, &s);
	ev.data.fd = c;
	w.epfd = epoll_create1(0);
	if (epoll_ctl(w.epfd, EPOLL_CTL_ADD, c, &ev) < 0)
		fail("epoll_ctl: %s", strerror(errno));
	pthread_create(&t[0], NULL, epoll_twice, &w);
	pthread_create(&t[1], NULL, epoll_twice, &w);
	/* The upgrade happens while they wait (the waits read its state). */
	warm(c, s, 3);
	join_within(t[0], 20, "epoll waiter 1");
	join_within(t[1], 20, "epoll waiter 2");
	write_all(s, "Y", 1);
	double t0 = now();

	n = epoll_wait(w.epfd, &ev, 1, 5000);
	if (n != 1 || now() - t0 > 2.0)
		fail("a byte on the set was reported after %.3f s (n=%d)", now() - t0, n);
	read_all(c, &b, 1);
	close(w.epfd);
	close(c);
	close(s);
	printf("OK epoll-two rounds=%d\n", rounds);
}

/* ---- fork-storm ---- */

#define STORM_PAIRS 3

struct pingpong {
	int c, s;
	volatile int stop;
	unsigned long long bytes;
	char why[128];
};

static void *pp_echo(void *arg)
{
	struct pingpong *p = arg;
	unsigned char buf[4096];

	for (;;) {
		ssize_t n = recv(p->s, buf, sizeof(buf), 0);

		if (n <= 0)
			return NULL;
		if (send(p->s, buf, (size_t)n, MSG_NOSIGNAL) != n)
			return NULL;
	}
}

static void *pp_client(void *arg)
{
	struct pingpong *p = arg;
	unsigned char out[4096], in[4096];

	for (unsigned i = 0; !p->stop; i++) {
		size_t got = 0;

		fill(out, sizeof(out), i);
		if (send(p->c, out, sizeof(out), MSG_NOSIGNAL) != (ssize_t)sizeof(out)) {
			snprintf(p->why, sizeof(p->why), "send: %s", strerror(errno));
			return NULL;
		}
		while (got < sizeof(in)) {
			ssize_t n = recv(p->c, in + got, sizeof(in) - got, 0);

			if (n <= 0) {
				snprintf(p->why, sizeof(p->why), "recv: %s", n ? strerror(errno) : "EOF");
				return NULL;
			}
			got += (size_t)n;
		}
		if (memcmp(in, out, sizeof(in))) {
			snprintf(p->why, sizeof(p->why), "bytes differ at exchange %u", i);
			return NULL;
		}
		p->bytes += sizeof(out);
	}
	return NULL;
}

static void fork_storm(void)
{
	struct pingpong pp[STORM_PAIRS];
	pthread_t tc[STORM_PAIRS], ts[STORM_PAIRS];
	int children = 0;

	memset(pp, 0, sizeof(pp));
	for (int k = 0; k < STORM_PAIRS; k++) {
		pair(&pp[k].c, &pp[k].s);
		warm(pp[k].c, pp[k].s, (unsigned)k);
		pthread_create(&ts[k], NULL, pp_echo, &pp[k]);
		pthread_create(&tc[k], NULL, pp_client, &pp[k]);
	}
	for (int i = 0; i < rounds; i++) {
		int st;
		pid_t pid = fork();

		if (pid < 0)
			fail("fork: %s", strerror(errno));
		if (pid == 0) {
			/* A child that only closes its copies, as a daemon's
			 * helper does; a hang here is the test failing. */
			alarm(5);
			for (int k = 0; k < STORM_PAIRS; k++) {
				close(pp[k].c);
				close(pp[k].s);
			}
			_exit(0);
		}
		if (waitpid(pid, &st, 0) != pid)
			fail("waitpid: %s", strerror(errno));
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fail("child %d ended by %s %d (a hang in close ends with SIGALRM=%d)", i,
			     WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
			     SIGALRM);
		children++;
		sleep_us(rand() % 3000);
		for (int k = 0; k < STORM_PAIRS; k++)
			if (pp[k].why[0])
				fail("pair %d after %d children: %s", k, children, pp[k].why);
	}
	for (int k = 0; k < STORM_PAIRS; k++) {
		pp[k].stop = 1;
		join_within(tc[k], 10, "a ping-pong client");
		if (pp[k].why[0])
			fail("pair %d: %s", k, pp[k].why);
		shutdown(pp[k].c, SHUT_WR);
		join_within(ts[k], 10, "an echo thread");
		close(pp[k].c);
		close(pp[k].s);
	}
	printf("OK fork-storm children=%d\n", children);
}

/* ---- fork-close ---- */

static void fork_close(void)
{
	for (int i = 0; i < rounds; i++) {
		int c, s, st;
		pid_t pid;

		pair(&c, &s);
		warm(c, s, (unsigned)i);
		pid = fork();
		if (pid == 0) {
			alarm(5);
			close(c);
			close(s);
			_exit(0);
		}
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fail("round %d: the child ended badly (status %d)", i, st);
		warm_for(c, s, (unsigned)i + 7, 0.002);
		/* The last descriptor of c goes (the child's went before): the
		 * peer must see the end, after what was sent before it. */
		write_all(c, "E", 1);
		close(c);
		char b[2];
		struct pollfd p = { .fd = s, .events = POLLIN };

		read_all(s, b, 1);
		if (b[0] != 'E')
			fail("round %d: the last byte before close differs", i);
		if (poll(&p, 1, 5000) != 1 || recv(s, b, 1, 0) != 0)
			fail("round %d: no EOF after the last close of the other end", i);
		close(s);
	}
	printf("OK fork-close rounds=%d\n", rounds);
}

/* ---- scm ---- */

static int send_fd(int via, int fd)
{
	char c = 'F';
	struct iovec iov = { &c, 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(via, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int via)
{
	char c;
	struct iovec iov = { &c, 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int fd;

	if (recvmsg(via, &m, 0) != 1)
		return -1;
	cm = CMSG_FIRSTHDR(&m);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

static void scm(void)
{
	int sv[2], st;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		fail("socketpair: %s", strerror(errno));
	pid = fork();
	if (pid == 0) {
		/* The worker: echoes every connection it is handed to EOF. */
		alarm(30);
		close(sv[0]);
		for (int fd; (fd = recv_fd(sv[1])) >= 0;) {
			char buf[4096];
			ssize_t n;

			while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
				if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
					break;
			close(fd);
		}
		_exit(0);
	}
	close(sv[1]);
	for (int i = 0; i < rounds; i++) {
		unsigned char out[65536], in[65536];
		int c, s;

		pair(&c, &s);
		if (send_fd(sv[0], s) < 0)
			fail("send_fd: %s", strerror(errno));
		close(s);
		fill(out, sizeof(out), (unsigned)i);
		write_all(c, out, sizeof(out));
		read_all(c, in, sizeof(in));
		if (memcmp(in, out, sizeof(in)))
			fail("round %d: echoed bytes differ", i);
		close(c);
	}
	close(sv[0]);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail("worker ended badly (status %d)", st);
	printf("OK scm rounds=%d\n", rounds);
}

/* early: hand over right after the first byte moved, while the handshake
 * is under way; else after 20 ms of traffic, upgraded. */
static void scm_upgraded(bool early)
{
	int sv[2], st, full = 0;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		fail("socketpair: %s", strerror(errno));
	pid = fork();
	if (pid == 0) {
		/* The worker: echoes each connection to its end; every byte
		 * must be the next one the peer sent. */
		alarm(60);
		close(sv[0]);
		for (int fd, i = 0; (fd = recv_fd(sv[1])) >= 0; i++) {
			unsigned char want[65536], buf[4096];
			size_t at = 0;
			ssize_t n;

			fill(want, sizeof(want), (unsigned)i);
			while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
				if (at + (size_t)n > sizeof(want) || memcmp(buf, want + at, (size_t)n)) {
					printf("FAIL %s: the receiver of connection %d read %zd bytes that the peer did not send there\n",
					       mode, i, n);
					fflush(stdout);
					_exit(1);
				}
				at += (size_t)n;
				if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
					break;
			}
			close(fd);
		}
		_exit(0);
	}
	close(sv[1]);
	for (int i = 0; i < rounds; i++) {
		unsigned char out[65536], in[4096];
		struct pollfd p;
		size_t back = 0;
		int c, s;

		pair(&c, &s);
		if (early) {
			write_all(c, "x", 1);
			read_all(s, in, 1);
		} else {
			warm(c, s, (unsigned)i + 100);
		}
		if (send_fd(sv[0], s) < 0)
			fail("send_fd: %s", strerror(errno));
		close(s);
		fill(out, sizeof(out), (unsigned)i);
		for (size_t at = 0; at < sizeof(out);) {
			ssize_t n = send(c, out + at, sizeof(out) - at, MSG_NOSIGNAL);

			if (n <= 0)
				break; /* the connection was ended: fine */
			at += (size_t)n;
		}
		shutdown(c, SHUT_WR);
		/* The echo, a prefix of what was sent, then the end, in time. */
		for (;;) {
			ssize_t n;

			p = (struct pollfd){ .fd = c, .events = POLLIN };
			if (poll(&p, 1, 10000) != 1)
				fail("round %d: the client saw no end within 10 s", i);
			n = recv(c, in, sizeof(in), 0);
			if (n <= 0)
				break;
			if (back + (size_t)n > sizeof(out) || memcmp(in, out + back, (size_t)n))
				fail("round %d: the echo differs from what was sent at byte %zu", i, back);
			back += (size_t)n;
		}
		full += back == sizeof(out);
		close(c);
	}
	close(sv[0]);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail("the receiver ended badly (status %d)", st);
	printf("OK %s rounds=%d served_in_full=%d\n", mode, rounds, full);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		fail("usage: conc MODE --port P [--rounds N]");
	mode = argv[1];
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
	}
	signal(SIGPIPE, SIG_IGN);
	srand((unsigned)getpid());
	listen_on_port();
	if (!strcmp(mode, "close-race"))
		close_race();
	else if (!strcmp(mode, "reuse"))
		reuse();
	else if (!strcmp(mode, "epoll-close"))
		epoll_close();
	else if (!strcmp(mode, "epoll-two"))
		epoll_two();
	else if (!strcmp(mode, "fork-storm"))
		fork_storm();
	else if (!strcmp(mode, "fork-close"))
		fork_close();
	else if (!strcmp(mode, "scm"))
		scm();
	else if (!strcmp(mode, "scm-upgraded"))
		scm_upgraded(false);
	else if (!strcmp(mode, "scm-early"))
		scm_upgraded(true);
	else
		fail("unknown mode");
	return 0;
}
