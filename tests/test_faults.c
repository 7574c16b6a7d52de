/* Unit tests for shim/core/faults.c: the RDMASHIM_TEST_FAULTS parser and
 * when a strike happens. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "faults.h"
#include "trace.h"
#include "check_run.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- good lists ------------------------------------------------------------ */

static const struct {
	const char *text;
	unsigned count;
	struct shim_fault_entry e[4];
} good[] = {
	{ "", 0, { { 0 } } },
	{ "   ", 0, { { 0 } } },
	{ "ring_alloc@1", 1, { { SHIM_FAULT_RING_ALLOC, 1 } } },
	{ "bell_loss@3,bell_loss@40", 2, { { SHIM_FAULT_BELL_LOSS, 3 }, { SHIM_FAULT_BELL_LOSS, 40 } } },
	{ " peer_stall @ 2 , verify_fail@7 ", 2, { { SHIM_FAULT_PEER_STALL, 2 }, { SHIM_FAULT_VERIFY_FAIL, 7 } } },
	{ "\trv_silent@1\t", 1, { { SHIM_FAULT_RV_SILENT, 1 } } },
	{ "switch_late@007", 1, { { SHIM_FAULT_SWITCH_LATE, 7 } } },
	{ "switch_late@4611686018427387904", 1, { { SHIM_FAULT_SWITCH_LATE, 4611686018427387904ull } } },
	{ "stat_kill@2", 1, { { SHIM_FAULT_STAT_KILL, 2 } } },
	{ "ring_alloc@1,bell_loss@2,peer_stall@3,verify_fail@4", 4,
	  { { SHIM_FAULT_RING_ALLOC, 1 }, { SHIM_FAULT_BELL_LOSS, 2 }, { SHIM_FAULT_PEER_STALL, 3 },
	    { SHIM_FAULT_VERIFY_FAIL, 4 } } },
	/* The RDMA kinds (qp_error's N is a byte offset, parsed alike). */
	{ "cm_timeout@1,cm_timeout@2,cm_timeout@3", 3,
	  { { SHIM_FAULT_CM_TIMEOUT, 1 }, { SHIM_FAULT_CM_TIMEOUT, 2 }, { SHIM_FAULT_CM_TIMEOUT, 3 } } },
	{ "cm_reject@2, qp_error@1048576", 2, { { SHIM_FAULT_CM_REJECT, 2 }, { SHIM_FAULT_QP_ERROR, 1048576 } } },
	{ "cq_lost@500,reg_fail@1,link_qp_lost@8", 3,
	  { { SHIM_FAULT_CQ_LOST, 500 }, { SHIM_FAULT_REG_FAIL, 1 }, { SHIM_FAULT_LINK_QP_LOST, 8 } } },
	{ "cq_stall@300,cq_lost@2", 2, { { SHIM_FAULT_CQ_STALL, 300 }, { SHIM_FAULT_CQ_LOST, 2 } } },
	{ "bell_loss@1,qp_error@4611686018427387904", 2,
	  { { SHIM_FAULT_BELL_LOSS, 1 }, { SHIM_FAULT_QP_ERROR, 4611686018427387904ull } } },
	/* The same fault twice strikes once: allowed, not an error. */
	{ "verify_fail@2,verify_fail@2", 2, { { SHIM_FAULT_VERIFY_FAIL, 2 }, { SHIM_FAULT_VERIFY_FAIL, 2 } } },
};

START_TEST(parse_good)
{
	struct shim_fault_plan plan;
	char why[256];

	ck_assert_msg(shim_faults_parse(good[_i].text, &plan, why, sizeof(why)) == 0, "'%s': %s", good[_i].text,
		      why);
	ck_assert_str_eq(why, "");
	ck_assert_uint_eq(plan.count, good[_i].count);
	for (unsigned k = 0; k < plan.count; k++) {
		ck_assert_int_eq(plan.e[k].kind, good[_i].e[k].kind);
		ck_assert_uint_eq(plan.e[k].n, good[_i].e[k].n);
	}
}
END_TEST

