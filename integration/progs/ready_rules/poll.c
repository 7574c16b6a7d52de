/* ready_rules: the poll and select server, turn about; R1 for poll's two
 * entries of one fd. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "ready_rules.h"

void poll_loop(struct loop *L)
{
	static struct pollfd p[2 * MAXC + 1];
	struct conn *pc[MAXC];

	while (!loop_over(L) && !give_up(L)) {
		int n = atomic_load(&L->t->n), np = 0, nc = 0, r;

		for (int i = 0; i < n; i++) {
			struct conn *c = L->t->c[i];

			if (atomic_load(&c->closed))
				continue;
			atomic_store(&c->interest, wanted(L, c));
			pc[nc++] = c;
		}
		stall_scan(L);
		if (L->iter++ % 2 == 0) {
			/* poll(), each connection twice with the same events: the
			 * kernel gives both entries the same revents. */
			p[np++] = (struct pollfd){ .fd = L->lfd, .events = POLLIN };
			for (int i = 0; i < nc; i++) {
				short e = (short)((wanted(L, pc[i]) & EPOLLIN ? POLLIN : 0) |
						  (wanted(L, pc[i]) & EPOLLOUT ? POLLOUT : 0));

				p[np++] = (struct pollfd){ .fd = pc[i]->fd, .events = e };
				p[np++] = (struct pollfd){ .fd = pc[i]->fd, .events = e };
			}
			wait_begin(L);
			r = poll(p, (nfds_t)np, WAIT_MS);
			wait_done(L, r);
			if (r < 0) {
				if (errno != EINTR)
					error_line(L, NULL, "poll: %s", strerror(errno));
				continue;
			}
			if (p[0].revents & POLLIN)
				accept_some(L, 8);
			for (int i = 0; i < nc; i++) {
				short a = p[1 + 2 * i].revents, b = p[2 + 2 * i].revents;
				uint32_t rev = 0;

				/* poll() looks at its entries one after the other, so
				 * bytes (or room) arriving between the two looks may
				 * show in the second only, with the kernel too. But
				 * nobody reads or writes during the call: what the
				 * first entry saw, the second must see as well. */
				if (a & ~b)
					violation(1, L, pc[i], "poll: two entries for one fd report %#x and then %#x", a, b);
				else if (a != b)
					atomic_fetch_add(&S->poll_splits, 1);
				a |= b;
				if (a & POLLNVAL) {
					error_line(L, pc[i], "poll: POLLNVAL");
					pc[i]->broken = true;
				}
				rev |= a & POLLIN ? EPOLLIN : 0;
				rev |= a & POLLOUT ? EPOLLOUT : 0;
				rev |= a & POLLERR ? EPOLLERR : 0;
				rev |= a & POLLHUP ? EPOLLHUP : 0;
				if (rev || pc[i]->broken) {
					handle(L, pc[i], rev);
					settle(L, pc[i]);
				}
			}
		} else {
			fd_set rd, wr;
			int maxfd = L->lfd;
			struct timeval tv = { .tv_sec = WAIT_MS / 1000, .tv_usec = (WAIT_MS % 1000) * 1000 };

			FD_ZERO(&rd);
			FD_ZERO(&wr);
			FD_SET(L->lfd, &rd);
			for (int i = 0; i < nc; i++) {
				if (pc[i]->fd >= FD_SETSIZE) {
					error_line(L, pc[i], "fd %d too large for select", pc[i]->fd);
					exit(1);
				}
				if (wanted(L, pc[i]) & EPOLLIN)
					FD_SET(pc[i]->fd, &rd);
				if (wanted(L, pc[i]) & EPOLLOUT)
					FD_SET(pc[i]->fd, &wr);
				if (pc[i]->fd > maxfd)
					maxfd = pc[i]->fd;
			}
			wait_begin(L);
			r = select(maxfd + 1, &rd, &wr, NULL, &tv);
			wait_done(L, r);
			if (r < 0) {
				if (errno != EINTR)
					error_line(L, NULL, "select: %s", strerror(errno));
				continue;
			}
			if (FD_ISSET(L->lfd, &rd))
				accept_some(L, 8);
			for (int i = 0; i < nc; i++) {
				uint32_t rev = (FD_ISSET(pc[i]->fd, &rd) ? EPOLLIN : 0) | (FD_ISSET(pc[i]->fd, &wr) ? EPOLLOUT : 0);

				if (rev) {
					handle(L, pc[i], rev);
					settle(L, pc[i]);
				}
			}
		}
	}
}
