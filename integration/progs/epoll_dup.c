/*
 * epoll_dup: an epoll registration outlives the close of its number while a
 * dup keeps the file open, as the kernel keeps (file, number); a new file
 * that gets the old number is a registration of its own. Both ends of every
 * connection live in this process, so under the shim both are intercepted
 * and the connections upgrade (bytes move both ways first).
 *
 *   epoll_dup --port P
 *
 * Steps, each checked against what the kernel does:
 *   1. s added with data A, dup'ed to d, s closed: a byte from the peer is
 *      reported with data A; MOD and DEL through d fail ENOENT.
 *   2. a new connection's end gets s's old number and is added with data B:
 *      ADD succeeds, its byte is reported with B alone, the old file's with
 *      A alone; DEL of the old number removes B, not A.
 *   3. d closed (the file's last fd): nothing is reported for it any more,
 *      and a third connection at d's number, added with data C, is
 *      reported with C.
 *   4. a thread sleeps in epoll_wait on a connection added with data D
 *      while the main thread dups and closes its number; the peer's byte
 *      then wakes it, reported with D.
 * Whether the connections upgraded is the caller's to check (the shim's
 * trace).
 *
 * Prints "OK ..." and exits 0, or "FAIL: why" and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loop_pair.h"

#define DATA_A 0xa1a1a1a100000001ull
#define DATA_B 0xb2b2b2b200000002ull
#define DATA_C 0xc3c3c3c300000003ull
#define DATA_D 0xd4d4d4d400000004ull

static int port, lfd, step;

static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL step %d: ", step);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static void pair(int *c, int *s)
{
	int rc = loop_pair(lfd, port, c, s);

	if (rc < 0)
		fail("connect/accept: %s", strerror(-rc));
}

static void put(int fd, char b)
{
	if (send(fd, &b, 1, MSG_NOSIGNAL) != 1)
		fail("send on %d: %s", fd, strerror(errno));
}

static char get(int fd)
{
	char b;
	ssize_t n = recv(fd, &b, 1, 0);

	if (n != 1)
		fail("recv on %d: %s", fd, n < 0 ? strerror(errno) : "EOF");
	return b;
}

/* Bytes both ways, so that under the shim the connection upgrades. */
static void warm(int c, int s)
{
	int rc = loop_warm(c, s, 200);

	if (rc < 0)
		fail("warm-up: %s", strerror(-rc));
}

/* One wait: exactly the events wanted (data, EPOLLIN), in any order. */
static void expect(int ep, int timeout_ms, int n, const uint64_t *data)
{
	struct epoll_event ev[8];
	int got = epoll_wait(ep, ev, 8, timeout_ms);

	if (got != n)
		fail("epoll_wait gave %d events, want %d (first data %#llx)", got, n,
		     got > 0 ? (unsigned long long)ev[0].data.u64 : 0ull);
	for (int i = 0; i < n; i++) {
		int found = 0;

		for (int k = 0; k < got; k++)
			found |= ev[k].data.u64 == data[i] && (ev[k].events & EPOLLIN);
		if (!found)
			fail("no EPOLLIN event with data %#llx (got %#llx)", (unsigned long long)data[i],
			     (unsigned long long)ev[0].data.u64);
	}
}

struct sleeper {
	int ep, n;
	struct epoll_event ev;
};

static void *sleep_in_wait(void *arg)
{
	struct sleeper *w = arg;

	w->n = epoll_wait(w->ep, &w->ev, 1, 5000);
	return NULL;
}

static void ctl(int ep, int op, int fd, uint64_t data, int want_errno)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = data };
	int r = epoll_ctl(ep, op, fd, &ev);

	if (want_errno ? (r == 0 || errno != want_errno) : r != 0)
		fail("epoll_ctl op %d fd %d: %s, want %s", op, fd, r ? strerror(errno) : "0",
		     want_errno ? strerror(want_errno) : "0");
}

