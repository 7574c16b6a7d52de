/*
 * wake_on_add: a thread asleep in epoll_wait is woken when another thread
 * adds, or re-arms, a connection that is already readable, as the kernel
 * wakes it at the ADD or MOD (apache's event MPM: its listener sleeps while
 * a worker hands a kept-alive connection back). Both ends of each
 * connection live in this process, so under the shim both are intercepted
 * and the connection upgrades (bytes both ways first): its readiness is
 * then the ring's, which no kernel object of the program's set carries.
 *
 *   wake_on_add --port P [--rounds N]
 *
 * Each round, for each shape, times from the registration change to the
 * sleeper's return; the sleeper's own timeout is 5 s, so a sleeper that is
 * not woken is seen. Shapes:
 *   empty   the set held nothing when the sleeper began (a kernel wait);
 *   busy    the set held another connection, idle (the shim's wait);
 *   rearm   a one-shot registration that fired, re-armed by MOD while the
 *           sleeper waits (apache, Boost.Asio).
 * Prints "OK empty=MS busy=MS rearm=MS" (the worst of the rounds, in ms)
 * and exits 0; "FAIL ..." and 1 when a sleeper was not woken by its event
 * (a timeout, or another event than the one made ready). The caller
 * compares the figures with a run without the shim.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "loop_pair.h"

#define DATA_READY 0x5eadbeef00000001ull
#define DATA_IDLE 0x1d1e000000000002ull

static int port, lfd;

static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void pair(int *c, int *s)
{
	int rc = loop_pair(lfd, port, c, s);

	if (rc < 0)
		fail("connect/accept: %s", strerror(-rc));
}

static void put(int fd)
{
	char b = 'x';

	if (send(fd, &b, 1, MSG_NOSIGNAL) != 1)
		fail("send on %d: %s", fd, strerror(errno));
}

static void get(int fd)
{
	char b;
	ssize_t n = recv(fd, &b, 1, 0);

	if (n != 1)
		fail("recv on %d: %s", fd, n < 0 ? strerror(errno) : "EOF");
}

/* Bytes both ways, so that under the shim the connection upgrades. */
static void warm(int c, int s)
{
	int rc = loop_warm(c, s, 200);

	if (rc < 0)
		fail("warm-up: %s", strerror(-rc));
}

struct sleeper {
	int ep, n;
	struct epoll_event ev;
	double woke;
};

static void *sleep_in_wait(void *arg)
{
	struct sleeper *w = arg;

	w->n = epoll_wait(w->ep, &w->ev, 1, 5000);
	w->woke = now_ms();
	return NULL;
}

/* Starts a sleeper on ep, lets it sleep, runs change(ep), and returns the
 * ms from the change to the sleeper's return. */
static double timed_wake(int ep, void (*change)(int ep, void *ctx), void *ctx, const char *shape)
{
	struct sleeper w = { .ep = ep };
	pthread_t t;
	double t0;

	if (pthread_create(&t, NULL, sleep_in_wait, &w) != 0)
		fail("pthread_create");
	usleep(30 * 1000);
	t0 = now_ms();
	change(ep, ctx);
	pthread_join(t, NULL);
	if (w.n != 1 || w.ev.data.u64 != DATA_READY || !(w.ev.events & EPOLLIN))
		fail("%s: sleeper returned %d (data %#llx, events %#x), want the ready connection", shape, w.n,
		     w.n > 0 ? (unsigned long long)w.ev.data.u64 : 0ull, w.n > 0 ? w.ev.events : 0u);
	return w.woke - t0;
}

struct conn {
	int c, s;
};

static void add_ready(int ep, void *ctx)
{
	struct conn *k = ctx;
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = DATA_READY };

	if (epoll_ctl(ep, EPOLL_CTL_ADD, k->s, &ev) < 0)
		fail("ADD: %s", strerror(errno));
}

static void rearm_ready(int ep, void *ctx)
{
	struct conn *k = ctx;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = DATA_READY };

	if (epoll_ctl(ep, EPOLL_CTL_MOD, k->s, &ev) < 0)
		fail("MOD: %s", strerror(errno));
}

static double worst(double a, double b)
{
	return a > b ? a : b;
}

int main(int argc, char **argv)
{
	struct conn ready, idle;
	double w_empty = 0, w_busy = 0, w_rearm = 0;
	int rounds = 3, rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--port") && i + 1 < argc)
			port = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
	}
	if (port <= 0)
		fail("usage: wake_on_add --port P [--rounds N]");
	rc = loop_listen(port, 16, &lfd);
	if (rc < 0)
		fail("listen: %s", strerror(-rc));
	pair(&ready.c, &ready.s);
	pair(&idle.c, &idle.s);
	warm(ready.c, ready.s);
	warm(idle.c, idle.s);

	for (int r = 0; r < rounds; r++) {
		int ep = epoll_create1(EPOLL_CLOEXEC);
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = DATA_IDLE };

		/* empty: nothing in the set while the sleeper begins. */
		put(ready.c);
		w_empty = worst(w_empty, timed_wake(ep, add_ready, &ready, "empty"));
		get(ready.s);
		epoll_ctl(ep, EPOLL_CTL_DEL, ready.s, NULL);
		close(ep);

		/* busy: an idle connection in the set. */
		ep = epoll_create1(EPOLL_CLOEXEC);
		if (epoll_ctl(ep, EPOLL_CTL_ADD, idle.s, &ev) < 0)
			fail("ADD idle: %s", strerror(errno));
		put(ready.c);
		w_busy = worst(w_busy, timed_wake(ep, add_ready, &ready, "busy"));
		get(ready.s);

		/* rearm: one-shot, fired and handled, then re-armed with data
		 * already there. */
		ev = (struct epoll_event){ .events = EPOLLIN | EPOLLONESHOT, .data.u64 = DATA_READY };
		if (epoll_ctl(ep, EPOLL_CTL_MOD, ready.s, &ev) < 0)
			fail("MOD oneshot: %s", strerror(errno));
		put(ready.c);
		{
			struct epoll_event got;

			if (epoll_wait(ep, &got, 1, 5000) != 1 || got.data.u64 != DATA_READY)
				fail("rearm: the one-shot registration did not fire");
		}
		get(ready.s);
		put(ready.c);
		w_rearm = worst(w_rearm, timed_wake(ep, rearm_ready, &ready, "rearm"));
		get(ready.s);
		close(ep);
	}
	printf("OK empty=%.1f busy=%.1f rearm=%.1f\n", w_empty, w_busy, w_rearm);
	return 0;
}
