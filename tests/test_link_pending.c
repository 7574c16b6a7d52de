/*
 * Unit tests for the count of links being made toward client hosts
 * (shim/transport/rdma/rdma_link_table.c, shim_rdma_link_making): a server
 * connection that finds one being made waits for it instead of making a
 * link of its own, so a burst makes a link per cap. What must hold: the
 * count is per host and goes to zero only when every attempt that counted
 * ended; an end that was never counted changes nothing (no wrap that would
 * make every later connection wait); past the table's hosts nothing is
 * counted (and the caller is told so); a fork child starts with none of
 * its parent's attempts, which it does not own. The waiters are counted
 * beside them, and wait while the links on their way have room for all.
 */
#include <check.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "rdma_link.h"
#include "self.h"
#include "check_run.h"

static struct shim_endpoint host(uint8_t last)
{
	struct shim_endpoint e;

	memset(&e, 0, sizeof(e));
	e.addr[10] = e.addr[11] = 0xff; /* v4-mapped 10.0.0.last */
	e.addr[12] = 10;
	e.addr[15] = last;
	return e;
}

START_TEST(counted_per_host_until_every_attempt_ended)
{
	struct shim_endpoint a = host(1), b = host(2);

	ck_assert(!shim_rdma_link_makings(&a));
	ck_assert(shim_rdma_link_making(a.addr, true));
	ck_assert(shim_rdma_link_making(a.addr, true));
	ck_assert_uint_eq(shim_rdma_link_makings(&a), 2);
	ck_assert_uint_eq(shim_rdma_link_makings(&b), 0);
	ck_assert(shim_rdma_link_making(a.addr, false));
	ck_assert_uint_eq(shim_rdma_link_makings(&a), 1);
	ck_assert(shim_rdma_link_making(a.addr, false));
	ck_assert(!shim_rdma_link_makings(&a));
}
END_TEST

START_TEST(an_end_never_counted_changes_nothing)
{
	struct shim_endpoint a = host(3);

	ck_assert(!shim_rdma_link_making(a.addr, false));
	ck_assert(!shim_rdma_link_makings(&a));
	ck_assert(shim_rdma_link_making(a.addr, true));
	ck_assert(shim_rdma_link_making(a.addr, false));
	ck_assert(!shim_rdma_link_making(a.addr, false));
	ck_assert(!shim_rdma_link_makings(&a));
}
END_TEST

START_TEST(past_the_tables_hosts_nothing_is_counted)
{
	unsigned i, counted = 0;
	struct shim_endpoint e;

	for (i = 0; i < 64; i++) {
		e = host((uint8_t)(100 + i));
		counted += shim_rdma_link_making(e.addr, true);
	}
	ck_assert_uint_ge(counted, 1);
	ck_assert_uint_lt(counted, 64);
	e = host((uint8_t)(100 + 63));
	ck_assert(!shim_rdma_link_makings(&e));
	/* A slot freed is taken by the next host. */
	e = host(100);
	ck_assert(shim_rdma_link_making(e.addr, false));
	e = host(99);
	ck_assert(shim_rdma_link_making(e.addr, true));
	ck_assert(shim_rdma_link_makings(&e));
}
END_TEST

START_TEST(a_fork_child_starts_with_none_of_its_parents)
{
	struct shim_endpoint a = host(4);
	int status;
	pid_t pid;

	ck_assert(shim_rdma_link_making(a.addr, true));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		shim_self_forget();
		if (shim_rdma_link_makings(&a))
			_exit(1);
		if (!shim_rdma_link_making(a.addr, true) || !shim_rdma_link_makings(&a))
			_exit(2);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert(shim_rdma_link_makings(&a));
}
END_TEST

/* A host's entry kept by its waiters alone: an end of a link attempt
 * that was never counted does not wrap the count of those on their way
 * (every later connection would wait for links that do not come). */
START_TEST(an_uncounted_end_does_not_wrap_a_host_kept_by_its_waiters)
{
	struct shim_endpoint a = host(5);

	ck_assert(shim_rdma_link_waiting(a.addr, true));
	ck_assert(!shim_rdma_link_making(a.addr, false));
	ck_assert_uint_eq(shim_rdma_link_makings(&a), 0);
	ck_assert(shim_rdma_link_waiting(a.addr, false));
	ck_assert(!shim_rdma_link_waiting(a.addr, false));
}
END_TEST

/* The burst rule (shim/PROTOCOL.md, "A burst"), with no link up: waiters
 * wait while the links on their way have a place for each of them (a cap
 * less the maker's), or while SHIM_LINK_MAKING_MAX are on their way; with
 * none on its way nobody waits. */
START_TEST(waiters_wait_while_the_links_on_their_way_have_room_for_them)
{
	struct shim_endpoint a = host(6);
	unsigned i;

	shim_cfg.rdma_link_conns = 8;
	ck_assert(shim_rdma_link_waiting(a.addr, true));
	ck_assert(!shim_rdma_link_room_coming(&a));
	ck_assert(shim_rdma_link_making(a.addr, true));
	for (i = 1; i < 7; i++)
		ck_assert(shim_rdma_link_waiting(a.addr, true));
	ck_assert(shim_rdma_link_room_coming(&a));
	ck_assert(shim_rdma_link_waiting(a.addr, true));
	ck_assert(!shim_rdma_link_room_coming(&a));
	ck_assert(shim_rdma_link_making(a.addr, true));
	ck_assert(shim_rdma_link_room_coming(&a));
	for (i = 0; i < 21; i++) /* 29 waiters: 4 links on their way hold 28 */
		ck_assert(shim_rdma_link_waiting(a.addr, true));
	ck_assert(!shim_rdma_link_room_coming(&a));
	for (i = 2; i < SHIM_LINK_MAKING_MAX; i++)
		ck_assert(shim_rdma_link_making(a.addr, true));
	ck_assert(shim_rdma_link_room_coming(&a));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("link_pending");
	TCase *tc = tcase_create("link_pending");

	tcase_add_test(tc, counted_per_host_until_every_attempt_ended);
	tcase_add_test(tc, an_end_never_counted_changes_nothing);
	tcase_add_test(tc, past_the_tables_hosts_nothing_is_counted);
	tcase_add_test(tc, a_fork_child_starts_with_none_of_its_parents);
	tcase_add_test(tc, an_uncounted_end_does_not_wrap_a_host_kept_by_its_waiters);
	tcase_add_test(tc, waiters_wait_while_the_links_on_their_way_have_room_for_them);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
