/*
 * conn_hold: many 1-byte ping-pong connections between two processes, for
 * the benchmarks (integration/bench/upgrade_time.sh, many_conns.sh).
 *
 *   conn_hold server --port P --conns N [--rounds R] [--host A] [--seq [--fork W]] [--warm MS] [--think US]
 *                    [--hold FILE]
 *   conn_hold client --port P --conns N [--rounds R] [--each E] [--host A] [--seq [--times]] [--warm MS] [--think US]
 *                    [--pause FILE] [--go FILE] [--hold FILE]
 *
 * Both ends use blocking I/O in one thread, in connection order: the client
 * writes one byte (the round's letter, a to z), the server reads it and
 * writes it back, the client reads it and checks it, R times per connection
 * (default 10).
 *
 *   --seq   one connection at a time: connect, R rounds, close (the server
 *           then reads EOF and closes). For timing upgrades one by one.
 *   default all N connections are made first, then R rounds over each in
 *           turn, and they stay open: the client prints "UP ms=T" (T: from
 *           the first connect to the last byte of the last round) and both
 *           wait for FILE (--hold) to exist before closing them all.
 *   --each E  E rounds over each connection as soon as it is made, before
 *           the next (default 0; not with --seq): with the upgrade at the
 *           first data call, each handshake ends before the next begins.
 *   --fork W  (server, with --seq) W processes forked after listen accept
 *           on the one listener, each serving connections one at a time
 *           until it is killed (a prefork server: which process takes a
 *           connection is the kernel's choice).
 *   --pause FILE  (client) after its first connect, prints "CONNECTED
 *           <local port>" and waits for FILE before its first byte.
 *   --go FILE  the client waits for FILE before its first connect (so its
 *           memory can be read before any connection).
 *   --host A   the IPv4 address the server binds and the client connects to
 *           (default 127.0.0.1; the Soft-RoCE VMs use their rxe address).
 *   --warm MS  before the counted connections, one more (both ends given
 *           --warm): the client does 1-byte request/answers over it for MS
 *           milliseconds, then closes it; both then print "WARMED". Under
 *           the shim this runs each process's RDMA warm-up (device probe,
 *           first pool chunk: a second and more in a TCG VM), which is not
 *           what the counted connections are for. The client waits for
 *           --go after it, so memory read before "go" includes it.
 *   --think US  each end waits US microseconds before each of its writes
 *           (default 0): requests far apart and a slow server, whose
 *           receivers are asleep when the bytes come.
 *   --times with --seq, the client prints one line per connection:
 *           "CONN <i> first_us=<F> total_us=<T>", F from the start of its
 *           connect() to the end of the read of the first answer, T to the
 *           end of its close().
 *
 * Prints "READY <port> pid=<pid>" first (the server once it listens); with
 * --seq, "DONE ms=<wall> cpu_us=<this process's CPU>" at the end. Exits
 * 0 when every byte came back, 1 (with a line on stderr) otherwise. Every
 * wait is bounded (120 s).
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The CPU this process used, user and system (precise, unlike getrusage). */
static double cpu_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void wait_file(const char *path)
{
	double end = now_ms() + 120e3;
	struct stat st;

	while (path && stat(path, &st) != 0) {
		if (now_ms() > end) {
			fprintf(stderr, "conn_hold: %s never appeared\n", path);
			exit(1);
		}
		usleep(10000);
	}
}

static int connect_to(struct in_addr host, int port);
static unsigned think_us; /* --think */

static void one_byte_back(int fd, char c)
{
	if (write(fd, &c, 1) != 1) {
		fprintf(stderr, "conn_hold: warm connection: write: %s\n", strerror(errno));
		exit(1);
	}
}

/* One round: the client sends the round's letter and must read the same
 * one back (a byte lost, doubled or moved shows); the server echoes. */
static void one_byte(int fd, bool send_first, int conn, int round)
{
	const char want = (char)('a' + round % 26);
	char c = want;

	if (send_first && ((think_us && usleep(think_us)) || write(fd, &c, 1) != 1))
		goto fail;
	if (read(fd, &c, 1) != 1 || (send_first && c != want))
		goto fail;
	if (!send_first && ((think_us && usleep(think_us)) || write(fd, &c, 1) != 1))
		goto fail;
	return;
fail:
	fprintf(stderr, "conn_hold: connection %d: ping-pong failed in round %d (%s)\n", conn, round,
		c != want && send_first ? "a wrong byte came back" : strerror(errno));
	exit(1);
}

/* A prefork worker's connection: the rounds, the client's EOF, close. */
static void serve_one(int fd, int rounds, int conn)
{
	char c;
	ssize_t got;

	if (fd < 0) {
		fprintf(stderr, "conn_hold: accept: %s\n", strerror(errno));
		exit(1);
	}
	for (int r = 0; r < rounds; r++)
		one_byte(fd, false, conn, r);
	got = read(fd, &c, 1);
	if (got != 0) {
		fprintf(stderr, "conn_hold: connection %d: expected EOF, read returned %zd (%s)\n", conn, got,
			got < 0 ? strerror(errno) : "a byte");
		exit(1);
	}
	close(fd);
}

