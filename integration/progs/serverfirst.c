/*
 * serverfirst: a server that speaks first. On every accepted connection it
 * writes a banner at once, before reading anything, then echoes until EOF,
 * shuts its direction down and closes (one thread per connection).
 *
 *   serverfirst [--port P] [--bind ADDR] [--max-conns N]
 *               [--banner TEXT] [--timeout SEC]
 *
 * Default banner: "HELLO rdmashim\r\n". Prints "READY <port>" once listening.
 * Pair with: echo_client --expect-banner "$(printf 'HELLO rdmashim\r\n')".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *banner = "HELLO rdmashim\r\n";
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static long running, errors;

static void die(const char *what)
{
	fprintf(stderr, "serverfirst: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void on_alarm(int sig)
{
	static const char msg[] = "serverfirst: timeout\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing to do */
	}
	_exit(3);
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void *serve(void *arg)
{
	int fd = (int)(intptr_t)arg, rc = 0;
	char buf[32 * 1024];

	if (write_all(fd, banner, strlen(banner)) < 0)
		rc = -1;
	while (rc == 0) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = -1;
		if (n <= 0)
			break;
		if (write_all(fd, buf, (size_t)n) < 0)
			rc = -1;
	}
	if (rc == 0)
		shutdown(fd, SHUT_WR);
	else
		fprintf(stderr, "serverfirst: connection error: %s\n", strerror(errno));
	close(fd);
	pthread_mutex_lock(&lock);
	running--;
	errors += rc < 0;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *bind_addr = "127.0.0.1";
	int port = 0, timeout_s = 120, one = 1, lfd;
	long max_conns = 0, accepted = 0;
	struct sockaddr_storage ss = { 0 };
	socklen_t len;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--bind"))
			bind_addr = argv[i + 1];
		else if (!strcmp(argv[i], "--max-conns"))
			max_conns = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--banner"))
			banner = argv[i + 1];
		else if (!strcmp(argv[i], "--timeout"))
			timeout_s = atoi(argv[i + 1]);
		else {
			fprintf(stderr, "usage: serverfirst [--port P] [--bind ADDR] [--max-conns N] "
					"[--banner TEXT] [--timeout SEC]\n");
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	if (timeout_s > 0)
		alarm((unsigned)timeout_s);
	if (strchr(bind_addr, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, bind_addr, &in6->sin6_addr) != 1)
			die("bad --bind");
		len = sizeof(*in6);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;

		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, bind_addr, &in->sin_addr) != 1)
			die("bad --bind");
		len = sizeof(*in);
	}
	lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ss, len) < 0)
		die("bind");
	if (listen(lfd, 128) < 0)
		die("listen");
	len = sizeof(ss);
	if (getsockname(lfd, (struct sockaddr *)&ss, &len) < 0)
		die("getsockname");
	printf("READY %d\n", ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
							     : ((struct sockaddr_in *)&ss)->sin_port));
	fflush(stdout);
	while (max_conns <= 0 || accepted < max_conns) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept4");
		}
		pthread_mutex_lock(&lock);
		running++;
		pthread_mutex_unlock(&lock);
		if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd) != 0)
			die("pthread_create");
		pthread_detach(t);
		accepted++;
	}
	pthread_mutex_lock(&lock);
	while (running > 0)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	close(lfd);
	return errors ? 1 : 0;
}
