/*
 * Unit tests for shim/transport/shm/arena.c's trim: a slot whose rings'
 * last use wrote past the warm part gives that memory back (it reads as
 * zero and is no longer resident); a slot whose use stayed within it is
 * left alone, so a short connection's end costs no hole punch.
 */
#include <check.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arena.h"
#include "check_run.h"
#include "ring.h"

#define RING (1u << 20)

static struct shim_arena a;
static int memfd = -1;

static void setup(void)
{
	ck_assert_int_eq(shim_arena_make(RING, 2, &a, &memfd), 0);
	for (unsigned k = 0; k < 2; k++)
		for (unsigned r = 0; r < 2; r++)
			shim_ring_format(shim_arena_slot(&a, k) + r * shim_ring_footprint(RING), RING);
}

static void teardown(void)
{
	shim_arena_unmap(&a);
	close(memfd);
}

/* Where ring r of slot k keeps data byte off, and its header. */
static uint8_t *data_at(unsigned k, unsigned r, size_t off)
{
	return shim_arena_slot(&a, k) + r * shim_ring_footprint(RING) + SHIM_RING_HDR_BYTES + off;
}

static struct shim_ring_hdr *hdr_of(unsigned k, unsigned r)
{
	return (struct shim_ring_hdr *)(shim_arena_slot(&a, k) + r * shim_ring_footprint(RING));
}

static bool resident(const void *p)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned char v = 0;
	void *base = (void *)((uintptr_t)p & ~(uintptr_t)(page - 1));

	ck_assert_int_eq(mincore(base, (size_t)page, &v), 0);
	return v & 1;
}

START_TEST(a_ring_written_past_the_warm_part_is_given_back)
{
	size_t far = SHIM_ARENA_WARM_BYTES + 8192;

	memset(data_at(0, 1, far), 0xab, 4096);
	memset(data_at(0, 0, 100), 0xcd, 10);
	hdr_of(0, 1)->tail = far + 4096;
	hdr_of(0, 0)->tail = 110;
	ck_assert(resident(data_at(0, 1, far)));
	shim_arena_trim(&a, 0);
	ck_assert(!resident(data_at(0, 1, far)));
	ck_assert_int_eq(*data_at(0, 1, far), 0);
	/* The warm part stays as it was. */
	ck_assert_int_eq(*data_at(0, 0, 100), 0xcd);
}
END_TEST

START_TEST(a_short_use_costs_no_hole_punch)
{
	size_t far = SHIM_ARENA_WARM_BYTES + 8192;

	/* Bytes past the warm part that no tail owns up to (a peer's lie):
	 * the trim trusts the tails, so they stay; nothing else is touched. */
	memset(data_at(1, 0, far), 0xee, 16);
	hdr_of(1, 0)->tail = 64;
	hdr_of(1, 1)->tail = SHIM_ARENA_WARM_BYTES;
	shim_arena_trim(&a, 1);
	ck_assert(resident(data_at(1, 0, far)));
	ck_assert_int_eq(*data_at(1, 0, far), 0xee);
}
END_TEST

static Suite *arena_suite(void)
{
	Suite *s = suite_create("arena");
	TCase *tc = tcase_create("trim");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, a_ring_written_past_the_warm_part_is_given_back);
	tcase_add_test(tc, a_short_use_costs_no_hole_punch);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(arena_suite());
}
