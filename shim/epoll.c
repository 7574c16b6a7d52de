/*
 * epoll emulation for switched fds; see wait.h.
 *
 * Only epoll sets that hold an intercepted fd are known here; every other
 * epoll fd stays the kernel's alone. Such a set is tracked by a shim_sock
 * of role SHIM_ROLE_EPOLL in the fd table (so close finds it), pointing at
 * a shim_ep with a uthash table of its intercepted items.
 *
 * Intercepted fds are registered with the kernel under a tagged data word
 * (tag_hi << 32 | fd) so their kernel events can be told apart and mapped
 * back to the application's own data. Once a fd switched, its kernel
 * registration asks for EPOLLIN only (bells) and its readiness comes from
 * its channel. EPOLLET on a switched fd reports rises of readiness, and
 * EPOLLIN again when bytes came since the last report (channel_round);
 * EPOLLONESHOT is honoured. A fd back on TCP after a failover gets its
 * program's registration back.
 */
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <uthash.h>

#include "compiler.h"
#include "fdtable.h"
#include "io.h"
#include "real.h"
#include "sock.h"
#include "trace.h"
#include "upgrade.h"
#include "wait.h"

struct shim_epitem {
	int fd;
	uint32_t events; /* the application's */
	epoll_data_t data;
	bool kernel_switched; /* kernel registration is the bell-only one */
	bool oneshot_fired;
	/* EPOLLET on a switched fd: the readiness last seen, and the bytes
	 * readable then; an event is a rise of readiness, or bytes that came
	 * since (channel_round). ADD and MOD start from none, as the kernel's
	 * MOD re-checks readiness. */
	uint32_t et_level;
	unsigned et_avail;
	unsigned et_rx_starved, et_tx_starved; /* the sock's counts at the last report */
	UT_hash_handle hh;
};

struct shim_ep {
	pthread_mutex_t lock;
	struct shim_epitem *items;
	struct shim_ep *next; /* all sets, for shim_epoll_forget_fd() */
	struct shim_spin_hist spin_hist; /* do this set's waits spin (spin.h) */
};

static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_ep *all_eps;

static uint32_t tag_hi;
static pthread_once_t tag_once = PTHREAD_ONCE_INIT;

static void make_tag(void)
{
	uint32_t r = 0;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = 0x52534831u;
	/* Never a valid user-space pointer's high half on x86-64/aarch64. */
	tag_hi = r | 0x80000000u;
}

static uint64_t tag_of(int fd)
{
	return ((uint64_t)tag_hi << 32) | (uint32_t)fd;
}

/* The intercepted sock at fd, held (shim_sock_put()), or NULL. */
static struct shim_sock *intercepted_sock(int fd)
{
	struct shim_sock *s;

	if (likely(!shim_fd_get(fd)))
		return NULL;
	s = shim_sock_get(fd);
	if (s && (s->role == SHIM_ROLE_EPOLL || !__atomic_load_n(&s->intercept, __ATOMIC_RELAXED))) {
		shim_sock_put(s);
		return NULL;
	}
	return s;
}

/* The tracked epoll set at epfd, its sock held (shim_sock_put()), or NULL.
 * The reference keeps the set's state alive for a wait in progress when
 * another thread closes epfd. */
static struct shim_sock *epoll_sock(int epfd)
{
	struct shim_sock *s;

	if (likely(!shim_fd_get(epfd)))
		return NULL;
	s = shim_sock_get(epfd);
	if (s && s->role != SHIM_ROLE_EPOLL) {
		shim_sock_put(s);
		return NULL;
	}
	return s;
}

/* The shim's own copy of the set's fd (made at tracking, closed with the
 * last reference): never the program's number, which may be reused. */
static int epoll_fd(const struct shim_sock *es)
{
	return es->tcp_keep;
}

static uint32_t kernel_events(const struct shim_epitem *it)
{
	return it->kernel_switched ? (EPOLLIN | EPOLLRDHUP) : it->events;
}

static int kernel_ctl(int efd, int op, struct shim_epitem *it)
{
	struct epoll_event ev = { .events = kernel_events(it), .data.u64 = tag_of(it->fd) };

	return REAL(epoll_ctl)(efd, op, it->fd, &ev) < 0 ? -errno : 0;
}

