/*
 * Unit tests for shim/core/self.c: the cached pid is the kernel's, and a
 * fork child (through fork's handlers, as every fork of the program goes)
 * sees its own pid, not its parent's, and keeps it.
 */
#include <check.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "self.h"

START_TEST(cached_pid_is_the_kernels)
{
	ck_assert_int_eq(shim_self_pid(), getpid());
	ck_assert_int_eq(shim_self_pid(), getpid());
}
END_TEST

START_TEST(fork_child_sees_its_own_pid)
{
	pid_t parent = shim_self_pid(), pid;
	int status;

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		pid_t me = shim_self_pid();

		_exit(me == getpid() && me != parent && shim_self_pid() == me ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(shim_self_pid(), parent);
}
END_TEST

START_TEST(forget_asks_again)
{
	(void)shim_self_pid();
	shim_self_forget();
	ck_assert_int_eq(shim_self_pid(), getpid());
}
END_TEST

static Suite *self_suite(void)
{
	Suite *s = suite_create("self");
	TCase *tc = tcase_create("self");

	tcase_add_test(tc, cached_pid_is_the_kernels);
	tcase_add_test(tc, fork_child_sees_its_own_pid);
	tcase_add_test(tc, forget_asks_again);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(self_suite());
}
