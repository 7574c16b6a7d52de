/* Unit tests for shim/spin.c: when a wait spins (crowding, per-waiter history). */
#include <check.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "clock.h"
#include "config.h"
#include "spin.h"
#include "stats.h"
#include "check_run.h"

static void setup(void)
{
	shim_cfg.spin_us = 1; /* a miss costs a microsecond */
	shim_cfg.spin_adapt = 1;
	shim_spin_set_cpus(4);
	shim_spin_reset_prior();
	/* A loaded machine stalls these loops: only the test of that rule
	 * watches for it. */
	shim_spin_watch_preemption(false);
}

/* One wait: polls until the budget ends (nothing ever gets ready) unless
 * hit (ready at once); returns whether it spun at all. */
static bool one_wait(struct shim_spin_hist *h, bool hit)
{
	struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
	bool spun = shim_spin_more(&run, h, -1);

	if (spun && !hit)
		while (shim_spin_more(&run, h, -1))
			;
	shim_spin_end(&run, h, hit, -1);
	return spun;
}

/* A hit must count as early (first half of the budget) however slow the
 * build (ThreadSanitizer): these tests give the budget 20 ms. */
#define ROOMY_SPIN_US 20000

START_TEST(spins_that_pay_keep_spinning)
{
	struct shim_spin_hist h = { 0 };

	shim_cfg.spin_us = ROOMY_SPIN_US;

	for (int i = 0; i < 100; i++)
		ck_assert(one_wait(&h, true));
	ck_assert_uint_eq(h.level, 0);
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

START_TEST(misses_back_off_then_a_probe_resumes)
{
	struct shim_spin_hist h = { 0 };
	unsigned long backoffs = shim_stats_spin[SHIM_SPIN_STAT_BACKOFF];

	shim_cfg.spin_us = ROOMY_SPIN_US;

	for (int i = 0; i < SHIM_SPIN_MISS_LIMIT; i++)
		ck_assert(one_wait(&h, false));
	ck_assert_uint_eq(shim_stats_spin[SHIM_SPIN_STAT_BACKOFF], backoffs + 1);
	/* Level 1: two waits skip the spin, the third probes. */
	ck_assert(!one_wait(&h, false));
	ck_assert(!one_wait(&h, false));
	ck_assert(one_wait(&h, false)); /* the probe misses: level 2, four skipped */
	for (int i = 0; i < 4; i++)
		ck_assert(!one_wait(&h, false));
	ck_assert(one_wait(&h, true)); /* this probe pays */
	ck_assert_uint_eq(h.level, 0);
	for (int i = 0; i < 10; i++)
		ck_assert(one_wait(&h, true));
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

START_TEST(back_off_is_bounded)
{
	struct shim_spin_hist h = { 0 };
	int skipped = 0;

	for (int i = 0; i < 5000; i++) {
		bool spun = one_wait(&h, false);

		skipped = spun ? 0 : skipped + 1;
		ck_assert_int_le(skipped, 1 << SHIM_SPIN_MAX_LEVEL);
	}
	ck_assert_uint_eq(h.level, SHIM_SPIN_MAX_LEVEL);
}
END_TEST

/* Data found only late in the budget: the spin cost more than it saved. */
START_TEST(late_hits_count_as_misses)
{
	struct shim_spin_hist h = { 0 };

	shim_cfg.spin_us = 20;
	for (int i = 0; i < SHIM_SPIN_MISS_LIMIT; i++) {
		struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
		struct timespec ts = { 0, 15000 };

		ck_assert(shim_spin_more(&run, &h, -1));
		nanosleep(&ts, NULL); /* 15 us or more: past half of 20 */
		shim_spin_end(&run, &h, true, -1);
	}
	ck_assert_uint_eq(h.level, 1);
}
END_TEST

/* A wait that skipped its spin and then woke within the budget: the next
 * wait probes at once. */
START_TEST(short_sleep_hurries_the_probe)
{
	struct shim_spin_hist h = { 0 };

	shim_cfg.spin_us = 1000000; /* "within the budget" for sure */
	h.level = 3;
	h.skip = 8;
	ck_assert(!one_wait(&h, true));
	ck_assert_uint_eq(h.skip, 0);
	ck_assert(one_wait(&h, true));
	ck_assert_uint_eq(h.level, 0);
}
END_TEST

/* One wait whose spin runs out, then a sleep of sleep_us that ends with
 * data (the wake-up and the rest of the round trip); returns whether it
 * spun. */
static bool wait_then_sleep(struct shim_spin_hist *h, long sleep_us)
{
	struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
	struct timespec ts = { sleep_us / 1000000, (sleep_us % 1000000) * 1000 };
	bool spun = shim_spin_more(&run, h, -1);

	if (spun)
		while (shim_spin_more(&run, h, -1))
			;
	shim_spin_sleeping();
	nanosleep(&ts, NULL);
	shim_spin_end(&run, h, true, -1);
	return spun;
}

/* The data came during the arm, before any sleep: no wake-up to learn
 * from. Such waits must not make slow wake-ups look cheap (an RDMA arm is
 * a round trip, which often finds the data). */
START_TEST(a_wait_that_never_slept_is_no_wake_up)
{
	shim_cfg.spin_us = 100;
	for (int i = 0; i < 4; i++)
		wait_then_sleep(&(struct shim_spin_hist){ 0 }, 1000);
	for (int i = 0; i < 8; i++) {
		struct shim_spin_hist h = { 0 };
		struct shim_spin_run run = SHIM_SPIN_RUN_INIT;

		ck_assert(shim_spin_more(&run, &h, -1));
		while (shim_spin_more(&run, &h, -1))
			;
		shim_spin_end(&run, &h, true, -1); /* found at once, no sleep */
	}
	ck_assert_uint_ge(shim_spin_wake_ns(), 1000 * 1000);
}
END_TEST

/*
 * Issue 34's lock-in: a round trip just over the budget, and a wake-up
 * that costs ten times the budget (Soft-RoCE under emulation). Each spin
 * runs out and the data comes during the sleep, a wake-up later. Those
 * spins nearly paid: the waiter must not climb the back-off (it used to
 * reach level 5 in 60 waits, spinning in 8 of them).
 */
START_TEST(slow_wake_ups_do_not_lock_the_back_off_in)
{
	struct shim_spin_hist h = { 0 };
	int spun = 0;

	shim_cfg.spin_us = 100;
	for (int i = 0; i < 60; i++)
		spun += wait_then_sleep(&h, 1000);
	ck_assert_int_ge(spun, 50);
	ck_assert_uint_le(h.level, 1);
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

/* Backed off already (a new socket starting from the process's prior, or
 * real misses), with slow wake-ups: a sleep that ended a wake-up after a
 * skipped spin brings the probe forward, and a probe that nearly paid
 * ends the back-off. */
START_TEST(slow_wake_ups_end_a_back_off)
{
	struct shim_spin_hist h = { 0 };

	shim_cfg.spin_us = 100;
	/* The process has seen its wake-ups cost a millisecond. */
	for (int i = 0; i < 4; i++)
		wait_then_sleep(&(struct shim_spin_hist){ 0 }, 1000);
	h.level = SHIM_SPIN_MAX_LEVEL;
	h.skip = 1u << SHIM_SPIN_MAX_LEVEL;
	h.seeded = 1;
	ck_assert(!wait_then_sleep(&h, 1000));
	ck_assert_uint_eq(h.skip, 0);
	ck_assert(wait_then_sleep(&h, 1000));
	ck_assert_uint_eq(h.level, 0);
}
END_TEST

/* With wake-ups that cost more than the budget, a spin polls as long as a
 * wake-up costs: stopping at the budget would add a wake-up to the wait.
 * With cheap ones, it stops at the budget. */
START_TEST(slow_wake_ups_lengthen_the_spin)
{
	struct shim_spin_hist h = { 0 };
	struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
	unsigned long long t0;

	shim_cfg.spin_us = 200;
	ck_assert(shim_spin_more(&run, &h, -1));
	t0 = shim_now_ns();
	while (shim_spin_more(&run, &h, -1))
		;
	shim_spin_end(&run, &h, false, -1);
	ck_assert_uint_lt(shim_now_ns() - t0, 700 * 1000); /* no wake-up seen: the budget */
	for (int i = 0; i < 4; i++)
		wait_then_sleep(&(struct shim_spin_hist){ 0 }, 1000);
	ck_assert_uint_ge(shim_spin_wake_ns(), 1000 * 1000);
	run = (struct shim_spin_run)SHIM_SPIN_RUN_INIT;
	ck_assert(shim_spin_more(&run, &h, -1));
	/* Never past four budgets, however slow the wake-ups seen. */
	ck_assert_uint_eq(run.end_ns - run.start_ns, 4 * 200 * 1000);
	t0 = shim_now_ns();
	while (shim_spin_more(&run, &h, -1))
		;
	shim_spin_end(&run, &h, true, -1);
	/* Four budgets: the wake-ups seen (4 x 1 ms) are bounded by them. */
	ck_assert_uint_ge(shim_now_ns() - t0, 790 * 1000);
}
END_TEST

/* With slow wake-ups a hit late in the budget still saved a wake-up: it
 * pays (it is a miss only where a sleep costs less than what it burnt). */
START_TEST(slow_wake_ups_make_late_hits_pay)
{
	struct shim_spin_hist h = { 0 };

	shim_cfg.spin_us = 100;
	for (int i = 0; i < 4; i++)
		wait_then_sleep(&(struct shim_spin_hist){ 0 }, 1000);
	for (int i = 0; i < 2 * SHIM_SPIN_MISS_LIMIT; i++) {
		struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
		unsigned long long until;

		ck_assert(shim_spin_more(&run, &h, -1));
		until = run.start_ns + 70 * 1000; /* past half of 100 us */
		while (shim_spin_more(&run, &h, -1) && run.last_ns < until)
			;
		shim_spin_end(&run, &h, true, -1);
	}
	ck_assert_uint_eq(h.level, 0);
}
END_TEST

/*
 * What the back-off is for, on a full host: wake-ups are cheap (a few
 * microseconds), and the data comes only once the spin gives its core up
 * (the peer needed it). Those spins paid nothing: the waiter still backs
 * off. The same when the data comes long after a slow wake-up would have
 * (an idle peer).
 */
START_TEST(cheap_wake_ups_or_idle_peers_still_back_off)
{
	struct shim_spin_hist h = { 0 }, idle = { 0 };

	/* A budget far above what a loaded machine adds to a sleep of 0. */
	shim_cfg.spin_us = 5000;
	for (int i = 0; i < SHIM_SPIN_MISS_LIMIT; i++)
		ck_assert(wait_then_sleep(&h, 0));
	ck_assert_uint_eq(h.level, 1);

	shim_spin_reset_prior();
	shim_cfg.spin_us = 20;
	/* Slow wake-ups seen (a millisecond), then a peer that answers only
	 * 30 ms after: far beyond what a spin could have caught. */
	for (int i = 0; i < 4; i++)
		wait_then_sleep(&(struct shim_spin_hist){ 0 }, 1000);
	for (int i = 0; i < SHIM_SPIN_MISS_LIMIT; i++)
		ck_assert(wait_then_sleep(&idle, 30 * 1000));
	ck_assert_uint_eq(idle.level, 1);
	ck_assert(!wait_then_sleep(&idle, 30 * 1000));
}
END_TEST

/* The wait loop asks again after a sleep that ended empty (RDMA's first
 * sleep after an arm lasts a millisecond): an idle peer's long waits must
 * still count as misses then, and back off. */
START_TEST(a_spin_asked_again_after_an_empty_sleep_is_still_judged)
{
	struct shim_spin_hist h = { 0 };

	shim_cfg.spin_us = 20;
	for (int i = 0; i < 4; i++)
		wait_then_sleep(&(struct shim_spin_hist){ 0 }, 1000);
	for (int i = 0; i < SHIM_SPIN_MISS_LIMIT; i++) {
		struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
		struct timespec ts = { 0, 15 * 1000 * 1000 };

		ck_assert(shim_spin_more(&run, &h, -1));
		while (shim_spin_more(&run, &h, -1))
			;
		ck_assert(!shim_spin_more(&run, &h, -1)); /* after an empty sleep */
		shim_spin_sleeping();
		nanosleep(&ts, NULL);
		shim_spin_end(&run, &h, true, -1);
	}
	ck_assert_uint_eq(h.level, 1);
}
END_TEST

START_TEST(no_spin_when_every_cpu_has_a_spinner)
{
	struct shim_spin_hist h = { 0 };
	struct shim_spin_run a = SHIM_SPIN_RUN_INIT, b = SHIM_SPIN_RUN_INIT, c = SHIM_SPIN_RUN_INIT;
	unsigned long crowded = shim_stats_spin[SHIM_SPIN_STAT_SKIP_CROWDED];

	shim_cfg.spin_us = 1000000;
	shim_spin_set_cpus(2);
	ck_assert(shim_spin_more(&a, &h, -1));
	ck_assert(shim_spin_more(&b, &h, -1));
	ck_assert_uint_eq(shim_spin_spinners(), 2);
	ck_assert(!shim_spin_more(&c, &h, -1));
	ck_assert_uint_eq(shim_stats_spin[SHIM_SPIN_STAT_SKIP_CROWDED], crowded + 1);
	shim_spin_end(&c, &h, false, -1);
	shim_spin_end(&a, &h, true, -1);
	ck_assert_uint_eq(shim_spin_spinners(), 1);
	/* A core is free again. */
	c = (struct shim_spin_run)SHIM_SPIN_RUN_INIT;
	ck_assert(shim_spin_more(&c, &h, -1));
	shim_spin_end(&c, &h, true, -1);
	shim_spin_end(&b, &h, true, -1);
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

START_TEST(adapt_off_always_spins)
{
	struct shim_spin_hist h = { 0 };
	struct shim_spin_run a = SHIM_SPIN_RUN_INIT, b = SHIM_SPIN_RUN_INIT;

	shim_cfg.spin_adapt = 0;
	for (int i = 0; i < 50; i++)
		ck_assert(one_wait(&h, false));
	shim_spin_set_cpus(1);
	shim_cfg.spin_us = 1000000;
	ck_assert(shim_spin_more(&a, &h, -1));
	ck_assert(shim_spin_more(&b, &h, -1));
	shim_spin_end(&a, &h, true, -1);
	shim_spin_end(&b, &h, true, -1);
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

/* A new waiter (a connection per request) starts from the process's last
 * verdict: backed off after another waiter backed off, spinning again once
 * one resumed. */
START_TEST(new_waiters_start_from_the_process_prior)
{
	struct shim_spin_hist first = { 0 }, fresh = { 0 }, later = { 0 };

	shim_cfg.spin_us = ROOMY_SPIN_US;
	ck_assert(one_wait(&fresh, true)); /* no verdict yet: it spins */
	for (int i = 0; i < SHIM_SPIN_MISS_LIMIT; i++)
		ck_assert(one_wait(&first, false));
	struct shim_spin_hist next = { 0 };

	ck_assert(!one_wait(&next, false)); /* starts backed off: level 1 */
	ck_assert(!one_wait(&next, false));
	ck_assert(one_wait(&next, true)); /* its probe pays: the process resumes */
	ck_assert_uint_eq(next.level, 0);
	ck_assert(one_wait(&later, true));
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

/* A history apart (the handshake waits): its late hits pay, and its own
 * back-off neither comes from nor goes to the process's prior, which the
 * data waits' new waiters start from. */
START_TEST(a_history_apart_keeps_to_itself)
{
	struct shim_spin_hist apart = { .apart = 1 }, fresh = { 0 };

	shim_cfg.spin_us = 20;
	for (int i = 0; i < SHIM_SPIN_MISS_LIMIT; i++) {
		struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
		struct timespec ts = { 0, 15000 };

		ck_assert(shim_spin_more(&run, &apart, -1));
		nanosleep(&ts, NULL); /* past half of the budget */
		shim_spin_end(&run, &apart, true, -1);
	}
	ck_assert_uint_eq(apart.level, 0);
	shim_cfg.spin_us = ROOMY_SPIN_US;
	for (int i = 0; i < SHIM_SPIN_MISS_LIMIT; i++)
		ck_assert(one_wait(&apart, false));
	ck_assert_uint_eq(apart.level, 1);
	ck_assert(one_wait(&fresh, true)); /* not backed off by the other's verdict */
	ck_assert_uint_eq(fresh.level, 0);
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

/* A spin that lost its core (here: a sleep between two looks) ends, and
 * holds the spins of every waiter of the process for a while. */
START_TEST(a_spin_that_loses_its_core_holds_the_spins)
{
	struct shim_spin_hist h = { 0 }, other = { 0 };
	struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
	unsigned long preempted = shim_stats_spin[SHIM_SPIN_STAT_PREEMPTED];
	struct timespec pause = { 0, 2 * 1000 * 1000 };

	shim_cfg.spin_us = 1000 * 1000; /* a second: only the gap ends it */
	shim_spin_watch_preemption(true);
	ck_assert(shim_spin_more(&run, &h, -1));
	for (int i = 0; i < 3; i++)
		ck_assert(shim_spin_more(&run, &h, -1));
	nanosleep(&pause, NULL);
	ck_assert(!shim_spin_more(&run, &h, -1));
	shim_spin_end(&run, &h, false, -1);
	ck_assert_uint_eq(shim_stats_spin[SHIM_SPIN_STAT_PREEMPTED], preempted + 1);
	ck_assert(!one_wait(&other, true)); /* held: another waiter does not spin */
	ck_assert_uint_eq(shim_spin_spinners(), 0);
	shim_spin_reset_prior();
	ck_assert(one_wait(&other, true));
}
END_TEST

static long my_switches(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

/* A gap between two looks in which the thread kept its core (here: a busy
 * loop; under a hypervisor, the virtual CPU stalled) is no contention:
 * the spin goes on and nothing holds. Retried when the machine happened
 * to switch the loop out meanwhile. */
START_TEST(a_gap_without_a_switch_holds_nothing)
{
	struct shim_spin_hist other = { 0 };
	unsigned long preempted = shim_stats_spin[SHIM_SPIN_STAT_PREEMPTED];
	unsigned long stalled = shim_stats_spin[SHIM_SPIN_STAT_STALLED];
	bool judged = false;

	shim_cfg.spin_us = 1000 * 1000;
	shim_spin_watch_preemption(true);
	for (int tries = 0; tries < 50 && !judged; tries++) {
		struct shim_spin_run run = SHIM_SPIN_RUN_INIT;
		struct shim_spin_hist h = { 0 }; /* a lost try's miss is not this one's */
		unsigned long long until;
		long before;

		ck_assert(shim_spin_more(&run, &h, -1));
		/* The switches are read once the spin has run a while. */
		until = shim_now_ns() + 1000 * 1000;
		while (run.switches < 0 && shim_now_ns() < until)
			ck_assert(shim_spin_more(&run, &h, -1));
		before = run.switches;
		ck_assert(before >= 0);
		until = shim_now_ns() + 2 * 1000 * 1000;
		while (shim_now_ns() < until)
			__builtin_ia32_pause();
		if (my_switches() != before) {
			/* switched out after all: a lost core, held */
			shim_spin_more(&run, &h, -1);
			shim_spin_end(&run, &h, false, -1);
			shim_spin_reset_prior();
			preempted = shim_stats_spin[SHIM_SPIN_STAT_PREEMPTED];
			continue;
		}
		ck_assert(shim_spin_more(&run, &h, -1));
		shim_spin_end(&run, &h, true, -1);
		judged = true;
	}
	ck_assert_msg(judged, "the busy loop was switched out at every try");
	ck_assert_uint_eq(shim_stats_spin[SHIM_SPIN_STAT_PREEMPTED], preempted);
	ck_assert_uint_eq(shim_stats_spin[SHIM_SPIN_STAT_STALLED], stalled + 1);
	ck_assert(one_wait(&other, true)); /* nothing held */
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

START_TEST(spin_us_zero_never_spins)
{
	struct shim_spin_hist h = { 0 };

	shim_cfg.spin_us = 0;
	ck_assert(!one_wait(&h, true));
	ck_assert(!one_wait(&h, false));
	ck_assert_uint_eq(shim_spin_spinners(), 0);
}
END_TEST

static Suite *spin_suite(void)
{
	Suite *s = suite_create("spin");
	TCase *tc = tcase_create("adaptive");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, spins_that_pay_keep_spinning);
	tcase_add_test(tc, misses_back_off_then_a_probe_resumes);
	tcase_add_test(tc, back_off_is_bounded);
	tcase_add_test(tc, late_hits_count_as_misses);
	tcase_add_test(tc, short_sleep_hurries_the_probe);
	tcase_add_test(tc, slow_wake_ups_do_not_lock_the_back_off_in);
	tcase_add_test(tc, slow_wake_ups_end_a_back_off);
	tcase_add_test(tc, slow_wake_ups_make_late_hits_pay);
	tcase_add_test(tc, slow_wake_ups_lengthen_the_spin);
	tcase_add_test(tc, cheap_wake_ups_or_idle_peers_still_back_off);
	tcase_add_test(tc, a_spin_asked_again_after_an_empty_sleep_is_still_judged);
	tcase_add_test(tc, a_wait_that_never_slept_is_no_wake_up);
	tcase_add_test(tc, no_spin_when_every_cpu_has_a_spinner);
	tcase_add_test(tc, adapt_off_always_spins);
	tcase_add_test(tc, spin_us_zero_never_spins);
	tcase_add_test(tc, new_waiters_start_from_the_process_prior);
	tcase_add_test(tc, a_history_apart_keeps_to_itself);
	tcase_add_test(tc, a_spin_that_loses_its_core_holds_the_spins);
	tcase_add_test(tc, a_gap_without_a_switch_holds_nothing);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(spin_suite());
}