/* Changes an item's kernel registration, only while its fd still names s
 * (checked under s->lock: close clears the entry, then takes the lock,
 * before the real close), so that a reused number's registration, maybe
 * the program's own, is never touched. Lock order: ep->lock, then s->lock. */
static void item_ctl(int efd, struct shim_sock *s, struct shim_epitem *it)
{
	pthread_mutex_lock(&s->lock);
	if (shim_fd_get_acquire(it->fd) == s)
		kernel_ctl(efd, EPOLL_CTL_MOD, it);
	pthread_mutex_unlock(&s->lock);
}

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

int shim_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event)
{
	struct shim_sock *s = intercepted_sock(fd), *es = epoll_sock(epfd);
	struct shim_ep *ep;
	struct shim_epitem *it;
	int rc;

	if (!s && !es)
		return REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
	pthread_once(&tag_once, make_tag);
	if (!es) {
		es = shim_sock_track_epoll(epfd);
		if (!es) {
			shim_sock_put(s);
			return REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
		}
	}
	ep = es->ep;
	pthread_mutex_lock(&ep->lock);
	HASH_FIND_INT(ep->items, &fd, it);
	if (!s && !it) {
		pthread_mutex_unlock(&ep->lock);
		shim_sock_put(es);
		if (op == EPOLL_CTL_ADD)
			shim_epoll_note_early(epfd, fd);
		return REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
	}
	rc = kernel_mask_check(op, event, it);
	if (rc < 0) {
		pthread_mutex_unlock(&ep->lock);
		shim_sock_put(s);
		shim_sock_put(es);
		return rc;
	}
	switch (op) {
	case EPOLL_CTL_ADD: {
		struct shim_epitem *old = it;

		it = calloc(1, sizeof(*it));
		if (!it) {
			rc = -ENOMEM;
			break;
		}
		it->fd = fd;
		it->events = event->events;
		it->data = event->data;
		it->kernel_switched = s ? shim_io_is_switched(s) : false;
		rc = kernel_ctl(epfd, EPOLL_CTL_ADD, it);
		if (rc < 0) {
			/* EEXIST: the fd is registered, and an item we hold for
			 * it stays (programs try ADD, then MOD on EEXIST). */
			free(it);
			break;
		}
		if (old) {
			/* The kernel took it: the item we held was left from a
			 * closed fd of the same number. */
			HASH_DEL(ep->items, old);
			free(old);
		}
		HASH_ADD_INT(ep->items, fd, it);
		break;
	}
	case EPOLL_CTL_MOD:
		if (!it) {
			rc = REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
			break;
		}
		it->events = event->events;
		it->data = event->data;
		it->oneshot_fired = false;
		it->et_level = 0;
		it->et_avail = 0;
		rc = kernel_ctl(epfd, EPOLL_CTL_MOD, it);
		break;
	case EPOLL_CTL_DEL:
		rc = REAL(epoll_ctl)(epfd, op, fd, event) < 0 ? -errno : 0;
		if (it) {
			HASH_DEL(ep->items, it);
			free(it);
		}
		break;
	default:
		rc = -EINVAL;
	}
	pthread_mutex_unlock(&ep->lock);
	shim_sock_put(s);
	shim_sock_put(es);
	return rc;
}

static uint32_t poll_to_epoll(int mask)
{
	uint32_t ev = 0;

	if (mask & POLLIN)
		ev |= EPOLLIN;
	if (mask & POLLOUT)
		ev |= EPOLLOUT;
	if (mask & POLLRDHUP)
		ev |= EPOLLRDHUP;
	if (mask & POLLHUP)
		ev |= EPOLLHUP;
	if (mask & POLLERR)
		ev |= EPOLLERR;
	return ev;
}

/* Readiness of the switched items, into out[]; switches kernel
 * registrations of items that switched since. Called with ep->lock. */