/* The --warm connection; see the header. */
static void warm(int lfd, struct in_addr host, int port, double ms)
{
	double end = now_ms() + ms;
	int fd = lfd >= 0 ? accept(lfd, NULL, NULL) : connect_to(host, port);
	char c;

	if (fd < 0) {
		fprintf(stderr, "conn_hold: accept: %s\n", strerror(errno));
		exit(1);
	}
	if (lfd >= 0) {
		while (read(fd, &c, 1) == 1)
			one_byte_back(fd, c);
	} else {
		for (int r = 0; r == 0 || now_ms() < end; r++)
			one_byte(fd, true, -1, r);
	}
	close(fd);
	printf("WARMED\n");
	fflush(stdout);
}

static int connect_to(struct in_addr host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = host };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		fprintf(stderr, "conn_hold: connect: %s\n", strerror(errno));
		exit(1);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int main(int argc, char **argv)
{
	int port = 0, n = 0, rounds = 10, each = 0, seq = 0, times = 0, workers = 0, *fds, lfd = -1;
	double warm_ms = -1;
	struct in_addr host = { .s_addr = htonl(INADDR_LOOPBACK) };
	const char *go = NULL, *hold = NULL, *pause = NULL;
	bool server;

	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: conn_hold server|client --port P --conns N [--rounds R] [--each E] [--host A] "
				"[--seq [--times]] [--fork W] [--warm MS] [--pause F] [--go F] [--hold F]\n");
		return 2;
	}
	server = !strcmp(argv[1], "server");
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--seq"))
			seq = 1;
		else if (!strcmp(argv[i], "--times"))
			times = 1;
		else if (i + 1 >= argc)
			return 2;
		else if (!strcmp(argv[i], "--port"))
			port = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--conns"))
			n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--each"))
			each = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--fork"))
			workers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--go"))
			go = argv[++i];
		else if (!strcmp(argv[i], "--pause"))
			pause = argv[++i];
		else if (!strcmp(argv[i], "--hold"))
			hold = argv[++i];
		else if (!strcmp(argv[i], "--think"))
			think_us = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--warm"))
			warm_ms = atof(argv[++i]);
		else if (!strcmp(argv[i], "--host")) {
			if (inet_pton(AF_INET, argv[++i], &host) != 1)
				return 2;
		}
		else
			return 2;
	}
	if (port <= 0 || n <= 0 || rounds < 0 || each < 0 || (each && seq) || workers < 0 ||
	    (workers && (!server || !seq)))
		return 2;
	fds = calloc((size_t)n, sizeof(*fds));
	if (!fds)
		return 1;
	if (server) {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = host };
		int one = 1;

		lfd = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 4096) < 0) {
			fprintf(stderr, "conn_hold: listen: %s\n", strerror(errno));
			return 1;
		}
	}
	printf("READY %d pid=%d\n", port, (int)getpid());
	fflush(stdout);
	if (workers) {
		for (int w = 0; w < workers; w++)
			if (fork() == 0)
				for (int i = 0;; i++)
					serve_one(accept(lfd, NULL, NULL), rounds, i);
		for (int w = 0; w < workers; w++)
			wait(NULL);
		return 0;
	}
	if (warm_ms >= 0)
		warm(lfd, host, port, warm_ms);
	if (!server)
		wait_file(go);
	double t0 = now_ms(), cpu0 = cpu_us();

	for (int i = 0; i < n; i++) {
		double c0 = now_ms(), first = 0;

		fds[i] = server ? accept(lfd, NULL, NULL) : connect_to(host, port);
		if (fds[i] < 0) {
			fprintf(stderr, "conn_hold: accept: %s\n", strerror(errno));
			return 1;
		}
		if (pause && i == 0 && !server) {
			struct sockaddr_in me;
			socklen_t len = sizeof(me);

			getsockname(fds[i], (struct sockaddr *)&me, &len);
			printf("CONNECTED %d\n", ntohs(me.sin_port));
			fflush(stdout);
			wait_file(pause);
		}
		for (int r = 0; r < each; r++)
			one_byte(fds[i], !server, i, r);
		if (!seq)
			continue;
		first = now_ms(); /* with no rounds: the connect */
		for (int r = 0; r < rounds; r++) {
			one_byte(fds[i], !server, i, each + r);
			if (r == 0)
				first = now_ms();
		}
		if (server) {
			char c;

			ssize_t got;

			got = read(fds[i], &c, 1);

			if (got != 0) {
				fprintf(stderr, "conn_hold: connection %d: expected EOF, read returned %zd (%s)\n", i, got,
					got < 0 ? strerror(errno) : "a byte");
				return 1;
			}
		}
		close(fds[i]);
		if (times && !server)
			printf("CONN %d first_us=%.0f total_us=%.0f\n", i, (first - c0) * 1e3, (now_ms() - c0) * 1e3);
	}
	if (seq) {
		printf("DONE ms=%.1f cpu_us=%.0f\n", now_ms() - t0, cpu_us() - cpu0);
		return 0;
	}
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < n; i++)
			one_byte(fds[i], !server, i, each + r);
	printf("UP ms=%.1f\n", now_ms() - t0);
	fflush(stdout);
	wait_file(hold);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return 0;
}
