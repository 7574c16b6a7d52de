/*
 * close_answer: the HTTP/1.0 shape. The server reads a request, writes its
 * answer and closes at once; the client sends its request and reads until
 * EOF. Over TCP the client gets every byte, then EOF, every time.
 *
 *   close_answer serve --port P --conns N --answer BYTES [--workers W] [--delay-us D]
 *                      [--fork-exit 1]
 *   close_answer fetch --port P --conns N --answer BYTES [--parallel K]
 *
 * serve prints "READY <port>" once listening, serves N connections (each
 * worker process takes its share with accept on the shared listener), then
 * exits 0. With --delay-us, every other request waits D us before its
 * answer. With --fork-exit 1, a child per connection answers and exits
 * without closing the socket (the CGI shape). The answer is a pattern of BYTES bytes that depends on the
 * request's sequence number.
 * fetch runs N connections (K at a time, one thread each), checks each
 * answer's length and every byte, and prints one line:
 *   "fetch: N ok, S short, R reset, E other errors"
 * exiting 0 only when all N were ok.
 */
#include <arpa/inet.h>
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
#include <sys/wait.h>
#include <unistd.h>

#define REQ_BYTES 64

static int port, conns, parallel = 4, workers = 1, delay_us, fork_exit;
static size_t answer_bytes;
static unsigned seq_hint;
static int next_conn, n_ok, n_short, n_reset, n_other;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint8_t pattern(unsigned seq, size_t i)
{
	return (uint8_t)(seq * 131u + i * 7u + (i >> 9));
}

static void answer(int fd);

static int serve_one(int lfd)
{
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		return -1;
	if (fork_exit) {
		/* The CGI shape: a child answers and exits without close. */
		pid_t pid = fork();

		if (pid == 0) {
			answer(fd);
			exit(0);
		}
		close(fd);
		waitpid(pid, NULL, 0);
		return 0;
	}
	answer(fd);
	close(fd);
	return 0;
}

static void answer(int fd)
{
	char req[REQ_BYTES];
	size_t got = 0, off = 0;
	unsigned seq;
	uint8_t *ans;

	while (got < sizeof(req)) {
		ssize_t n = read(fd, req + got, sizeof(req) - got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	/* Think a moment, as servers do, on every other request: the upgrade
	 * then meets the answer at every stage. */
	if (delay_us && (seq_hint++ & 1))
		usleep((useconds_t)delay_us);
	if (got == sizeof(req) && sscanf(req, "GET %u", &seq) == 1) {
		ans = malloc(answer_bytes);
		for (size_t i = 0; i < answer_bytes; i++)
			ans[i] = pattern(seq, i);
		while (off < answer_bytes) {
			ssize_t n = write(fd, ans + off, answer_bytes - off);

			if (n <= 0)
				break;
			off += (size_t)n;
		}
		free(ans);
	}
}

static int serve(void)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1, status = 0;

	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 128) < 0) {
		perror("close_answer: listen");
		return 1;
	}
	printf("READY %d\n", port);
	fflush(stdout);
	for (int w = 0; w < workers; w++) {
		int share = conns / workers + (w < conns % workers);

		if (fork() == 0) {
			for (int i = 0; i < share; i++)
				serve_one(lfd);
			_exit(0);
		}
	}
	for (int w = 0; w < workers; w++) {
		int st;

		wait(&st);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			status = 1;
	}
	return status;
}

static void fetch_one(unsigned seq)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char req[REQ_BYTES] = { 0 };
	uint8_t buf[65536];
	size_t got = 0;
	bool bad = false;
	int fd = socket(AF_INET, SOCK_STREAM, 0), err = 0;

	snprintf(req, sizeof(req), "GET %u", seq);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || write(fd, req, sizeof(req)) != sizeof(req)) {
		err = errno;
	} else {
		for (;;) {
			ssize_t n = read(fd, buf, sizeof(buf));

			if (n < 0) {
				err = errno;
				break;
			}
			if (n == 0)
				break;
			for (ssize_t i = 0; i < n; i++)
				bad |= buf[i] != pattern(seq, got + (size_t)i);
			got += (size_t)n;
		}
	}
	close(fd);
	pthread_mutex_lock(&lock);
	if (err == ECONNRESET)
		n_reset++;
	else if (err || bad)
		n_other++;
	else if (got != answer_bytes)
		n_short++;
	else
		n_ok++;
	pthread_mutex_unlock(&lock);
}

static void *fetcher(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&lock);
		int seq = next_conn < conns ? next_conn++ : -1;

		pthread_mutex_unlock(&lock);
		if (seq < 0)
			return NULL;
		fetch_one((unsigned)seq);
	}
}

static int fetch(void)
{
	pthread_t t[64];

	if (parallel > 64)
		parallel = 64;
	for (int i = 0; i < parallel; i++)
		pthread_create(&t[i], NULL, fetcher, NULL);
	for (int i = 0; i < parallel; i++)
		pthread_join(t[i], NULL);
	printf("fetch: %d ok, %d short, %d reset, %d other errors\n", n_ok, n_short, n_reset, n_other);
	return n_ok == conns ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--conns"))
			conns = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--answer"))
			answer_bytes = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--parallel"))
			parallel = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--delay-us"))
			delay_us = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--fork-exit"))
			fork_exit = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--workers"))
			workers = atoi(argv[i + 1]);
		else
			return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(argv[1], "serve"))
		return serve();
	if (!strcmp(argv[1], "fetch"))
		return fetch();
	return 2;
}
