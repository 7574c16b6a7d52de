/*
 * close_cost: what the shim's close of a tracked connection costs after few
 * and after many connections were made, through the library's own entry
 * points (unit level: linked against librdmashim_core.a, no LD_PRELOAD).
 *
 *   close_cost N [PORT]
 *
 * PORT 0 or absent: the kernel picks a free one (and that one is whitelisted).
 * One real TCP connection on 127.0.0.1:PORT (whitelisted, transports=tcp so
 * nothing upgrades); then N times: a fresh fd for it (dup, which the core
 * does not hook), shim_sock_adopt() (the tracking that connect/accept/
 * SCM_RIGHTS do: a new shim_sock), then shim_sock_on_close() + close(),
 * timed. A connection made and closed per iteration, as far as the shim's
 * bookkeeping goes, without N real handshakes (a million of those take
 * minutes and exhaust ports). Prints the median close time (ns) over the
 * first 10 closes, over closes 1,001-11,000 and over the last 10,000, and
 * the last 10 alone.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fdtable.h"
#include "real.h"
#include "sock.h"

static const char *env(const char *name, void *ctx)
{
	(void)ctx;
	return getenv(name);
}

static long long ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

static long long median(long long *v, long n)
{
	long long *copy = malloc((size_t)n * sizeof(*v)), m;

	memcpy(copy, v, (size_t)n * sizeof(*v));
	qsort(copy, (size_t)n, sizeof(*v), cmp);
	m = copy[n / 2];
	free(copy);
	return m;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	int port = argc > 2 ? atoi(argv[2]) : 0;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	char err[512], portstr[16];
	long long *t;
	int l, c, s, one = 1;

	if (n < 20000 || port < 0) {
		fprintf(stderr, "usage: close_cost N(>=20000) [PORT]\n");
		return 2;
	}
	shim_real_resolve();
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &(socklen_t){ sizeof(a) }) < 0) {
		perror("close_cost: listen");
		return 1;
	}
	snprintf(portstr, sizeof(portstr), "%d", ntohs(a.sin_port));
	setenv("RDMASHIM_PORTS", portstr, 1);
	setenv("RDMASHIM_TRANSPORTS", "tcp", 1);
	if (shim_config_parse(&shim_cfg, env, NULL, err, sizeof(err)) < 0 || shim_fdtable_init(4096) < 0) {
		fprintf(stderr, "close_cost: %s\n", err);
		return 1;
	}
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0 || (s = accept(l, NULL, NULL)) < 0) {
		perror("close_cost: loopback connection");
		return 1;
	}
	t = malloc((size_t)n * sizeof(*t));
	for (long i = 0; i < n; i++) {
		int fd = dup(c);
		long long t0;

		shim_sock_adopt(fd, "bench");
		if (i == 0 && !shim_fd_get(fd)) {
			fprintf(stderr, "close_cost: the connection was not tracked\n");
			return 1;
		}
		t0 = ns();
		shim_sock_on_close(fd);
		close(fd);
		t[i] = ns() - t0;
	}
	printf("connections made and closed: %ld\n", n);
	printf("median close, closes 1-10:               %lld ns\n", median(t, 10));
	printf("median close, closes 1,001-11,000:       %lld ns\n", median(t + 1000, 10000));
	printf("median close, last 10,000 (to %ld):  %lld ns\n", n, median(t + n - 10000, 10000));
	printf("median close, last 10:                   %lld ns\n", median(t + n - 10, 10));
	printf("socks in the pool at the end: %u (live %u)\n", shim_sock_pool_count(), shim_sock_live_count());
	close(s);
	close(c);
	close(l);
	free(t);
	return 0;
}
