/*
 * Unit tests for shim/core/fdtable.c. The table never dereferences what it holds,
 * so the tests store made-up pointers that encode the fd and a generation.
 *
 * The table is process-wide and initialises once; with CK_FORK (the default)
 * every test starts from a fresh, uninitialised table. With CK_FORK=no the
 * tests still hold: the uninitialised test runs first, all use TABLE_FDS, and
 * setup() empties the table.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fdtable.h"
#include "check_run.h"

#define TABLE_FDS 4096

static int ck_fork_disabled(void)
{
	const char *v = getenv("CK_FORK");

	return v && strcmp(v, "no") == 0;
}

static struct shim_sock *fake(unsigned fd, unsigned gen)
{
	/* Never NULL: fd + 1 is at least 1. */
	return (struct shim_sock *)(uintptr_t)(((uintptr_t)(fd + 1) << 12) | (gen & 0xfffu));
}

static unsigned fake_fd(const struct shim_sock *sock)
{
	return (unsigned)(((uintptr_t)sock >> 12) - 1);
}

static void setup(void)
{
	ck_assert_int_eq(shim_fdtable_init(TABLE_FDS), 0);
	ck_assert_ptr_nonnull(shim_fd_slots);
	ck_assert_uint_eq(shim_fd_capacity, TABLE_FDS);
	/* Forked, the table is new; unforked, forget what earlier tests left. */
	if (ck_fork_disabled())
		for (int fd = 0; fd < TABLE_FDS; fd++)
			shim_fd_clear(fd);
}

START_TEST(uninitialised_table_tracks_nothing)
{
	int err = 0;

	if (shim_fd_slots) /* only when tests do not fork */
		return;
	ck_assert_uint_eq(shim_fd_capacity, 0);
	ck_assert_ptr_null(shim_fd_get(0));
	ck_assert_ptr_null(shim_fd_get_acquire(0));
	ck_assert_ptr_null(shim_fd_publish(0, fake(0, 1), &err));
	ck_assert_int_eq(err, -EBADF);
	ck_assert_ptr_null(shim_fd_clear(0));
	ck_assert_int_eq(shim_fdtable_init(0), -EINVAL);
	ck_assert_ptr_null(shim_fd_slots);
}
END_TEST

START_TEST(init_is_idempotent)
{
	setup();
	struct shim_sock **slots = shim_fd_slots;

	/* A second init keeps the first table (and its size). */
	ck_assert_int_eq(shim_fdtable_init(8), 0);
	ck_assert_ptr_eq(shim_fd_slots, slots);
	ck_assert_uint_eq(shim_fd_capacity, TABLE_FDS);
}
END_TEST

START_TEST(empty_table_returns_null)
{
	setup();
	for (int fd = 0; fd < TABLE_FDS; fd++) {
		ck_assert_ptr_null(shim_fd_get(fd));
		ck_assert_ptr_null(shim_fd_get_acquire(fd));
	}
	ck_assert_ptr_null(shim_fd_clear(3));
}
END_TEST

START_TEST(publish_get_clear)
{
	struct shim_sock *a = fake(5, 1), *b = fake(5, 2);
	int err = 1;

	setup();
	ck_assert_ptr_null(shim_fd_publish(5, a, &err));
	ck_assert_int_eq(err, 0);
	ck_assert_ptr_eq(shim_fd_get(5), a);
	ck_assert_ptr_eq(shim_fd_get_acquire(5), a);
	ck_assert_ptr_null(shim_fd_get(4));
	ck_assert_ptr_null(shim_fd_get(6));
	/* Publishing over an entry hands back the previous one. */
	ck_assert_ptr_eq(shim_fd_publish(5, b, &err), a);
	ck_assert_int_eq(err, 0);
	ck_assert_ptr_eq(shim_fd_get(5), b);
	ck_assert_ptr_eq(shim_fd_clear(5), b);
	ck_assert_ptr_null(shim_fd_get(5));
	ck_assert_ptr_null(shim_fd_clear(5));
	/* Publishing NULL is a clear that reports what was there. */
	ck_assert_ptr_null(shim_fd_publish(7, a, &err));
	ck_assert_ptr_eq(shim_fd_publish(7, NULL, &err), a);
	ck_assert_ptr_null(shim_fd_get(7));
}
END_TEST

START_TEST(edges_of_the_table)
{
	struct shim_sock *first = fake(0, 1), *last = fake(TABLE_FDS - 1, 1);
	int err;

	setup();
	ck_assert_ptr_null(shim_fd_publish(0, first, &err));
	ck_assert_int_eq(err, 0);
	ck_assert_ptr_null(shim_fd_publish(TABLE_FDS - 1, last, &err));
	ck_assert_int_eq(err, 0);
	ck_assert_ptr_eq(shim_fd_get(0), first);
	ck_assert_ptr_eq(shim_fd_get(TABLE_FDS - 1), last);
	/* Every other slot is untouched. */
	for (int fd = 1; fd < TABLE_FDS - 1; fd++)
		ck_assert_ptr_null(shim_fd_get(fd));
}
END_TEST

