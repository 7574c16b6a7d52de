/*
 * conn_hold: many ping-pong connections between two processes, for the
 * benchmarks (integration/bench/upgrade_time.sh, many_conns.sh: 1-byte
 * rounds) and for integration/vm/guest-rdma-links.sh (--size: rounds whose
 * every byte is checked).
 *
 *   conn_hold server --port P --conns N [--rounds R] [--size B] [--host A] [--seq [--fork W]] [--warm MS]
 *                    [--think US] [--hold FILE]
 *   conn_hold client --port P --conns N [--rounds R] [--size B] [--each E] [--host A] [--from-port P] [--seq [--times]]
 *                    [--warm MS] [--think US] [--pause FILE] [--go FILE] [--hold FILE]
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
 *   --from-port P  (client) its connections' local ports are P, P+1, ...
 *           in the order they are made (the --warm one first), instead of
 *           the kernel's: Linux gives one ephemeral port to connections to
 *           different servers, and clients run side by side must not share
 *           one (an RDMA upgrade listens with rdma_cm on it).
 *   --host A   the IPv4 address the server binds and the client connects to
 *           (default 127.0.0.1; the Soft-RoCE VMs use their rxe address).
 *   --warm MS  before the counted connections, one more (both ends given
 *           --warm): the client does 1-byte request/answers over it for MS
 *           milliseconds (if either end's warm-up thread outlives them, until
 *           both are gone and MS / 2 more: the server answers in upper case
 *           while its own lives), then closes it; each end then waits (at most 60 s)
 *           until it has no thread named "rdmashim-warm" left and prints
 *           "WARMED". Under the shim this runs each process's RDMA warm-up
 *           (device probe, first pool chunk: 2-3 s in a TCG VM, on that
 *           thread), which is not what the counted connections are for:
 *           those made while it runs start their handshakes late. The
 *           client waits for --go after it, so memory read before "go"
 *           includes it.
 *   --think US  each end waits US microseconds before each of its writes
 *           (default 0): requests far apart and a slow server, whose
 *           receivers are asleep when the bytes come.
 *   --times with --seq, the client prints one line per connection:
 *           "CONN <i> first_us=<F> total_us=<T>", F from the start of its
 *           connect() to the end of the read of the first answer, T to the
 *           end of its close().
 *   --size B  each round is a B-byte request and a B-byte answer instead of
 *           the letter, byte k of each a hash of (connection, round, k,
 *           direction), and both ends check every byte they read: a byte
 *           lost, doubled, moved or changed shows where it happens, and one
 *           that never comes is reported after 60 s instead of waited for.
 *           In the held mode the ends of the streams are checked too: after
 *           --hold the client shuts its sending side down, the server must
 *           read EOF on each connection before it closes it, and the client
 *           must then read EOF (a byte too many either way shows). Both print
 *           "CHECKED conns=N rounds=R size=B" once all that held.
 *
 * Prints "READY <port> pid=<pid>" first (the server once it listens);
 * "WARMED port=<the --warm connection's client port> wait_ms=<the wait for
 * the warm-up thread>" after --warm (the port tells that connection from the
 * counted ones in a trace); with
 * --seq, "DONE ms=<wall> cpu_us=<this process's CPU>" at the end. Exits
 * 0 when every byte came back, 1 (with a line on stderr) otherwise. Every
 * wait is bounded (120 s).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "thread_named.h"

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
	const char *what = "write";
	ssize_t n = 1;

	if (send_first && ((think_us && usleep(think_us)) || (n = write(fd, &c, 1)) != 1))
		goto fail;
	what = "read";
	if ((n = read(fd, &c, 1)) != 1 || (send_first && c != want))
		goto fail;
	what = "write";
	if (!send_first && ((think_us && usleep(think_us)) || (n = write(fd, &c, 1)) != 1))
		goto fail;
	return;
fail:
	/* errno only where the call said -1: an EOF leaves an old one. */
	fprintf(stderr, "conn_hold: connection %d: ping-pong failed in round %d (%s %s)\n", conn, round, what,
		n == 1 ? "brought a wrong byte" : n == 0 ? "returned 0 (EOF)" : strerror(errno));
	exit(1);
}

#define READ_WAIT_MS 60000 /* --size: a byte that never comes, reported */

static size_t msg_size;       /* --size; 0: the one-letter rounds */
static unsigned char *msg;    /* one request or answer */

/* Byte k of a round's request (dir 0) or answer (dir 1): a hash, so that a
 * byte lost, doubled or taken from another connection or round differs
 * from the one expected there (a counter would repeat across rounds). */
static unsigned char pattern(int conn, int round, size_t k, int dir)
{
	uint32_t x = (uint32_t)conn * 0x9e3779b1u ^ (uint32_t)round * 0x85ebca77u ^ (uint32_t)k * 0xc2b2ae3du ^
		     (uint32_t)dir * 0x27d4eb2fu;

	x ^= x >> 15;
	x *= 0x2c1b3c6du;
	x ^= x >> 12;
	x *= 0x297a2d39u;
	x ^= x >> 15;
	return (unsigned char)x;
}

