/*
 * Unit tests for shim/core/nonce.c: bytes drawn from one batch are never
 * handed out twice, in this process or in a fork child (whose copy of the
 * batch is its parent's), and a draw larger than allowed is refused.
 */
#include <check.h>
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "nonce.h"

#define DRAWS 200 /* several batches */

START_TEST(draws_are_all_different)
{
	static uint8_t seen[DRAWS][16];

	for (int i = 0; i < DRAWS; i++) {
		ck_assert_int_eq(shim_nonce_draw(seen[i], 16), 0);
		for (int j = 0; j < i; j++)
			ck_assert_msg(memcmp(seen[i], seen[j], 16) != 0, "draw %d repeats draw %d", i, j);
	}
}
END_TEST

/* The child draws first from what would be the rest of the parent's batch;
 * the parent then draws its next: the two must differ. */
START_TEST(fork_child_draws_its_own)
{
	uint8_t mine[16], childs[16];
	int pipefd[2], status;
	pid_t pid;

	ck_assert_int_eq(shim_nonce_draw(mine, 16), 0); /* a batch is drawn, its rest held */
	ck_assert_int_eq(pipe(pipefd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		uint8_t n[16];

		_exit(shim_nonce_draw(n, 16) == 0 && write(pipefd[1], n, 16) == 16 ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(read(pipefd[0], childs, 16), 16);
	ck_assert_int_eq(shim_nonce_draw(mine, 16), 0);
	ck_assert_msg(memcmp(mine, childs, 16) != 0, "the child handed out its parent's next nonce");
}
END_TEST

START_TEST(oversized_draw_is_refused)
{
	uint8_t big[SHIM_NONCE_POOL_MAX + 1];

	ck_assert_int_eq(shim_nonce_draw(big, sizeof(big)), -EINVAL);
}
END_TEST

static Suite *nonce_suite(void)
{
	Suite *s = suite_create("nonce");
	TCase *tc = tcase_create("nonce");

	tcase_add_test(tc, draws_are_all_different);
	tcase_add_test(tc, fork_child_draws_its_own);
	tcase_add_test(tc, oversized_draw_is_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(nonce_suite());
}
