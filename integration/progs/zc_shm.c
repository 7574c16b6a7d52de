/*
 * zc_shm: a byte-checked stream of large blocking sends and receives, for
 * one copy on shared memory (docs/ZEROCOPY.md, t_shm_zc).
 *
 *   zc_shm server PORT [options]   accepts one connection, reads and
 *                                  checks every byte; prints
 *                                  "zc_shm: OK bytes=N intr=I tmo=T again=A"
 *                                  or "zc_shm: FAIL ..." (exit 1)
 *   zc_shm client PORT [options]   connects to 127.0.0.1:PORT and sends
 *
 * Options:
 *   --bytes N      total bytes (default 256M)
 *   --msg N        the sender's message size (default 4M)
 *   --buf N        the reader's buffer (default 4M)
 *   --signals      server: a thread sends SIGUSR1 (no SA_RESTART) to the
 *                  reader every ms: reads end with EINTR or short
 *   --rcvtimeo MS  server: SO_RCVTIMEO; EAGAIN reads are counted and retried
 *   --nonblock K   server: every K-th read is MSG_DONTWAIT
 *   --pause-us U   client: sleeps U us between messages (the reader waits
 *                  on an empty ring, and its timeouts fire)
 *   --die-after N  client: SIGKILLs itself in the middle of a send once N
 *                  bytes were sent (a thread does it); the server then
 *                  checks the prefix it got and expects the end (EOF or
 *                  ECONNRESET), not a hang
 *   --waitall      server: recv with MSG_WAITALL
 * The byte at stream offset o is pattern(o).
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static size_t opt_bytes = 256u << 20, opt_msg = 4u << 20, opt_buf = 4u << 20, opt_die_after;
static unsigned opt_nonblock, opt_pause_us, opt_rcvtimeo;
static bool opt_signals, opt_waitall;
static volatile int stop_signals;
static pthread_t reader;

static inline uint8_t pattern(uint64_t o)
{
	return (uint8_t)(o ^ (o >> 8) ^ (o >> 17) ^ 0x5a);
}

static size_t size_arg(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	else if (*end == 'G' || *end == 'g')
		v <<= 30;
	return (size_t)v;
}

static void on_usr1(int sig)
{
	(void)sig;
}

static void *signaller(void *arg)
{
	(void)arg;
	while (!stop_signals) {
		struct timespec ts = { 0, 1000000 };

		pthread_kill(reader, SIGUSR1);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static int serve(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0), fd;
	uint8_t *buf = malloc(opt_buf);
	unsigned long long off = 0, intr = 0, tmo = 0, again = 0, reads = 0;
	pthread_t sig_thr;

	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (!buf || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 4) < 0) {
		perror("zc_shm: listen");
		return 2;
	}
	printf("READY %d\n", port);
	fflush(stdout);
	fd = accept(ls, NULL, NULL);
	if (fd < 0) {
		perror("zc_shm: accept");
		return 2;
	}
	if (opt_rcvtimeo) {
		struct timeval tv = { opt_rcvtimeo / 1000, (opt_rcvtimeo % 1000) * 1000 };

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	reader = pthread_self();
	if (opt_signals) {
		struct sigaction sa = { .sa_handler = on_usr1 }; /* no SA_RESTART: EINTR */

		sigaction(SIGUSR1, &sa, NULL);
		pthread_create(&sig_thr, NULL, signaller, NULL);
	}
	for (;;) {
		int fl = opt_waitall ? MSG_WAITALL : 0;
		ssize_t n;

		reads++;
		if (opt_nonblock && reads % opt_nonblock == 0)
			fl = MSG_DONTWAIT;
		/* A marker the sender never writes: a byte the read did not
		 * return must not be trusted, and a stale one is caught. */
		n = recv(fd, buf, opt_buf, fl);
		if (n < 0) {
			if (errno == EINTR) {
				intr++;
				continue;
			}
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (fl & MSG_DONTWAIT)
					again++;
				else
					tmo++;
				continue;
			}
			if (errno == ECONNRESET && opt_die_after)
				break;
			printf("zc_shm: FAIL recv errno=%d (%s) at=%llu\n", errno, strerror(errno), off);
			return 1;
		}
		if (n == 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != pattern(off + (uint64_t)i)) {
				printf("zc_shm: FAIL offset=%llu expected=0x%02x got=0x%02x\n", off + (unsigned long long)i,
				       pattern(off + (uint64_t)i), buf[i]);
				return 1;
			}
		}
		off += (unsigned long long)n;
	}
	stop_signals = 1;
	if (opt_signals)
		pthread_join(sig_thr, NULL);
	if (!opt_die_after && off != opt_bytes) {
		printf("zc_shm: FAIL short bytes=%llu want=%zu\n", off, opt_bytes);
		return 1;
	}
	printf("zc_shm: OK bytes=%llu intr=%llu tmo=%llu again=%llu\n", off, intr, tmo, again);
	return 0;
}

