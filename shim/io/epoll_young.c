/*
 * Epoll registrations of young connections, left with the kernel.
 *
 * A whitelisted connection is intercepted from its first call, but it
 * carries its bytes on TCP until its upgrade starts, and most never start
 * one (a connection per request ends before RDMASHIM_UPGRADE_AFTER_MS:
 * upgrade.h). An item of ours for such a connection bought nothing and
 * cost every registration change a tagged kernel call and a table entry,
 * and every wait on the set a progress step per item (redis-benchmark -k 0:
 * about half of what the shim cost both processes per request).
 *
 * So the first registration of a young connection in a set, if it is
 * level-triggered and neither one-shot nor exclusive, stays the kernel's
 * under the program's own events and data: the sock records it (sock.h,
 * ep_young_*), changes of it go to the kernel and to the record, and a set
 * with no item left is waited on by the kernel alone (epoll_wait.c). The
 * kernel's whole state of such a registration is its mask and its data,
 * so it can be taken over later with no event lost or made up: a MOD to
 * our tagged registration, which re-checks readiness as level-triggered
 * registrations report it anyway. An edge-triggered one would report an
 * edge that did not happen, a one-shot that fired would be armed again,
 * an exclusive one can not be modified: those get an item at once.
 *
 * No upgrade starts while a record exists (upgrade.c). The data call that
 * finds the upgrade due takes the record over first (shim_io_*, with no
 * lock held: the set's lock comes before the sock's); if the set is gone,
 * so is the registration. A take-over that fails (no memory, the kernel
 * refused the MOD) leaves the program's registration as it was, and the
 * connection on TCP for good, where that registration is right. A close
 * of the recorded number while a dup keeps the file takes it over too, so
 * that epoll_close.c orphans it as any item.
 */
#include <errno.h>
#include <pthread.h>

#include "clock.h"
#include "fdtable.h"
#include "io.h"
#include "real.h"
#include "trace.h"
#include "upgrade.h"
#include "epoll_internal.h"

static void forget(struct shim_sock *s)
{
	__atomic_store_n(&s->ep_young_set, 0, __ATOMIC_RELAXED);
}

/* Under s->lock: the kernel's change of fd's registration in ep (through
 * our copy of the set), and the record kept in step with it: made or
 * changed by an ADD or MOD the kernel took, gone with a DEL. */
static int kernel_change(struct shim_ep *ep, struct shim_sock *s, int op, int fd, const struct epoll_event *event)
{
	if (REAL(epoll_ctl)(ep->efd, op, fd, (struct epoll_event *)event) < 0)
		return -errno;
	if (op == EPOLL_CTL_DEL) {
		forget(s);
		return 0;
	}
	s->ep_young_fd = fd;
	s->ep_young_events = event->events;
	s->ep_young_data = event->data.u64;
	__atomic_store_n(&s->ep_young_set, ep->id, __ATOMIC_RELAXED);
	return 0;
}

/*
 * Under ep->lock and s->lock, the record being ep's: the record becomes an
 * item. closing: its number is closing (the table no longer names s, the
 * kernel still does). On failure the connection stays on TCP for good.
 */
static void take_over(struct shim_ep *ep, struct shim_sock *s, bool closing)
{
	int fd = s->ep_young_fd, rc = -EBADF;

	if (closing || shim_fd_get_acquire(fd) == s)
		rc = shim_ep_item_take_over(ep, fd, s, s->ep_young_events, s->ep_young_data);
	forget(s);
	SHIM_TRACE(rc < 0 ? SHIM_TRACE_WARN : SHIM_TRACE_DEBUG, "epoll.take_over", fd, &s->tuple,
		   rc < 0 ? SHIM_REASON_INTERNAL_ERROR : SHIM_REASON_NONE, "\"rc\":%d", rc);
	if (rc < 0)
		shim_upgrade_pin_tcp(s, fd, SHIM_REASON_INTERNAL_ERROR);
}