START_TEST(parse_null_is_empty)
{
	struct shim_fault_plan plan = { .count = 3 };

	ck_assert_int_eq(shim_faults_parse(NULL, &plan, NULL, 0), 0);
	ck_assert_uint_eq(plan.count, 0);
}
END_TEST

/* Every kind parses by the name the trace gives it. */
START_TEST(names_round_trip)
{
	struct shim_fault_plan plan;
	char text[64];

	for (unsigned k = 0; k < SHIM_FAULT_KINDS; k++) {
		snprintf(text, sizeof(text), "%s@5", shim_fault_name((enum shim_fault_kind)k));
		ck_assert_int_eq(shim_faults_parse(text, &plan, NULL, 0), 0);
		ck_assert_uint_eq(plan.count, 1);
		ck_assert_int_eq(plan.e[0].kind, (int)k);
	}
	ck_assert_str_eq(shim_fault_name(SHIM_FAULT_KINDS), "?");
}
END_TEST

/* ---- bad lists --------------------------------------------------------------- */

static const struct {
	const char *text;
	int rc;
	const char *why; /* a piece the clause must hold */
} bad[] = {
	/* syntax */
	{ "bell_loss", -EINVAL, "expected @N after 'bell_loss'" },
	{ "bell_loss@", -EINVAL, "expected a count N" },
	{ "bell_loss@x", -EINVAL, "expected a count N" },
	{ "bell_loss@-1", -EINVAL, "expected a count N" },
	{ "bell_loss@+1", -EINVAL, "expected a count N" },
	{ "bell_loss@1x", -EINVAL, "expected ',' or the end" },
	{ "bell_loss@1 2", -EINVAL, "expected ',' or the end" },
	{ "bell_loss@1;peer_stall@2", -EINVAL, "expected ',' or the end" },
	{ "bell_loss@1,", -EINVAL, "expected KIND@N" },
	{ ",bell_loss@1", -EINVAL, "expected KIND@N" },
	{ "bell_loss@1,,peer_stall@2", -EINVAL, "expected KIND@N" },
	{ "@1", -EINVAL, "expected KIND@N" },
	{ "bell_loss@@1", -EINVAL, "expected a count N" },
	{ "bell_loss@0x10", -ERANGE, "is 0" },
	/* unknown kinds: no prefix, no suffix, no case folding */
	{ "bell@1", -EINVAL, "unknown kind 'bell'" },
	{ "bell_lossy@1", -EINVAL, "unknown kind 'bell_lossy'" },
	{ "BELL_LOSS@1", -EINVAL, "unknown kind 'BELL_LOSS'" },
	{ "qp_err@1", -EINVAL, "unknown kind 'qp_err'" },
	{ "link_qp_lost_all@1", -EINVAL, "unknown kind 'link_qp_lost_all'" },
	{ "CM_TIMEOUT@1", -EINVAL, "unknown kind 'CM_TIMEOUT'" },
	{ "nope@1", -EINVAL, "link_qp_lost, cq_stall" },
	{ "cq_stalled@1", -EINVAL, "unknown kind 'cq_stalled'" },
	{ "cq_lost@0", -ERANGE, "is 0" },
	{ "qp_error@4611686018427387905", -ERANGE, "past 4611686018427387904" },
	{ "bell_loss@1,nope@2", -EINVAL, "unknown kind 'nope'" },
	/* N out of range */
	{ "bell_loss@0", -ERANGE, "is 0" },
	{ "bell_loss@000", -ERANGE, "is 0" },
	{ "bell_loss@4611686018427387905", -ERANGE, "past 4611686018427387904" },
	{ "bell_loss@18446744073709551615", -ERANGE, "past" },
	{ "bell_loss@18446744073709551616", -ERANGE, "past" },
	{ "bell_loss@99999999999999999999999999999999", -ERANGE, "past" },
	/* too many */
	{ "bell_loss@1,bell_loss@2,bell_loss@3,bell_loss@4,bell_loss@5,bell_loss@6,bell_loss@7,bell_loss@8,"
	  "bell_loss@9,bell_loss@10,bell_loss@11,bell_loss@12,bell_loss@13,bell_loss@14,bell_loss@15,"
	  "bell_loss@16,bell_loss@17",
	  -EINVAL, "more than 16" },
};

