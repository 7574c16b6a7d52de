/*
 * Unit tests for the wait engine behind poll, select and epoll
 * (shim/io/waitloop.c) and poll's counting rule (shim/io/wait.c), with a
 * scripted set of ops: what a round finds is returned as it is; one look
 * only for a zero timeout; every arm is followed by exactly one disarm,
 * whether it slept; no sleep when an arm found the fd ready; an arm's cap
 * (a short arm's millisecond, a handshake's next timed step) caps the
 * sleep; a sleep never outlasts the deadline;
 * errors end the wait; a spin policy, when given, decides the spin and
 * learns the outcome; and poll counts entries, never rounds.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "config.h"
#include "wait.h"
#include "waitloop.h"
#include "check_run.h"

static struct script {
	int look_ready_at;   /* the look call that finds something (0: never) */
	int after_ready_at;  /* the after call that finds something (0: never) */
	int arm_result;      /* 1 sleep, 0 ready, -errno */
	int arm_cap;         /* what the arm caps the sleep at (0: nothing) */
	int sleep_result;
	int looks, arms, disarms, sleeps, afters;
	int armed;           /* arms not yet disarmed */
	int max_sleep_ms, min_sleep_ms;
	int last_after_theirs;
} sc;

static int s_look(void *ctx)
{
	(void)ctx;
	sc.looks++;
	return sc.look_ready_at && sc.looks >= sc.look_ready_at ? 3 : 0;
}

static int s_arm(void *ctx, int *cap_ms)
{
	(void)ctx;
	sc.arms++;
	if (sc.arm_result < 0)
		return sc.arm_result;
	sc.armed++;
	if (sc.arm_cap)
		shim_waitloop_cap(cap_ms, sc.arm_cap);
	return sc.arm_result;
}

static int s_sleep(void *ctx, int ms)
{
	(void)ctx;
	ck_assert_int_eq(sc.armed, 1); /* sleeps only armed */
	sc.sleeps++;
	if (ms > sc.max_sleep_ms)
		sc.max_sleep_ms = ms;
	if (sc.min_sleep_ms < 0 || ms < sc.min_sleep_ms)
		sc.min_sleep_ms = ms;
	return sc.sleep_result;
}

static void s_disarm(void *ctx)
{
	(void)ctx;
	sc.disarms++;
	sc.armed--;
	ck_assert_int_eq(sc.armed, 0);
}

static int s_after(void *ctx, int theirs)
{
	(void)ctx;
	sc.afters++;
	sc.last_after_theirs = theirs;
	if (theirs < 0)
		return theirs;
	return sc.after_ready_at && sc.afters >= sc.after_ready_at ? 2 : 0;
}

static const struct shim_waitloop_ops ops = {
	.look = s_look, .arm = s_arm, .sleep = s_sleep, .disarm = s_disarm, .after = s_after,
};

static void setup(void)
{
	memset(&sc, 0, sizeof(sc));
	sc.arm_result = 1;
	sc.min_sleep_ms = -1;
	memset(&shim_cfg, 0, sizeof(shim_cfg));
	shim_cfg.spin_us = 0;
}

START_TEST(ready_at_first_look_never_arms)
{
	sc.look_ready_at = 1;
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, -1), 3);
	ck_assert_int_eq(sc.looks, 1);
	ck_assert_int_eq(sc.arms, 0);
}
END_TEST

START_TEST(zero_timeout_is_one_look)
{
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, 0), 0);
	ck_assert_int_eq(sc.looks, 1);
	ck_assert_int_eq(sc.arms, 0);
	ck_assert_int_eq(sc.sleeps, 0);
}
END_TEST

START_TEST(every_arm_has_one_disarm)
{
	sc.after_ready_at = 4;
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, -1), 2);
	ck_assert_int_eq(sc.arms, 4);
	ck_assert_int_eq(sc.disarms, 4);
	ck_assert_int_eq(sc.sleeps, 4);
	ck_assert_int_eq(sc.afters, 4);
	ck_assert_int_eq(sc.looks, 4);
	/* No deadline: whole slices. */
	ck_assert_int_eq(sc.max_sleep_ms, SHIM_SLEEP_SLICE_MS);
}
END_TEST

START_TEST(an_arm_that_finds_it_ready_does_not_sleep)
{
	sc.arm_result = 0;
	sc.after_ready_at = 1;
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, -1), 2);
	ck_assert_int_eq(sc.sleeps, 0);
	ck_assert_int_eq(sc.disarms, 1);
	ck_assert_int_eq(sc.last_after_theirs, 0);
}
END_TEST

START_TEST(a_short_arm_caps_the_sleep)
{
	sc.arm_cap = 1;
	sc.after_ready_at = 3;
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, -1), 2);
	ck_assert_int_eq(sc.max_sleep_ms, 1);
}
END_TEST

START_TEST(an_arms_cap_bounds_the_slice)
{
	sc.arm_cap = 7;
	sc.after_ready_at = 2;
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, -1), 2);
	ck_assert_int_eq(sc.max_sleep_ms, 7);
	ck_assert_int_eq(sc.min_sleep_ms, 7);
}
END_TEST

/* The lowest cap wins, none is 0 or less, and a time due (S's next try) caps at
 * what is left, rounded up, a past one at a millisecond. */