struct walk {
	int fds[8];
	int n;
};

static void collect(int fd, void *ctx)
{
	struct walk *w = ctx;

	if (w->n < 8)
		w->fds[w->n] = fd;
	w->n++;
}

/* The sandbox's walk (no /proc): every fd the table names, in order,
 * and none it cleared. */
START_TEST(each_tracked_walks_the_table)
{
	struct shim_sock *a = fake(3, 1), *b = fake(9, 1), *c = fake(40, 1);
	struct walk w = { .n = 0 };
	int err;

	setup();
	shim_fd_each_tracked(collect, &w);
	ck_assert_int_eq(w.n, 0);
	ck_assert_ptr_null(shim_fd_publish(9, b, &err));
	ck_assert_ptr_null(shim_fd_publish(3, a, &err));
	ck_assert_ptr_null(shim_fd_publish(40, c, &err));
	ck_assert_ptr_eq(shim_fd_clear(40), c);
	shim_fd_each_tracked(collect, &w);
	ck_assert_int_eq(w.n, 2);
	ck_assert_int_eq(w.fds[0], 3);
	ck_assert_int_eq(w.fds[1], 9);
	ck_assert_ptr_eq(shim_fd_clear(3), a);
	ck_assert_ptr_eq(shim_fd_clear(9), b);
}
END_TEST

START_TEST(out_of_range)
{
	static const int bad[] = { -1, -2, TABLE_FDS, TABLE_FDS + 1, INT_MAX, INT_MIN };
	struct shim_sock *s = fake(1, 1);

	setup();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int err = 0;

		ck_assert_ptr_null(shim_fd_get(bad[i]));
		ck_assert_ptr_null(shim_fd_get_acquire(bad[i]));
		ck_assert_ptr_null(shim_fd_publish(bad[i], s, &err));
		ck_assert_msg(err == -EBADF, "publish(%d) err %d", bad[i], err);
		ck_assert_ptr_null(shim_fd_clear(bad[i]));
	}
	/* Nothing landed anywhere. */
	for (int fd = 0; fd < TABLE_FDS; fd++)
		ck_assert_ptr_null(shim_fd_get(fd));
}
END_TEST

/* ---- threads -------------------------------------------------------------- */

enum { WRITERS = 4, READERS = 4, THREAD_FDS = 1024, ROUNDS = 200 };

struct writer {
	pthread_t thread;
	unsigned id;
	unsigned errors;
	struct shim_sock *last[THREAD_FDS]; /* what this writer last left in each fd */
};

struct reader {
	pthread_t thread;
	unsigned errors;
	unsigned long seen;
	uint64_t rng;
};

static int stop_readers;
static pthread_barrier_t start_line;

/* Writer w owns the fds with fd % WRITERS == w: nobody else touches them. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;

	pthread_barrier_wait(&start_line);
	for (unsigned round = 1; round <= ROUNDS; round++) {
		for (unsigned fd = w->id; fd < THREAD_FDS; fd += WRITERS) {
			struct shim_sock *next = fake(fd, round), *prev;
			int err;

			if ((fd / WRITERS + round) % 3 == 0) {
				prev = shim_fd_clear((int)fd);
				next = NULL;
			} else {
				prev = shim_fd_publish((int)fd, next, &err);
				w->errors += err != 0;
			}
			/* Only this writer writes fd: the exchange must return its own last value. */
			w->errors += prev != w->last[fd];
			w->last[fd] = next;
		}
	}
	return NULL;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	pthread_barrier_wait(&start_line);
	while (!__atomic_load_n(&stop_readers, __ATOMIC_ACQUIRE)) {
		r->rng ^= r->rng << 13;
		r->rng ^= r->rng >> 7;
		r->rng ^= r->rng << 17;
		unsigned fd = (unsigned)(r->rng % THREAD_FDS);
		struct shim_sock *s = (r->rng & 1) ? shim_fd_get((int)fd) : shim_fd_get_acquire((int)fd);

		/* NULL or a value some writer put in exactly this fd, never a torn one. */
		if (s) {
			__atomic_add_fetch(&r->seen, 1, __ATOMIC_RELAXED);
			r->errors += fake_fd(s) != fd;
			r->errors += ((uintptr_t)s & 0xfffu) == 0 || ((uintptr_t)s & 0xfffu) > ROUNDS;
		}
	}
	return NULL;
}

