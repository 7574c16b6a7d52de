/*
 * Unit tests for shim/core/abverdict.c, the A/B verdict of `rdmashim stat
 * --ab`: on synthetic intervals whose arms differ by a known ratio (a load
 * factor per interval shared by both arms, as on a loaded machine), each
 * verdict is reached where it must be: BETTER at 0.5, WORSE at 2, EQUIVALENT
 * at 1, INCONCLUSIVE near the margin with few intervals, INSUFFICIENT_DATA
 * with too few samples or intervals; the guardrails make a better arm
 * WORSE; a seed reproduces the interval; the interpolated quantile.
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "abverdict.h"
#include "check_run.h"

static uint64_t gen_state;

static double uni(void)
{
	gen_state = gen_state * 6364136223846793005ull + 1442695040888963407ull;
	return ((double)(gen_state >> 11) + 0.5) / 9007199254740992.0;
}

/* Standard normal (Box-Muller). */
static double gauss(void)
{
	return sqrt(-2.0 * log(uni())) * cos(6.283185307179586 * uni());
}

/*
 * nint intervals of per samples each arm: a round trip is base_ns (times
 * ratio for the accelerated arm) times the interval's load (log-normal,
 * sigma 0.3, both arms alike) times its own spread (log-normal, sigma 0.5).
 */
static shim_ab_interval *make(size_t nint, unsigned per, double base_ns, double ratio, uint64_t seed)
{
	shim_ab_interval *iv = calloc(nint ? nint : 1, sizeof(*iv));

	ck_assert_ptr_nonnull(iv);
	gen_state = seed;
	for (size_t i = 0; i < nint; i++) {
		double load = exp(0.3 * gauss());

		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
			for (unsigned k = 0; k < per; k++) {
				double ns = base_ns * (a == 0 ? ratio : 1.0) * load * exp(0.5 * gauss());

				iv[i][a][shim_stat_rtt_bucket((uint64_t)ns)]++;
			}
	}
	return iv;
}

static struct shim_ab_result judge(size_t nint, unsigned per, double ratio, double q)
{
	shim_ab_interval *iv = make(nint, per, 40000, ratio, 7);
	struct shim_ab_input in = { .nint = nint, .iv = iv, .conns = { 10, 10 } };
	struct shim_ab_params p;
	struct shim_ab_result r;

	shim_ab_params_default(&p);
	p.seed = 42;
	p.quantile = q;
	ck_assert_int_eq(shim_ab_judge(&in, &p, &r), 0);
	free(iv);
	return r;
}

START_TEST(better_at_half)
{
	struct shim_ab_result r = judge(60, 300, 0.5, 0.5);

	ck_assert_int_eq(r.verdict, SHIM_AB_BETTER);
	ck_assert(r.p50.lo < 0.5 * 1.1 && r.p50.hi > 0.5 * 0.9);
	ck_assert(r.p50.lo <= r.p50.ratio && r.p50.ratio <= r.p50.hi);
	ck_assert_uint_eq(r.intervals, 60);
	ck_assert_uint_eq(r.n[0], 60 * 300);
	/* 18000 samples an arm: p99 is judged too, and better. */
	ck_assert(r.p99.judged);
	ck_assert_int_eq(r.p99.verdict, SHIM_AB_BETTER);
	r = judge(60, 300, 0.5, 0.99);
	ck_assert_int_eq(r.verdict, SHIM_AB_BETTER);
}
END_TEST

START_TEST(worse_at_two)
{
	struct shim_ab_result r = judge(60, 300, 2.0, 0.5);

	ck_assert_int_eq(r.verdict, SHIM_AB_WORSE);
	ck_assert(r.p50.lo > 1.05);
	ck_assert_int_eq(shim_ab_verdict_exit(r.verdict), 1);
}
END_TEST

START_TEST(equivalent_at_one)
{
	struct shim_ab_result r = judge(120, 400, 1.0, 0.5);

	ck_assert_msg(r.verdict == SHIM_AB_EQUIVALENT, "ratio %.3f [%.3f, %.3f]", r.p50.ratio, r.p50.lo, r.p50.hi);
	ck_assert(r.p50.lo >= 0.95 && r.p50.hi <= 1.05);
	ck_assert_int_eq(shim_ab_verdict_exit(r.verdict), 3);
}
END_TEST

START_TEST(inconclusive_across_margin)
{
	/* 7 % better, few samples: the interval straddles 0.95. */
	struct shim_ab_result r = judge(12, 100, 0.93, 0.5);

	ck_assert_msg(r.verdict == SHIM_AB_INCONCLUSIVE, "ratio %.3f [%.3f, %.3f]", r.p50.ratio, r.p50.lo,
		      r.p50.hi);
	ck_assert_int_eq(shim_ab_verdict_exit(r.verdict), 4);
}
END_TEST

START_TEST(insufficient)
{
	/* Under 10 intervals. */
	struct shim_ab_result r = judge(9, 500, 0.5, 0.5);

	ck_assert_int_eq(r.verdict, SHIM_AB_INSUFFICIENT_DATA);
	ck_assert(!r.p50.judged);
	ck_assert_int_eq(shim_ab_verdict_exit(r.verdict), 5);
	/* Under 100 samples an arm for p50. */
	r = judge(20, 4, 0.5, 0.5);
	ck_assert_int_eq(r.verdict, SHIM_AB_INSUFFICIENT_DATA);
	/* Enough for p50, under 1000 for p99. */
	r = judge(20, 40, 0.5, 0.99);
	ck_assert(r.p50.judged && !r.p99.judged);
	ck_assert_int_eq(r.verdict, SHIM_AB_INSUFFICIENT_DATA);
	/* No data at all. */
	struct shim_ab_input in = { 0 };
	struct shim_ab_params p;

	shim_ab_params_default(&p);
	ck_assert_int_eq(shim_ab_judge(&in, &p, &r), 0);
	ck_assert_int_eq(r.verdict, SHIM_AB_INSUFFICIENT_DATA);
}
END_TEST

