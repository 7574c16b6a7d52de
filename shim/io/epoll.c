/*
 * The program's registration changes on tracked sets (epoll_ctl), the
 * events of a kernel wait mapped back, and the registrations adopted from
 * the kernel; the sets and their items are epoll_set.c's, a young
 * connection's registration epoll_young.c's. See wait.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "clock.h"
#include "compiler.h"
#include "fdtable.h"
#include "io.h"
#include "real.h"
#include "sock.h"
#include "trace.h"
#include "upgrade.h"
#include "epoll_internal.h"

/*
 * The kernel's own checks on the program's mask (fs/eventpoll.c), which it
 * can no longer make once the registration carries our mask instead:
 * EPOLLEXCLUSIVE only with the in/out, error, hang-up, wake-up and edge
 * bits, only at ADD, and an exclusive item can not be modified.
 */
#define EP_EXCLUSIVE_OK                                                                      \
	(EPOLLIN | EPOLLOUT | EPOLLRDNORM | EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND | EPOLLERR | \
	 EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE)

static int kernel_mask_check(int op, const struct epoll_event *event, const struct shim_epitem *it)
{
	if (op == EPOLL_CTL_DEL)
		return 0;
	if (!event)
		return -EFAULT;
	if (op == EPOLL_CTL_ADD && (event->events & EPOLLEXCLUSIVE) && (event->events & ~EP_EXCLUSIVE_OK))
		return -EINVAL;
	if (op == EPOLL_CTL_MOD && ((event->events & EPOLLEXCLUSIVE) || (it && (it->events & EPOLLEXCLUSIVE))))
		return -EINVAL;
	return 0;
}

/* A registration change the shim holds nothing of (fd not intercepted, no
 * item of ours for it in the tracked set es): the kernel's alone. Gives
 * es's reference back. */
static int ctl_kernel_only(struct shim_sock *es, int epfd, int op, int fd, struct epoll_event *event)
{
	shim_sock_put(es);
	/* Only a fd the shim does not track yet may become tracked later. */
	if (op == EPOLL_CTL_ADD && !shim_fd_get(fd))
		shim_epoll_note_early(epfd, fd);
	return REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
}

int shim_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	struct shim_sock *s, *es;
	struct shim_ep *ep;
	struct shim_epitem *it;
	int rc;

	if (shim_fd_ctl_is_kernels(fd))
		return REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
	if (shim_ep_young_change(epfd, op, fd, event, &rc))
		return rc;
	s = shim_ep_intercepted_sock(fd);
	es = shim_ep_sock(epfd);
	if (!s && !es)
		return REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
	shim_ep_tag_init();
	if (!es) {
		es = shim_sock_track_epoll(epfd, shim_epoll_new(epfd));
		if (!es) {
			shim_sock_put(s);
			return REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
		}
	}
	ep = es->ep;
	/* Relaxed: the items that matter here are fd's own, which only a
	 * registration change of fd (the program's, ordered by it) or its
	 * close adds or drops. */
	if (!s && !__atomic_load_n(&ep->n_items, __ATOMIC_RELAXED))
		return ctl_kernel_only(es, epfd, op, fd, event);
	pthread_mutex_lock(&ep->lock);
	it = shim_ep_item_at(ep, fd);
	if (!s && !it) {
		pthread_mutex_unlock(&ep->lock);
		return ctl_kernel_only(es, epfd, op, fd, event);
	}
	rc = kernel_mask_check(op, event, it);
	/* A young connection's registration may stay the kernel's
	 * (epoll_young.c). */
	if (rc == 0 && s && !it && s->role != SHIM_ROLE_EPOLL) {
		if (shim_ep_young_ctl(ep, s, op, fd, event, &rc))
			goto out;
		it = shim_ep_item_at(ep, fd);
	}
	if (rc < 0)
		goto out;
	switch (op) {
	case EPOLL_CTL_ADD: {
		struct shim_epitem *old;

		if (it && it->orphan) {
			/* Its registration was moved to our copy of the file,
			 * where the kernel can not see it is this key's. */
			rc = -EEXIST;
			break;
		}
		if (!s) {
			/* Left intercepting: the kernel's own registration. */
			rc = REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
			break;
		}
		it = shim_ep_item_new(ep, fd, s, event->events, event->data, shim_io_is_switched(s));
		if (!it) {
			rc = -ENOMEM;
			break;
		}
		rc = shim_ep_kernel_ctl(epfd, EPOLL_CTL_ADD, it);
		if (rc < 0) {
			/* EEXIST: the fd is registered, and an item we hold for
			 * it stays (programs try ADD, then MOD on EEXIST). */
			free(it);
			break;
		}
		HASH_FIND_INT(ep->items, &fd, old);
		if (old) {
			/* The kernel took it: the item we held was left from a
			 * closed fd of the same number. */
			shim_ep_item_drop(ep, old);
		}
		shim_ep_item_link(ep, it);
		/* A waiter asleep now armed its sleep without this item:
		 * its channel would not wake it (nor a kernel-only wait,
		 * begun while the set held nothing of ours). */
		if (it->kernel_switched)
			shim_ep_kick(ep);
		break;
	}
	case EPOLL_CTL_MOD:
		if (!it) {
			rc = REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
			break;
		}
		if (!s && !it->orphan && !it->kernel_switched) {
			/* Its connection stays on TCP for good (nothing moved
			 * and no handshake will start: intercept is off), and
			 * the program changes its registration: the kernel
			 * takes the program's own, as without the shim, and
			 * the item goes. A wait that already took an event
			 * under our tag drops it; the kernel's MOD checks
			 * readiness again and reports it under the program's
			 * data. */
			rc = REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
			if (rc == 0)
				shim_ep_item_drop(ep, it);
			break;
		}
		it->events = event->events;
		it->data = event->data;
		it->oneshot_fired = false;
		it->et_level = 0;
		it->et_rx_arrived = 0;
		rc = shim_ep_kernel_ctl(epfd, EPOLL_CTL_MOD, it);
		if (rc == 0 && it->kernel_switched)
			shim_ep_kick(ep);
		break;
	case EPOLL_CTL_DEL:
		if (!it) {
			rc = REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
			break;
		}
		rc = shim_ep_kernel_ctl(epfd, op, it);
		shim_ep_item_drop(ep, it);
		break;
	default:
		rc = -EINVAL;
	}
