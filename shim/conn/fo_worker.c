/*
 * The failover worker; see fo_worker.h.
 *
 * One detached thread, started on the first kick and ended once its queue
 * is empty. Each kicked connection is looked at again (the peer's RESUME
 * may still be on its way, or the TCP send buffer full) after FIRST_NS,
 * then twice as long each time up to MAX_NS, until shim_failover_alone()
 * says the program's calls can do the rest, or GIVE_UP_NS passed: the
 * program's own calls then go on as before. The backoff bounds what a
 * link of 128 connections whose peer is slow to answer costs: about 128
 * looks every MAX_NS, not every millisecond.
 */
#include "fo_worker.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "bgthread.h"
#include "clock.h"
#include "failover.h"

#define FIRST_NS (1000ull * 1000)            /* 1 ms */
#define MAX_NS (64ull * 1000 * 1000)         /* 64 ms */
#define GIVE_UP_NS (30000ull * 1000 * 1000)  /* 30 s */

/* No reference is held between steps: a close must find the connection
 * as the program left it (sockfd.c settles what is on the wire only when
 * no one else holds the socket), and each step takes one through the fd
 * table, as a call would. */
struct kick {
	struct shim_sock *s;
	int fd;
	unsigned long long since_ns, next_ns, delay_ns;
	struct kick *next;
};

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static struct kick *q_head; /* under q_lock */
static bool q_running;      /* under q_lock: the worker thread lives */

/* One step on k's connection, with a reference taken for it; true when
 * done: its failover is as far as the worker takes it, or fd names
 * another socket now (closed: close settled it, or the call that was
 * under way when it closed goes on with it). */
static bool step(const struct kick *k)
{
	struct shim_sock *now = shim_sock_get(k->fd);
	bool done = now != k->s || shim_failover_alone(now, k->fd);

	shim_sock_put(now);
	return done;
}

/* Moves on every entry that is due; drops those done or given up.
 * Returns the earliest time one is due again (0: the list is empty). */
static unsigned long long step_all(struct kick **list)
{
	unsigned long long now = shim_now_ns(), earliest = 0;
	struct kick **pp = list;

	while (*pp) {
		struct kick *k = *pp;

		if (now >= k->next_ns) {
			if (step(k) || now - k->since_ns > GIVE_UP_NS) {
				*pp = k->next;
				free(k);
				continue;
			}
			k->next_ns = now + k->delay_ns;
			k->delay_ns = k->delay_ns * 2 > MAX_NS ? MAX_NS : k->delay_ns * 2;
		}
		if (!earliest || k->next_ns < earliest)
			earliest = k->next_ns;
		pp = &k->next;
	}
	return earliest;
}

static void *worker_main(void *arg)
{
	struct kick *mine = NULL;
	unsigned long long due;

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
		due = step_all(&mine);
		pthread_mutex_lock(&q_lock);
		if (mine && !q_head) {
			unsigned long long now = shim_now_ns(), wait_ns = due > now ? due - now : 0;
			struct timespec until;

			/* The condition variable's clock is CLOCK_REALTIME; a
			 * step of that clock only makes this wait shorter or
			 * longer once, by the step. */
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += (time_t)(wait_ns / 1000000000ull);
			until.tv_nsec += (long)(wait_ns % 1000000000ull);
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

	if (!s || fd < 0)
		return;
	k = malloc(sizeof(*k));
	if (!k)
		return; /* the program's calls move it on, as before */
	k->s = s;
	k->fd = fd;
	k->since_ns = k->next_ns = shim_now_ns();
	k->delay_ns = FIRST_NS;
	pthread_mutex_lock(&q_lock);
	if (!q_running && shim_bgthread_start(worker_main, NULL) == 0)
		q_running = true;
	if (!q_running) {
		pthread_mutex_unlock(&q_lock);
		free(k);
		return;
	}
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
	struct kick *k;

	/* The parent's worker may have been waiting on the condition: not in
	 * this process. The lock is this thread's (prepare took it) and is
	 * let go, as every other one, so that TSan's model stays true. */
	pthread_cond_init(&q_cond, NULL);
	while ((k = q_head)) {
		q_head = k->next;
		free(k);
	}
	q_running = false;
	pthread_mutex_unlock(&q_lock);
}
