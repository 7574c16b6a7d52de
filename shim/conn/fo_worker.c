/*
 * The failover worker; see fo_worker.h.
 *
 * One detached thread, started on the first kick and ended once its queue
 * is empty. Each kicked connection is looked at every POLL_NS (the peer's
 * RESUME may still be on its way, or the TCP send buffer full) until
 * shim_failover_alone() says the program's calls can do the rest, or
 * GIVE_UP_NS passed: the program's own calls then go on as before.
 */
#include "fo_worker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "bgthread.h"
#include "clock.h"
#include "failover.h"

#define POLL_NS (1000ull * 1000)                 /* 1 ms */
#define GIVE_UP_NS (30000ull * 1000 * 1000)      /* 30 s */

struct kick {
	struct shim_sock *s; /* one reference held */
	int fd;
	unsigned long long since_ns;
	struct kick *next;
};

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static struct kick *q_head; /* under q_lock */
static bool q_running;      /* under q_lock: the worker thread lives */

/* A reference on s unless its last one already went (a sock being freed
 * is left to its release). The pool is type-stable (LIFETIME.md), and the
 * caller's channel keeps s in this life while it holds the channel. */
static bool hold_if_live(struct shim_sock *s)
{
	int r = __atomic_load_n(&s->refs, __ATOMIC_RELAXED);

	do {
		if (r == 0)
			return false;
		/* Acquire: pairs with the acq_rel drop in shim_sock_put. */
	} while (!__atomic_compare_exchange_n(&s->refs, &r, r + 1, true, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED));
	return true;
}

/* Moves every entry on; drops those done or given up. */
static void step_all(struct kick **list)
{
	unsigned long long now = shim_now_ns();
	struct kick **pp = list;

	while (*pp) {
		struct kick *k = *pp;

		if (shim_failover_alone(k->s, k->fd) || now - k->since_ns > GIVE_UP_NS) {
			*pp = k->next;
			shim_sock_put(k->s);
			free(k);
		} else {
			pp = &k->next;
		}
	}
}

static void *worker_main(void *arg)
{
	struct kick *mine = NULL;

	(void)arg;
	pthread_mutex_lock(&q_lock);
	for (;;) {
		while (q_head) {
			struct kick *k = q_head;

			q_head = k->next;
			k->next = mine;
			mine = k;
		}
		if (!mine)
			break;
		pthread_mutex_unlock(&q_lock);
		step_all(&mine);
		pthread_mutex_lock(&q_lock);
		if (mine && !q_head) {
			struct timespec until;

			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_nsec += (long)POLL_NS;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&q_cond, &q_lock, &until);
		}
	}
	q_running = false;
	pthread_mutex_unlock(&q_lock);
	return NULL;
}

void shim_failover_kick(struct shim_sock *s, int fd)
{
	struct kick *k;

	/* Nothing here gives a reference back: the caller may hold a link's
	 * lock, which a last put's release would take again. */
	if (!s || fd < 0)
		return;
	k = malloc(sizeof(*k));
	if (!k)
		return; /* the program's calls move it on, as before */
	k->fd = fd;
	k->since_ns = shim_now_ns();
	pthread_mutex_lock(&q_lock);
	if (!q_running && shim_bgthread_start(worker_main, NULL) == 0)
		q_running = true;
	if (!q_running || !hold_if_live(s)) {
		/* A worker started for nothing finds its queue empty and ends. */
		pthread_mutex_unlock(&q_lock);
		free(k);
		return;
	}
	k->s = s;
	k->next = q_head;
	q_head = k;
	pthread_cond_signal(&q_cond);
	pthread_mutex_unlock(&q_lock);
}

void shim_fo_worker_atfork_prepare(void)
{
	pthread_mutex_lock(&q_lock);
}

void shim_fo_worker_atfork_parent(void)
{
	pthread_mutex_unlock(&q_lock);
}

void shim_fo_worker_atfork_child(void)
{
	pthread_mutex_init(&q_lock, NULL);
	pthread_cond_init(&q_cond, NULL);
	q_head = NULL;
	q_running = false;
}
