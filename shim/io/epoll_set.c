/*
 * The tracked epoll sets and their items; see wait.h.
 *
 * Only epoll sets that hold an intercepted fd are known here; every other
 * epoll fd stays the kernel's alone. Such a set is tracked by a shim_sock
 * of role SHIM_ROLE_EPOLL in the fd table (so close finds it), pointing at
 * a shim_ep with a uthash table of its intercepted items.
 *
 * Intercepted fds are registered with the kernel under a tagged data word
 * (tag_hi << 32 | the item's id) so their kernel events can be told apart
 * and mapped back to the application's own data. Once a fd switched, its kernel
 * registration asks for EPOLLIN only (bells) and its readiness comes from
 * its channel. EPOLLET on a switched fd reports rises of readiness, and
 * EPOLLIN again when bytes came since the last report (ep_channel_round);
 * EPOLLONESHOT is honoured. A fd back on TCP after a failover gets its
 * program's registration back.
 *
 * An item is the kernel's (file, number) registration: closing its number
 * while a dup keeps the file open leaves it in the set, reported with the
 * program's data, until the file's last fd goes (shim_epoll_fd_closed()).
 * The program's registration changes come through epoll.c; a young
 * connection's may stay the kernel's without an item (epoll_young.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
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


static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_ep *all_eps;

static uint64_t next_set_id;

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

void shim_ep_tag_init(void)
{
	pthread_once(&tag_once, make_tag);
}

uint32_t shim_ep_tag_hi(void)
{
	shim_ep_tag_init();
	return tag_hi;
}

static uint64_t tag_of(uint32_t id)
{
	return ((uint64_t)tag_hi << 32) | id;
}

/* A bell line's registration: its events are wake-ups, never the program's. */
static uint32_t line_tag_hi(void)
{
	return tag_hi ^ 1u;
}

static uint32_t kick_tag_hi(void)
{
	return tag_hi ^ 2u;
}

static void kick_make(struct shim_ep *ep)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)kick_tag_hi() << 32 };
	int fd;

	if (ep->kick_fd >= 0)
		return;
	fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0)
		return; /* a sleep's slice still ends the wait */
	if (REAL(epoll_ctl)(ep->efd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		REAL(close)(fd);
		return;
	}
	ep->kick_fd = fd;
}

void shim_ep_kick(struct shim_ep *ep)
{
	static const uint64_t one = 1;

	kick_make(ep);
	/* EAGAIN: the count is full, a wake-up is pending anyway. */
	if (ep->kick_fd >= 0 && REAL(write)(ep->kick_fd, &one, sizeof(one)) < 0)
		return;
}

int shim_ep_item_line(struct shim_ep *ep, struct shim_epitem *it, int line)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET };
	int copy;

	/* Gone from the table under us (a program's close-all): forget it. */
	if (it->line.fd >= 0 && !shim_owned_still(&it->line))
		it->line.fd = -1;
	if (line < 0 || it->line.fd >= 0) {
		if (line < 0 && it->line.fd >= 0) {
			REAL(epoll_ctl)(ep->efd, EPOLL_CTL_DEL, it->line.fd, NULL);
			shim_owned_close(&it->line);
		}
		return line < 0 ? -1 : line;
	}
	/*
	 * A copy of our own: the registration is keyed by the number, which
	 * the channel's close would free for reuse. Edge-triggered: a bell
	 * that came after its wait ended (the disarm drains the line) wakes
	 * the set once, not at every wait.
	 */
	copy = shim_fd_own_checked(REAL(fcntl)(line, F_DUPFD_CLOEXEC, 0));
	if (copy < 0)
		return -1;
	ev.data.u64 = ((uint64_t)line_tag_hi() << 32) | it->id;
	if (REAL(epoll_ctl)(ep->efd, EPOLL_CTL_ADD, copy, &ev) < 0 || shim_owned_take(&it->line, copy) < 0) {
		REAL(close)(copy);
		return -1;
	}
	return line;
}

void shim_ep_item_wake(struct shim_ep *ep, struct shim_epitem *it, struct shim_sock *s, int *cap_ms)
{
	shim_io_wake_register(s, ep->efd, ((uint64_t)line_tag_hi() << 32) | it->id, &it->wake_gen, cap_ms);
}

/* The intercepted sock at fd, held (shim_sock_put()), or NULL. */
struct shim_sock *shim_ep_intercepted_sock(int fd)
{
	struct shim_sock *s = shim_sock_get_intercepted(fd);

	if (s && s->role == SHIM_ROLE_EPOLL) {
		shim_sock_put(s);
		return NULL;
	}
	return s;
}

/* The tracked epoll set at epfd, its sock held (shim_sock_put()), or NULL.
 * The reference keeps the set's state alive for a wait in progress when
 * another thread closes epfd. */
struct shim_sock *shim_ep_sock(int epfd)
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
int shim_ep_fd(const struct shim_sock *es)
{
	return es->ep->efd;
}

/* The sock an item names (through it->via), held, or NULL. */
struct shim_sock *shim_ep_item_sock(const struct shim_epitem *it)
{
	struct shim_sock *s = shim_ep_intercepted_sock(it->via);