START_TEST(intervals_of_one_arm_left_out)
{
	shim_ab_interval *iv = make(30, 200, 40000, 0.5, 3);
	struct shim_ab_input in = { .nint = 30, .iv = iv };
	struct shim_ab_params p;
	struct shim_ab_result r;

	/* Half the intervals lose their control samples: unpaired, unused. */
	for (size_t i = 0; i < 30; i += 2)
		memset(iv[i][1], 0, sizeof(iv[i][1]));
	shim_ab_params_default(&p);
	ck_assert_int_eq(shim_ab_judge(&in, &p, &r), 0);
	ck_assert_uint_eq(r.intervals, 15);
	ck_assert_uint_eq(r.n[0], 15 * 200);
	ck_assert_int_eq(r.verdict, SHIM_AB_BETTER);
	free(iv);
}
END_TEST

START_TEST(guardrails)
{
	shim_ab_interval *iv = make(60, 300, 40000, 0.5, 7);
	struct shim_ab_input in = { .nint = 60, .iv = iv, .conns = { 100, 100 }, .fallbacks = { 11, 0 } };
	struct shim_ab_params p;
	struct shim_ab_result r;

	shim_ab_params_default(&p);
	ck_assert_int_eq(shim_ab_judge(&in, &p, &r), 0);
	ck_assert(r.guard_fallback && !r.guard_error);
	ck_assert_int_eq(r.verdict, SHIM_AB_WORSE);
	/* At the limit, not over it. */
	in.fallbacks[0] = 10;
	ck_assert_int_eq(shim_ab_judge(&in, &p, &r), 0);
	ck_assert_int_eq(r.verdict, SHIM_AB_BETTER);
	/* The control arm's own are not the accelerated arm's fault. */
	in.fallbacks[0] = 0;
	in.errors[1] = 50;
	ck_assert_int_eq(shim_ab_judge(&in, &p, &r), 0);
	ck_assert_int_eq(r.verdict, SHIM_AB_BETTER);
	in.errors[0] = 2;
	ck_assert_int_eq(shim_ab_judge(&in, &p, &r), 0);
	ck_assert(r.guard_error);
	ck_assert_int_eq(r.verdict, SHIM_AB_WORSE);
	/* A looser limit lets it through. */
	p.max_error = 0.05;
	ck_assert_int_eq(shim_ab_judge(&in, &p, &r), 0);
	ck_assert_int_eq(r.verdict, SHIM_AB_BETTER);
	free(iv);
}
END_TEST

START_TEST(seed_reproduces)
{
	shim_ab_interval *iv = make(40, 100, 40000, 0.97, 11);
	struct shim_ab_input in = { .nint = 40, .iv = iv };
	struct shim_ab_params p;
	struct shim_ab_result a, b, c;

	shim_ab_params_default(&p);
	p.seed = 1234;
	ck_assert_int_eq(shim_ab_judge(&in, &p, &a), 0);
	ck_assert_int_eq(shim_ab_judge(&in, &p, &b), 0);
	ck_assert(a.p50.lo == b.p50.lo && a.p50.hi == b.p50.hi);
	p.seed = 99;
	ck_assert_int_eq(shim_ab_judge(&in, &p, &c), 0);
	ck_assert(a.p50.lo != c.p50.lo || a.p50.hi != c.p50.hi);
	/* Bad parameters. */
	p.margin = -1;
	ck_assert_int_eq(shim_ab_judge(&in, &p, &c), -EINVAL);
	free(iv);
}
END_TEST

START_TEST(quantile_interpolated)
{
	uint64_t h[SHIM_STAT_RTT_BUCKETS] = { 0 };
	unsigned b = shim_stat_rtt_bucket(10000);
	double lo = (double)shim_stat_rtt_upper_ns(b - 1), hi = (double)shim_stat_rtt_upper_ns(b);

	ck_assert(shim_ab_quantile_ns(h, 0.5) == 0);
	h[b] = 100;
	ck_assert(fabs(shim_ab_quantile_ns(h, 0.5) - (lo + (hi - lo) * 0.5)) < 1e-6);
	ck_assert(fabs(shim_ab_quantile_ns(h, 1.0) - hi) < 1e-6);
	h[b + 4] = 100; /* twice as far */
	ck_assert(shim_ab_quantile_ns(h, 0.99) > hi);
	ck_assert_str_eq(shim_ab_verdict_name(SHIM_AB_INSUFFICIENT_DATA), "INSUFFICIENT_DATA");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("abverdict");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, better_at_half);
	tcase_add_test(tc, worse_at_two);
	tcase_add_test(tc, equivalent_at_one);
	tcase_add_test(tc, inconclusive_across_margin);
	tcase_add_test(tc, insufficient);
	tcase_add_test(tc, intervals_of_one_arm_left_out);
	tcase_add_test(tc, guardrails);
	tcase_add_test(tc, seed_reproduces);
	tcase_add_test(tc, quantile_interpolated);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