static volatile size_t sent_so_far;

static void *killer(void *arg)
{
	(void)arg;
	while (sent_so_far < opt_die_after) {
		struct timespec ts = { 0, 50000 };

		nanosleep(&ts, NULL);
	}
	/* In the middle of whatever send is running now. */
	raise(SIGKILL);
	return NULL;
}

static int client(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	uint8_t *msg = malloc(opt_msg);
	unsigned long long off = 0;
	pthread_t kt;

	if (!msg || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("zc_shm: connect");
		return 2;
	}
	if (opt_die_after)
		pthread_create(&kt, NULL, killer, NULL);
	while (off < opt_bytes) {
		size_t len = opt_bytes - off < opt_msg ? (size_t)(opt_bytes - off) : opt_msg;
		size_t done = 0;

		for (size_t i = 0; i < len; i++)
			msg[i] = pattern(off + i);
		while (done < len) {
			ssize_t n = send(fd, msg + done, len - done, MSG_NOSIGNAL);

			if (n < 0) {
				if (errno == EINTR)
					continue;
				printf("zc_shm: client send errno=%d (%s)\n", errno, strerror(errno));
				return 1;
			}
			done += (size_t)n;
			sent_so_far = off + done;
		}
		/* The buffer is ours again: scribble on it, a late write of
		 * the old bytes would be caught by the reader. */
		memset(msg, 0xee, len);
		off += len;
		if (opt_pause_us) {
			struct timespec ts = { opt_pause_us / 1000000, (opt_pause_us % 1000000) * 1000L };

			nanosleep(&ts, NULL);
		}
	}
	close(fd);
	printf("zc_shm: client OK bytes=%llu\n", off);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: zc_shm server|client PORT [options]\n");
		return 2;
	}
	for (int i = 3; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : "0";

		if (!strcmp(o, "--signals")) {
			opt_signals = true;
			continue;
		}
		if (!strcmp(o, "--waitall")) {
			opt_waitall = true;
			continue;
		}
		i++;
		if (!strcmp(o, "--bytes"))
			opt_bytes = size_arg(v);
		else if (!strcmp(o, "--msg"))
			opt_msg = size_arg(v);
		else if (!strcmp(o, "--buf"))
			opt_buf = size_arg(v);
		else if (!strcmp(o, "--rcvtimeo"))
			opt_rcvtimeo = (unsigned)atoi(v);
		else if (!strcmp(o, "--nonblock"))
			opt_nonblock = (unsigned)atoi(v);
		else if (!strcmp(o, "--pause-us"))
			opt_pause_us = (unsigned)atoi(v);
		else if (!strcmp(o, "--die-after"))
			opt_die_after = size_arg(v);
		else {
			fprintf(stderr, "zc_shm: unknown option %s\n", o);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	return !strcmp(argv[1], "server") ? serve(atoi(argv[2])) : client(atoi(argv[2]));
}
