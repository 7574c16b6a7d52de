/* The per-peer circuit breaker; see breaker.h. */
#include "breaker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "config.h"
#include "clock.h"

struct breaker_entry {
	uint8_t peer[16];
	enum shim_breaker_state state;
	unsigned failures;   /* consecutive, while closed */
	uint64_t opened_ms;  /* when it last opened */
	uint64_t probe_ms;   /* when the half-open probe went out */
	UT_hash_handle hh;
};

struct shim_breaker {
	pthread_mutex_t lock;
	unsigned failures;
	unsigned cooldown_ms;
	struct breaker_entry *peers;
};

struct shim_breaker *shim_breaker_new(unsigned failures, unsigned cooldown_ms)
{
	struct shim_breaker *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	pthread_mutex_init(&b->lock, NULL);
	b->failures = failures ? failures : 1;
	b->cooldown_ms = cooldown_ms;
	return b;
}

void shim_breaker_free(struct shim_breaker *b)
{
	struct breaker_entry *e, *tmp;

	if (!b)
		return;
	HASH_ITER(hh, b->peers, e, tmp) {
		HASH_DEL(b->peers, e);
		free(e);
	}
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static struct breaker_entry *find(struct shim_breaker *b, const uint8_t peer[16])
{
	struct breaker_entry *e;

	HASH_FIND(hh, b->peers, peer, 16, e);
	return e;
}

/* Open -> half-open once the cooldown is over. A probe that never reported
 * (its connection closed mid-attempt) must not keep the peer shut for good:
 * after another cooldown a new probe may go out. */
static void age(struct shim_breaker *b, struct breaker_entry *e, uint64_t now_ms)
{
	if (e->state == SHIM_BREAKER_OPEN && now_ms - e->opened_ms >= b->cooldown_ms) {
		e->state = SHIM_BREAKER_HALF_OPEN;
		e->probe_ms = 0;
	}
	if (e->state == SHIM_BREAKER_HALF_OPEN && e->probe_ms && now_ms - e->probe_ms >= b->cooldown_ms)
		e->probe_ms = 0;
}

enum shim_breaker_verdict shim_breaker_check(struct shim_breaker *b, const uint8_t peer[16], uint64_t now_ms)
{
	enum shim_breaker_verdict v = SHIM_BREAKER_ALLOW;
	struct breaker_entry *e;

	pthread_mutex_lock(&b->lock);
	e = find(b, peer);
	if (e) {
		age(b, e, now_ms);
		if (e->state == SHIM_BREAKER_OPEN) {
			v = SHIM_BREAKER_SKIP;
		} else if (e->state == SHIM_BREAKER_HALF_OPEN) {
			if (e->probe_ms) {
				v = SHIM_BREAKER_SKIP;
			} else {
				/* 0 means "no probe out": never store it as a time. */
				e->probe_ms = now_ms ? now_ms : 1;
				v = SHIM_BREAKER_PROBE;
			}
		}
	}
	pthread_mutex_unlock(&b->lock);
	return v;
}

void shim_breaker_record(struct shim_breaker *b, const uint8_t peer[16], bool ok, uint64_t now_ms)
{
	struct breaker_entry *e;

	pthread_mutex_lock(&b->lock);
	e = find(b, peer);
	if (ok) {
		/* Closed with no failures is the same as no entry: keep the
		 * table as small as the set of troubled peers. */
		if (e) {
			HASH_DEL(b->peers, e);
			free(e);
		}
		pthread_mutex_unlock(&b->lock);
		return;
	}
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e) {
			pthread_mutex_unlock(&b->lock);
			return;
		}
		memcpy(e->peer, peer, 16);
		e->state = SHIM_BREAKER_CLOSED;
		HASH_ADD(hh, b->peers, peer, 16, e);
	}
	age(b, e, now_ms);
	if (e->state == SHIM_BREAKER_HALF_OPEN || ++e->failures >= b->failures) {
		e->state = SHIM_BREAKER_OPEN;
		e->opened_ms = now_ms;
		e->probe_ms = 0;
	}
	pthread_mutex_unlock(&b->lock);
}

enum shim_breaker_state shim_breaker_state_of(struct shim_breaker *b, const uint8_t peer[16], uint64_t now_ms)
{
	enum shim_breaker_state st = SHIM_BREAKER_CLOSED;
	struct breaker_entry *e;

	pthread_mutex_lock(&b->lock);
	e = find(b, peer);
	if (e) {
		age(b, e, now_ms);
		st = e->state;
	}
	pthread_mutex_unlock(&b->lock);
	return st;
}

const char *shim_breaker_state_name(enum shim_breaker_state st)
{
	static const char *const names[] = { "closed", "open", "half_open" };

	return (unsigned)st < 3 ? names[st] : "?";
}

uint64_t shim_breaker_now_ms(void)
{
	return shim_now_ns() / 1000000u;
}

static struct shim_breaker *global_breaker;
static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
	global_breaker = shim_breaker_new(shim_cfg.breaker_failures, shim_cfg.breaker_cooldown_ms);
}

struct shim_breaker *shim_breaker_global(void)
{
	pthread_once(&global_once, global_init);
	return global_breaker;
}

/* fork (atfork.c): the child must not inherit the lock held. */
void shim_breaker_atfork(bool prepare)
{
	struct shim_breaker *b = __atomic_load_n(&global_breaker, __ATOMIC_ACQUIRE);

	if (!b)
		return;
	if (prepare)
		pthread_mutex_lock(&b->lock);
	else
		pthread_mutex_unlock(&b->lock);
}
