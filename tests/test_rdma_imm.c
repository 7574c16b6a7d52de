/*
 * Unit tests for the RDMA immediates (shim/transport/rdma/rdma_wire.h):
 * a tail word immediate and a DATA one name the same connection; a DATA
 * immediate's head bits give the sender's exact head for every move
 * shorter than their span, across their wrap and far into 64 bits; a lie
 * is never behind what the receiver knew and never more than the span
 * ahead of it (shim_rdma_peer_credits then bounds it by our tail); the
 * tail a DATA immediate gives, across the ring's end too.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>

#include "rdma_wire.h"
#include "check_run.h"

START_TEST(test_ids)
{
	static const uint32_t ids[] = { 0, 1, 7, 0x7ff, SHIM_RDMA_IMM_DATA_ID };

	for (unsigned i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		uint32_t id = ids[i];

		ck_assert_uint_eq(shim_rdma_imm_id(id), id);
		ck_assert_uint_eq(shim_rdma_imm_id(id | SHIM_RDMA_IMM_CLOSED), id);
		ck_assert_uint_eq(shim_rdma_imm_id(shim_rdma_imm_data(id, 0, false)), id);
		ck_assert_uint_eq(shim_rdma_imm_id(shim_rdma_imm_data(id, ~0ull, true)), id);
		ck_assert(shim_rdma_imm_data(id, ~0ull, false) & SHIM_RDMA_IMM_DATA);
		ck_assert(!(shim_rdma_imm_data(id, ~0ull, false) & SHIM_RDMA_IMM_WRAP));
		ck_assert(shim_rdma_imm_data(id, 0, true) & SHIM_RDMA_IMM_WRAP);
		ck_assert(!(shim_rdma_imm_data(id, ~0ull, true) & SHIM_RDMA_IMM_CLOSED));
	}
	/* The tail word form keeps its 24-bit ids. */
	ck_assert_uint_eq(shim_rdma_imm_id(SHIM_RDMA_IMM_ID), SHIM_RDMA_IMM_ID);
}
END_TEST

START_TEST(test_head_exact)
{
	static const uint64_t knowns[] = {
		0, 1, 64, SHIM_RDMA_IMM_DATA_HEAD - 1, SHIM_RDMA_IMM_DATA_HEAD, SHIM_RDMA_IMM_DATA_HEAD + 1,
		(1ull << 32) - 5, (1ull << 40) + 12345, UINT64_MAX - 2 * (uint64_t)SHIM_RDMA_IMM_DATA_HEAD,
	};
	static const uint64_t moves[] = { 0, 1, 63, 64, 4096, 65536, SHIM_RDMA_IMM_DATA_HEAD - 1,
					  SHIM_RDMA_IMM_DATA_HEAD };

	for (unsigned k = 0; k < sizeof(knowns) / sizeof(knowns[0]); k++)
		for (unsigned m = 0; m < sizeof(moves) / sizeof(moves[0]); m++) {
			uint64_t head = knowns[k] + moves[m];
			uint32_t imm = shim_rdma_imm_data(5, head, m & 1);

			ck_assert_uint_eq(shim_rdma_imm_head(knowns[k], imm), head);
		}
}
END_TEST

START_TEST(test_head_lie_bounded)
{
	for (uint32_t low = 0; low <= SHIM_RDMA_IMM_DATA_HEAD; low += 4099) {
		uint64_t known = 1000003;
		uint64_t h = shim_rdma_imm_head(known, SHIM_RDMA_IMM_DATA | low);

		ck_assert_uint_ge(h, known);
		ck_assert_uint_le(h - known, SHIM_RDMA_IMM_DATA_HEAD);
	}
}
END_TEST

/* A send's bytes: one WRITE, or two across the ring's end, the last one's
 * byte count and WRAP giving the new tail. */
START_TEST(test_tail)
{
	const uint64_t ring = 1u << 20;
	static const uint64_t hads[] = { 0, 100, (1u << 20) - 64, 5 * (1ull << 20) + 12345, (1ull << 40) + 7 };

	for (unsigned i = 0; i < sizeof(hads) / sizeof(hads[0]); i++) {
		uint64_t had = hads[i], rest = ring - (had & (ring - 1));

		for (uint64_t n = 1; n <= ring; n = n * 3 + 1) {
			bool wrapped = n > rest;
			uint32_t last = (uint32_t)(wrapped ? n - rest : n);
			uint32_t imm = shim_rdma_imm_data(9, 0, wrapped);

			ck_assert_uint_eq(shim_rdma_imm_tail(had, imm, last, ring), had + n);
		}
	}
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("rdma_imm");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_ids);
	tcase_add_test(tc, test_head_exact);
	tcase_add_test(tc, test_head_lie_bounded);
	tcase_add_test(tc, test_tail);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(suite());
}
