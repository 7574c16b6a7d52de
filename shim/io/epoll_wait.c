/*
 * The wait over a tracked epoll set (shim_epoll_wait), on the wait engine
 * (waitloop.h): readiness of the switched items from their channels, the
 * kernel's events for the rest, and the arms of one sleep. The sets and
 * their items are epoll.c's.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "epoll_internal.h"
#include "io.h"
#include "real.h"
#include "trace.h"
#include "waitloop.h"

static uint32_t poll_to_epoll(int mask)
{
	uint32_t ev = 0;

	if (mask & POLLIN)
		ev |= EPOLLIN;
	if (mask & POLLOUT)
		ev |= EPOLLOUT;
	if (mask & POLLPRI)
		ev |= EPOLLPRI;
	if (mask & POLLRDHUP)
		ev |= EPOLLRDHUP;
	if (mask & POLLHUP)
		ev |= EPOLLHUP;
	if (mask & POLLERR)
		ev |= EPOLLERR;
	return ev;
}

/* An item back on TCP after a failover: the program's own registration
 * again. MOD re-checks readiness, so an edge-triggered item is told what
 * is already there; the kernel is asked again within this look
 * (look_again_if_moved). Called with ep->lock. */
static void give_back(int efd, struct shim_ep *ep, struct shim_sock *s, struct shim_epitem *it)
{
	it->kernel_switched = false;
	shim_ep_item_line(ep, it, -1);
	shim_ep_item_ctl(efd, s, it);
	it->moved_gen = ep->look_gen;
	ep->moved_back = true;
}

/* An item whose connection left the shim's hands for good while its
 * registration was the switched one (failover.c, leave_to_kernel): it is
 * no longer intercepted, so shim_ep_item_sock() does not find it. */
static void give_back_released(int efd, struct shim_ep *ep, struct shim_epitem *it)
{
	struct shim_sock *s = shim_sock_get(it->via);

	if (s && s == it->sock && !__atomic_load_n(&s->intercept, __ATOMIC_RELAXED))
		give_back(efd, ep, s, it);
	shim_sock_put(s);
}

/*
 * An item whose connection left the shim's hands for good (a peer without
 * the shim, a failed upgrade, a failover that ended on TCP), back on the
 * program's own events: unless its kind needs us (shim_ep_mask_and_data_
 * only), the kernel's registration gets the program's data again and the
 * item goes, so that the fd's changes and the set's waits cost nothing of
 * the shim's from here on. Not in a set a fork may share, whose other
 * process's copy of the item would still name the tag. An event of the tag
 * that another thread's kernel wait took just before the MOD finds no item
 * and is dropped; the level-triggered registration reports it again.
 * Under ep->lock; lock order ep->lock, then s->lock.
 */
static void release_for_good(int efd, struct shim_ep *ep, struct shim_epitem *it)
{
	struct shim_sock *s;
	bool released = false;

	if (it->kernel_switched || it->orphan || ep->forked || it->oneshot_fired ||
	    !shim_ep_mask_and_data_only(it->events))
		return;
	s = shim_sock_get(it->via);
	if (s && s == it->sock && !__atomic_load_n(&s->intercept, __ATOMIC_RELAXED)) {
		struct epoll_event ev = { .events = it->events, .data = it->data };

		pthread_mutex_lock(&s->lock);
		if (shim_fd_get_acquire(it->fd) == s)
			released = REAL(epoll_ctl)(efd, EPOLL_CTL_MOD, it->fd, &ev) == 0;
		pthread_mutex_unlock(&s->lock);
		if (released) {
			SHIM_TRACE(SHIM_TRACE_DEBUG, "epoll.release", it->fd, &s->tuple, SHIM_REASON_NONE, NULL);
			shim_ep_item_drop(ep, it);
		}
	}
	shim_sock_put(s);
}

/* Readiness of the switched items, into out[] (report: false, none: a
 * second round of one look, which only gives registrations back); switches
 * kernel registrations of items that switched, or came back, since.
 * Called with ep->lock. */
