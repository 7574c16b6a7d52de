/* ready_rules: what every loop does whatever it waits with: accept, handle
 * one report for one connection, re-register or close, know when it is
 * done. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "ready_rules.h"

struct loop *loop_new(int side, int lfd, const char *who)
{
	struct loop *L = calloc(1, sizeof(*L));
	struct table *t = calloc(1, sizeof(*t));

	if (!L || !t)
		exit(1);
	pthread_mutex_init(&t->mu, NULL);
	L->side = side;
	L->lfd = lfd;
	L->t = t;
	L->who = who;
	L->ep = -1;
	L->sched_fd = -2; /* opened by the thread that runs the loop */
	L->et = mode == M_ET;
	L->toggle = side == SERVER && mode == M_MODTOGGLE;
	return L;
}

/* The events the connection needs now. */
uint32_t wanted(struct loop *L, struct conn *c)
{
	uint32_t ev = 0;
	bool txp = tx_pending(c);

	if (!atomic_load(&c->eof) && !(L->toggle && txp))
		ev |= EPOLLIN;
	if (txp)
		ev |= EPOLLOUT;
	return ev;
}

void accept_some(struct loop *L, unsigned max)
{
	for (unsigned i = 0; !max || i < max; i++) {
		int fd = accept4(L->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct conn *c;

		if (fd < 0) {
			/* The listener is shared (level: two processes; oneshot:
			 * two threads): the other one may have taken it. */
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				error_line(L, NULL, "accept: %s", strerror(errno));
			return;
		}
		c = conn_new(L, fd, -1);
		if (L->ep >= 0) {
			if (L->oneshot)
				atomic_store(&c->busy, 1);
			ep_set(L, c, EPOLL_CTL_ADD);
		}
	}
}

/* One report for one connection; the order (write, then read, then the
 * writes a read made due) keeps each check on the call the report is
 * about. */
void handle(struct loop *L, struct conn *c, uint32_t rev)
{
	bool lt = !L->et;

	if (rev & EPOLLERR) {
		int e = 0;
		socklen_t len = sizeof(e);

		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &len);
		error_line(L, c, "error reported: %s (events %#x)", strerror(e), rev);
		c->broken = true;
	}
	if ((rev & EPOLLOUT) && tx_pending(c))
		conn_write(L, c, true, lt ? 4 : 0, rev);
	if (rev & (EPOLLIN | EPOLLHUP))
		conn_read(L, c, (rev & EPOLLIN) != 0, lt ? 1 : 0, rev);
	if (c->side == CLIENT && !c->broken)
		client_ask(L, c);
	/* modtoggle writes only on EPOLLOUT; the others write at once. */
	if (!L->toggle && tx_pending(c))
		conn_write(L, c, false, lt ? 4 : 0, 0);
}

/* After a handling: re-register, or close when done. */
void settle(struct loop *L, struct conn *c)
{
	if (conn_finished(c)) {
		conn_close(L, c);
		return;
	}
	if (L->ep >= 0)
		ep_set(L, c, EPOLL_CTL_MOD);
}

static bool side_done(struct loop *L)
{
	return atomic_load(&S->finished[L->side]) >= (uint64_t)nconns;
}

bool give_up(struct loop *L)
{
	if (now_us() < t_giveup_us)
		return false;
	error_line(L, NULL, "gave up: %llu of %d connections finished on this side",
		   (unsigned long long)atomic_load(&S->finished[L->side]), nconns);
	return true;
}

/* Done here: every connection of this loop is finished. For a server the
 * connections are spread over processes (or threads), hence the shared
 * count; a loop with a listener stays until all are finished. */
bool loop_over(struct loop *L)
{
	if (L->lfd >= 0)
		return side_done(L);
	int n = atomic_load(&L->t->n);

	for (int i = 0; i < n; i++)
		if (!atomic_load(&L->t->c[i]->closed))
			return false;
	return true;
}
