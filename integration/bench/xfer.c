/*
 * xfer: ping-pong latency and one-way throughput at one message size, over
 * loopback TCP or a Unix-domain stream socket, with the CPU time each end
 * spent; the transfer program of the benchmark suite (suite.sh). The same
 * program serves every transport, so that only the transport differs.
 *
 *   xfer server (--port P [--addr A] | --unix PATH) [--timeout SEC]
 *   xfer client (--port P [--addr A] | --unix PATH) --op pp|bw --size N
 *               [--size N ...] --secs S [--warm-ms W] [--first-warm-ms W]
 *
 * A is an IPv4 address (default 127.0.0.1: the VM benchmark uses the
 * address of its RDMA device). Each --size is one connection, one after
 * the other in the same process, each printing its line: under the shim
 * over RDMA a process's first connection waits out the process's warm-up
 * (--first-warm-ms, default W), the later ones find it done.
 *
 * The server prints "READY" once listening and serves connections one
 * after the other until --timeout (default 600 s) or a signal. A
 * connection: the client's header (op, size); a warm-up of 16-byte
 * ping-pongs for W ms (default 40: a connection under the shim upgrades
 * only once it is a few milliseconds old and has made a round trip); then
 * the measured phase, ping-pong of N-byte messages (pp) or N-byte writes
 * one way (bw, Nagle's algorithm left on as sockperf's throughput test
 * has it), for S seconds; the client's shutdown(SHUT_WR); the server's
 * trailer (bytes it received in the measured phase, its CPU time over it).
 *
 * The client prints one JSON object: for pp the half round trip's p50,
 * p99 and mean in microseconds (sockperf's "latency"), for bw the bytes
 * per second the server received; for both, each end's CPU time in the
 * measured phase (getrusage, all threads, so a preloaded library's own
 * threads count) and the phase's wall time. Exit status 0, or 1 with a
 * line on stderr.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x78667231u
#define MAX_SIZE (16u << 20)
#define MAX_SAMPLES (1u << 21)
#define WARM_LEN 16

struct hdr {
	uint32_t magic, op, size, pad;
};
struct trailer {
	uint64_t bytes, user_us, sys_us;
};

static int port = -1;
static const char *upath;
static in_addr_t addr; /* network order; 0 until --addr: loopback */

static void fail(const char *what)
{
	fprintf(stderr, "xfer: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void cpu_us(uint64_t *user, uint64_t *sys)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	*user = ru.ru_utime.tv_sec * 1000000ull + ru.ru_utime.tv_usec;
	*sys = ru.ru_stime.tv_sec * 1000000ull + ru.ru_stime.tv_usec;
}

/* Reads exactly n bytes; 0 at a clean EOF before the first, -1 otherwise short. */
static int read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return got == 0 && r == 0 ? 0 : -1;
		got += r;
	}
	return 1;
}

static int write_full(int fd, const void *buf, size_t n)
{
	size_t put = 0;
	while (put < n) {
		ssize_t r = write(fd, (const char *)buf + put, n - put);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		put += r;
	}
	return 0;
}

static int make_socket(struct sockaddr_storage *sa, socklen_t *len)
{
	memset(sa, 0, sizeof(*sa));
	if (upath) {
		struct sockaddr_un *u = (struct sockaddr_un *)sa;
		u->sun_family = AF_UNIX;
		snprintf(u->sun_path, sizeof(u->sun_path), "%s", upath);
		*len = sizeof(*u);
		return socket(AF_UNIX, SOCK_STREAM, 0);
	}
	struct sockaddr_in *in = (struct sockaddr_in *)sa;
	in->sin_family = AF_INET;
	in->sin_port = htons(port);
	in->sin_addr.s_addr = addr ? addr : htonl(INADDR_LOOPBACK);
	*len = sizeof(*in);
	return socket(AF_INET, SOCK_STREAM, 0);
}