START_TEST(parse_bad)
{
	struct shim_fault_plan plan;
	char why[256];

	ck_assert_int_eq(shim_faults_parse(bad[_i].text, &plan, why, sizeof(why)), bad[_i].rc);
	ck_assert_msg(strstr(why, bad[_i].why) != NULL, "'%s': \"%s\" lacks \"%s\"", bad[_i].text, why,
		      bad[_i].why);
	ck_assert_ptr_null(strchr(why, '\n'));
	/* Nothing of a bad list is kept. */
	ck_assert_uint_eq(plan.count, 0);
}
END_TEST

/* Sixteen is the most, and fits. */
START_TEST(parse_sixteen)
{
	struct shim_fault_plan plan;
	char text[512] = "", why[256];

	for (unsigned i = 1; i <= SHIM_FAULTS_MAX; i++) {
		size_t n = strlen(text);

		snprintf(text + n, sizeof(text) - n, "%speer_stall@%u", i > 1 ? "," : "", i);
	}
	ck_assert_int_eq(shim_faults_parse(text, &plan, why, sizeof(why)), 0);
	ck_assert_uint_eq(plan.count, SHIM_FAULTS_MAX);
	ck_assert_uint_eq(plan.e[15].n, 16);
}
END_TEST

/* A long value is quoted in part only, and a short buffer holds a clause cut short. */
START_TEST(parse_why_bounded)
{
	struct shim_fault_plan plan;
	char text[400], why[256], tiny[8];

	memset(text, 'x', sizeof(text) - 1);
	text[sizeof(text) - 1] = '\0';
	ck_assert_int_eq(shim_faults_parse(text, &plan, why, sizeof(why)), -EINVAL);
	ck_assert_int_lt(strlen(why), sizeof(why) - 1);
	ck_assert_int_eq(shim_faults_parse("nope@1", &plan, tiny, sizeof(tiny)), -EINVAL);
	ck_assert_uint_eq(strlen(tiny), sizeof(tiny) - 1);
}
END_TEST

/* The variable goes through the configuration: a bad list is one line and an inert shim. */
static const char *env_of(const char *name, void *ctx)
{
	return strcmp(name, "RDMASHIM_TEST_FAULTS") == 0 ? ctx : strcmp(name, "RDMASHIM_PORTS") == 0 ? "6379" : NULL;
}

START_TEST(config_carries_the_plan)
{
	struct shim_config cfg;
	char err[512];

	ck_assert_int_eq(shim_config_parse(&cfg, env_of, (void *)"rv_silent@2", err, sizeof(err)), 0);
	ck_assert(cfg.enabled);
	ck_assert_uint_eq(cfg.faults.count, 1);
	ck_assert_int_eq(cfg.faults.e[0].kind, SHIM_FAULT_RV_SILENT);
	ck_assert_int_eq(shim_config_parse(&cfg, env_of, (void *)"rv_silent@2,bogus@1", err, sizeof(err)), -EINVAL);
	ck_assert(!cfg.enabled);
	ck_assert_msg(strstr(err, "RDMASHIM_TEST_FAULTS=\"rv_silent@2,bogus@1\" is invalid (unknown kind 'bogus'") ==
			      err + strlen("rdmashim: "),
		      "%s", err);
	ck_assert_ptr_nonnull(strstr(err, "stays inert"));
	ck_assert_ptr_null(strchr(err, '\n'));
	/* Unset: no faults. */
	ck_assert_int_eq(shim_config_parse(&cfg, env_of, NULL, err, sizeof(err)), 0);
	ck_assert_uint_eq(cfg.faults.count, 0);
}
END_TEST

/* ---- strikes ------------------------------------------------------------------ */

static void arm(const char *text)
{
	struct shim_fault_plan plan;

	ck_assert_int_eq(shim_faults_parse(text, &plan, NULL, 0), 0);
	shim_faults_arm(&plan);
}