static int ep_channel_round(int efd, struct shim_ep *ep, struct epoll_event *out, struct shim_ep_src *src, int max,
			    bool report)
{
	struct shim_epitem *it, *tmp;
	unsigned shim_items = 0;
	int n = 0;

	HASH_ITER(hh_id, ep->by_id, it, tmp) {
		struct shim_sock *s = shim_ep_item_sock(it);
		int mask;

		if (!s) {
			if (it->kernel_switched)
				give_back_released(efd, ep, it);
			release_for_good(efd, ep, it);
			continue;
		}
		if (!shim_io_progress(s, it->via)) {
			if (it->kernel_switched)
				give_back(efd, ep, s, it);
			shim_sock_put(s);
			continue;
		}
		shim_items++;
		if (!it->kernel_switched) {
			it->kernel_switched = true;
			shim_ep_item_ctl(efd, s, it);
		}
		mask = (report && n >= max) || it->oneshot_fired ? -1 : shim_io_poll_mask(s, it->via);
		/* The look itself may have ended a failover (the peer's RESUME
		 * read, the ring empty). */
		if (mask < 0 && (!report || n < max) && !it->oneshot_fired && !shim_io_progress(s, it->via))
			give_back(efd, ep, s, it);
		if (!report)
			mask = -1; /* reported by this look's first round already */
		uint64_t arrived = 0;
		unsigned rx_starved = __atomic_load_n(&s->rx_starved, __ATOMIC_RELAXED);
		unsigned rx_wakes = __atomic_load_n(&s->rx_wakes, __ATOMIC_RELAXED);
		unsigned tx_starved = __atomic_load_n(&s->tx_starved, __ATOMIC_RELAXED);

		if (mask >= 0 && (it->events & EPOLLET) && (it->events & EPOLLIN))
			arrived = shim_io_rx_arrived(s, it->via);
		shim_sock_put(s);
		if (mask < 0)
			continue;
		uint32_t ev = poll_to_epoll(mask) & (it->events | EPOLLHUP | EPOLLERR);

		if (it->events & EPOLLET) {
			/* Edge-triggered: an edge is what rose since the last
			 * look, or bytes that came since. A ring with room would
			 * otherwise wake the program on every wait. As the
			 * kernel's, an edge reports all that is ready then: its
			 * wake-up queues the item, and epoll_wait polls it. */
			uint32_t level = ev;
			bool edge = (ev & ~it->et_level) != 0;

			/* Bytes that came since, even if another thread read
			 * them already: the kernel's wake-up queued the item
			 * then, and it reports what is still ready. */
			if (arrived != it->et_rx_arrived || rx_wakes != it->et_rx_wakes)
				edge = true;
			/* A program that ran out (EAGAIN, a short call) since
			 * the last report waits for the next edge: readiness
			 * now is that edge, whether or not we saw it fall. */
			if ((level & EPOLLIN) && rx_starved != it->et_rx_starved)
				edge = true;
			if ((level & EPOLLOUT) && tx_starved != it->et_tx_starved)
				edge = true;
			ev = edge ? level : 0;
			it->et_level = level;
			it->et_rx_arrived = arrived;
			it->et_rx_wakes = rx_wakes;
			if (ev & EPOLLIN)
				it->et_rx_starved = rx_starved;
			if (ev & EPOLLOUT)
				it->et_tx_starved = tx_starved;
		}
		if (!ev)
			continue;
		out[n].events = ev;
		out[n].data = it->data;
		src[n] = (struct shim_ep_src){ .id = it->id, .item = true, .kernel = false };
		n++;
		if (it->events & EPOLLONESHOT)
			it->oneshot_fired = true;
	}
	/* Once, at the end: a wait of another thread reads it without the
	 * lock (kernel_only) and never sees a round half-counted. */
	__atomic_store_n(&ep->shim_items, shim_items, __ATOMIC_RELAXED);
	return n;
}

static int kernel_wait(int efd, struct epoll_event *ev, int max, int timeout_ms, const sigset_t *sigmask)
{
	int n = sigmask ? REAL(epoll_pwait)(efd, ev, max, timeout_ms, sigmask)
			: REAL(epoll_wait)(efd, ev, max, timeout_ms);

	return n < 0 ? -errno : n;
}

/*
 * One wait's arms: kept by the waiting thread, never in the shared items,
 * so that two threads waiting on one set each disarm exactly what they
 * armed. Each entry holds a reference, so the disarm reaches the same
 * socket even if its fd was closed (and its number reused) meanwhile.
 */
struct arm {
	struct shim_sock *s;
	int fd;
	int armed;
};

#define ARMS_ON_STACK 32
#define SRC_ON_STACK 64

/* Arms every switched item into arms[] (at most cap). Returns false when
 * sleeping is not needed; lowers *cap_ms as the arms and handshakes ask
 * (waitloop.h). Called with ep->lock. */
