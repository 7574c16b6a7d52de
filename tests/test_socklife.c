/*
 * Unit tests for shim/conn/socklife.c: held references from lookups, the
 * type-stable pool, the fd rule under the lock and the fork child's fix-up
 * (shim/LIFETIME.md). Socks here own no resources (no channel, no fds), so
 * their release is bookkeeping only.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "fdtable.h"
#include "layers.h"
#include "sock.h"
#include "check_run.h"

#define TABLE_FDS 1024

static void setup(void)
{
	shim_layers_register();
	ck_assert_int_eq(shim_fdtable_init(TABLE_FDS), 0);
}

/* A sock published at fd, tagged with the fd (its tuple's local port). */
static struct shim_sock *publish(int fd)
{
	struct shim_sock *s = shim_sock_alloc();
	int err;

	ck_assert_ptr_nonnull(s);
	s->tuple.local.port = (uint16_t)fd;
	ck_assert_ptr_null(shim_fd_publish(fd, s, &err));
	ck_assert_int_eq(err, 0);
	return s;
}

/* close(fd) as far as references go. */
static void drop(int fd)
{
	shim_sock_unref_fd(shim_fd_clear(fd));
}

START_TEST(lookup_holds_a_reference)
{
	unsigned live = shim_sock_live_count();
	struct shim_sock *s = publish(5), *got;

	ck_assert_ptr_null(shim_sock_get(6));
	got = shim_sock_get(5);
	ck_assert_ptr_eq(got, s);
	ck_assert_int_eq(s->refs, 2);
	ck_assert_int_eq(s->fds, 1);
	/* The fd closes while the reference is held: the sock lives on. */
	drop(5);
	ck_assert_int_eq(s->refs, 1);
	ck_assert_uint_eq(shim_sock_live_count(), live + 1);
	ck_assert_ptr_null(shim_sock_get(5));
	shim_sock_put(got);
	ck_assert_int_eq(s->refs, 0);
	ck_assert_uint_eq(shim_sock_live_count(), live);
}
END_TEST

START_TEST(freed_memory_is_reused_as_a_sock)
{
	struct shim_sock *s = publish(7), *t;
	unsigned pool = shim_sock_pool_count();

	drop(7);
	t = publish(8);
	/* The pool gives the same memory back (never to malloc), cleared. */
	ck_assert_ptr_eq(t, s);
	ck_assert_uint_eq(shim_sock_pool_count(), pool);
	ck_assert_int_eq(t->refs, 1);
	ck_assert_int_eq(t->tcp_keep, -1);
	ck_assert_ptr_null(t->neg);
	/* A lookup of the old number does not find the new life. */
	ck_assert_ptr_null(shim_sock_get(7));
	ck_assert_ptr_eq(shim_sock_get(8), t);
	shim_sock_put(t);
	drop(8);
}
END_TEST

START_TEST(fd_is_used_only_while_the_table_names_the_sock)
{
	struct shim_sock *s = publish(9), *got = shim_sock_get(9);
	int keep;

	pthread_mutex_lock(&s->lock);
	ck_assert_int_eq(shim_sock_fd_locked(s, 9), 9);
	ck_assert_int_eq(shim_sock_fd_locked(s, 10), -EBADF);
	pthread_mutex_unlock(&s->lock);
	/* Closed while held: only our own copy may be used. */
	drop(9);
	pthread_mutex_lock(&s->lock);
	ck_assert_int_eq(shim_sock_fd_locked(s, 9), -EBADF);
	keep = dup(0);
	ck_assert_int_ge(keep, 0);
	s->tcp_keep = keep;
	ck_assert_int_eq(shim_sock_fd_locked(s, 9), keep);
	pthread_mutex_unlock(&s->lock);
	shim_sock_put(got);
	/* The last put closed our copy. */
	ck_assert_int_eq(fcntl(keep, F_GETFD), -1);
}
END_TEST