static void nodelay(int fd)
{
	int one = 1;
	if (!upath)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Warm-up echo until the client's 'M'; then the measured phase. */
static void serve_one(int fd, char *buf)
{
	struct hdr h;
	struct trailer t = { 0 };
	uint64_t u0, s0, u1, s1;
	char w[WARM_LEN];

	if (read_full(fd, &h, sizeof(h)) != 1 || h.magic != MAGIC || h.size == 0 || h.size > MAX_SIZE)
		return;
	if (h.op == 0)
		nodelay(fd);
	do {
		if (read_full(fd, w, WARM_LEN) != 1 || write_full(fd, w, WARM_LEN) < 0)
			return;
	} while (w[0] != 'M');
	cpu_us(&u0, &s0);
	for (;;) {
		if (h.op == 0) {
			int r = read_full(fd, buf, h.size);
			if (r == 0)
				break;
			if (r < 0 || write_full(fd, buf, h.size) < 0)
				return;
			t.bytes += h.size;
		} else {
			ssize_t r = read(fd, buf, h.size);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				return;
			if (r == 0)
				break;
			t.bytes += r;
		}
	}
	cpu_us(&u1, &s1);
	t.user_us = u1 - u0;
	t.sys_us = s1 - s0;
	write_full(fd, &t, sizeof(t));
}

static _Noreturn void server(int timeout)
{
	struct sockaddr_storage sa;
	socklen_t len;
	int one = 1, lfd = make_socket(&sa, &len);
	char *buf = malloc(MAX_SIZE);

	if (lfd < 0 || !buf)
		fail("socket");
	if (upath)
		unlink(upath);
	else
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, len) < 0 || listen(lfd, 16) < 0)
		fail("bind/listen");
	alarm(timeout);
	printf("READY\n");
	fflush(stdout);
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			fail("accept");
		}
		serve_one(fd, buf);
		close(fd);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int client(int op, uint32_t size, double secs, double warm_ms)
{
	struct sockaddr_storage sa;
	socklen_t len;
	int fd = make_socket(&sa, &len);
	char *buf = calloc(1, size);
	double *lat = op == 0 ? malloc(MAX_SAMPLES * sizeof(double)) : NULL;
	struct hdr h = { MAGIC, op, size, 0 };
	struct trailer t;
	uint64_t n = 0, u0, s0, u1, s1;
	char w[WARM_LEN] = { 'W' };
	double t0, t1, end;

	if (fd < 0 || !buf || (op == 0 && !lat))
		fail("socket");
	if (connect(fd, (struct sockaddr *)&sa, len) < 0)
		fail("connect");
	if (op == 0)
		nodelay(fd);
	if (write_full(fd, &h, sizeof(h)) < 0)
		fail("header");
	end = now() + warm_ms / 1000;
	for (;;) {
		if (now() >= end)
			w[0] = 'M';
		if (write_full(fd, w, WARM_LEN) < 0 || read_full(fd, w, WARM_LEN) != 1)
			fail("warm-up");
		if (w[0] == 'M')
			break;
	}
	cpu_us(&u0, &s0);
	t0 = now();
	end = t0 + secs;
	if (op == 0) {
		double a = t0, b;
		do {
			if (write_full(fd, buf, size) < 0 || read_full(fd, buf, size) != 1)
				fail("ping-pong");
			b = now();
			lat[n++] = (b - a) * 1e6 / 2;
			a = b;
		} while (b < end && n < MAX_SAMPLES);
	} else {
		do {
			if (write_full(fd, buf, size) < 0)
				fail("write");
			n++;
		} while ((n & 15) || now() < end);
	}
	shutdown(fd, SHUT_WR);
	if (read_full(fd, &t, sizeof(t)) != 1)
		fail("trailer");
	t1 = now();
	cpu_us(&u1, &s1);
	printf("{\"op\":\"%s\",\"size\":%u,\"msgs\":%llu,\"bytes\":%llu,\"secs\":%.6f,"
	       "\"cpu_client_us\":%llu,\"cpu_server_us\":%llu",
	       op == 0 ? "pp" : "bw", size, (unsigned long long)n, (unsigned long long)t.bytes, t1 - t0,
	       (unsigned long long)(u1 - u0 + s1 - s0), (unsigned long long)(t.user_us + t.sys_us));
	if (op == 0) {
		double sum = 0;
		for (uint64_t i = 0; i < n; i++)
			sum += lat[i];
		qsort(lat, n, sizeof(double), cmp_double);
		printf(",\"p50_us\":%.4f,\"p99_us\":%.4f,\"mean_us\":%.4f", lat[n / 2], lat[(uint64_t)(n * 0.99)],
		       sum / n);
	} else {
		printf(",\"bytes_per_sec\":%.1f", t.bytes / (t1 - t0));
	}
	printf("}\n");
	return 0;
}

#define MAX_SIZES 32

int main(int argc, char **argv)
{
	int op = -1, timeout = 600, nsizes = 0;
	uint32_t sizes[MAX_SIZES];
	double secs = 1, warm_ms = 40, first_warm_ms = -1;

	if (argc < 2)
		goto usage;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!v)
			goto usage;
		if (!strcmp(a, "--port"))
			port = atoi(v);
		else if (!strcmp(a, "--unix"))
			upath = v;
		else if (!strcmp(a, "--op"))
			op = !strcmp(v, "pp") ? 0 : !strcmp(v, "bw") ? 1 : -1;
		else if (!strcmp(a, "--addr")) {
			if (inet_pton(AF_INET, v, &addr) != 1)
				goto usage;
		} else if (!strcmp(a, "--size")) {
			if (nsizes == MAX_SIZES)
				goto usage;
			sizes[nsizes++] = strtoul(v, NULL, 0);
		} else if (!strcmp(a, "--first-warm-ms"))
			first_warm_ms = atof(v);
		else if (!strcmp(a, "--secs"))
			secs = atof(v);
		else if (!strcmp(a, "--warm-ms"))
			warm_ms = atof(v);
		else if (!strcmp(a, "--timeout"))
			timeout = atoi(v);
		else
			goto usage;
		i++;
	}
	if ((port < 0) == !upath)
		goto usage;
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[1], "server"))
		server(timeout);
	if (!strcmp(argv[1], "client") && op >= 0 && nsizes > 0) {
		for (int i = 0; i < nsizes; i++)
			if (sizes[i] == 0 || sizes[i] > MAX_SIZE)
				goto usage;
		for (int i = 0; i < nsizes; i++) {
			client(op, sizes[i], secs, i == 0 && first_warm_ms >= 0 ? first_warm_ms : warm_ms);
			fflush(stdout);
		}
		return 0;
	}
usage:
	fprintf(stderr, "usage: xfer server (--port P [--addr A] | --unix PATH) [--timeout SEC]\n"
			"       xfer client (--port P [--addr A] | --unix PATH) --op pp|bw --size N [--size N ...]\n"
			"                   --secs S [--warm-ms W] [--first-warm-ms W]\n");
	return 2;
}