int main(int argc, char **argv)
{
	int c, s, d, c2, s2, c3, s3, c4, s4, ep, old, rc;
	struct sleeper w;
	pthread_t t;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--port") && i + 1 < argc)
			port = atoi(argv[++i]);
	if (!port)
		fail("usage: epoll_dup --port P");
	rc = loop_listen(port, 8, &lfd);
	if (rc < 0)
		fail("listen on %d: %s", port, strerror(-rc));
	ep = epoll_create1(0);

	step = 1;
	pair(&c, &s);
	warm(c, s);
	ctl(ep, EPOLL_CTL_ADD, s, DATA_A, 0);
	d = dup(s);
	old = s;
	close(s);
	expect(ep, 0, 0, NULL);
	put(c, 'a');
	expect(ep, 1000, 1, (uint64_t[]){ DATA_A });
	ctl(ep, EPOLL_CTL_MOD, d, DATA_B, ENOENT);
	ctl(ep, EPOLL_CTL_DEL, d, 0, ENOENT);
	expect(ep, 0, 1, (uint64_t[]){ DATA_A });
	if (get(d) != 'a')
		fail("wrong byte");
	expect(ep, 0, 0, NULL);

	step = 2;
	pair(&c2, &s2);
	warm(c2, s2);
	/* The old number for the new connection's end, as the kernel would
	 * hand it out next anyway. */
	if (s2 == old) {
		s2 = c2;
		c2 = old;
	}
	if (c2 != old && dup2(c2, old) < 0)
		fail("dup2: %s", strerror(errno));
	ctl(ep, EPOLL_CTL_ADD, old, DATA_B, 0);
	expect(ep, 0, 0, NULL);
	put(s2, 'b');
	expect(ep, 1000, 1, (uint64_t[]){ DATA_B });
	put(c, 'a');
	expect(ep, 1000, 2, (uint64_t[]){ DATA_A, DATA_B });
	if (get(old) != 'b')
		fail("wrong byte on the new connection");
	expect(ep, 0, 1, (uint64_t[]){ DATA_A });
	ctl(ep, EPOLL_CTL_DEL, old, 0, 0);
	expect(ep, 0, 1, (uint64_t[]){ DATA_A });
	if (get(d) != 'a')
		fail("wrong byte");
	put(s2, 'b');
	expect(ep, 100, 0, NULL);

	step = 3;
	put(c, 'a');
	expect(ep, 1000, 1, (uint64_t[]){ DATA_A });
	if (get(d) != 'a')
		fail("wrong byte");
	old = d;
	close(d);
	expect(ep, 0, 0, NULL);
	put(c, 'x'); /* to a closed end: a reset, nothing for the set */
	expect(ep, 100, 0, NULL);
	pair(&c3, &s3);
	warm(c3, s3);
	if (s3 == old) { /* the end at the old number is the one added */
		s3 = c3;
		c3 = old;
	}
	if (c3 != old && dup2(c3, old) < 0)
		fail("dup2: %s", strerror(errno));
	ctl(ep, EPOLL_CTL_ADD, old, DATA_C, 0);
	expect(ep, 0, 0, NULL);
	put(s3, 'c');
	expect(ep, 1000, 1, (uint64_t[]){ DATA_C });

	step = 4;
	if (get(old) != 'c')
		fail("wrong byte");
	ctl(ep, EPOLL_CTL_DEL, old, 0, 0);
	pair(&c4, &s4);
	warm(c4, s4);
	ctl(ep, EPOLL_CTL_ADD, s4, DATA_D, 0);
	w = (struct sleeper){ .ep = ep };
	if (pthread_create(&t, NULL, sleep_in_wait, &w))
		fail("pthread_create");
	usleep(100 * 1000); /* the thread is asleep in the wait by now */
	d = dup(s4);
	close(s4);
	usleep(20 * 1000);
	put(c4, 'd');
	pthread_join(t, NULL);
	if (w.n != 1 || w.ev.data.u64 != DATA_D || !(w.ev.events & EPOLLIN))
		fail("the sleeping wait gave %d events, data %#llx", w.n, (unsigned long long)w.ev.data.u64);
	if (get(d) != 'd')
		fail("wrong byte");
	printf("OK epoll_dup\n");
	return 0;
}
