/*
 * close_loop: N real loopback TCP connections made and closed one after the
 * other on one port (a listener in this process accepts and closes each);
 * times every client close() and prints medians over the first 10, over
 * 1,001-2,000 and over the last 1,000 (ns). Run under the shim with the port
 * whitelisted, this is what a program's close of a tracked connection costs
 * after many were made (integration/bench/close_cost.sh).
 *
 *   close_loop N [PORT]       (PORT 0 or absent: any free one)
 *
 * SO_LINGER 0 on the client: its close resets instead of leaving TIME_WAIT,
 * so N can exceed the ephemeral port range.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

static long long median(const long long *v, long n)
{
	long long *c = malloc((size_t)n * sizeof(*c)), m;

	memcpy(c, v, (size_t)n * sizeof(*c));
	qsort(c, (size_t)n, sizeof(*c), cmp);
	m = c[n / 2];
	free(c);
	return m;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct linger lg = { 1, 0 };
	socklen_t alen = sizeof(a);
	long long *t;
	int l, one = 1;

	if (n < 2000) {
		fprintf(stderr, "usage: close_loop N(>=2000) [PORT]\n");
		return 2;
	}
	a.sin_port = htons((uint16_t)(argc > 2 ? atoi(argv[2]) : 0));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 64) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &alen) < 0) {
		perror("close_loop: listen");
		return 1;
	}
	t = malloc((size_t)n * sizeof(*t));
	for (long i = 0; i < n; i++) {
		int c = socket(AF_INET, SOCK_STREAM, 0), s;
		long long t0;

		if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0 || (s = accept(l, NULL, NULL)) < 0) {
			perror("close_loop: connection");
			return 1;
		}
		setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		t0 = ns();
		close(c);
		t[i] = ns() - t0;
		close(s);
	}
	printf("real connections made and closed: %ld (port %d)\n", n, ntohs(a.sin_port));
	printf("median close(), closes 1-10:        %lld ns\n", median(t, 10));
	printf("median close(), closes 1,001-2,000: %lld ns\n", median(t + 1000, 1000));
	printf("median close(), last 1,000:         %lld ns\n", median(t + n - 1000, 1000));
	free(t);
	close(l);
	return 0;
}
