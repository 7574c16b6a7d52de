/*
 * The runner every unit test's main ends in: runs the suite (each test in
 * a child, Check's default), frees it, and says failure as the exit code.
 */
#ifndef RDMASHIM_CHECK_RUN_H
#define RDMASHIM_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int shim_check_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