static int channel_round(int efd, struct shim_ep *ep, struct epoll_event *out, int max)
{
	struct shim_epitem *it, *tmp;
	int n = 0;

	HASH_ITER(hh, ep->items, it, tmp) {
		struct shim_sock *s = intercepted_sock(it->fd);
		int mask;

		if (!s)
			continue;
		if (!shim_io_progress(s, it->fd)) {
			if (it->kernel_switched) {
				/* Back on TCP after a failover: the program's own
				 * registration again. MOD re-checks readiness, so an
				 * edge-triggered item is told what is already there. */
				it->kernel_switched = false;
				item_ctl(efd, s, it);
			}
			shim_sock_put(s);
			continue;
		}
		if (!it->kernel_switched) {
			it->kernel_switched = true;
			item_ctl(efd, s, it);
		}
		mask = n >= max || it->oneshot_fired ? -1 : shim_io_poll_mask(s, it->fd);
		int avail = 0;
		unsigned rx_starved = __atomic_load_n(&s->rx_starved, __ATOMIC_RELAXED);
		unsigned tx_starved = __atomic_load_n(&s->tx_starved, __ATOMIC_RELAXED);

		if (mask >= 0 && (it->events & EPOLLET) && (mask & POLLIN))
			shim_io_bytes_readable(s, it->fd, &avail);
		shim_sock_put(s);
		if (mask < 0)
			continue;
		uint32_t ev = poll_to_epoll(mask) & (it->events | EPOLLHUP | EPOLLERR);

		if (it->events & EPOLLET) {
			/* Edge-triggered: what rose since the last look, and
			 * EPOLLIN again for bytes that came since. A ring with
			 * room would otherwise wake the program on every wait. */
			uint32_t level = ev;

			ev &= ~it->et_level;
			/* A program that ran out (EAGAIN, a short call) since
			 * the last report waits for the next edge: readiness
			 * now is that edge, whether or not we saw it fall. */
			if ((level & EPOLLIN) && ((unsigned)avail > it->et_avail || rx_starved != it->et_rx_starved))
				ev |= EPOLLIN;
			if ((level & EPOLLOUT) && tx_starved != it->et_tx_starved)
				ev |= EPOLLOUT;
			it->et_level = level;
			it->et_avail = (level & EPOLLIN) ? (unsigned)avail : 0;
			if (ev & EPOLLIN)
				it->et_rx_starved = rx_starved;
			if (ev & EPOLLOUT)
				it->et_tx_starved = tx_starved;
		}
		if (!ev)
			continue;
		out[n].events = ev;
		out[n].data = it->data;
		n++;
		if (it->events & EPOLLONESHOT)
			it->oneshot_fired = true;
	}
	return n;
}

/* Maps kernel events back: tagged ones to the item's data; events of
 * switched items are bells and are dropped (their readiness is ours). */
static int translate(struct shim_ep *ep, struct epoll_event *ev, int n)
{
	int kept = 0;

	for (int i = 0; i < n; i++) {
		struct shim_epitem *it = NULL;

		if ((uint32_t)(ev[i].data.u64 >> 32) == tag_hi) {
			int fd = (int)(uint32_t)ev[i].data.u64;

			HASH_FIND_INT(ep->items, &fd, it);
		}
		if (it) {
			if (it->kernel_switched) {
				struct shim_sock *s = intercepted_sock(it->fd);

				if (s)
					shim_io_drain_bells(s, it->fd);
				shim_sock_put(s);
				continue;
			}
			ev[i].data = it->data;
		}
		ev[kept++] = ev[i];
	}
	return kept;
}

