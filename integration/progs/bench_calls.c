/*
 * bench_calls: the cost of one 1-byte send() or recv() on a loopback TCP
 * connection, for comparing runs with and without LD_PRELOAD=librdmashim.so
 * (integration/bench/passthrough.sh does that).
 *
 * It opens a connected pair (listen on 127.0.0.1 port 0, connect, accept),
 * then in one thread does send(1 byte) on one end and recv(1 byte) on the
 * other, blocking, K times per batch, for B batches. A "call" is one send or
 * one recv, so a batch is 2*K calls. It prints the median and the minimum
 * batch's ns per call:
 *
 *   calls_ns median=1234.5 min=1200.1 batches=31 iters=20000
 *
 * Options: -b batches (31), -k iterations per batch (20000),
 *          -w warm-up iterations (2000), -p port to listen on (0: any),
 *          -q (quiet: run the loop once, -k iterations, print nothing but
 *          "done iters=K"; for instruction counting under callgrind, where
 *          the loop is the function bench_loop).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "bench_calls: %s: %s\n", what, strerror(errno));
	exit(1);
}

static long parse_pos(const char *s, const char *name)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0) {
		fprintf(stderr, "bench_calls: bad %s: %s\n", name, s);
		exit(2);
	}
	return v;
}

static void connected_pair(int port, int *a, int *b)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int one = 1;
	int l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0)
		die("socket");
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("bind");
	if (listen(l, 1) < 0)
		die("listen");
	if (getsockname(l, (struct sockaddr *)&sa, &len) < 0)
		die("getsockname");
	*a = socket(AF_INET, SOCK_STREAM, 0);
	if (*a < 0)
		die("socket");
	if (connect(*a, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	*b = accept(l, NULL, NULL);
	if (*b < 0)
		die("accept");
	close(l);
	/* 1-byte writes must leave at once, not wait for an ACK (Nagle). */
	if (setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0 ||
	    setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		die("setsockopt TCP_NODELAY");
}

/* The measured loop; noinline so callgrind can --toggle-collect on it. */
__attribute__((noinline)) void bench_loop(int a, int b, long iters)
{
	char out = 'x', in;

	for (long i = 0; i < iters; i++) {
		if (send(a, &out, 1, 0) != 1)
			die("send");
		if (recv(b, &in, 1, 0) != 1)
			die("recv");
	}
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
	long batches = 31, iters = 20000, warmup = 2000, port = 0;
	int quiet = 0, opt, a, b;
	double *ns;

	while ((opt = getopt(argc, argv, "b:k:w:p:q")) != -1) {
		switch (opt) {
		case 'b': batches = parse_pos(optarg, "batches"); break;
		case 'k': iters = parse_pos(optarg, "iters"); break;
		case 'w': warmup = parse_pos(optarg, "warmup"); break;
		case 'p': port = parse_pos(optarg, "port"); break;
		case 'q': quiet = 1; break;
		default:
			fprintf(stderr, "usage: %s [-b batches] [-k iters] [-w warmup] [-p port] [-q]\n",
				argv[0]);
			return 2;
		}
	}
	if (batches < 1 || iters < 1 || port > 65535) {
		fprintf(stderr, "bench_calls: need batches >= 1, iters >= 1, port <= 65535\n");
		return 2;
	}

	connected_pair((int)port, &a, &b);

	if (quiet) {
		bench_loop(a, b, iters);
		printf("done iters=%ld\n", iters);
		return 0;
	}

	bench_loop(a, b, warmup);
	ns = calloc((size_t)batches, sizeof(*ns));
	if (!ns)
		die("calloc");
	for (long i = 0; i < batches; i++) {
		double t0 = now_ns();

		bench_loop(a, b, iters);
		ns[i] = (now_ns() - t0) / (2.0 * (double)iters);
	}
	qsort(ns, (size_t)batches, sizeof(*ns), cmp_double);
	printf("calls_ns median=%.1f min=%.1f batches=%ld iters=%ld\n", ns[batches / 2], ns[0],
	       batches, iters);
	free(ns);
	close(a);
	close(b);
	return 0;
}