START_TEST(concurrent_publish_clear_get)
{
	static struct writer writers[WRITERS];
	static struct reader readers[READERS];
	unsigned long seen = 0;
	time_t deadline;

	setup();
	stop_readers = 0;
	ck_assert_int_eq(pthread_barrier_init(&start_line, NULL, WRITERS + READERS), 0);
	for (unsigned i = 0; i < READERS; i++) {
		readers[i].rng = 0x2545f4914f6cdd1dull * (i + 1);
		ck_assert_int_eq(pthread_create(&readers[i].thread, NULL, reader_main, &readers[i]), 0);
	}
	for (unsigned i = 0; i < WRITERS; i++) {
		writers[i].id = i;
		ck_assert_int_eq(pthread_create(&writers[i].thread, NULL, writer_main, &writers[i]), 0);
	}
	for (unsigned i = 0; i < WRITERS; i++) {
		pthread_join(writers[i].thread, NULL);
		ck_assert_msg(writers[i].errors == 0, "writer %u saw %u inconsistent exchanges", i,
			      writers[i].errors);
	}
	/* Let every reader find something before stopping it, even on one CPU. */
	deadline = time(NULL) + 10;
	for (unsigned i = 0; i < READERS && time(NULL) < deadline; i++)
		while (__atomic_load_n(&readers[i].seen, __ATOMIC_RELAXED) == 0 && time(NULL) < deadline)
			sched_yield();
	__atomic_store_n(&stop_readers, 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < READERS; i++) {
		pthread_join(readers[i].thread, NULL);
		ck_assert_msg(readers[i].errors == 0, "reader %u saw %u foreign values", i, readers[i].errors);
		seen += readers[i].seen;
	}
	ck_assert_uint_ge(seen, READERS);
	pthread_barrier_destroy(&start_line);
	/* The table ends exactly as the writers left it. */
	for (unsigned fd = 0; fd < THREAD_FDS; fd++)
		ck_assert_ptr_eq(shim_fd_get((int)fd), writers[fd % WRITERS].last[fd]);
	for (unsigned fd = THREAD_FDS; fd < TABLE_FDS; fd++)
		ck_assert_ptr_null(shim_fd_get((int)fd));
}
END_TEST

/*
 * Every writer exchanges unique tokens into the same two fds. If each exchange
 * is atomic, every token published comes back exactly once: from a later
 * publish or clear, or as what the table holds at the end. The tokens that
 * come back are counted, summed and summed in squares: a token lost and
 * another returned twice can not keep all three right.
 */
enum { SHARED_FDS = 2, TOKENS_PER_WRITER = 2000000 };

struct tally {
	uint64_t count, sum, squares;
};

static struct shim_sock *token(uint64_t n)
{
	return (struct shim_sock *)(uintptr_t)(n << 4);
}

static void give_back(struct tally *t, struct shim_sock *s)
{
	uint64_t n = (uintptr_t)s >> 4;

	if (!s)
		return;
	t->count++;
	t->sum += n;
	t->squares += n * n;
}

struct exchanger {
	pthread_t thread;
	unsigned id;
	struct tally back;
};

static void *exchanger_main(void *arg)
{
	struct exchanger *x = arg;

	pthread_barrier_wait(&start_line);
	for (uint64_t i = 0; i < TOKENS_PER_WRITER; i++) {
		uint64_t n = 1 + x->id * (uint64_t)TOKENS_PER_WRITER + i;
		int err;

		give_back(&x->back, shim_fd_publish((int)(n % SHARED_FDS), token(n), &err));
		/* Now and then a clear: it hands back whoever's token is there. */
		if (i % 5 == 4)
			give_back(&x->back, shim_fd_clear((int)((n / 5) % SHARED_FDS)));
	}
	return NULL;
}

START_TEST(concurrent_exchange_conserves_tokens)
{
	static struct exchanger xs[WRITERS];
	struct tally got = { 0, 0, 0 }, want = { 0, 0, 0 };

	setup();
	ck_assert_int_eq(pthread_barrier_init(&start_line, NULL, WRITERS), 0);
	for (unsigned i = 0; i < WRITERS; i++) {
		xs[i].id = i;
		ck_assert_int_eq(pthread_create(&xs[i].thread, NULL, exchanger_main, &xs[i]), 0);
	}
	for (unsigned i = 0; i < WRITERS; i++) {
		pthread_join(xs[i].thread, NULL);
		got.count += xs[i].back.count;
		got.sum += xs[i].back.sum;
		got.squares += xs[i].back.squares;
	}
	pthread_barrier_destroy(&start_line);
	for (int fd = 0; fd < SHARED_FDS; fd++)
		give_back(&got, shim_fd_clear(fd));
	for (uint64_t n = 1; n <= (uint64_t)WRITERS * TOKENS_PER_WRITER; n++)
		give_back(&want, token(n));
	ck_assert_msg(got.count == want.count && got.sum == want.sum && got.squares == want.squares,
		      "tokens: %llu came back of %llu published; sums %s", (unsigned long long)got.count,
		      (unsigned long long)want.count, got.sum == want.sum ? "agree" : "differ");
}
END_TEST

static Suite *fdtable_suite(void)
{
	Suite *s = suite_create("fdtable");
	TCase *tc = tcase_create("fdtable");

	tcase_add_test(tc, uninitialised_table_tracks_nothing);
	tcase_add_test(tc, init_is_idempotent);
	tcase_add_test(tc, empty_table_returns_null);
	tcase_add_test(tc, publish_get_clear);
	tcase_add_test(tc, edges_of_the_table);
	tcase_add_test(tc, out_of_range);
	tcase_add_test(tc, each_tracked_walks_the_table);
	tcase_add_test(tc, concurrent_publish_clear_get);
	tcase_add_test(tc, concurrent_exchange_conserves_tokens);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(fdtable_suite());
}
