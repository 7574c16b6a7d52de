/*
 * first_conn: times the first connection of a fresh process against an echo
 * server, for the check that the shim's RDMA warm-up (about 1 s under QEMU
 * TCG) does not block the program (design-brief invariant 6).
 *
 *   first_conn --host ADDR --port P [--hold MS] [--conns N] [--fork-child]
 *              [--timeout SEC]
 *
 * 1. Connection 1: connect(), send() 64 bytes, recv() their echo, timed
 *    each; then a 64-byte ping-pong every 20 ms for --hold ms (default 5000)
 *    on the same connection: data must flow while the side channel is set
 *    up, and the connection may switch to it meanwhile.
 * 2. Connections 2..N (--conns, default 2), one after the other, each a
 *    ping-pong for --hold ms: a later connection of a warm process.
 * 3. --fork-child: then fork; the child opens one more connection of its
 *    own and ping-pongs on it for 1 s (a process forked after its parent
 *    set up RDMA: it must stay on TCP, byte exact).
 *
 * Output, one line per item (local is the connection's own address as the
 * shim's trace writes it):
 *   pid=P
 *   first: local=IP:PORT connect_ms=X send_ms=X echo_ms=X total_ms=X
 *   conn K: local=IP:PORT pings=N
 *   child: pid=P local=IP:PORT pings=N
 *   first_conn: OK            (or "first_conn: FAIL what", exit 1)
 * --timeout (default 60 s) bounds the whole run with alarm().
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define PING_GAP_US (20 * 1000)

static const char *host;
static int port;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void fail(const char *what)
{
	printf("first_conn: FAIL %s (%s)\n", what, strerror(errno));
	fflush(stdout);
	exit(1);
}

static int open_conn(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		fail("socket");
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
		errno = EINVAL;
		fail("--host must be an IPv4 address");
	}
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		fail("connect");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void local_of(int fd, char *buf, size_t len)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	char ip[INET_ADDRSTRLEN] = "?";

	if (getsockname(fd, (struct sockaddr *)&sin, &sl) == 0)
		inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
	snprintf(buf, len, "%s:%u", ip, ntohs(sin.sin_port));
}

static void send_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			fail("send");
		p += w;
		n -= (size_t)w;
	}
}

/* Reads the echo of msg and compares it. */
static void recv_echo(int fd, const unsigned char *msg)
{
	unsigned char got[MSG];
	size_t have = 0;

	while (have < MSG) {
		ssize_t r = recv(fd, got + have, MSG - have, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = ECONNRESET;
			fail("recv");
		}
		have += (size_t)r;
	}
	if (memcmp(got, msg, MSG)) {
		errno = EPROTO;
		fail("echo differs");
	}
}

static void fill(unsigned char *msg, unsigned seq)
{
	for (int i = 0; i < MSG; i++)
		msg[i] = (unsigned char)(seq * 131u + (unsigned)i * 7u);
}

/* Ping-pongs on fd for hold_ms; returns the number of round trips. */
static unsigned ping_for(int fd, double hold_ms, unsigned seq)
{
	unsigned char msg[MSG];
	double end = now_ms() + hold_ms;
	unsigned n = 0;

	while (now_ms() < end) {
		fill(msg, seq + n);
		send_all(fd, msg, MSG);
		recv_echo(fd, msg);
		n++;
		usleep(PING_GAP_US);
	}
	return n;
}

static void close_conn(int fd)
{
	char c;

	/* The server echoes until our EOF, then closes: wait for its EOF so
	 * that both ends finished cleanly. */
	shutdown(fd, SHUT_WR);
	while (recv(fd, &c, 1, 0) > 0)
		;
	close(fd);
}

int main(int argc, char **argv)
{
	double hold = 5000, t0, t_conn, t_send, t_echo;
	int conns = 2, timeout = 60, fd, status = 0;
	bool fork_child = false;
	unsigned char msg[MSG];
	char local[64];
	pid_t pid;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--fork-child")) {
			fork_child = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "first_conn: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--host"))
			host = v;
		else if (!strcmp(a, "--port"))
			port = atoi(v);
		else if (!strcmp(a, "--hold"))
			hold = atof(v);
		else if (!strcmp(a, "--conns"))
			conns = atoi(v);
		else if (!strcmp(a, "--timeout"))
			timeout = atoi(v);
		else {
			fprintf(stderr, "usage: first_conn --host ADDR --port P [--hold MS] [--conns N] "
					"[--fork-child] [--timeout SEC]\n");
			return 2;
		}
	}
	if (!host || port <= 0 || port > 65535 || conns < 1) {
		fprintf(stderr, "first_conn: --host and --port are required\n");
		return 2;
	}
	alarm((unsigned)timeout);
	printf("pid=%d\n", (int)getpid());

	/* 1. The process's first connection, timed. */
	fill(msg, 0);
	t0 = now_ms();
	fd = open_conn();
	t_conn = now_ms();
	send_all(fd, msg, MSG);
	t_send = now_ms();
	recv_echo(fd, msg);
	t_echo = now_ms();
	local_of(fd, local, sizeof(local));
	printf("first: local=%s connect_ms=%.3f send_ms=%.3f echo_ms=%.3f total_ms=%.3f\n", local, t_conn - t0,
	       t_send - t_conn, t_echo - t_send, t_echo - t0);
	fflush(stdout);
	printf("conn 1: local=%s pings=%u\n", local, ping_for(fd, hold, 1));
	close_conn(fd);

	/* 2. Later connections of the now warm process. */
	for (int k = 2; k <= conns; k++) {
		fd = open_conn();
		local_of(fd, local, sizeof(local));
		printf("conn %d: local=%s pings=%u\n", k, local, ping_for(fd, hold, (unsigned)k * 100000u));
		fflush(stdout);
		close_conn(fd);
	}

	/* 3. A child forked after the warm-up: a connection of its own. */
	if (fork_child) {
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			fail("fork");
		if (pid == 0) {
			fd = open_conn();
			local_of(fd, local, sizeof(local));
			printf("child: pid=%d local=%s pings=%u\n", (int)getpid(), local, ping_for(fd, 1000, 900000u));
			close_conn(fd);
			fflush(stdout);
			_exit(0);
		}
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			errno = ECHILD;
			fail("the forked child's connection");
		}
	}
	printf("first_conn: OK\n");
	return 0;
}