START_TEST(fork_child_drops_the_other_threads_references)
{
	unsigned live = shim_sock_live_count();
	struct shim_sock *a = publish(11), *b = publish(12);

	/* Two calls in progress on a (other threads), one on b, whose fd
	 * was closed since: only those calls keep b. */
	ck_assert_ptr_eq(shim_sock_get(11), a);
	ck_assert_ptr_eq(shim_sock_get(11), a);
	ck_assert_ptr_eq(shim_sock_get(12), b);
	drop(12);
	a->active = 2;
	a->phase = SHIM_PHASE_DONE; /* upgraded: both processes reach its channel */
	shim_sock_atfork_prepare();
	ck_assert_int_eq(pthread_mutex_trylock(&a->lock), EBUSY);
	shim_sock_atfork_child();
	shim_sock_atfork_child_done();
	ck_assert_int_eq(a->refs, 1);
	ck_assert_int_eq(a->fds, 1);
	ck_assert_uint_eq(a->active, 0);
	ck_assert(a->shared);
	ck_assert_int_eq(b->refs, 0);
	a->phase = SHIM_PHASE_IDLE;
	ck_assert_int_eq(pthread_mutex_trylock(&a->lock), 0);
	pthread_mutex_unlock(&a->lock);
	drop(11);
	ck_assert_uint_eq(shim_sock_live_count(), live);
}
END_TEST

/*
 * Lookups racing closes and new socks on the same numbers: a lookup returns
 * NULL or a sock the number named (its tag), never another fd's, and every
 * reference comes back (nothing is left live at the end).
 */
#define RACE_FDS 8
#define RACE_ROUNDS 200000

static int race_stop; /* atomic */
static int race_bad;  /* atomic */

static void *race_lookups(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&race_stop, __ATOMIC_RELAXED)) {
		for (int fd = 100; fd < 100 + RACE_FDS; fd++) {
			struct shim_sock *s = shim_sock_get(fd);

			if (!s)
				continue;
			if (s->tuple.local.port != fd || __atomic_load_n(&s->refs, __ATOMIC_RELAXED) <= 0)
				__atomic_store_n(&race_bad, 1, __ATOMIC_RELAXED);
			shim_sock_put(s);
		}
	}
	return NULL;
}

START_TEST(lookups_race_closes_and_reuse)
{
	unsigned live = shim_sock_live_count();
	pthread_t t[2];

	for (int fd = 100; fd < 100 + RACE_FDS; fd++)
		publish(fd);
	pthread_create(&t[0], NULL, race_lookups, NULL);
	pthread_create(&t[1], NULL, race_lookups, NULL);
	for (int i = 0; i < RACE_ROUNDS; i++) {
		int fd = 100 + i % RACE_FDS;

		drop(fd);
		publish(fd);
	}
	__atomic_store_n(&race_stop, 1, __ATOMIC_RELAXED);
	pthread_join(t[0], NULL);
	pthread_join(t[1], NULL);
	ck_assert_int_eq(__atomic_load_n(&race_bad, __ATOMIC_RELAXED), 0);
	for (int fd = 100; fd < 100 + RACE_FDS; fd++)
		drop(fd);
	ck_assert_uint_eq(shim_sock_live_count(), live);
	/* O(1) reuse: the pool never held more than the socks alive at once
	 * plus what lookups kept for a moment. */
	ck_assert_uint_le(shim_sock_pool_count(), 64);
}
END_TEST

static Suite *socklife_suite(void)
{
	Suite *s = suite_create("socklife");
	TCase *tc = tcase_create("refs");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, lookup_holds_a_reference);
	tcase_add_test(tc, freed_memory_is_reused_as_a_sock);
	tcase_add_test(tc, fd_is_used_only_while_the_table_names_the_sock);
	tcase_add_test(tc, fork_child_drops_the_other_threads_references);
	tcase_add_test(tc, lookups_race_closes_and_reuse);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(socklife_suite());
}