static bool arm_all(struct shim_ep *ep, struct arm *arms, unsigned cap, unsigned *n, int *cap_ms)
{
	struct shim_epitem *it, *tmp;
	bool sleep = true;

	*n = 0;
	HASH_ITER(hh_id, ep->by_id, it, tmp) {
		struct shim_sock *s;
		short want = 0;

		if (*n == cap)
			return false; /* more items than room: look again at once */
		if (it->oneshot_fired)
			continue;
		s = shim_ep_item_sock(it);
		if (!it->kernel_switched) {
			/* Its handshake's messages wake the sleep too, and
			 * its timer ends it. */
			if (s)
				shim_ep_item_wake(ep, it, s, cap_ms);
			shim_sock_put(s);
			continue;
		}
		if (!s)
			continue;
		if (it->events & EPOLLIN)
			want |= POLLIN;
		if (it->events & EPOLLOUT)
			want |= POLLOUT;
		if (it->events & EPOLLET) {
			/* Readiness already reported, with no call of the program
			 * run out since, is no reason to stay awake: an edge
			 * program waits for the next edge (ep_channel_round). */
			if ((it->et_level & EPOLLIN) &&
			    __atomic_load_n(&s->rx_starved, __ATOMIC_RELAXED) == it->et_rx_starved)
				want &= (short)~POLLIN;
			if ((it->et_level & EPOLLOUT) &&
			    __atomic_load_n(&s->tx_starved, __ATOMIC_RELAXED) == it->et_tx_starved)
				want &= (short)~POLLOUT;
		}
		int line = shim_ep_item_line(ep, it, shim_io_line(s));

		arms[*n] = (struct arm){ .s = s, .fd = it->via, .armed = shim_io_arm(s, it->via, want, line) };
		if (arms[*n].armed & SHIM_ARM_READY)
			sleep = false;
		if (arms[*n].armed & SHIM_ARM_SHORT)
			shim_waitloop_cap(cap_ms, 1);
		(*n)++;
	}
	return sleep;
}

static void disarm_all(struct arm *arms, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (arms[i].armed)
			shim_io_disarm(arms[i].s, arms[i].fd, arms[i].armed);
		shim_sock_put(arms[i].s);
	}
}

/* One epoll_wait's state across the engine's rounds (waitloop.h). */
struct ep_wait {
	struct shim_ep *ep;
	int efd;
	long long timeout_ns;
	struct epoll_event *events;
	struct shim_ep_src *src; /* each event's source (ep_settle) */
	int maxevents;
	const sigset_t *sigmask;
	struct arm arms_stack[ARMS_ON_STACK], *arms;
	unsigned cap, narmed;
	struct shim_spin_run spin;
};

/* The last look found no item in the shim's hands: the kernel's own wait
 * sees everything. Read without the lock: a round of this thread set it,
 * and another thread's round only changes which of two correct paths the
 * next step takes. */
static bool kernel_only(const struct ep_wait *w)
{
	return __atomic_load_n(&w->ep->shim_items, __ATOMIC_RELAXED) == 0;
}

/* Busy-poll while spin.h allows (at most RDMASHIM_SPIN_US), and only for a
 * set with items on a channel: a kernel-only set is woken by the kernel as
 * without the shim, and polling it would take a core from its peers. */
static bool ep_spin_more(void *ctx)
{
	struct ep_wait *w = ctx;

	return !kernel_only(w) && shim_spin_more(&w->spin, &w->ep->spin_hist, w->efd);
}

static void ep_spin_end(void *ctx, int rc)
{
	struct ep_wait *w = ctx;

	shim_spin_end(&w->spin, &w->ep->spin_hist, rc > 0, w->efd);
}

/* The kernel's ready events into events[0, max), translated (moved_only:
 * see shim_ep_translate). */
static int kernel_look(struct ep_wait *w, int at, bool moved_only)
{
	int max = w->maxevents - at;
	int theirs = max > 0 ? kernel_wait(w->efd, w->events + at, max, 0, NULL) : 0;

	if (theirs > 0) {
		pthread_mutex_lock(&w->ep->lock);
		theirs = shim_ep_translate(w->ep, w->events + at, w->src + at, theirs, moved_only);
		pthread_mutex_unlock(&w->ep->lock);
	}
	return theirs;
}

/* A new look: registrations given back from here on are its own. */
static void look_begin(struct shim_ep *ep)
{
	ep->look_gen++;
	ep->moved_back = false;
}