START_TEST(nothing_armed_nothing_strikes)
{
	arm("");
	ck_assert_uint_eq(shim_faults_armed, 0);
	for (int i = 0; i < 100; i++)
		for (unsigned k = 0; k < SHIM_FAULT_KINDS; k++)
			ck_assert(!shim_fault_hit((enum shim_fault_kind)k, -1, NULL, "test"));
	for (unsigned k = 0; k < SHIM_FAULT_KINDS; k++)
		ck_assert_uint_eq(shim_faults_injected((enum shim_fault_kind)k), 0);
}
END_TEST

/* The Nth attempt of its kind strikes, once; other kinds count apart. */
START_TEST(nth_attempt_strikes)
{
	arm("bell_loss@2,bell_loss@5,ring_alloc@1");
	ck_assert_uint_eq(shim_faults_armed, (1u << SHIM_FAULT_BELL_LOSS) | (1u << SHIM_FAULT_RING_ALLOC));
	ck_assert(!shim_fault_hit(SHIM_FAULT_BELL_LOSS, -1, NULL, "test"));    /* 1 */
	ck_assert(shim_fault_hit(SHIM_FAULT_RING_ALLOC, 3, NULL, "test"));     /* ring 1 */
	ck_assert(shim_fault_hit(SHIM_FAULT_BELL_LOSS, -1, NULL, "test"));     /* 2 */
	ck_assert(!shim_fault_hit(SHIM_FAULT_RING_ALLOC, 3, NULL, "test"));    /* ring 2 */
	ck_assert_uint_eq(shim_fault_strike(SHIM_FAULT_BELL_LOSS), 0);         /* 3 */
	ck_assert_uint_eq(shim_fault_strike(SHIM_FAULT_BELL_LOSS), 0);         /* 4 */
	ck_assert_uint_eq(shim_fault_strike(SHIM_FAULT_BELL_LOSS), 5);         /* 5 */
	for (int i = 0; i < 1000; i++)
		ck_assert(!shim_fault_hit(SHIM_FAULT_BELL_LOSS, -1, NULL, "test"));
	ck_assert(!shim_fault_hit(SHIM_FAULT_PEER_STALL, -1, NULL, "test"));
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_BELL_LOSS), 2);
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_RING_ALLOC), 1);
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_PEER_STALL), 0);
	/* Armed again: counts start over. */
	arm("bell_loss@1");
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_BELL_LOSS), 0);
	ck_assert(shim_fault_hit(SHIM_FAULT_BELL_LOSS, -1, NULL, "test"));
	ck_assert(!shim_fault_hit(SHIM_FAULT_RING_ALLOC, -1, NULL, "test"));
}
END_TEST

#define THREADS 4
#define CALLS 20000

static void *hammer(void *arg)
{
	unsigned long *hits = arg;

	for (int i = 0; i < CALLS; i++)
		if (shim_fault_hit(SHIM_FAULT_PEER_STALL, -1, NULL, "test"))
			(*hits)++;
	return NULL;
}

/* Counted over every thread: each listed N strikes exactly once. */
START_TEST(threads_strike_once)
{
	pthread_t t[THREADS];
	unsigned long hits[THREADS] = { 0 }, total = 0;

	arm("peer_stall@1,peer_stall@40000,peer_stall@80000,peer_stall@80001");
	for (int i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, hammer, &hits[i]), 0);
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		total += hits[i];
	}
	/* 80000 attempts in all: the one past them never comes. */
	ck_assert_uint_eq(total, 3);
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_PEER_STALL), 3);
}
END_TEST

/* qp_error: N is a byte offset; the post whose bytes reach or cross it
 * strikes, once, and an offset inside one post counts as that post's. */