	if (s && s != it->sock) {
		shim_sock_put(s);
		return NULL;
	}
	return s;
}

static uint32_t kernel_events(const struct shim_epitem *it)
{
	if (it->kernel_switched)
		return EPOLLIN | EPOLLRDHUP;
	/* A spent one shot stays spent, as the kernel's does until a MOD:
	 * what it could still report (an error, a hang-up) once is dropped. */
	if ((it->events & EPOLLONESHOT) && it->oneshot_fired)
		return EPOLLONESHOT;
	return it->events;
}

/* The registration is on it->kfd, our own copy of the file, once the
 * item's number closed; before that on the program's number. */
int shim_ep_kernel_ctl(int efd, int op, struct shim_epitem *it)
{
	struct epoll_event ev = { .events = kernel_events(it), .data.u64 = tag_of(it->id) };

	return REAL(epoll_ctl)(efd, op, it->kfd >= 0 ? it->kfd : it->fd, &ev) < 0 ? -errno : 0;
}

/* Changes an item's kernel registration, only while its fd still names s
 * (checked under s->lock: close clears the entry, then takes the lock,
 * before the real close), so that a reused number's registration, maybe
 * the program's own, is never touched; an orphan's through our copy of its
 * file, or not at all without one. Lock order: ep->lock, then s->lock. */
void shim_ep_item_ctl(int efd, struct shim_sock *s, struct shim_epitem *it)
{
	if (it->kfd >= 0) {
		shim_ep_kernel_ctl(efd, EPOLL_CTL_MOD, it);
		return;
	}
	if (it->orphan)
		return;
	pthread_mutex_lock(&s->lock);
	if (shim_fd_get_acquire(it->fd) == s)
		shim_ep_kernel_ctl(efd, EPOLL_CTL_MOD, it);
	pthread_mutex_unlock(&s->lock);
}

/* switched: shim_io_is_switched(s), which the caller knows or asks. */
struct shim_epitem *shim_ep_item_new(struct shim_ep *ep, int fd, struct shim_sock *s, uint32_t events,
				    epoll_data_t data, bool switched)
{
	struct shim_epitem *it = calloc(1, sizeof(*it)), *taken;

	if (!it)
		return NULL;
	it->fd = it->via = fd;
	it->sock = s;
	it->kfd = -1;
	it->line.fd = -1;
	it->events = events;
	it->data = data;
	it->kernel_switched = switched;
	/* Ids wrap after 2^32 registrations: skip one still in use. */
	do {
		it->id = ep->next_id++;
		HASH_FIND(hh_id, ep->by_id, &it->id, sizeof(it->id), taken);
	} while (taken);
	return it;
}

void shim_ep_item_link(struct shim_ep *ep, struct shim_epitem *it)
{
	HASH_ADD_INT(ep->items, fd, it);
	HASH_ADD(hh_id, ep->by_id, id, sizeof(it->id), it);
	__atomic_store_n(&ep->n_items, ep->n_items + 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&it->sock->ep_items, 1, __ATOMIC_RELAXED);
}

/* Under ep->lock. The kernel registration is the caller's business. */
void shim_ep_item_drop(struct shim_ep *ep, struct shim_epitem *it)
{
	if (it->orphan) {
		struct shim_epitem **pp = &ep->orphans;

		while (*pp != it)
			pp = &(*pp)->orphan_next;
		*pp = it->orphan_next;
	} else {
		HASH_DEL(ep->items, it);
	}
	HASH_DELETE(hh_id, ep->by_id, it);
	__atomic_store_n(&ep->n_items, ep->n_items - 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&it->sock->ep_items, 1, __ATOMIC_RELAXED);
	if (it->kfd >= 0)
		REAL(close)(it->kfd);
	shim_ep_item_line(ep, it, -1);
	free(it);
}

int shim_ep_item_take_over(struct shim_ep *ep, int fd, struct shim_sock *s, uint32_t events, uint64_t data)
{
	struct shim_epitem *it, *old;
	int rc;

	pthread_once(&tag_once, make_tag);
	it = shim_ep_item_new(ep, fd, s, events, (epoll_data_t){ .u64 = data }, shim_io_switched(s));
	if (!it)
		return -ENOMEM;
	rc = shim_ep_kernel_ctl(ep->efd, EPOLL_CTL_MOD, it);
	if (rc < 0) {
		free(it);
		return rc;
	}
	HASH_FIND_INT(ep->items, &fd, old);
	if (old)
		shim_ep_item_drop(ep, old); /* left from a closed fd of this number */
	shim_ep_item_link(ep, it);
	return 0;
}

bool shim_ep_with_set(uint64_t id, void (*fn)(struct shim_ep *ep, void *ctx), void *ctx)
{
	bool found = false;

	pthread_mutex_lock(&all_lock);
	for (struct shim_ep *ep = all_eps; ep && !found; ep = ep->next) {
		if (ep->id != id)
			continue;
		found = true;
		pthread_mutex_lock(&ep->lock);
		fn(ep, ctx);
		pthread_mutex_unlock(&ep->lock);
	}
	pthread_mutex_unlock(&all_lock);
	return found;
}

