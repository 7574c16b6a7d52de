/*
 * Loopback connection pairs for the checker programs whose two ends live in
 * one process (under the shim both ends are intercepted, so the connection
 * upgrades once bytes moved both ways). Each returns 0 or -errno; the
 * caller says what failed, in its own words.
 */
#ifndef LOOP_PAIR_H
#define LOOP_PAIR_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

static inline struct sockaddr_in loop_addr(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* *lfd: a listener on 127.0.0.1:port (SO_REUSEADDR). */
static inline int loop_listen(int port, int backlog, int *lfd)
{
	struct sockaddr_in a = loop_addr(port);
	int one = 1;

	*lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (*lfd < 0)
		return -errno;
	setsockopt(*lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(*lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(*lfd, backlog) < 0)
		return -errno;
	return 0;
}

/* *c: a new connection to port; *s: its end accepted from lfd. */
static inline int loop_pair(int lfd, int port, int *c, int *s)
{
	struct sockaddr_in a = loop_addr(port);

	*c = socket(AF_INET, SOCK_STREAM, 0);
	if (*c < 0 || connect(*c, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -errno;
	*s = accept(lfd, NULL, NULL);
	return *s < 0 ? -errno : 0;
}

/* One byte each way, n times, the last rounds paced: under the shim the
 * handshake rides on the first calls, and a few round trips settle it. */
static inline int loop_warm(int c, int s, int n)
{
	char b = 'w';

	for (int i = 0; i < n; i++) {
		if (send(c, &b, 1, MSG_NOSIGNAL) != 1 || recv(s, &b, 1, 0) != 1 ||
		    send(s, &b, 1, MSG_NOSIGNAL) != 1 || recv(c, &b, 1, 0) != 1)
			return errno ? -errno : -EPIPE;
		if (i >= 20)
			usleep(500);
	}
	return 0;
}

#endif
