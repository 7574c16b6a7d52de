/*
 * The life of a shim_sock: references, the type-stable pool and the fork
 * handlers over every sock lock. The model is written down in
 * shim/LIFETIME.md; in short:
 *
 *  - a lookup returns a held reference, taken with increment-if-not-zero
 *    and confirmed by reading the table entry again;
 *  - the last put releases the connection's resources at once and gives
 *    the memory back to a pool that never returns it to malloc, so a
 *    lookup that loaded the pointer just before the entry was cleared
 *    still reads a shim_sock (at worst a later one: it fails the
 *    confirmation and lets go);
 *  - giving back and taking from the pool is O(1) under a lock held for a
 *    few stores, never across a scan.
 */
#include "sock.h"
#include "sockstat.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fdtable.h"
#include "transport.h"

struct shim_sock_hooks shim_sock_hooks;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_sock *pool_free; /* under pool_lock */
static struct shim_sock *all_socks; /* pushed under pool_lock; never shrinks */
static unsigned pool_count;         /* under pool_lock */
static unsigned live_socks;         /* atomic */

unsigned shim_sock_live_count(void)
{
	return __atomic_load_n(&live_socks, __ATOMIC_RELAXED);
}

unsigned shim_sock_pool_count(void)
{
	unsigned n;

	pthread_mutex_lock(&pool_lock);
	n = pool_count;
	pthread_mutex_unlock(&pool_lock);
	return n;
}

/* The part of a sock a new life starts from zero: everything after the
 * lock. refs stays 0 until the very end, so a stale lookup that reaches
 * this sock meanwhile fails its increment and never reads these fields. */
#define SOCK_BODY_OFF (offsetof(struct shim_sock, lock) + sizeof(pthread_mutex_t))

struct shim_sock *shim_sock_alloc(void)
{
	struct shim_sock *s;

	pthread_mutex_lock(&pool_lock);
	s = pool_free;
	if (s) {
		pool_free = s->pool_next;
		/* Under pool_lock: the fork handler (which takes pool_lock
		 * first) never sees a sock half cleared. */
		memset((char *)s + SOCK_BODY_OFF, 0, sizeof(*s) - SOCK_BODY_OFF);
		s->pool_next = NULL;
	}
	pthread_mutex_unlock(&pool_lock);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		pthread_mutex_init(&s->lock, NULL);
		pthread_mutex_lock(&pool_lock);
		s->all_next = all_socks;
		all_socks = s;
		pool_count++;
		pthread_mutex_unlock(&pool_lock);
	}
	s->fds = 1;
	/* The fds a sock may own: none yet (0 is a valid fd). */
	s->tcp_keep = -1;
	s->neg_fd = -1;
	s->neg_wake.fd = -1;
	s->neg_wake_watch = -1;
	/* Release: the cleared fields are in place before a stale lookup's
	 * increment can succeed; pairs with the acquire CAS in shim_sock_get(). */
	__atomic_store_n(&s->refs, 1, __ATOMIC_RELEASE);
	__atomic_add_fetch(&live_socks, 1, __ATOMIC_RELAXED);
	return s;
}

static void sock_free(struct shim_sock *s)
{
	/* The last put may come after a wrapper set errno for its caller. */
	int err = errno;

	pthread_mutex_lock(&s->lock);
	s->closed = true;
	s->state = SHIM_STATE_CLOSED;
	if (shim_sock_hooks.release)
		shim_sock_hooks.release(s);
	shim_sockstat_release(s);
	pthread_mutex_unlock(&s->lock);
	if (s->ep) {
		if (shim_sock_hooks.ep_free)
			shim_sock_hooks.ep_free(s->ep);
		s->ep = NULL;
	}
	__atomic_sub_fetch(&live_socks, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&pool_lock);
	s->pool_next = pool_free;
	pool_free = s;
	pthread_mutex_unlock(&pool_lock);
	errno = err;
}

void shim_sock_free_last(struct shim_sock *s)
{
	sock_free(s);
}

static void unref(struct shim_sock *s)
{
	shim_sock_put(s);
}

void shim_sock_unref_fd(struct shim_sock *s)
{
	if (!s)
		return;
	__atomic_sub_fetch(&s->fds, 1, __ATOMIC_RELAXED);
	unref(s);
}

void shim_sock_ref_becomes_fd(struct shim_sock *s)
{
	__atomic_add_fetch(&s->fds, 1, __ATOMIC_RELAXED);
}