/*
 * A connection found back on TCP after this look's kernel round (its
 * RESUME read by the round's drain, or the ring's last bytes read since)
 * still had the bells' registration then: its program's registration comes
 * back now (a channel round), and the kernel is asked once more, for those
 * items alone (the others' events were taken already), so that a zero
 * timeout sees what TCP shows. Adds to events[got..].
 */
static int look_again_if_moved(struct ep_wait *w, int got)
{
	int theirs;

	pthread_mutex_lock(&w->ep->lock);
	if (!w->ep->moved_back || got >= w->maxevents) {
		pthread_mutex_unlock(&w->ep->lock);
		return got;
	}
	w->ep->moved_back = false;
	ep_channel_round(w->efd, w->ep, NULL, NULL, 0, false);
	pthread_mutex_unlock(&w->ep->lock);
	theirs = kernel_look(w, got, true);
	return theirs < 0 ? got : got + theirs;
}

/*
 * What a report promises, made true at its end whatever the rounds before
 * found (apache's event MPM aborted, wrk counted read errors):
 * - one registration is one entry: a look's channel round and its kernel
 *   round (or the round again after a registration came back) may both
 *   see an item that switched or came back between them; its events are
 *   merged into its first entry;
 * - readiness the kernel gave for an intercepted connection is TCP's, and
 *   the shim may have taken those bytes since (a SWITCH frame, a RESUME,
 *   bells): it is checked against what a read or write of the program's
 *   would now find (shim_io_poll_mask), and what is not so is taken out.
 *   A channel round's entries were computed under this wait's lock just
 *   before, from the rings, which only the program's own calls drain.
 * An entry left with nothing goes; a one-shot registration the kernel
 * disabled keeps its entry (it would not fire again). Under ep->lock.
 */
static int ep_settle(struct ep_wait *w, int n)
{
	const uint32_t any = EPOLLIN | EPOLLOUT | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLRDNORM |
			     EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND;
	struct shim_ep *ep = w->ep;
	unsigned long gen = ++ep->settle_gen;
	int kept = 0;

	for (int i = 0; i < n; i++) {
		struct shim_epitem *it = NULL;
		uint32_t ev = w->events[i].events;

		if (w->src[i].item)
			HASH_FIND(hh_id, ep->by_id, &w->src[i].id, sizeof(w->src[i].id), it);
		if (it && it->settle_gen == gen) {
			w->events[it->settle_at].events |= ev;
			continue;
		}
		if (it && w->src[i].kernel && !(it->events & EPOLLONESHOT)) {
			struct shim_sock *s = shim_ep_item_sock(it);
			int mask = s ? shim_io_poll_mask(s, it->via) : -1;

			shim_sock_put(s);
			if (mask >= 0 && !(mask & POLLIN))
				ev &= ~(uint32_t)(EPOLLIN | EPOLLRDNORM);
			if (mask >= 0 && !(mask & POLLOUT))
				ev &= ~(uint32_t)(EPOLLOUT | EPOLLWRNORM);
			if (!(ev & any))
				continue;
		}
		if (it) {
			it->settle_gen = gen;
			it->settle_at = kept;
		}
		w->events[kept] = w->events[i];
		w->events[kept].events = ev;
		w->src[kept] = w->src[i];
		kept++;
	}
	return kept;
}

static int ep_report(struct ep_wait *w, int n)
{
	if (n <= 0)
		return n;
	pthread_mutex_lock(&w->ep->lock);
	n = ep_settle(w, n);
	pthread_mutex_unlock(&w->ep->lock);
	return n;
}

static int ep_look(void *ctx)
{
	struct ep_wait *w = ctx;
	int mine, theirs;

	pthread_mutex_lock(&w->ep->lock);
	look_begin(w->ep);
	mine = ep_channel_round(w->efd, w->ep, w->events, w->src, w->maxevents, true);
	/* The kernel round below sees what this round gave back. */
	look_begin(w->ep);
	pthread_mutex_unlock(&w->ep->lock);
	/* A kernel-only set that may sleep: its sleep is the kernel's look
	 * (epoll_wait returns at once when something is ready), one system
	 * call per wait as without the shim. */
	if (!mine && w->timeout_ns != 0 && kernel_only(w))
		return 0;
	theirs = kernel_look(w, mine, false);
	return theirs < 0 ? theirs : ep_report(w, look_again_if_moved(w, mine + theirs));
}