bool shim_ep_young_ctl(struct shim_ep *ep, struct shim_sock *s, int op, int fd, const struct epoll_event *event,
		       int *rc)
{
	bool answered = false;

	pthread_mutex_lock(&s->lock);
	if (s->ep_young_set == ep->id && s->ep_young_fd == fd) {
		if (op == EPOLL_CTL_MOD && event && !shim_ep_mask_and_data_only(event->events)) {
			/* Becomes a kind the kernel's state of which a
			 * take-over would change: ours from here on. */
			take_over(ep, s, false);
		} else {
			*rc = kernel_change(ep, s, op, fd, event);
			answered = true;
		}
	} else if (!s->ep_young_set && op == EPOLL_CTL_ADD && event && shim_ep_mask_and_data_only(event->events) && shim_io_young_locked(s) &&
		   shim_fd_get_acquire(fd) == s) {
		*rc = kernel_change(ep, s, op, fd, event);
		answered = true;
	}
	pthread_mutex_unlock(&s->lock);
	return answered;
}

bool shim_ep_young_change(int epfd, int op, int fd, const struct epoll_event *event, int *rc)
{
	struct shim_sock *s, *es;
	bool answered = false;

	if (op != EPOLL_CTL_DEL && (!event || !shim_ep_mask_and_data_only(event->events)))
		return false;
	/* A look without a reference first (the pool is type-stable; its
	 * atomic words read alike on a sock recycled meanwhile, which the
	 * checks under the lock then find): a record to change, or none and
	 * no item for a first ADD. Anything else is the slow path's, at the
	 * cost of one load. */
	s = shim_fd_get(fd);
	if (!s || (op == EPOLL_CTL_ADD) != !__atomic_load_n(&s->ep_young_set, __ATOMIC_RELAXED) ||
	    (op == EPOLL_CTL_ADD && __atomic_load_n(&s->ep_items, __ATOMIC_RELAXED)))
		return false;
	s = shim_ep_intercepted_sock(fd);
	if (!s)
		return false;
	es = shim_ep_sock(epfd);
	if (!es) {
		shim_sock_put(s);
		return false;
	}
	/* Under the lock, a table that still names s at fd means the number
	 * is s's (close clears the entry, then takes the lock), and the
	 * record can change in no other way. */
	pthread_mutex_lock(&s->lock);
	if (shim_fd_get_acquire(fd) != s) {
		/* closed meanwhile: the slow path answers for what fd is now */
	} else if (op == EPOLL_CTL_ADD) {
		/* A first registration, with no item of ours anywhere (the
		 * slow path's item_at() would find none): the kernel says
		 * whether the number is registered in the set already, also
		 * against an item another thread's ADD is making now. */
		if (!s->ep_young_set && !__atomic_load_n(&s->ep_items, __ATOMIC_RELAXED) && shim_io_young_locked(s)) {
			*rc = kernel_change(es->ep, s, op, fd, event);
			answered = true;
		}
	} else if (s->ep_young_set == es->ep->id && s->ep_young_fd == fd) {
		*rc = kernel_change(es->ep, s, op, fd, event);
		answered = true;
	}
	pthread_mutex_unlock(&s->lock);
	shim_sock_put(es);
	shim_sock_put(s);
	return answered;
}

void shim_ep_young_closed(struct shim_ep *ep, struct shim_sock *sock, int fd, int other)
{
	pthread_mutex_lock(&sock->lock);
	if (sock->ep_young_set == ep->id && sock->ep_young_fd == fd) {
		if (other >= 0)
			take_over(ep, sock, true);
		else
			forget(sock); /* the file goes, and the registration with it */
	}
	pthread_mutex_unlock(&sock->lock);
}

static void take_over_in_set(struct shim_ep *ep, void *ctx)
{
	struct shim_sock *s = ctx;

	pthread_mutex_lock(&s->lock);
	if (s->ep_young_set == ep->id)
		take_over(ep, s, false);
	pthread_mutex_unlock(&s->lock);
}

void shim_io_young_take_over(struct shim_sock *s)
{
	uint64_t set;
	bool due;

	pthread_mutex_lock(&s->lock);
	set = s->ep_young_set;
	due = set && shim_io_young_locked(s) && shim_upgrade_due(s, shim_now_ns());
	pthread_mutex_unlock(&s->lock);
	if (!due || shim_ep_with_set(set, take_over_in_set, s))
		return;
	/* The set was closed, and its registrations went with it. */
	pthread_mutex_lock(&s->lock);
	if (s->ep_young_set == set)
		forget(s);
	pthread_mutex_unlock(&s->lock);
}