START_TEST(caps_take_the_lowest_and_time_left)
{
	int cap = 0;
	unsigned long long now = shim_now_ns();

	shim_waitloop_cap_until(&cap, 0);
	ck_assert_int_eq(cap, 0);
	shim_waitloop_cap(&cap, 50);
	shim_waitloop_cap(&cap, 80);
	ck_assert_int_eq(cap, 50);
	shim_waitloop_cap_until(&cap, now + 20ull * 1000 * 1000);
	ck_assert_int_ge(cap, 19);
	ck_assert_int_le(cap, 20);
	shim_waitloop_cap_until(&cap, now + 40ull * 1000 * 1000);
	ck_assert_int_le(cap, 20);
	shim_waitloop_cap_until(&cap, now - 5ull * 1000 * 1000);
	ck_assert_int_eq(cap, 1);
	cap = -1;
	shim_waitloop_cap(&cap, 0);
	ck_assert_int_eq(cap, 1);
}
END_TEST

START_TEST(the_deadline_ends_it_with_zero)
{
	unsigned long long t0 = shim_now_ns();

	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, 30ll * 1000 * 1000), 0);
	/* The scripted sleeps return at once: the engine looped until the
	 * deadline, each sleep at most what was left. */
	ck_assert_uint_ge(shim_now_ns() - t0, 30ull * 1000 * 1000);
	ck_assert_int_le(sc.max_sleep_ms, 30);
	ck_assert_int_eq(sc.arms, sc.disarms);
}
END_TEST

START_TEST(errors_end_the_wait)
{
	sc.sleep_result = -EINTR;
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, -1), -EINTR);
	ck_assert_int_eq(sc.disarms, 1);
	ck_assert_int_eq(sc.last_after_theirs, -EINTR);

	setup();
	sc.arm_result = -ENOMEM;
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, -1), -ENOMEM);
	ck_assert_int_eq(sc.disarms, 0); /* nothing was armed */
	ck_assert_int_eq(sc.sleeps, 0);
}
END_TEST

START_TEST(spins_before_it_arms)
{
	shim_cfg.spin_us = 20000;
	sc.look_ready_at = 0;
	sc.after_ready_at = 1;
	ck_assert_int_eq(shim_waitloop_run(&ops, NULL, -1), 2);
	ck_assert_int_gt(sc.looks, 1); /* looked again while spinning */
	ck_assert_int_eq(sc.arms, 1);
}
END_TEST

static int spin_left, spin_ended_with = 99;

static bool s_spin_more(void *ctx)
{
	(void)ctx;
	return spin_left-- > 0;
}

static void s_spin_end(void *ctx, int rc)
{
	(void)ctx;
	spin_ended_with = rc;
}

START_TEST(a_spin_policy_decides_the_spin_and_learns_the_outcome)
{
	struct shim_waitloop_ops pol = ops;

	pol.spin_more = s_spin_more;
	pol.spin_end = s_spin_end;
	shim_cfg.spin_us = 1000000; /* ignored when a policy is given */
	spin_left = 5;
	sc.after_ready_at = 1;
	ck_assert_int_eq(shim_waitloop_run(&pol, NULL, -1), 2);
	ck_assert_int_eq(sc.looks, 6); /* the first, then one per spin allowed */
	ck_assert_int_eq(sc.arms, 1);
	ck_assert_int_eq(spin_ended_with, 2);
	spin_left = 0;
	sc.look_ready_at = sc.looks + 1;
	ck_assert_int_eq(shim_waitloop_run(&pol, NULL, 0), 3);
	ck_assert_int_eq(spin_ended_with, 3);
}
END_TEST

START_TEST(poll_counts_entries_not_rounds)
{
	struct pollfd fds[3] = {
		{ .fd = 3, .events = POLLIN, .revents = POLLIN | POLLOUT },
		{ .fd = 4, .events = POLLIN, .revents = 0 },
		{ .fd = 5, .events = POLLOUT, .revents = POLLOUT },
	};

	/* A fd filled by both rounds is one entry: poll over it says 1. */
	ck_assert_int_eq(shim_wait_count_ready(fds, 1), 1);
	ck_assert_int_eq(shim_wait_count_ready(fds, 3), 2);
	ck_assert_int_eq(shim_wait_count_ready(fds + 1, 1), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("waitloop");
	TCase *tc = tcase_create("engine");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, ready_at_first_look_never_arms);
	tcase_add_test(tc, zero_timeout_is_one_look);
	tcase_add_test(tc, every_arm_has_one_disarm);
	tcase_add_test(tc, an_arm_that_finds_it_ready_does_not_sleep);
	tcase_add_test(tc, a_short_arm_caps_the_sleep);
	tcase_add_test(tc, an_arms_cap_bounds_the_slice);
	tcase_add_test(tc, caps_take_the_lowest_and_time_left);
	tcase_add_test(tc, the_deadline_ends_it_with_zero);
	tcase_add_test(tc, errors_end_the_wait);
	tcase_add_test(tc, spins_before_it_arms);
	tcase_add_test(tc, a_spin_policy_decides_the_spin_and_learns_the_outcome);
	tcase_add_test(tc, poll_counts_entries_not_rounds);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