/* Under s->lock, before the fork (the hook's comment says why). Under
 * every sock's lock no handshake can start or move meanwhile. */
static void settle_handshake(struct shim_sock *s)
{
	int fd;

	if (!__atomic_load_n(&s->refs, __ATOMIC_RELAXED) || !shim_sock_hooks.fork_settle ||
	    (s->phase != SHIM_PHASE_NEGOTIATING && s->phase != SHIM_PHASE_COMMITTING) || s->closed ||
	    s->aborted)
		return;
	fd = shim_sock_fd_locked(s, s->neg_fd);
	if (fd >= 0)
		shim_sock_hooks.fork_settle(s, fd);
}

/*
 * fork: the child must not inherit a sock lock held by a thread that does
 * not exist there. prepare takes the pool lock (no sock is made or cleared
 * meanwhile), then every sock's lock; a sock lock is never held across a
 * blocking wait, so this ends. Lock order: epoll set locks, then sock
 * locks, then the pool lock is never taken with a sock lock held.
 */
void shim_sock_atfork_prepare(void)
{
	pthread_mutex_lock(&pool_lock);
	for (struct shim_sock *s = all_socks; s; s = s->all_next) {
		pthread_mutex_lock(&s->lock);
		settle_handshake(s);
		if (s->phase == SHIM_PHASE_IDLE)
			s->forked_idle = true;
		/* The child holds a copy of every fd now. What matters is a
		 * side channel (or a handshake towards one) that both could
		 * reach: a connection still idle is upgraded later by one of
		 * them, which then owns that channel alone. */
		if (__atomic_load_n(&s->refs, __ATOMIC_RELAXED) &&
		    (s->chan || s->neg || (s->phase != SHIM_PHASE_IDLE && s->phase != SHIM_PHASE_FAILED))) {
			s->shared = true;
			if (s->chan && s->chan->ops->share)
				s->chan->ops->share(s->chan);
		}
	}
}

void shim_sock_atfork_parent(void)
{
	for (struct shim_sock *s = all_socks; s; s = s->all_next)
		pthread_mutex_unlock(&s->lock);
	pthread_mutex_unlock(&pool_lock);
}

static struct shim_sock *child_orphans;

void shim_sock_atfork_child(void)
{
	struct shim_sock *orphans = NULL;

	/* Only the forking thread lives on: the calls other threads had in
	 * progress hold references and counts no one will give back here.
	 * What is left is one reference per fd-table entry. */
	for (struct shim_sock *s = all_socks; s; s = s->all_next) {
		if (__atomic_load_n(&s->refs, __ATOMIC_RELAXED)) {
			int left = __atomic_load_n(&s->fds, __ATOMIC_RELAXED);

			s->active = 0;
			s->sleepers = 0;
			if (left <= 0) {
				/* Only those calls kept it: its fds are gone. */
				left = 1;
				s->fds = 1;
				s->pool_next = orphans;
				orphans = s;
			}
			__atomic_store_n(&s->refs, left, __ATOMIC_RELAXED);
		}
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&pool_lock);
	child_orphans = orphans;
}

void shim_sock_atfork_child_done(void)
{
	struct shim_sock *orphans = child_orphans;

	child_orphans = NULL;
	while (orphans) {
		struct shim_sock *s = orphans;

		orphans = s->pool_next;
		s->pool_next = NULL;
		shim_sock_unref_fd(s);
	}
}

static const char *const role_names[] = { "listener", "client", "server", "epoll" };
static const char *const state_names[] = { "listening", "connecting", "tcp", "closed" };
static const char *const phase_names[] = { "idle", "negotiating", "committing", "done", "failed" };

const char *shim_phase_name(enum shim_phase phase)
{
	return (unsigned)phase < ARRAY_SIZE(phase_names) ? phase_names[phase] : "?";
}

const char *shim_role_name(enum shim_role role)
{
	return (unsigned)role < ARRAY_SIZE(role_names) ? role_names[role] : "?";
}

const char *shim_state_name(enum shim_sock_state state)
{
	return (unsigned)state < ARRAY_SIZE(state_names) ? state_names[state] : "?";
}

int shim_sock_install(int fd, struct shim_sock *sock)
{
	int err;
	struct shim_sock *old = shim_fd_publish(fd, sock, &err);

	if (err) {
		shim_sock_unref_fd(sock);
		return err;
	}
	shim_sock_unref_fd(old);
	return 0;
}
