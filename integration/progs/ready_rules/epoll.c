/* ready_rules: the epoll loop and its registrations (level, EPOLLET,
 * EPOLLONESHOT shared by two threads); R1 for epoll_wait's results. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "ready_rules.h"

void ep_set(struct loop *L, struct conn *c, int op)
{
	uint32_t want = wanted(L, c);
	struct epoll_event ev = { .data.u64 = (uint64_t)c->idx };

	if (L->et)
		want = EPOLLIN | EPOLLOUT | EPOLLET; /* once, for good */
	if (op == EPOLL_CTL_MOD && !L->oneshot && want == atomic_load(&c->interest))
		return;
	ev.events = want | (L->oneshot ? EPOLLONESHOT : 0);
	atomic_store(&c->interest, want);
	if (L->oneshot) {
		/* The hand-off: another thread may get it the moment it is armed. */
		atomic_fetch_add(&c->armgen, 1);
		atomic_store(&c->armed, 1);
		atomic_store(&c->busy, 0);
	}
	if (epoll_ctl(L->ep, op, c->fd, &ev) < 0) {
		error_line(L, c, "epoll_ctl %d: %s", op, strerror(errno));
		c->broken = true;
	}
}

void epoll_loop(struct loop *L)
{
	struct epoll_event ev[MAXEV];

	while (!loop_over(L) && !give_up(L)) {
		int n;

		stall_scan(L);
		wait_begin(L);
		n = epoll_wait(L->ep, ev, MAXEV, WAIT_MS);
		wait_done(L, n);
		if (n < 0) {
			if (errno != EINTR)
				error_line(L, NULL, "epoll_wait: %s", strerror(errno));
			continue;
		}
		for (int i = 0; i < n; i++)
			for (int k = 0; k < i; k++)
				if (ev[k].data.u64 == ev[i].data.u64)
					violation(1, L, ev[i].data.u64 < MAXC ? L->t->c[ev[i].data.u64] : NULL,
						  "data %#llx twice in one result of %d (events %#x and %#x)",
						  (unsigned long long)ev[i].data.u64, n, ev[k].events, ev[i].events);
		for (int i = 0; i < n; i++) {
			uint64_t d = ev[i].data.u64;
			struct conn *c;

			if (d == UINT64_MAX) {
				accept_some(L, L->et ? 0 : 8);
				continue;
			}
			if (d >= (uint64_t)atomic_load(&L->t->n)) {
				error_line(L, NULL, "event with unknown data %#llx", (unsigned long long)d);
				continue;
			}
			c = L->t->c[d];
			if (atomic_load(&c->closed))
				continue; /* a duplicate of one handled above (R1 counted it) */
			if (L->oneshot) {
				atomic_store(&c->armed, 0);
				if (atomic_exchange(&c->busy, 1)) {
					violation(1, L, c, "EPOLLONESHOT registration reported while another thread handles it (events %#x)",
						  ev[i].events);
					continue;
				}
			}
			handle(L, c, ev[i].events);
			settle(L, c);
		}
	}
}

void ep_add_listener(struct loop *L)
{
	struct epoll_event ev = { .events = EPOLLIN | (L->et ? EPOLLET : 0), .data.u64 = UINT64_MAX };

	if (epoll_ctl(L->ep, EPOLL_CTL_ADD, L->lfd, &ev) < 0) {
		error_line(L, NULL, "epoll_ctl listener: %s", strerror(errno));
		exit(1);
	}
}