/* Reads up to len bytes, each wait bounded (poll, not a blocking read, so
 * a missing byte is an error, not a hang): the count read, less at EOF or
 * when nothing came for READ_WAIT_MS (errno ETIMEDOUT), -1 on an error. */
static ssize_t read_full(int fd, unsigned char *p, size_t len)
{
	size_t got = 0;

	while (got < len) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int ready = poll(&pfd, 1, READ_WAIT_MS);
		ssize_t n;

		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0) {
			errno = ready ? errno : ETIMEDOUT;
			return ready ? -1 : (ssize_t)got;
		}
		n = read(fd, p + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			errno = n ? errno : 0;
			return n ? -1 : (ssize_t)got;
		}
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static void write_full(int fd, const unsigned char *p, size_t len, int conn, int round)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "conn_hold: connection %d: round %d: write: %s\n", conn, round, strerror(errno));
			exit(1);
		}
		p += n;
		len -= (size_t)n;
	}
}

/* Reads one request or answer and checks each byte; names the first wrong
 * one, or how many came when some are missing. */
static void recv_checked(int fd, int conn, int round, int dir)
{
	const char *what = dir ? "answer" : "request";
	ssize_t got = read_full(fd, msg, msg_size);

	if (got < (ssize_t)msg_size) {
		fprintf(stderr, "conn_hold: connection %d: round %d: %zd of the %zu bytes of the %s came (%s)\n", conn,
			round, got < 0 ? (ssize_t)0 : got, msg_size, what,
			got < 0 ? strerror(errno) : errno == ETIMEDOUT ? "nothing more for 60 s" : "EOF");
		exit(1);
	}
	for (size_t k = 0; k < msg_size; k++) {
		if (msg[k] != pattern(conn, round, k, dir)) {
			fprintf(stderr,
				"conn_hold: connection %d: round %d: byte %zu of the %zu of the %s is 0x%02x, "
				"expected 0x%02x\n",
				conn, round, k, msg_size, what, msg[k], pattern(conn, round, k, dir));
			exit(1);
		}
	}
}

static void send_pattern(int fd, int conn, int round, int dir)
{
	if (think_us)
		usleep(think_us);
	for (size_t k = 0; k < msg_size; k++)
		msg[k] = pattern(conn, round, k, dir);
	write_full(fd, msg, msg_size, conn, round);
}

/* One round of the connection: the letter, or with --size a checked
 * request and a checked answer. */
static void round_trip(int fd, bool client, int conn, int round)
{
	if (!msg_size) {
		one_byte(fd, client, conn, round);
	} else if (client) {
		send_pattern(fd, conn, round, 0);
		recv_checked(fd, conn, round, 1);
	} else {
		recv_checked(fd, conn, round, 0);
		send_pattern(fd, conn, round, 1);
	}
}

/* The peer must have ended its side right here: the next read is EOF.
 * Without --size one blocking read, as before --size came (the benches
 * count this program's system calls); with it, a bounded one. */
static void expect_eof(int fd, int conn)
{
	unsigned char c;
	ssize_t got;

	errno = 0;
	got = msg_size ? read_full(fd, &c, 1) : read(fd, &c, 1);
	if (got != 0 || errno == ETIMEDOUT) {
		fprintf(stderr, "conn_hold: connection %d: expected EOF, %s\n", conn,
			got > 0 ? "a byte came" : got < 0 ? strerror(errno) : "nothing came for 60 s");
		exit(1);
	}
}

/* --size, held mode: the client shuts every sending side down, then each
 * end must read EOF where the rounds ended (the server closes each
 * connection once it did, which is the client's EOF). */
static void end_streams(int *fds, int n, bool server)
{
	for (int i = 0; i < n && !server; i++) {
		if (shutdown(fds[i], SHUT_WR) < 0) {
			fprintf(stderr, "conn_hold: connection %d: shutdown: %s\n", i, strerror(errno));
			exit(1);
		}
	}
	for (int i = 0; i < n; i++) {
		expect_eof(fds[i], i);
		close(fds[i]);
	}
}

/* A prefork worker's connection: the rounds, the client's EOF, close. */
static void serve_one(int fd, int rounds, int conn)
{
	if (fd < 0) {
		fprintf(stderr, "conn_hold: accept: %s\n", strerror(errno));
		exit(1);
	}
	for (int r = 0; r < rounds; r++)
		round_trip(fd, false, conn, r);
	expect_eof(fd, conn);
	close(fd);
}

/* The client's port of a connection: its local one at the client, the
 * peer's at the server (the same number at both ends). */
static int client_port(int fd, bool server)
{
	struct sockaddr_in a = { 0 };
	socklen_t len = sizeof(a);

	if ((server ? getpeername(fd, (struct sockaddr *)&a, &len) : getsockname(fd, (struct sockaddr *)&a, &len)) < 0)
		return 0;
	return ntohs(a.sin_port);
}

/* Whether this process's RDMA warm-up thread lives, looked at most every
 * 50 ms (each look reads /proc); *last: when it was last seen. */