START_TEST(byte_offset_strikes)
{
	arm("qp_error@100,qp_error@1000,qp_error@1001");
	ck_assert(!shim_fault_hit_bytes(SHIM_FAULT_QP_ERROR, 99, -1, NULL, "test"));   /* 1..99 */
	ck_assert(shim_fault_hit_bytes(SHIM_FAULT_QP_ERROR, 1, -1, NULL, "test"));     /* 100 */
	ck_assert(!shim_fault_hit_bytes(SHIM_FAULT_QP_ERROR, 1, -1, NULL, "test"));    /* 101 */
	ck_assert_uint_eq(shim_fault_strike_bytes(SHIM_FAULT_QP_ERROR, 898), 0);       /* ..999 */
	/* 1000 and 1001 in one post: one strike, at the first of them. */
	ck_assert_uint_eq(shim_fault_strike_bytes(SHIM_FAULT_QP_ERROR, 4096), 1000);
	ck_assert_uint_eq(shim_fault_strike_bytes(SHIM_FAULT_QP_ERROR, 1u << 20), 0);
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_QP_ERROR), 2);
	/* Counting bytes of one kind leaves the others' counts alone. */
	ck_assert(!shim_fault_hit(SHIM_FAULT_CQ_LOST, -1, NULL, "test"));
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_CQ_LOST), 0);
}
END_TEST

/* The RDMA kinds that count attempts strike at their Nth as the others. */
START_TEST(rdma_kinds_strike)
{
	arm("cm_timeout@1,cm_timeout@2,cm_timeout@3,cm_reject@2,reg_fail@1,link_qp_lost@3,cq_lost@2");
	for (int i = 0; i < 3; i++)
		ck_assert(shim_fault_hit(SHIM_FAULT_CM_TIMEOUT, -1, NULL, "test"));
	ck_assert(!shim_fault_hit(SHIM_FAULT_CM_TIMEOUT, -1, NULL, "test"));
	ck_assert(!shim_fault_hit(SHIM_FAULT_CM_REJECT, -1, NULL, "test"));
	ck_assert(shim_fault_hit(SHIM_FAULT_CM_REJECT, -1, NULL, "test"));
	ck_assert(shim_fault_hit(SHIM_FAULT_REG_FAIL, -1, NULL, "test"));
	ck_assert_uint_eq(shim_fault_strike(SHIM_FAULT_LINK_QP_LOST), 0);
	ck_assert_uint_eq(shim_fault_strike(SHIM_FAULT_LINK_QP_LOST), 0);
	ck_assert_uint_eq(shim_fault_strike(SHIM_FAULT_LINK_QP_LOST), 3);
	ck_assert(!shim_fault_hit(SHIM_FAULT_CQ_LOST, -1, NULL, "test"));
	ck_assert(shim_fault_hit(SHIM_FAULT_CQ_LOST, -1, NULL, "test"));
	ck_assert(!shim_fault_hit(SHIM_FAULT_CQ_STALL, -1, NULL, "test")); /* not armed */
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_CM_TIMEOUT), 3);
	ck_assert_uint_eq(shim_faults_injected(SHIM_FAULT_LINK_QP_LOST), 1);
	ck_assert_uint_eq(shim_faults_armed & (1u << SHIM_FAULT_QP_ERROR), 0);
}
END_TEST

static Suite *faults_suite(void)
{
	Suite *s = suite_create("faults");
	TCase *tc;

	tc = tcase_create("parse");
	tcase_add_loop_test(tc, parse_good, 0, N(good));
	tcase_add_test(tc, parse_null_is_empty);
	tcase_add_test(tc, names_round_trip);
	tcase_add_loop_test(tc, parse_bad, 0, N(bad));
	tcase_add_test(tc, parse_sixteen);
	tcase_add_test(tc, parse_why_bounded);
	tcase_add_test(tc, config_carries_the_plan);
	suite_add_tcase(s, tc);

	tc = tcase_create("strike");
	tcase_add_test(tc, nothing_armed_nothing_strikes);
	tcase_add_test(tc, nth_attempt_strikes);
	tcase_add_test(tc, threads_strike_once);
	tcase_add_test(tc, byte_offset_strikes);
	tcase_add_test(tc, rdma_kinds_strike);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(faults_suite());
}