int shim_epoll_fixup(int epfd, struct epoll_event *events, int n)
{
	struct shim_sock *es = epoll_sock(epfd);
	struct shim_ep *ep;

	if (!es)
		return n;
	ep = es->ep;
	if (n > 0) {
		pthread_once(&tag_once, make_tag);
		pthread_mutex_lock(&ep->lock);
		n = translate(ep, events, n);
		pthread_mutex_unlock(&ep->lock);
	}
	shim_sock_put(es);
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

/* Arms every switched item into arms[] (at most cap). Returns false when
 * sleeping is not needed; *short_sleep: sleep a millisecond at most.
 * Called with ep->lock. */
static bool arm_all(struct shim_ep *ep, struct arm *arms, unsigned cap, unsigned *n, bool *short_sleep)
{
	struct shim_epitem *it, *tmp;
	bool sleep = true;

	*n = 0;
	HASH_ITER(hh, ep->items, it, tmp) {
		struct shim_sock *s;
		short want = 0;

		if (*n == cap)
			return false; /* more items than room: look again at once */
		if (!it->kernel_switched || it->oneshot_fired)
			continue;
		s = intercepted_sock(it->fd);
		if (!s)
			continue;
		if (it->events & EPOLLIN)
			want |= POLLIN;
		if (it->events & EPOLLOUT)
			want |= POLLOUT;
		if (it->events & EPOLLET) {
			/* Readiness already reported, with no call of the program
			 * run out since, is no reason to stay awake: an edge
			 * program waits for the next edge (channel_round). */
			if ((it->et_level & EPOLLIN) &&
			    __atomic_load_n(&s->rx_starved, __ATOMIC_RELAXED) == it->et_rx_starved)
				want &= (short)~POLLIN;
			if ((it->et_level & EPOLLOUT) &&
			    __atomic_load_n(&s->tx_starved, __ATOMIC_RELAXED) == it->et_tx_starved)
				want &= (short)~POLLOUT;
		}
		arms[*n] = (struct arm){ .s = s, .fd = it->fd, .armed = shim_io_arm(s, it->fd, want) };
		if (arms[*n].armed & SHIM_ARM_READY)
			sleep = false;
		if (arms[*n].armed & SHIM_ARM_SHORT)
			*short_sleep = true;
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

static int wait_loop(struct shim_sock *es, struct epoll_event *events, int maxevents, long long timeout_ns,
		     const sigset_t *sigmask)
{
	struct shim_ep *ep = es->ep;
	int efd = epoll_fd(es);
	long long deadline = shim_wait_deadline(timeout_ns);
	struct shim_spin_run spin = SHIM_SPIN_RUN_INIT;
	struct arm arms_stack[ARMS_ON_STACK], *arms = arms_stack;
	unsigned cap = ARMS_ON_STACK;
	int rc;

	for (;;) {
		int mine, theirs;

		pthread_mutex_lock(&ep->lock);
		mine = channel_round(efd, ep, events, maxevents);
		pthread_mutex_unlock(&ep->lock);
		theirs = mine < maxevents ? kernel_wait(efd, events + mine, maxevents - mine, 0, NULL) : 0;
		if (theirs > 0) {
			pthread_mutex_lock(&ep->lock);
			theirs = translate(ep, events + mine, theirs);
			pthread_mutex_unlock(&ep->lock);
		}
		if (theirs < 0 || mine + theirs > 0 || timeout_ns == 0) {
			rc = theirs < 0 ? theirs : mine + theirs;
			break;
		}
		/* Busy-poll while spin.h allows (at most RDMASHIM_SPIN_US). */
		if (shim_spin_more(&spin, &ep->spin_hist, efd)) {
			sched_yield(); /* the peer may share our core */
			continue;
		}
		pthread_mutex_lock(&ep->lock);
		unsigned items = HASH_COUNT(ep->items), narmed;

		if (items > cap) {
			struct arm *bigger = malloc(items * sizeof(*bigger));

			if (bigger) {
				if (arms != arms_stack)
					free(arms);
				arms = bigger;
				cap = items;
			}
		}
		bool short_sleep = false, sleep = arm_all(ep, arms, cap, &narmed, &short_sleep);
		int slice = shim_wait_slice_ms(deadline);

		pthread_mutex_unlock(&ep->lock);
		if (short_sleep && slice > 1)
			slice = 1;
		theirs = sleep ? kernel_wait(efd, events, maxevents, slice, sigmask) : 0;
		disarm_all(arms, narmed);
		pthread_mutex_lock(&ep->lock);
		if (theirs > 0)
			theirs = translate(ep, events, theirs);
		mine = theirs >= 0 && theirs < maxevents ? channel_round(efd, ep, events + theirs, maxevents - theirs) : 0;
		pthread_mutex_unlock(&ep->lock);
		if (theirs < 0 || mine + theirs > 0) {
			rc = theirs < 0 ? theirs : mine + theirs;
			break;
		}
		if (deadline >= 0 && (long long)shim_now_ns() >= deadline) {
			rc = 0;
			break;
		}
	}
	shim_spin_end(&spin, &ep->spin_hist, rc > 0, efd);
	if (arms != arms_stack)
		free(arms);
	return rc;
}

int shim_epoll_wait(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
		    const sigset_t *sigmask, int *rc)
{
	struct shim_sock *es = epoll_sock(epfd);

	if (!es)
		return 0;
	*rc = maxevents <= 0 ? -EINVAL : wait_loop(es, events, maxevents, timeout_ns, sigmask);
	shim_sock_put(es);
	return 1;
}

void shim_epoll_free(struct shim_ep *ep)
{
	struct shim_epitem *it, *tmp;

	pthread_mutex_lock(&all_lock);
	for (struct shim_ep **pp = &all_eps; *pp; pp = &(*pp)->next) {
		if (*pp == ep) {
			*pp = ep->next;
			break;
		}
	}
	pthread_mutex_unlock(&all_lock);
	HASH_ITER(hh, ep->items, it, tmp) {
		HASH_DEL(ep->items, it);
		free(it);
	}
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

struct shim_ep *shim_epoll_new(void)
{
	struct shim_ep *ep = calloc(1, sizeof(*ep));

	if (!ep)
		return NULL;
	pthread_mutex_init(&ep->lock, NULL);
	pthread_mutex_lock(&all_lock);
	ep->next = all_eps;
	all_eps = ep;
	pthread_mutex_unlock(&all_lock);
	return ep;
}

/* fork: no set lock may be inherited held (lock order: all_lock, then
 * each set's lock, then sock locks; see socklife.c). */
void shim_epoll_atfork_prepare(void)
{
	pthread_mutex_lock(&all_lock);
	for (struct shim_ep *ep = all_eps; ep; ep = ep->next)
		pthread_mutex_lock(&ep->lock);
}

void shim_epoll_atfork_release(void)
{
	for (struct shim_ep *ep = all_eps; ep; ep = ep->next)
		pthread_mutex_unlock(&ep->lock);
	pthread_mutex_unlock(&all_lock);
}

/* An intercepted fd closed: the kernel dropped it from its epoll sets (if it
 * was the last fd of its socket); drop our items, so that a new socket that
 * gets the same number is not mistaken for it. */
void shim_epoll_forget_fd(int fd)
{
	pthread_mutex_lock(&all_lock);
	for (struct shim_ep *ep = all_eps; ep; ep = ep->next) {
		struct shim_epitem *it;

		pthread_mutex_lock(&ep->lock);
		HASH_FIND_INT(ep->items, &fd, it);
		if (it) {
			HASH_DEL(ep->items, it);
			free(it);
		}
		pthread_mutex_unlock(&ep->lock);
	}
	pthread_mutex_unlock(&all_lock);
}

int shim_epoll_adopt(int epfd, int fd, uint32_t events, uint64_t data)
{
	struct shim_sock *s = intercepted_sock(fd), *es;
	struct shim_epitem *it;
	int rc = 0;

	if (!s)
		return -ENOENT;
	pthread_once(&tag_once, make_tag);
	es = epoll_sock(epfd);
	if (!es)
		es = shim_sock_track_epoll(epfd);
	if (!es) {
		shim_sock_put(s);
		return -ENOMEM;
	}
	pthread_mutex_lock(&es->ep->lock);
	HASH_FIND_INT(es->ep->items, &fd, it);
	if (!it) {
		it = calloc(1, sizeof(*it));
		if (it) {
			it->fd = fd;
			it->events = events;
			it->data.u64 = data;
			it->kernel_switched = shim_io_is_switched(s);
			/* The kernel holds the program's registration: ours
			 * replaces it, as a MOD does. */
			rc = kernel_ctl(epfd, EPOLL_CTL_MOD, it);
			if (rc == 0)
				HASH_ADD_INT(es->ep->items, fd, it);
			else
				free(it);
		} else {
			rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&es->ep->lock);
	shim_sock_put(s);
	shim_sock_put(es);
	return rc;
}