/*
 * The item the kernel would find for (the file fd names, fd): the one added
 * under fd while fd still names its file, or an orphan of fd's file added
 * under this number (a dup2 back onto it). A live item whose file the
 * number no longer names is left from a close that raced this call: not
 * the program's registration of what fd is now.
 */
struct shim_epitem *shim_ep_item_at(struct shim_ep *ep, int fd)
{
	struct shim_sock *cur = shim_fd_get_acquire(fd);
	struct shim_epitem *it;

	if (!cur)
		return NULL;
	HASH_FIND_INT(ep->items, &fd, it);
	if (it)
		return it->sock == cur ? it : NULL;
	for (it = ep->orphans; it; it = it->orphan_next)
		if (it->fd == fd && it->sock == cur)
			return it;
	return NULL;
}

/* Maps kernel events back: tagged ones to the item's data; events of
 * switched items are bells and are dropped (their readiness is ours). */
int shim_ep_translate(struct shim_ep *ep, struct epoll_event *ev, struct shim_ep_src *src, int n, bool moved_only)
{
	int kept = 0;

	for (int i = 0; i < n; i++) {
		struct shim_epitem *it = NULL;

		/* A bell on a line, or the set's kick: the wake-up was all it
		 * had to say. */
		if ((uint32_t)(ev[i].data.u64 >> 32) == line_tag_hi() ||
		    (uint32_t)(ev[i].data.u64 >> 32) == kick_tag_hi())
			continue;
		if ((uint32_t)(ev[i].data.u64 >> 32) != tag_hi && moved_only)
			continue;
		if ((uint32_t)(ev[i].data.u64 >> 32) == tag_hi) {
			uint32_t id = (uint32_t)ev[i].data.u64;

			HASH_FIND(hh_id, ep->by_id, &id, sizeof(id), it);
			if (it && moved_only && it->moved_gen != ep->look_gen)
				continue;
			/* A registration whose item went while the file lived
			 * on (our copy for a call in progress): not the
			 * program's any more. */
			if (!it)
				continue;
			if (it->kernel_switched) {
				struct shim_sock *s = shim_ep_item_sock(it);

				/* The drain may read the peer's RESUME: the
				 * connection is back on TCP, and this event was
				 * the program's to see. */
				if (s && shim_io_drain_bells(s, it->via))
					ep->moved_back = true;
				shim_sock_put(s);
				continue;
			}
			/* Back on TCP with its one shot spent on the channel:
			 * the program's registration came back disabled, and
			 * what it reports is not the program's. */
			if (it->oneshot_fired)
				continue;
			/* The kernel disabled it; the item must know, should
			 * it switch or its registration move. */
			if (it->events & EPOLLONESHOT)
				it->oneshot_fired = true;
			ev[i].data = it->data;
		}
		if (src)
			src[kept] = it ? (struct shim_ep_src){ .id = it->id, .item = true, .kernel = true }
				       : (struct shim_ep_src){ 0 };
		ev[kept++] = ev[i];
	}
	return kept;
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
	HASH_ITER(hh_id, ep->by_id, it, tmp) {
		shim_ep_item_drop(ep, it);
	}
	if (ep->kick_fd >= 0)
		REAL(close)(ep->kick_fd);
	if (ep->efd >= 0)
		REAL(close)(ep->efd);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

struct shim_ep *shim_epoll_new(int epfd)
{
	struct shim_ep *ep = calloc(1, sizeof(*ep));

	if (!ep)
		return NULL;
	/* The shim's waits and registrations go through a copy of the epoll
	 * fd, never the program's number: a wait in progress when the program
	 * closes its fd (and the number is reused) goes on, as the kernel's
	 * would, on the same set. */
	ep->efd = REAL(fcntl)(epfd, F_DUPFD_CLOEXEC, 0);
	if (ep->efd < 0) {
		free(ep);
		return NULL;
	}
	pthread_mutex_init(&ep->lock, NULL);
	ep->kick_fd = -1;
	ep->id = __atomic_add_fetch(&next_set_id, 1, __ATOMIC_RELAXED);
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
	for (struct shim_ep *ep = all_eps; ep; ep = ep->next) {
		pthread_mutex_lock(&ep->lock);
		ep->forked = true;
	}
}

void shim_epoll_atfork_release(void)
{
	for (struct shim_ep *ep = all_eps; ep; ep = ep->next)
		pthread_mutex_unlock(&ep->lock);
	pthread_mutex_unlock(&all_lock);
}

/* Calls fn(ep, ctx) for every set, under all_lock and the set's lock. */
void shim_ep_each(void (*fn)(struct shim_ep *ep, void *ctx), void *ctx)
{
	pthread_mutex_lock(&all_lock);
	for (struct shim_ep *ep = all_eps; ep; ep = ep->next) {
		pthread_mutex_lock(&ep->lock);
		fn(ep, ctx);
		pthread_mutex_unlock(&ep->lock);
	}
	pthread_mutex_unlock(&all_lock);
}
