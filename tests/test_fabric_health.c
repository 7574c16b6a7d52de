/*
 * Unit tests for shim/transport/rdma/fabric_health.c: the limits and their
 * parser, which counters are shown, and the judgement over a sysfs tree
 * made here, including what integration/t_health.sh can not reach from
 * outside (an active MTU that does not fit the netdev's, which only verbs
 * report, and a counter that went backwards); and the port watch's look
 * (shim_fh_watch_look, what rdma_port.c runs once a second), which must
 * judge a fixture tree exactly as rdmashim health does: one judgement.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "check_run.h"
#include "fabric_health.h"

/* The watch asks verbs for the state, health reads sysfs: one code. */
_Static_assert(SHIM_FH_STATE_ACTIVE == IBV_PORT_ACTIVE, "sysfs and verbs number the states alike");

static char root[64];
static struct shim_fh_report r; /* large: off the stack */

static void put(const char *rel, const char *text)
{
	char path[256], cmd[320];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	ck_assert_int_eq(system(cmd), 0);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

#define PORT "class/infiniband/rxe0/ports/1/"

static void setup(void)
{
	snprintf(root, sizeof(root), "/tmp/fabric_health.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	put(PORT "state", "4: ACTIVE\n");
	put(PORT "phys_state", "5: LinkUp\n");
	put(PORT "link_layer", "Ethernet\n");
	put(PORT "gids/0", "fe80:0000:0000:0000:5054:00ff:fe12:3456\n");
	put(PORT "gid_attrs/ndevs/0", "eth0\n");
	put(PORT "hw_counters/retry_exceeded_err", "7\n");
	put(PORT "hw_counters/sent_pkts", "7\n");
	put("class/net/eth0/mtu", "1500\n");
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(limits_parse)
{
	struct shim_fh_limits lim;
	const unsigned long long *max;

	shim_fh_limits_default(&lim);
	max = shim_fh_limit_of(&lim, "hw.out_of_buffer");
	ck_assert_ptr_nonnull(max);
	ck_assert_uint_eq(*max, 0);
	ck_assert_uint_eq(*shim_fh_limit_of(&lim, "packet_seq_err"), 100);
	ck_assert_ptr_null(shim_fh_limit_of(&lim, "hw.np_cnp_sent"));

	ck_assert_int_eq(shim_fh_limits_set(&lim, "out_of_buffer=12"), 0);
	ck_assert_uint_eq(*shim_fh_limit_of(&lim, "hw.out_of_buffer"), 12);
	ck_assert_int_eq(shim_fh_limits_set(&lim, "np_cnp_sent=5"), 0);
	ck_assert_uint_eq(*shim_fh_limit_of(&lim, "np_cnp_sent"), 5);
	ck_assert_int_eq(shim_fh_limits_set(&lim, "link_downed=off"), 0);
	ck_assert_ptr_null(shim_fh_limit_of(&lim, "link_downed"));

	static const char *const bad[] = { "", "x", "=1", "x=", "x=-1", "x=+1", "x=1k", "x= 1",
					   "a_name_far_too_long_for_any_counter_file_of_the_kernel=1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(shim_fh_limits_set(&lim, bad[i]) == -EINVAL, "'%s' is refused", bad[i]);
}
END_TEST

START_TEST(limits_table_full)
{
	struct shim_fh_limits lim;
	char spec[32];
	int rc = 0;

	shim_fh_limits_default(&lim);
	for (unsigned i = 0; rc == 0 && i < 2 * SHIM_FH_LIMITS_MAX; i++) {
		snprintf(spec, sizeof(spec), "c%u=1", i);
		rc = shim_fh_limits_set(&lim, spec);
	}
	ck_assert_int_eq(rc, -ENOSPC);
	ck_assert_uint_eq(lim.n, SHIM_FH_LIMITS_MAX);
}
END_TEST

START_TEST(shown_counters)
{
	ck_assert(shim_fh_counter_shown("out_of_buffer"));
	ck_assert(shim_fh_counter_shown("np_cnp_sent"));
	ck_assert(shim_fh_counter_shown("rp_cnp_handled"));
	ck_assert(shim_fh_counter_shown("np_ecn_marked_roce_packets"));
	ck_assert(shim_fh_counter_shown("req_cqe_error"));
	ck_assert(shim_fh_counter_shown("symbol_error"));
	ck_assert(!shim_fh_counter_shown("port_xmit_data"));
	ck_assert(!shim_fh_counter_shown("rx_write_requests"));
}
END_TEST

START_TEST(healthy_port)
{
	struct shim_fh_limits lim;

	shim_fh_limits_default(&lim);
	shim_fh_scan(root, &r);
	ck_assert_uint_eq(r.n_ports, 1);
	ck_assert_str_eq(r.ports[0].state, "ACTIVE");
	ck_assert_int_eq(r.ports[0].state_code, 4);
	ck_assert_str_eq(r.ports[0].netdev, "eth0");
	ck_assert_int_eq(r.ports[0].netdev_mtu, 1500);
	ck_assert_int_eq(shim_fh_judge(&r, &lim), SHIM_FH_HEALTHY);
	ck_assert_uint_eq(r.ports[0].after.n, 1); /* retry_exceeded_err, not sent_pkts */
}
END_TEST

START_TEST(mtu_that_does_not_fit)
{
	struct shim_fh_limits lim;

	shim_fh_limits_default(&lim);
	shim_fh_scan(root, &r);
	/* What verbs would say: 2048 needs a netdev MTU of 2106. */
	r.ports[0].active_mtu = 2048;
	ck_assert_int_eq(shim_fh_judge(&r, &lim), SHIM_FH_DEGRADED);
	ck_assert_uint_eq(r.ports[0].n_problems, 1);
	ck_assert_ptr_nonnull(strstr(r.ports[0].problems[0], "active MTU 2048 does not fit netdev eth0's MTU 1500"));

	shim_fh_scan(root, &r);
	r.ports[0].active_mtu = 1024;
	ck_assert_int_eq(shim_fh_judge(&r, &lim), SHIM_FH_HEALTHY);
}
END_TEST

START_TEST(counter_reset_is_no_growth)
{
	struct shim_fh_limits lim;
	unsigned long long d = 99;

	shim_fh_limits_default(&lim);
	shim_fh_scan(root, &r);
	put(PORT "hw_counters/retry_exceeded_err", "2\n");
	ck_assert_int_eq(shim_fh_judge(&r, &lim), SHIM_FH_HEALTHY);
	ck_assert(shim_fh_delta(&r.ports[0], 0, &d));
	ck_assert_uint_eq(d, 0);
}
END_TEST

START_TEST(counter_new_during_window_not_judged)
{
	struct shim_fh_limits lim;
	unsigned long long d;

	shim_fh_limits_default(&lim);
	shim_fh_scan(root, &r);
	put(PORT "hw_counters/link_downed", "3\n");
	ck_assert_int_eq(shim_fh_judge(&r, &lim), SHIM_FH_HEALTHY);
	ck_assert_uint_eq(r.ports[0].after.n, 2);
	/* Sorted by name: hw.link_downed first, and it has no delta. */
	ck_assert_str_eq(r.ports[0].after.name[0], "hw.link_downed");
	ck_assert(!shim_fh_delta(&r.ports[0], 0, &d));
}
END_TEST

START_TEST(no_root_folder)
{
	struct shim_fh_limits lim;

	shim_fh_limits_default(&lim);
	shim_fh_scan("/nonexistent/rdmashim-test", &r);
	ck_assert_int_eq(shim_fh_judge(&r, &lim), SHIM_FH_NO_DEVICE);
	ck_assert_ptr_nonnull(strstr(r.why, "does not exist"));
}
END_TEST

START_TEST(state_judgement)
{
	ck_assert(shim_fh_state_active(IBV_PORT_ACTIVE));
	ck_assert(!shim_fh_state_active(IBV_PORT_DOWN));
	ck_assert(!shim_fh_state_active(IBV_PORT_INIT));
	ck_assert(!shim_fh_state_active(-1));
	ck_assert(shim_fh_mtu_fits(1024, 1500));
	ck_assert(shim_fh_mtu_fits(4096, 9000));
	ck_assert(!shim_fh_mtu_fits(2048, 1500));
	ck_assert(!shim_fh_mtu_fits(1500, 1500));
}
END_TEST

/* The watch's looks: the first takes the counters, a growth past a limit
 * makes the port faulty with the counter named, a quiet look recovers it. */
START_TEST(watch_trips_and_recovers)
{
	struct shim_fh_watch w = { 0 };
	struct shim_fh_limits lim;
	struct shim_fh_over why;
	static struct shim_nic_counters prev;

	shim_fh_limits_default(&lim);
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, &prev, &why), SHIM_FH_SAME);
	ck_assert_uint_eq(prev.n, 0);
	ck_assert_uint_eq(w.seen.n, 1);
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, &prev, &why), SHIM_FH_SAME);

	put(PORT "hw_counters/retry_exceeded_err", "9\n");
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, &prev, &why), SHIM_FH_FAULTY);
	ck_assert_str_eq(why.name, "hw.retry_exceeded_err");
	ck_assert_uint_eq(why.delta, 2);
	ck_assert_uint_eq(why.limit, 0);
	ck_assert(w.faulty);
	ck_assert_uint_eq(prev.value[0], 7);
	/* Still growing: still faulty, no new change. */
	put(PORT "hw_counters/retry_exceeded_err", "10\n");
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, &prev, &why), SHIM_FH_SAME);
	ck_assert(w.faulty);
	/* Quiet: recovered, the counter that did it named. */
	memset(&why, 0, sizeof(why));
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, &prev, &why), SHIM_FH_RECOVERED);
	ck_assert_str_eq(why.name, "hw.retry_exceeded_err");
	ck_assert(!w.faulty);
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, &prev, &why), SHIM_FH_SAME);
}
END_TEST

