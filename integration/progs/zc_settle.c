/*
 * zc_settle: an offering receive whose offer another thread settles
 * (one copy on shared memory, docs/ZEROCOPY.md; t_shm_zc (g)).
 *
 *   zc_settle server PORT [ROUNDS] [MSG]   accepts one connection; its
 *       main thread reads each message of MSG bytes (default 1M) with
 *       blocking reads of a MSG buffer (each offers it) and answers one
 *       byte; a second thread peeks one byte without waiting, over and
 *       over, so that its reads settle the main thread's offers. Prints
 *       "zc_settle: OK rounds=R" or "zc_settle: FAIL ..." (exit 1).
 *   zc_settle client PORT [ROUNDS] [MSG]   sends ROUNDS (default 40)
 *       messages, each after the answer to the one before, and prints
 *       "zc_settle: rounds=R worst_ms=W" (the slowest round trip).
 *
 * A reader whose offer another thread settled and that slept on anyway
 * answers a slice later (200 ms) than it could: the worst round trip
 * shows it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 20

static atomic_int stop_peek;
static int conn_fd;

static inline uint8_t pattern(uint64_t o)
{
	return (uint8_t)(o ^ (o >> 8) ^ (o >> 17) ^ 0x3c);
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void *peeker(void *arg)
{
	uint8_t c;

	(void)arg;
	while (!atomic_load(&stop_peek))
		recv(conn_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return NULL;
}

static int serve(int port, unsigned rounds, size_t msg)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);
	uint8_t *buf = malloc(msg);
	uint64_t off = 0;
	pthread_t thr;

	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (!buf || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 4) < 0) {
		perror("zc_settle: listen");
		return 2;
	}
	printf("READY %d\n", port);
	fflush(stdout);
	conn_fd = accept(ls, NULL, NULL);
	if (conn_fd < 0) {
		perror("zc_settle: accept");
		return 2;
	}
	/* Ping-pongs first: the upgrade (its switch, which a thread that
	 * did not sleep may finish) is over before the peeking starts. */
	for (int i = 0; i < WARMUP; i++) {
		char c;

		if (recv(conn_fd, &c, 1, MSG_WAITALL) != 1 || send(conn_fd, &c, 1, 0) != 1) {
			printf("zc_settle: FAIL warm-up: %s\n", strerror(errno));
			return 1;
		}
	}
	pthread_create(&thr, NULL, peeker, NULL);
	for (unsigned r = 0; r < rounds; r++) {
		size_t got = 0;

		while (got < msg) {
			ssize_t n = recv(conn_fd, buf, msg - got, 0);

			if (n <= 0) {
				printf("zc_settle: FAIL round %u: recv %zd (%s)\n", r, n, n < 0 ? strerror(errno) : "EOF");
				return 1;
			}
			for (ssize_t i = 0; i < n; i++)
				if (buf[i] != pattern(off + (uint64_t)i)) {
					printf("zc_settle: FAIL wrong byte at %llu\n", (unsigned long long)(off + (uint64_t)i));
					return 1;
				}
			off += (uint64_t)n;
			got += (size_t)n;
		}
		if (send(conn_fd, "k", 1, 0) != 1) {
			printf("zc_settle: FAIL answer: %s\n", strerror(errno));
			return 1;
		}
	}
	atomic_store(&stop_peek, 1);
	pthread_join(thr, NULL);
	printf("zc_settle: OK rounds=%u\n", rounds);
	return 0;
}

static int client(int port, unsigned rounds, size_t msg)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	uint8_t *buf = malloc(msg);
	uint64_t off = 0;
	double worst = 0;
	unsigned worst_round = 0;

	if (!buf || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("zc_settle: connect");
		return 2;
	}
	for (int i = 0; i < WARMUP; i++) {
		char c = 'w';

		if (send(fd, &c, 1, 0) != 1 || recv(fd, &c, 1, MSG_WAITALL) != 1) {
			perror("zc_settle: warm-up");
			return 1;
		}
		usleep(10000);
	}
	for (unsigned r = 0; r < rounds; r++) {
		double t0;
		char c;

		for (size_t i = 0; i < msg; i++)
			buf[i] = pattern(off + i);
		off += msg;
		/* Let the reader go back to its wait, offering. */
		usleep(2000);
		t0 = now_ms();
		for (size_t sent = 0; sent < msg;) {
			ssize_t n = send(fd, buf + sent, msg - sent, 0);

			if (n <= 0) {
				perror("zc_settle: send");
				return 1;
			}
			sent += (size_t)n;
		}
		if (recv(fd, &c, 1, MSG_WAITALL) != 1) {
			perror("zc_settle: answer");
			return 1;
		}
		if (now_ms() - t0 > worst) {
			worst = now_ms() - t0;
			worst_round = r;
		}
	}
	printf("zc_settle: rounds=%u worst_ms=%.1f worst_round=%u\n", rounds, worst, worst_round);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned rounds = argc > 3 ? (unsigned)atoi(argv[3]) : 40;
	size_t msg = argc > 4 ? (size_t)strtoull(argv[4], NULL, 10) : 1u << 20;

	if (argc < 3) {
		fprintf(stderr, "usage: zc_settle server|client PORT [ROUNDS] [MSG]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "server"))
		return serve(atoi(argv[2]), rounds, msg);
	return client(atoi(argv[2]), rounds, msg);
}