static int ep_arm(void *ctx, int *cap_ms)
{
	struct ep_wait *w = ctx;
	bool sleep;

	pthread_mutex_lock(&w->ep->lock);
	unsigned items = HASH_CNT(hh_id, w->ep->by_id);

	if (items > w->cap) {
		struct arm *bigger = malloc(items * sizeof(*bigger));

		if (bigger) {
			if (w->arms != w->arms_stack)
				free(w->arms);
			w->arms = bigger;
			w->cap = items;
		}
	}
	sleep = arm_all(w->ep, w->arms, w->cap, &w->narmed, cap_ms);
	pthread_mutex_unlock(&w->ep->lock);
	return sleep;
}

static int ep_sleep(void *ctx, int ms)
{
	struct ep_wait *w = ctx;

	return kernel_wait(w->efd, w->events, w->maxevents, ms, w->sigmask);
}

static void ep_disarm(void *ctx)
{
	struct ep_wait *w = ctx;

	disarm_all(w->arms, w->narmed);
	w->narmed = 0;
}

static int ep_after(void *ctx, int theirs)
{
	struct ep_wait *w = ctx;
	int mine;

	pthread_mutex_lock(&w->ep->lock);
	look_begin(w->ep);
	if (theirs > 0)
		theirs = shim_ep_translate(w->ep, w->events, w->src, theirs, false);
	mine = theirs >= 0 && theirs < w->maxevents
		       ? ep_channel_round(w->efd, w->ep, w->events + theirs, w->src + theirs,
					  w->maxevents - theirs, true)
		       : 0;
	pthread_mutex_unlock(&w->ep->lock);
	return theirs < 0 ? theirs : ep_report(w, look_again_if_moved(w, mine + theirs));
}

static const struct shim_waitloop_ops ep_ops = {
	.look = ep_look,
	.arm = ep_arm,
	.sleep = ep_sleep,
	.disarm = ep_disarm,
	.after = ep_after,
	.spin_more = ep_spin_more,
	.spin_end = ep_spin_end,
};

static int wait_loop(struct shim_sock *es, struct epoll_event *events, int maxevents, long long timeout_ns,
		     const sigset_t *sigmask)
{
	struct ep_wait w = {
		.ep = es->ep, .efd = shim_ep_fd(es), .timeout_ns = timeout_ns, .events = events,
		.maxevents = maxevents, .sigmask = sigmask,
		.cap = ARMS_ON_STACK, .spin = SHIM_SPIN_RUN_INIT,
	};
	struct shim_ep_src src_stack[SRC_ON_STACK];
	int rc;

	w.arms = w.arms_stack;
	w.src = src_stack;
	/* A report shorter than asked is a report still: with no room for
	 * the sources, fewer events per call. */
	if (maxevents > SRC_ON_STACK) {
		w.src = malloc((size_t)maxevents * sizeof(*w.src));
		if (!w.src) {
			w.src = src_stack;
			w.maxevents = SRC_ON_STACK;
		}
	}
	rc = shim_waitloop_run(&ep_ops, &w, timeout_ns);
	if (w.arms != w.arms_stack)
		free(w.arms);
	if (w.src != src_stack)
		free(w.src);
	return rc;
}

int shim_epoll_wait(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
		    const sigset_t *sigmask, int *rc)
{
	struct shim_sock *es = shim_ep_sock(epfd);

	if (!es)
		return 0;
	/* No item at all (only young connections' registrations, which are
	 * the program's, or none yet): the kernel's own wait, as without the
	 * shim; the wrapper maps back a tagged event that raced it
	 * (shim_epoll_fixup). Relaxed: an item added meanwhile is one whose
	 * registration was still the program's when the kernel looked. */
	if (!__atomic_load_n(&es->ep->n_items, __ATOMIC_RELAXED)) {
		shim_sock_put(es);
		return 0;
	}
	*rc = maxevents <= 0 ? -EINVAL : wait_loop(es, events, maxevents, timeout_ns, sigmask);
	shim_sock_put(es);
	return 1;
}


/*
 * A tracked set inside poll or select (a cascaded set: an event loop that
 * waits on its epoll fd beside other fds). The kernel's readiness of the
 * set's fd sees its switched items' bell-only registrations, not their
 * rings; before the set's first epoll_wait, the TCP sockets of items that
 * switched since. So the outer wait asks here what the set's own
 * epoll_wait would report of its switched items, without taking it: an
 * edge or a one-shot stays for that epoll_wait, as the kernel's poll of an
 * epoll file looks at its ready list without emptying it. While the outer
 * wait sleeps, the items are armed as for the set's own sleep: a bell
 * rings on an item's line, which is in the set, and the set's fd, which
 * the outer wait watches, becomes readable.
 */
