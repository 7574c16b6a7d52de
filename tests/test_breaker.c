/*
 * Unit tests for shim/transport/rdma/breaker.c: closed -> open after N consecutive failures,
 * attempts skipped during the cooldown, one half-open probe, closed again on
 * success, reopened on a failed probe, peers independent of each other.
 * Time is injected through the now_ms parameter: nothing sleeps.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "breaker.h"
#include "check_run.h"

#define N 3
#define COOLDOWN 1000

static void peer(uint8_t out[16], uint8_t last)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	memcpy(out, mapped, 12);
	out[12] = 192;
	out[13] = 168;
	out[14] = 79;
	out[15] = last;
}

static struct shim_breaker *b;
static uint8_t a[16], other[16];

static void setup(void)
{
	b = shim_breaker_new(N, COOLDOWN);
	ck_assert_ptr_nonnull(b);
	peer(a, 2);
	peer(other, 3);
}

static void teardown(void)
{
	shim_breaker_free(b);
}

static void fail_n(const uint8_t *p, unsigned n, uint64_t now)
{
	for (unsigned i = 0; i < n; i++) {
		ck_assert_int_ne(shim_breaker_check(b, p, now), SHIM_BREAKER_SKIP);
		shim_breaker_record(b, p, false, now);
	}
}

START_TEST(unknown_peer_is_closed)
{
	ck_assert_int_eq(shim_breaker_check(b, a, 0), SHIM_BREAKER_ALLOW);
	ck_assert_int_eq(shim_breaker_state_of(b, a, 0), SHIM_BREAKER_CLOSED);
}
END_TEST

START_TEST(opens_after_n_consecutive_failures)
{
	fail_n(a, N - 1, 100);
	ck_assert_int_eq(shim_breaker_state_of(b, a, 100), SHIM_BREAKER_CLOSED);
	ck_assert_int_eq(shim_breaker_check(b, a, 100), SHIM_BREAKER_ALLOW);
	shim_breaker_record(b, a, false, 100);
	ck_assert_int_eq(shim_breaker_state_of(b, a, 100), SHIM_BREAKER_OPEN);
	ck_assert_int_eq(shim_breaker_check(b, a, 101), SHIM_BREAKER_SKIP);
}
END_TEST

START_TEST(success_resets_the_count)
{
	fail_n(a, N - 1, 100);
	shim_breaker_record(b, a, true, 100);
	fail_n(a, N - 1, 200);
	/* 2 + 2 failures, but never N in a row. */
	ck_assert_int_eq(shim_breaker_state_of(b, a, 200), SHIM_BREAKER_CLOSED);
	ck_assert_int_eq(shim_breaker_check(b, a, 200), SHIM_BREAKER_ALLOW);
}
END_TEST

START_TEST(skips_during_the_whole_cooldown)
{
	fail_n(a, N, 1000);
	ck_assert_int_eq(shim_breaker_check(b, a, 1000), SHIM_BREAKER_SKIP);
	ck_assert_int_eq(shim_breaker_check(b, a, 1000 + COOLDOWN / 2), SHIM_BREAKER_SKIP);
	ck_assert_int_eq(shim_breaker_check(b, a, 1000 + COOLDOWN - 1), SHIM_BREAKER_SKIP);
	ck_assert_int_eq(shim_breaker_state_of(b, a, 1000 + COOLDOWN - 1), SHIM_BREAKER_OPEN);
}
END_TEST

START_TEST(one_probe_when_half_open)
{
	uint64_t t = 5000 + COOLDOWN;

	fail_n(a, N, 5000);
	ck_assert_int_eq(shim_breaker_state_of(b, a, t), SHIM_BREAKER_HALF_OPEN);
	ck_assert_int_eq(shim_breaker_check(b, a, t), SHIM_BREAKER_PROBE);
	/* While the probe is out, everyone else still skips. */
	ck_assert_int_eq(shim_breaker_check(b, a, t + 1), SHIM_BREAKER_SKIP);
	ck_assert_int_eq(shim_breaker_check(b, a, t + 2), SHIM_BREAKER_SKIP);
}
END_TEST

START_TEST(probe_success_closes)
{
	uint64_t t = 5000 + COOLDOWN;

	fail_n(a, N, 5000);
	ck_assert_int_eq(shim_breaker_check(b, a, t), SHIM_BREAKER_PROBE);
	shim_breaker_record(b, a, true, t + 10);
	ck_assert_int_eq(shim_breaker_state_of(b, a, t + 10), SHIM_BREAKER_CLOSED);
	ck_assert_int_eq(shim_breaker_check(b, a, t + 11), SHIM_BREAKER_ALLOW);
	ck_assert_int_eq(shim_breaker_check(b, a, t + 12), SHIM_BREAKER_ALLOW);
	/* And it takes N failures again to open. */
	fail_n(a, N - 1, t + 20);
	ck_assert_int_eq(shim_breaker_state_of(b, a, t + 20), SHIM_BREAKER_CLOSED);
}
END_TEST