/* The same reads judged by rdmashim health (scan, then judge) and by the
 * watch (two looks) flag the same counters: a sequence counter under its
 * room of 100 neither, over it both; a congestion counter neither. */
START_TEST(watch_and_health_agree)
{
	static const struct {
		const char *file, *from, *to;
		bool over;
	} cases[] = {
		{ "rcvd_seq_err", "0\n", "50\n", false },
		{ "rcvd_seq_err", "0\n", "150\n", true },
		{ "np_cnp_sent", "0\n", "100000\n", false },
		{ "retry_exceeded_err", "7\n", "8\n", true },
		{ "retry_exceeded_err", "7\n", "3\n", false }, /* reset */
	};
	struct shim_fh_limits lim;

	shim_fh_limits_default(&lim);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct shim_fh_watch w = { 0 };
		struct shim_fh_over why;
		char file[128], problem[128];
		enum shim_fh_status health;
		enum shim_fh_change watch;

		snprintf(file, sizeof(file), PORT "hw_counters/%s", cases[i].file);
		put(PORT "hw_counters/retry_exceeded_err", "7\n");
		put(file, cases[i].from);
		shim_fh_scan(root, &r);
		shim_fh_watch_look(&w, root, "rxe0", 1, &lim, NULL, &why);
		put(file, cases[i].to);
		health = shim_fh_judge(&r, &lim);
		watch = shim_fh_watch_look(&w, root, "rxe0", 1, &lim, NULL, &why);
		ck_assert_msg((health == SHIM_FH_DEGRADED) == cases[i].over, "health, case %zu", i);
		ck_assert_msg((watch == SHIM_FH_FAULTY) == cases[i].over, "watch, case %zu", i);
		if (cases[i].over) {
			snprintf(problem, sizeof(problem), "counter %s grew by %llu (limit %llu)", shim_fh_bare_name(why.name),
				 why.delta, why.limit);
			ck_assert_str_eq(r.ports[0].problems[0], problem);
		}
		put(file, "0\n");
	}
}
END_TEST