struct shim_ep_outer {
	struct shim_sock *es;
	struct arm *arms;
	unsigned narmed;
};

bool shim_epoll_outer_needed(int fd)
{
	struct shim_sock *es = shim_ep_sock(fd);
	bool needed = es && __atomic_load_n(&es->ep->n_items, __ATOMIC_RELAXED);

	shim_sock_put(es);
	return needed;
}

struct shim_ep_outer *shim_epoll_outer_get(int fd)
{
	struct shim_sock *es = shim_ep_sock(fd);
	struct shim_ep_outer *o;

	if (!es)
		return NULL;
	o = calloc(1, sizeof(*o));
	if (!o) {
		shim_sock_put(es);
		return NULL;
	}
	o->es = es;
	return o;
}

/* What the set's next look would report of a switched item, left for it.
 * Called with ep->lock. */
static uint32_t outer_item_ready(struct shim_epitem *it, struct shim_sock *s)
{
	int mask = it->oneshot_fired ? -1 : shim_io_poll_mask(s, it->via);
	uint32_t ev;
	bool edge;

	if (mask < 0)
		return 0;
	ev = poll_to_epoll(mask) & (it->events | EPOLLHUP | EPOLLERR);
	if (!ev || !(it->events & EPOLLET))
		return ev;
	/* ep_channel_round's edge, read without moving it. */
	edge = (ev & ~it->et_level) != 0;
	if ((it->events & EPOLLIN) && (shim_io_rx_arrived(s, it->via) != it->et_rx_arrived ||
				       __atomic_load_n(&s->rx_wakes, __ATOMIC_RELAXED) != it->et_rx_wakes))
		edge = true;
	if ((ev & EPOLLIN) && __atomic_load_n(&s->rx_starved, __ATOMIC_RELAXED) != it->et_rx_starved)
		edge = true;
	if ((ev & EPOLLOUT) && __atomic_load_n(&s->tx_starved, __ATOMIC_RELAXED) != it->et_tx_starved)
		edge = true;
	return edge ? ev : 0;
}

int shim_epoll_outer_mask(struct shim_ep_outer *o)
{
	struct shim_ep *ep = o->es->ep;
	struct shim_epitem *it, *tmp;
	struct epoll_event unused;
	struct shim_ep_src unused_src;
	bool ours = false, ready = false;

	pthread_mutex_lock(&ep->lock);
	/* The registrations of items that switched, or came back, since the
	 * set's last look are moved first, as that look would (no report). */
	ep_channel_round(ep->efd, ep, &unused, &unused_src, 0, false);
	HASH_ITER(hh_id, ep->by_id, it, tmp) {
		struct shim_sock *s;

		if (!it->kernel_switched)
			continue;
		s = shim_ep_item_sock(it);
		if (!s)
			continue;
		if (shim_io_progress(s, it->via)) {
			ours = true;
			ready = ready || outer_item_ready(it, s);
		}
		shim_sock_put(s);
		if (ready)
			break;
	}
	pthread_mutex_unlock(&ep->lock);
	return !ours ? -1 : ready ? POLLIN : 0;
}

int shim_epoll_outer_arm(struct shim_ep_outer *o, int *cap_ms)
{
	struct shim_ep *ep = o->es->ep;
	bool sleep;

	pthread_mutex_lock(&ep->lock);
	unsigned items = HASH_CNT(hh_id, ep->by_id);

	o->arms = items ? malloc(items * sizeof(*o->arms)) : NULL;
	if (items && !o->arms) {
		pthread_mutex_unlock(&ep->lock);
		return -ENOMEM;
	}
	sleep = arm_all(ep, o->arms, items, &o->narmed, cap_ms);
	pthread_mutex_unlock(&ep->lock);
	return sleep;
}

void shim_epoll_outer_disarm(struct shim_ep_outer *o)
{
	if (!o->arms)
		return;
	disarm_all(o->arms, o->narmed);
	free(o->arms);
	o->arms = NULL;
	o->narmed = 0;
}

void shim_epoll_outer_put(struct shim_ep_outer *o)
{
	if (!o)
		return;
	shim_epoll_outer_disarm(o);
	shim_sock_put(o->es);
	free(o);
}
