/*
 * Unit tests for the stall watch's rule (shim/transport/rdma/rdma_link.h,
 * shim_rdma_stall_judge; RDMASHIM_RDMA_STALL_MS): a peer's tail word ahead
 * of our count only says "stalled" once it stood there, our count not
 * moving, for the whole bound; a count that moves starts the time again
 * (a slow CQ is not a stopped one), one that catches up forgets it, and a
 * word at or behind the count never counts. And the sender's side
 * (shim_rdma_lazy_due): its lazy tail word is due once bytes it announced
 * stood unpublished for a quarter of the bound, never while it is level.
 */
#include <check.h>
#include <stdint.h>

#include "rdma_link.h"
#include "check_run.h"

#define MS 1000000ull
#define BOUND (500 * MS)

START_TEST(ahead_for_the_bound_is_a_stall)
{
	unsigned long long since = 0;
	uint64_t at = 0;

	ck_assert(!shim_rdma_stall_judge(&since, &at, 200, 100, 1000 * MS, BOUND));
	ck_assert(!shim_rdma_stall_judge(&since, &at, 200, 100, 1250 * MS, BOUND));
	ck_assert(!shim_rdma_stall_judge(&since, &at, 300, 100, 1499 * MS, BOUND)); /* more came: still */
	ck_assert(shim_rdma_stall_judge(&since, &at, 300, 100, 1500 * MS, BOUND));
}
END_TEST

START_TEST(lazy_word_due_after_a_quarter)
{
	unsigned long long since = 0;
	uint64_t at = 0;

	ck_assert(!shim_rdma_lazy_due(&since, &at, 100, 100, 1000 * MS, BOUND)); /* level */
	ck_assert(!shim_rdma_lazy_due(&since, &at, 100, 200, 1100 * MS, BOUND)); /* lag seen */
	ck_assert(!shim_rdma_lazy_due(&since, &at, 100, 300, 1224 * MS, BOUND));
	ck_assert(shim_rdma_lazy_due(&since, &at, 100, 300, 1225 * MS, BOUND));
	/* Published up to what the first look saw: the time starts again. */
	ck_assert(!shim_rdma_lazy_due(&since, &at, 200, 300, 1300 * MS, BOUND));
	ck_assert(!shim_rdma_lazy_due(&since, &at, 200, 300, 1424 * MS, BOUND));
	ck_assert(shim_rdma_lazy_due(&since, &at, 200, 300, 1425 * MS, BOUND));
	/* Caught up: forgotten. */
	ck_assert(!shim_rdma_lazy_due(&since, &at, 300, 300, 1500 * MS, BOUND));
	ck_assert_uint_eq(since, 0);
}
END_TEST

START_TEST(a_count_that_moves_starts_again)
{
	unsigned long long since = 0;
	uint64_t at = 0;

	ck_assert(!shim_rdma_stall_judge(&since, &at, 200, 100, 1000 * MS, BOUND));
	ck_assert(!shim_rdma_stall_judge(&since, &at, 300, 150, 1400 * MS, BOUND));
	ck_assert(!shim_rdma_stall_judge(&since, &at, 300, 150, 1800 * MS, BOUND));
	ck_assert(shim_rdma_stall_judge(&since, &at, 300, 150, 1900 * MS, BOUND));
}
END_TEST

START_TEST(caught_up_forgets)
{
	unsigned long long since = 0;
	uint64_t at = 0;

	ck_assert(!shim_rdma_stall_judge(&since, &at, 200, 100, 1000 * MS, BOUND));
	ck_assert(!shim_rdma_stall_judge(&since, &at, 200, 200, 1200 * MS, BOUND));
	ck_assert_uint_eq(since, 0);
	/* Ahead again at the same count as before: a new wait. */
	ck_assert(!shim_rdma_stall_judge(&since, &at, 300, 200, 1300 * MS, BOUND));
	ck_assert(!shim_rdma_stall_judge(&since, &at, 300, 200, 1700 * MS, BOUND));
	ck_assert(shim_rdma_stall_judge(&since, &at, 300, 200, 1800 * MS, BOUND));
}
END_TEST

START_TEST(a_word_behind_never_counts)
{
	unsigned long long since = 0;
	uint64_t at = 0;

	for (unsigned long long t = 0; t < 10; t++)
		ck_assert(!shim_rdma_stall_judge(&since, &at, 100, t % 2 ? 100 : 150, t * 1000 * MS, BOUND));
}
END_TEST

int main(void)
{
	Suite *su = suite_create("link_stall");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, ahead_for_the_bound_is_a_stall);
	tcase_add_test(tc, a_count_that_moves_starts_again);
	tcase_add_test(tc, caught_up_forgets);
	tcase_add_test(tc, a_word_behind_never_counts);
	tcase_add_test(tc, lazy_word_due_after_a_quarter);
	suite_add_tcase(su, tc);
	return shim_check_run(su);
}
