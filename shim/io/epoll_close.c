/*
 * What the close of a connection's number does to the epoll items added
 * under it or reached through it (shim_epoll_fd_closed()): the kernel keeps
 * a registration, keyed by the file and the number it was added under,
 * while the file lives, so an item whose number closes while a dup keeps
 * the file open stays (an orphan), and goes with the file's last fd. The
 * sets and their items are epoll.c's (shim/LIFETIME.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <uthash.h>

#include "epoll_internal.h"
#include "fdtable.h"
#include "real.h"
#include "sock.h"
#include "wait.h"

struct other_fd {
	const struct shim_sock *sock;
	int closing, found;
};

static void other_fd_cb(int fd, void *ctx)
{
	struct other_fd *o = ctx;

	if (o->found < 0 && fd != o->closing && shim_fd_get_acquire(fd) == o->sock)
		o->found = fd;
}

/* Another of the program's numbers for sock, or -1. Under all_lock (from
 * shim_ep_each()): a number found here stays sock's until its own close
 * comes to shim_epoll_fd_closed(), after this one (close clears the entry
 * first). */
static int other_fd(const struct shim_sock *sock, int closing)
{
	struct other_fd o = { .sock = sock, .closing = closing, .found = -1 };

	/* fds still counts the closing entry. */
	if (__atomic_load_n(&sock->fds, __ATOMIC_RELAXED) <= 1)
		return -1;
	shim_fd_each_open(other_fd_cb, &o);
	return o.found;
}

/*
 * The item's number is closing while the file lives on through via. The
 * kernel's registration (file, fd) stays, but nothing could change it once
 * the number is gone (a switch, a failover, the program's MOD after a dup2
 * back): while fd still names the file, it moves to our own copy of the
 * file, under the same tag. Without a copy (EMFILE), or in a set another
 * process may share since a fork (whose copy of the item would still name
 * the number), it stays as it was. An edge-triggered item on TCP may
 * report readiness there once more (the kernel checks readiness at ADD); a
 * switched one's are bells.
 */
static void item_orphan(struct shim_ep *ep, struct shim_epitem *it, int via)
{
	int k = ep->forked ? -1 : shim_fd_own_checked(REAL(fcntl)(it->fd, F_DUPFD_CLOEXEC, 0));

	if (k >= 0 && REAL(epoll_ctl)(ep->efd, EPOLL_CTL_DEL, it->fd, NULL) == 0) {
		it->kfd = k;
		if (shim_ep_kernel_ctl(ep->efd, EPOLL_CTL_ADD, it) < 0) {
			it->kfd = -1;
			shim_ep_kernel_ctl(ep->efd, EPOLL_CTL_ADD, it);
			REAL(close)(k);
		}
	} else if (k >= 0) {
		REAL(close)(k);
	}
	HASH_DEL(ep->items, it);
	it->orphan = true;
	it->via = via;
	it->orphan_next = ep->orphans;
	ep->orphans = it;
}

struct closing {
	int fd;
	struct shim_sock *sock;
	int other; /* -2: not looked for yet */
};

static int closing_other(struct closing *c)
{
	if (c->other == -2)
		c->other = other_fd(c->sock, c->fd);
	return c->other;
}

static void closed_in_set(struct shim_ep *ep, void *ctx)
{
	struct closing *c = ctx;
	struct shim_epitem *it, *next;

	/* A registration of it that is still the kernel's becomes an item
	 * first when the file lives on, and is orphaned below as any.
	 * Relaxed: only this number's close, ordered by the program, or a
	 * take-over under ep->lock (held) changes it to or from ep's; the
	 * look spares every other close the search for another number. */
	if (__atomic_load_n(&c->sock->ep_young_set, __ATOMIC_RELAXED) == ep->id)
		shim_ep_young_closed(ep, c->sock, c->fd, closing_other(c));
	HASH_FIND_INT(ep->items, &c->fd, it);
	if (it && it->sock != c->sock) {
		shim_ep_item_drop(ep, it); /* left from an earlier file of this number */
		it = NULL;
	}
	if (it) {
		if (closing_other(c) >= 0)
			item_orphan(ep, it, c->other);
		else
			shim_ep_item_drop(ep, it);
	}
	for (it = ep->orphans; it; it = next) {
		next = it->orphan_next;
		if (it->via != c->fd || it->sock != c->sock)
			continue;
		if (closing_other(c) >= 0)
			it->via = c->other;
		else
			shim_ep_item_drop(ep, it);
	}
}

/*
 * The program's fd for sock is about to close (its table entry is cleared,
 * the real close not done). An item added under fd becomes an orphan
 * reached through another of the file's fds, and an orphan reached through
 * fd moves to another; with no other fd the file goes with this close, and
 * so do they (closing our copy first, so that the program's close is still
 * the file's last). Either way no item is left reached through fd, which a
 * new file may get next.
 */
void shim_epoll_fd_closed(int fd, struct shim_sock *sock)
{
	struct closing c = { .fd = fd, .sock = sock, .other = -2 };

	shim_ep_each(closed_in_set, &c);
}