static bool warming(double *next_look, bool *was, double *last)
{
	double now = now_ms();

	if (now >= *next_look) {
		*was = thread_named("rdmashim-warm");
		*next_look = now + 50;
	}
	if (*was)
		*last = now;
	return *was;
}

/* The --warm connection; see the header. The server answers each byte
 * upper-cased while its own warm-up thread lives: the client then knows
 * both ends' warm-ups, and the connection's upgrade starts only once both
 * are over (a client that stopped MS after its start, its own warm-up
 * done, closed the connection in the server's handshake: links idle saw
 * one link where it wants two). */
static void warm(int lfd, struct in_addr host, int port, double ms)
{
	double end = now_ms() + ms, closed, look = 0, last = 0, peer_last = 0;
	int fd = lfd >= 0 ? accept(lfd, NULL, NULL) : connect_to(host, port), client;
	bool was = false;
	char c;

	if (fd < 0) {
		fprintf(stderr, "conn_hold: accept: %s\n", strerror(errno));
		exit(1);
	}
	/* Now: a peer that closes in the upgrade, the peer's SWITCH frame
	 * unread, resets the connection, and getpeername fails after. */
	client = client_port(fd, lfd >= 0);
	if (lfd >= 0) {
		while (read(fd, &c, 1) == 1)
			one_byte_back(fd, warming(&look, &was, &last) ? (char)(c ^ 0x20) : c);
	} else {
		/* MS at least, then on while either warm-up lives (60 s at
		 * most), then MS / 2 more for the upgrade itself. */
		for (int r = 0;; r++) {
			const char want = (char)('a' + r % 26);
			double now = now_ms();

			c = want;
			if (write(fd, &c, 1) != 1 || read(fd, &c, 1) != 1 || (c != want && c != (want ^ 0x20))) {
				fprintf(stderr, "conn_hold: warm connection: ping-pong failed in round %d\n", r);
				exit(1);
			}
			if (c != want)
				peer_last = now;
			warming(&look, &was, &last);
			if (r > 0 && now >= end &&
			    (now >= end + 60e3 || (now >= last + ms / 2 && now >= peer_last + ms / 2 && !was && c == want)))
				break;
		}
	}
	closed = now_ms();
	close(fd);
	while (thread_named("rdmashim-warm") && now_ms() < closed + 60e3)
		usleep(20000);
	printf("WARMED port=%d wait_ms=%.0f\n", client, now_ms() - closed);
	fflush(stdout);
}

/* --from-port: the local port of the next connection (0: the kernel's). */
static int next_from_port;

static int connect_to(struct in_addr host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = host };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd >= 0 && next_from_port) {
		struct sockaddr_in from = { .sin_family = AF_INET, .sin_port = htons((uint16_t)next_from_port++) };

		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0) {
			fprintf(stderr, "conn_hold: bind to port %d: %s\n", next_from_port - 1, strerror(errno));
			exit(1);
		}
	}
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
	long size = 0;
	double warm_ms = -1;
	struct in_addr host = { .s_addr = htonl(INADDR_LOOPBACK) };
	const char *go = NULL, *hold = NULL, *pause = NULL;
	bool server;

	if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: conn_hold server|client --port P --conns N [--rounds R] [--size B] [--each E] "
				"[--host A] [--from-port P] [--seq [--times]] [--fork W] [--warm MS] [--pause F] [--go F] [--hold F]\n");
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
		else if (!strcmp(argv[i], "--size"))
			size = atol(argv[++i]);
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
		else if (!strcmp(argv[i], "--from-port") && i + 1 < argc)
			next_from_port = atoi(argv[++i]);
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
	    (workers && (!server || !seq)) || size < 0 || size > (16l << 20))
		return 2;
	msg_size = (size_t)size;
	fds = calloc((size_t)n, sizeof(*fds));
	msg = malloc(msg_size ? msg_size : 1);
	if (!fds || !msg)
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
			round_trip(fds[i], !server, i, r);
		if (!seq)
			continue;
		first = now_ms(); /* with no rounds: the connect */
		for (int r = 0; r < rounds; r++) {
			round_trip(fds[i], !server, i, each + r);
			if (r == 0)
				first = now_ms();
		}
		if (server)
			expect_eof(fds[i], i);
		close(fds[i]);
		if (times && !server)
			printf("CONN %d first_us=%.0f total_us=%.0f\n", i, (first - c0) * 1e3, (now_ms() - c0) * 1e3);
	}
	if (seq) {
		printf("DONE ms=%.1f cpu_us=%.0f\n", now_ms() - t0, cpu_us() - cpu0);
		if (msg_size)
			printf("CHECKED conns=%d rounds=%d size=%zu\n", n, each + rounds, msg_size);
		return 0;
	}
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < n; i++)
			round_trip(fds[i], !server, i, each + r);
	printf("UP ms=%.1f\n", now_ms() - t0);
	fflush(stdout);
	wait_file(hold);
	if (!msg_size) {
		for (int i = 0; i < n; i++)
			close(fds[i]);
		return 0;
	}
	end_streams(fds, n, server);
	printf("CHECKED conns=%d rounds=%d size=%zu\n", n, each + rounds, msg_size);
	return 0;
}
