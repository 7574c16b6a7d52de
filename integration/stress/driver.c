/*
 * driver.c — the loops that run a connection's rx_step and tx_step:
 * blocking (a reader and a writer thread), nonblock (one thread, poll) and
 * epoll-et (a fixed pool of edge-triggered event loops, each fd drained until
 * EAGAIN, fair across connections).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "stress.h"

/* ------------------------------------------------------- threaded drivers */

static void wait_fd(struct conn *c, short ev)
{
	struct pollfd p = { .fd = c->fd, .events = ev };
	poll(&p, 1, 1000);
}

static void *blk_writer(void *arg)
{
	struct conn *c = arg;
	for (;;) {
		int s = tx_step(c, true);
		if (s == ST_FAIL || s == ST_DONE || is_failed(c))
			return NULL;
		if (s == ST_AGAIN)
			wait_fd(c, POLLOUT);
	}
}

/* Blocking: the writer in its own thread, the reader in this one. */
void run_blocking(struct conn *c)
{
	struct rxbufs *b = rxbufs_new();
	pthread_t wt;

	while (c->server && !c->hdr_ok && !is_failed(c)) {
		int s = rx_header(c);
		if (s == ST_AGAIN)
			wait_fd(c, POLLIN);
	}
	if (!is_failed(c)) {
		int e = pthread_create(&wt, NULL, blk_writer, c);
		if (e)
			die("pthread_create: %s", strerror(e));
		for (;;) {
			int s = rx_step(c, b, true);
			if (s == ST_FAIL || s == ST_DONE || is_failed(c))
				break;
			if (s == ST_AGAIN)
				wait_fd(c, POLLIN);
		}
		pthread_join(wt, NULL);
	}
	rxbufs_free(b);
}

/* Nonblocking, one thread, poll(): each direction runs until EAGAIN. */
void run_nonblock(struct conn *c)
{
	struct rxbufs *b = rxbufs_new();
	bool rblk = false, wblk = false;

	while (!is_failed(c)) {
		bool wr = !c->rx_fin, ww = want_w(c);
		if (wr && !rblk) {
			int s = rx_step(c, b, false);
			if (s == ST_FAIL)
				break;
			rblk = s == ST_AGAIN;
		}
		if (ww && !wblk) {
			int s = tx_step(c, false);
			if (s == ST_FAIL)
				break;
			wblk = s == ST_AGAIN;
		}
		wr = !c->rx_fin;
		ww = want_w(c);
		if (!wr && !ww)
			break;
		/* A blocked direction is polled even while the other one
		 * progresses: a peer that never lets our reads run dry must not
		 * keep a blocked write from being retried forever. */
		short blocked = (short)((wr && rblk ? POLLIN : 0) | (ww && wblk ? POLLOUT : 0));
		bool busy = (wr && !rblk) || (ww && !wblk);
		if (!blocked)
			continue;
		struct pollfd p = { .fd = c->fd, .events = blocked };
		int r = poll(&p, 1, busy ? 0 : 1000);
		if (r < 0 && errno != EINTR) {
			conn_fail(c, c->rx_off, "reason=poll: %s", strerror(errno));
			break;
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR))
			rblk = false;
		if (p.revents & (POLLOUT | POLLHUP | POLLERR))
			wblk = false;
	}
	rxbufs_free(b);
}

/* A thread per connection (blocking and nonblock modes): run it, then
 * hand it to conn_finish(). */
void *conn_thread(void *arg)
{
	struct conn *c = arg;

	if (c->mode == M_BLOCKING)
		run_blocking(c);
	else
		run_nonblock(c);
	conn_finish(c);
	return NULL;
}

/* ---------------------------------------------------------- epoll-et loops */

static void wq_push(struct worker *w, struct conn *c)
{
	if (c->queued)
		return;
	c->queued = true;
	c->qnext = NULL;
	if (w->qt)
		w->qt->qnext = c;
	else
		w->qh = c;
	w->qt = c;
	w->qlen++;
}

static struct conn *wq_pop(struct worker *w)
{
	struct conn *c = w->qh;
	w->qh = c->qnext;
	if (!w->qh)
		w->qt = NULL;
	w->qlen--;
	c->queued = false;
	return c;
}

/* Service one ready connection for a bounded number of operations, so a
 * stream that never runs dry cannot starve the others; a connection that did
 * not reach EAGAIN stays queued (the edge will not come again). True when the
 * connection is finished. */
static bool ep_service(struct conn *c, struct rxbufs *b)
{
	for (int budget = 32; budget > 0 && !is_failed(c); budget--) {
		bool moved = false;
		if (c->rd && !c->rx_fin) {
			int s = rx_step(c, b, false);
			if (s == ST_FAIL)
				return true;
			if (s == ST_AGAIN)
				c->rd = false;
			else
				moved = true;
		}
		if (c->wr && want_w(c)) {
			int s = tx_step(c, false);
			if (s == ST_FAIL)
				return true;
			if (s == ST_AGAIN)
				c->wr = false;
			else
				moved = true;
		}
		if (conn_complete(c))
			return true;
		if (!moved)
			break;
	}
	return is_failed(c);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct rxbufs *b = rxbufs_new();
	struct epoll_event ev[256];

	while (w->server || atomic_load(&w->finished) < atomic_load(&w->assigned)) {
		int n = epoll_wait(w->ep, ev, 256, w->qh ? 0 : 200);
		if (n < 0 && errno != EINTR)
			die("epoll_wait: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			struct conn *c = ev[i].data.ptr;
			uint32_t e = ev[i].events;
			if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				c->rd = true;
			if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR))
				c->wr = true;
			wq_push(w, c);
		}
		for (int m = w->qlen; m > 0; m--) {
			struct conn *c = wq_pop(w);
			if (ep_service(c, b)) {
				conn_finish(c);
				atomic_fetch_add(&w->finished, 1);
			} else if ((c->rd && !c->rx_fin) || (c->wr && want_w(c))) {
				wq_push(w, c);
			}
		}
	}
	rxbufs_free(b);
	return NULL;
}

struct worker *workers_new(int n, bool server)
{
	struct worker *ws = calloc((size_t)n, sizeof *ws);
	if (!ws)
		die("out of memory");
	for (int i = 0; i < n; i++) {
		ws[i].server = server;
		ws[i].ep = epoll_create1(EPOLL_CLOEXEC);
		if (ws[i].ep < 0)
			die("epoll_create1: %s", strerror(errno));
	}
	return ws;
}

void worker_add(struct worker *w, struct conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c };
	c->w = w;
	c->rd = c->wr = true;	/* nothing tried yet: try both first */
	atomic_fetch_add(&w->assigned, 1);
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		die("epoll_ctl(ADD): %s", strerror(errno));
}

void worker_start(struct worker *w)
{
	int e = pthread_create(&w->thr, NULL, worker_main, w);
	if (e)
		die("pthread_create: %s", strerror(e));
}