out:
	pthread_mutex_unlock(&ep->lock);
	shim_sock_put(s);
	shim_sock_put(es);
	return rc;
}

/* Whether any event carries a tag of ours: with none (a set whose every
 * registration is the program's, as a young connection's is) there is
 * nothing to map back, and no lock to take. */
static bool events_tagged(const struct epoll_event *events, int n)
{
	uint32_t hi = shim_ep_tag_hi();

	/* The items' tag, their lines' and the set's kick (epoll_set.c): the
	 * two low bits tell them apart. */
	for (int i = 0; i < n; i++)
		if (((uint32_t)(events[i].data.u64 >> 32) ^ hi) < 4u)
			return true;
	return false;
}

int shim_epoll_fixup(int epfd, struct epoll_event *events, int n)
{
	struct shim_sock *es;

	/* No tag of ours among them: nothing to map back, and no lookup. */
	if (n <= 0 || !events_tagged(events, n))
		return n;
	es = shim_ep_sock(epfd);
	if (!es)
		return n;
	pthread_mutex_lock(&es->ep->lock);
	n = shim_ep_translate(es->ep, events, NULL, n, false);
	pthread_mutex_unlock(&es->ep->lock);
	shim_sock_put(es);
	return n;
}


int shim_epoll_adopt(int epfd, int fd, uint32_t events, uint64_t data)
{
	struct shim_sock *s = shim_ep_intercepted_sock(fd), *es;
	int rc = 0;

	if (!s)
		return -ENOENT;
	es = shim_ep_sock(epfd);
	if (!es)
		es = shim_sock_track_epoll(epfd, shim_epoll_new(epfd));
	if (!es) {
		shim_sock_put(s);
		return -ENOMEM;
	}
	pthread_mutex_lock(&es->ep->lock);
	if (!shim_ep_item_at(es->ep, fd)) {
		/* The kernel holds the program's registration: ours replaces
		 * it, as a MOD does. */
		pthread_mutex_lock(&s->lock);
		rc = shim_ep_item_take_over(es->ep, fd, s, events, data);
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&es->ep->lock);
	shim_sock_put(s);
	shim_sock_put(es);
	return rc;
}

void shim_epoll_adopt_early(int fd)
{
	int sets[SHIM_EPOLL_EARLY_SETS];
	unsigned n = shim_epoll_early_take(fd, sets);

	for (unsigned i = 0; i < n; i++) {
		uint32_t events;
		uint64_t data;
		int rc;

		if (!shim_epoll_early_registration(sets[i], fd, &events, &data))
			continue;
		rc = shim_epoll_adopt(sets[i], fd, events, data);
		SHIM_TRACE(SHIM_TRACE_DEBUG, "epoll.adopt", fd, NULL, SHIM_REASON_NONE,
			   "\"epfd\":%d,\"events\":%u,\"rc\":%d", sets[i], events, rc);
	}
}