/* A port whose folder vanishes between two looks: no counter is over,
 * nothing crashes; a faulty port recovers (its counters are gone). */
START_TEST(watch_port_vanishes)
{
	struct shim_fh_watch w = { 0 };
	struct shim_fh_limits lim;
	struct shim_fh_over why;
	char cmd[160];

	shim_fh_limits_default(&lim);
	shim_fh_watch_look(&w, root, "rxe0", 1, &lim, NULL, &why);
	put(PORT "hw_counters/retry_exceeded_err", "8\n");
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, NULL, &why), SHIM_FH_FAULTY);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/class/infiniband/rxe0'", root);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, NULL, &why), SHIM_FH_RECOVERED);
	ck_assert_uint_eq(w.seen.n, 0);
	ck_assert_int_eq(shim_fh_watch_look(&w, root, "rxe0", 1, &lim, NULL, &why), SHIM_FH_SAME);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("fabric_health");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, limits_parse);
	tcase_add_test(tc, limits_table_full);
	tcase_add_test(tc, shown_counters);
	tcase_add_test(tc, healthy_port);
	tcase_add_test(tc, mtu_that_does_not_fit);
	tcase_add_test(tc, counter_reset_is_no_growth);
	tcase_add_test(tc, counter_new_during_window_not_judged);
	tcase_add_test(tc, no_root_folder);
	tcase_add_test(tc, state_judgement);
	tcase_add_test(tc, watch_trips_and_recovers);
	tcase_add_test(tc, watch_and_health_agree);
	tcase_add_test(tc, watch_port_vanishes);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(suite());
}