START_TEST(probe_failure_reopens_for_a_new_cooldown)
{
	uint64_t t = 5000 + COOLDOWN;

	fail_n(a, N, 5000);
	ck_assert_int_eq(shim_breaker_check(b, a, t), SHIM_BREAKER_PROBE);
	shim_breaker_record(b, a, false, t + 50);
	ck_assert_int_eq(shim_breaker_state_of(b, a, t + 50), SHIM_BREAKER_OPEN);
	ck_assert_int_eq(shim_breaker_check(b, a, t + 50 + COOLDOWN - 1), SHIM_BREAKER_SKIP);
	ck_assert_int_eq(shim_breaker_check(b, a, t + 50 + COOLDOWN), SHIM_BREAKER_PROBE);
}
END_TEST

START_TEST(lost_probe_is_replaced_after_a_cooldown)
{
	uint64_t t = 5000 + COOLDOWN;

	fail_n(a, N, 5000);
	ck_assert_int_eq(shim_breaker_check(b, a, t), SHIM_BREAKER_PROBE);
	/* The probe's connection went away without a verdict. */
	ck_assert_int_eq(shim_breaker_check(b, a, t + COOLDOWN - 1), SHIM_BREAKER_SKIP);
	ck_assert_int_eq(shim_breaker_check(b, a, t + COOLDOWN), SHIM_BREAKER_PROBE);
}
END_TEST

START_TEST(peers_are_independent)
{
	fail_n(a, N, 100);
	ck_assert_int_eq(shim_breaker_check(b, a, 100), SHIM_BREAKER_SKIP);
	ck_assert_int_eq(shim_breaker_check(b, other, 100), SHIM_BREAKER_ALLOW);
	fail_n(other, N - 1, 100);
	ck_assert_int_eq(shim_breaker_state_of(b, other, 100), SHIM_BREAKER_CLOSED);
	/* Closing one does not touch the other. */
	ck_assert_int_eq(shim_breaker_check(b, a, 100 + COOLDOWN), SHIM_BREAKER_PROBE);
	shim_breaker_record(b, a, true, 100 + COOLDOWN);
	ck_assert_int_eq(shim_breaker_state_of(b, a, 100 + COOLDOWN), SHIM_BREAKER_CLOSED);
	shim_breaker_record(b, other, false, 100 + COOLDOWN);
	ck_assert_int_eq(shim_breaker_state_of(b, other, 100 + COOLDOWN), SHIM_BREAKER_OPEN);
	ck_assert_int_eq(shim_breaker_check(b, a, 100 + COOLDOWN), SHIM_BREAKER_ALLOW);
}
END_TEST

START_TEST(failures_of_one_do_not_count_for_another)
{
	/* Interleaved failures: N - 1 each, neither opens. */
	for (unsigned i = 0; i < N - 1; i++) {
		shim_breaker_record(b, a, false, 10);
		shim_breaker_record(b, other, false, 10);
	}
	ck_assert_int_eq(shim_breaker_state_of(b, a, 10), SHIM_BREAKER_CLOSED);
	ck_assert_int_eq(shim_breaker_state_of(b, other, 10), SHIM_BREAKER_CLOSED);
}
END_TEST

START_TEST(zero_cooldown_probes_at_once)
{
	struct shim_breaker *z = shim_breaker_new(1, 0);

	shim_breaker_record(z, a, false, 10);
	ck_assert_int_eq(shim_breaker_check(z, a, 10), SHIM_BREAKER_PROBE);
	ck_assert_int_eq(shim_breaker_check(z, a, 10), SHIM_BREAKER_PROBE);
	shim_breaker_free(z);
}
END_TEST

static Suite *breaker_suite(void)
{
	Suite *s = suite_create("breaker");
	TCase *tc = tcase_create("states");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, unknown_peer_is_closed);
	tcase_add_test(tc, opens_after_n_consecutive_failures);
	tcase_add_test(tc, success_resets_the_count);
	tcase_add_test(tc, skips_during_the_whole_cooldown);
	tcase_add_test(tc, one_probe_when_half_open);
	tcase_add_test(tc, probe_success_closes);
	tcase_add_test(tc, probe_failure_reopens_for_a_new_cooldown);
	tcase_add_test(tc, lost_probe_is_replaced_after_a_cooldown);
	tcase_add_test(tc, peers_are_independent);
	tcase_add_test(tc, failures_of_one_do_not_count_for_another);
	tcase_add_test(tc, zero_cooldown_probes_at_once);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(breaker_suite());
}
