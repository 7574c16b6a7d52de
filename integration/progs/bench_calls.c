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
 *          the loop is the function bench_loop),
 *          -i (interleaved, see below).
 *
 * -i compares, inside one process, send/recv as the dynamic linker bound them
 * (the shim's when it is preloaded) with libc's own send/recv (dlsym on
 * libc.so.6), alternating batch by batch (ABBA), -b batches of each. Both go
 * through the same function-pointer loop, so with the shim preloaded the
 * difference is the shim's wrappers, and without it the two are the same
 * functions (an A/A run: the method's own bias). Host noise that lasts
 * seconds hits both sides alike, which separate processes can not ensure:
 *
 *   calls_ns_interleaved bound=1234.5 libc=1230.0 diff=4.5 same_fn=0 batches=31 iters=20000
 *
 * bound and libc are median batch ns per call, diff is the median over batch
 * pairs of (bound - libc), same_fn is 1 when both resolve to one function.
 */
#include <dlfcn.h>
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

typedef ssize_t (*send_fn)(int, const void *, size_t, int);
typedef ssize_t (*recv_fn)(int, void *, size_t, int);

/* The interleaved loop: the same code for either pair of functions. */
__attribute__((noinline)) static void bench_loop_fn(int a, int b, long iters, send_fn sendf,
						    recv_fn recvf)
{
	char out = 'x', in;

	for (long i = 0; i < iters; i++) {
		if (sendf(a, &out, 1, 0) != 1)
			die("send");
		if (recvf(b, &in, 1, 0) != 1)
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

static double median_of(double *v, long n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int interleaved(int a, int b, long batches, long iters, long warmup)
{
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	send_fn bound_send = send, libc_send;
	recv_fn bound_recv = recv, libc_recv;
	double *ns[2], *diff;

	if (!libc) {
		fprintf(stderr, "bench_calls: dlopen libc.so.6: %s\n", dlerror());
		return 1;
	}
	libc_send = (send_fn)dlsym(libc, "send");
	libc_recv = (recv_fn)dlsym(libc, "recv");
	if (!libc_send || !libc_recv) {
		fprintf(stderr, "bench_calls: dlsym send/recv in libc: %s\n", dlerror());
		return 1;
	}
	ns[0] = calloc((size_t)batches, sizeof(double));
	ns[1] = calloc((size_t)batches, sizeof(double));
	diff = calloc((size_t)batches, sizeof(double));
	if (!ns[0] || !ns[1] || !diff)
		die("calloc");
	bench_loop_fn(a, b, warmup, bound_send, bound_recv);
	bench_loop_fn(a, b, warmup, libc_send, libc_recv);
	for (long i = 0; i < batches; i++) {
		for (int j = 0; j < 2; j++) {
			/* ABBA: even pairs bound first, odd pairs libc first. */
			int side = (int)(i & 1) ^ j;
			double t0 = now_ns();

			if (side == 0)
				bench_loop_fn(a, b, iters, bound_send, bound_recv);
			else
				bench_loop_fn(a, b, iters, libc_send, libc_recv);
			ns[side][i] = (now_ns() - t0) / (2.0 * (double)iters);
		}
		diff[i] = ns[0][i] - ns[1][i];
	}
	printf("calls_ns_interleaved bound=%.1f libc=%.1f diff=%.1f same_fn=%d batches=%ld iters=%ld\n",
	       median_of(ns[0], batches), median_of(ns[1], batches), median_of(diff, batches),
	       bound_send == libc_send && bound_recv == libc_recv, batches, iters);
	free(ns[0]);
	free(ns[1]);
	free(diff);
	return 0;
}

int main(int argc, char **argv)
{
	long batches = 31, iters = 20000, warmup = 2000, port = 0;
	int quiet = 0, inter = 0, opt, a, b;
	double *ns;

	while ((opt = getopt(argc, argv, "b:k:w:p:qi")) != -1) {
		switch (opt) {
		case 'b': batches = parse_pos(optarg, "batches"); break;
		case 'k': iters = parse_pos(optarg, "iters"); break;
		case 'w': warmup = parse_pos(optarg, "warmup"); break;
		case 'p': port = parse_pos(optarg, "port"); break;
		case 'q': quiet = 1; break;
		case 'i': inter = 1; break;
		default:
			fprintf(stderr, "usage: %s [-b batches] [-k iters] [-w warmup] [-p port] [-q | -i]\n",
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
	if (inter)
		return interleaved(a, b, batches, iters, warmup);

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
