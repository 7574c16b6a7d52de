/*
 * Unit tests for shim/transport/rdma/nic_counters.c: which counters count
 * faults, reading a port's two sysfs folders (a tree made here, laid out
 * as /sys/class/infiniband is), and the deltas the port watch traces.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "nic_counters.h"

static char root[64];

static void put(const char *rel, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static void dir(const char *rel)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	ck_assert_int_eq(mkdir(path, 0700), 0);
}

static void setup(void)
{
	snprintf(root, sizeof(root), "/tmp/nic_counters.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	dir("rxe0");
	dir("rxe0/ports");
	dir("rxe0/ports/1");
	dir("rxe0/ports/1/counters");
	dir("rxe0/ports/1/hw_counters");
	put("rxe0/ports/1/counters/port_rcv_errors", "0\n");
	put("rxe0/ports/1/counters/port_xmit_data", "100\n");
	put("rxe0/ports/1/counters/link_downed", "0\n");
	put("rxe0/ports/1/hw_counters/retry_exceeded_err", "2\n");
	put("rxe0/ports/1/hw_counters/sent_pkts", "5\n");
	put("rxe0/ports/1/hw_counters/link_downed", "1\n");
	put("rxe0/ports/1/hw_counters/rcvd_seq_err", "not a number\n");
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
}

static const unsigned long long *value_of(const struct shim_nic_counters *c, const char *name)
{
	for (unsigned i = 0; i < c->n; i++)
		if (strcmp(c->name[i], name) == 0)
			return &c->value[i];
	return NULL;
}

START_TEST(error_names)
{
	static const char *const faults[] = { "port_rcv_errors", "symbol_error", "port_xmit_discards", "link_downed",
					      "VL15_dropped", "rcvd_seq_err", "retry_exceeded_err",
					      "duplicate_request", "local_ack_timeout_err", "out_of_sequence",
					      "local_link_integrity_errors", "excessive_buffer_overrun_errors" };
	static const char *const traffic[] = { "port_xmit_data", "port_rcv_packets", "sent_pkts", "rcvd_pkts",
					       "rdma_sends", "rdma_recvs", "ack_deferred" };

	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		ck_assert_msg(shim_nic_counter_is_error(faults[i]), "%s counts faults", faults[i]);
	for (size_t i = 0; i < sizeof(traffic) / sizeof(traffic[0]); i++)
		ck_assert_msg(!shim_nic_counter_is_error(traffic[i]), "%s counts traffic", traffic[i]);
}
END_TEST

START_TEST(reads_both_folders_errors_only)
{
	struct shim_nic_counters c;

	ck_assert_int_eq(shim_nic_counters_read(root, "rxe0", 1, &c), 0);
	/* port_rcv_errors, link_downed, hw.retry_exceeded_err, hw.link_downed;
	 * not the traffic counters, not the file that is no number. */
	ck_assert_uint_eq(c.n, 4);
	ck_assert_ptr_nonnull(value_of(&c, "port_rcv_errors"));
	ck_assert_uint_eq(*value_of(&c, "hw.retry_exceeded_err"), 2);
	ck_assert_uint_eq(*value_of(&c, "hw.link_downed"), 1);
	ck_assert_uint_eq(*value_of(&c, "link_downed"), 0);
	ck_assert_ptr_null(value_of(&c, "port_xmit_data"));
	ck_assert_ptr_null(value_of(&c, "hw.rcvd_seq_err"));
	/* The file that is no number is named, for a reader to say so. */
	ck_assert_uint_eq(c.n_bad, 1);
	ck_assert_str_eq(c.bad[0], "hw.rcvd_seq_err");
}
END_TEST

static bool keep_traffic(const char *name)
{
	return strstr(name, "pkts") || strstr(name, "xmit_data");
}

START_TEST(read_if_keeps_what_keep_says)
{
	struct shim_nic_counters c;

	ck_assert_int_eq(shim_nic_counters_read_if(root, "rxe0", 1, keep_traffic, &c), 0);
	ck_assert_uint_eq(c.n, 2);
	ck_assert_uint_eq(*value_of(&c, "hw.sent_pkts"), 5);
	ck_assert_uint_eq(*value_of(&c, "port_xmit_data"), 100);
	ck_assert_uint_eq(c.n_bad, 0);
}
END_TEST

START_TEST(missing_port_is_enoent)
{
	struct shim_nic_counters c;

	ck_assert_int_eq(shim_nic_counters_read(root, "rxe0", 2, &c), -ENOENT);
	ck_assert_uint_eq(c.n, 0);
	ck_assert_int_eq(shim_nic_counters_read(root, "mlx5_0", 1, &c), -ENOENT);
}
END_TEST

START_TEST(grew_names_the_deltas)
{
	struct shim_nic_counters before, now;
	char buf[256];

	ck_assert_int_eq(shim_nic_counters_read(root, "rxe0", 1, &before), 0);
	ck_assert_int_eq(shim_nic_counters_read(root, "rxe0", 1, &now), 0);
	ck_assert_uint_eq(shim_nic_counters_grew(&before, &now, buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "");

	put("rxe0/ports/1/hw_counters/retry_exceeded_err", "5\n");
	put("rxe0/ports/1/counters/port_rcv_errors", "1\n");
	put("rxe0/ports/1/hw_counters/sent_pkts", "900\n");
	ck_assert_int_eq(shim_nic_counters_read(root, "rxe0", 1, &now), 0);
	ck_assert_uint_eq(shim_nic_counters_grew(&before, &now, buf, sizeof(buf)), 2);
	ck_assert_ptr_nonnull(strstr(buf, "\"hw.retry_exceeded_err\":3"));
	ck_assert_ptr_nonnull(strstr(buf, "\"port_rcv_errors\":1"));
	ck_assert_ptr_null(strstr(buf, "sent_pkts"));
}
END_TEST

START_TEST(new_counter_counts_from_zero)
{
	struct shim_nic_counters before = { .n = 0 }, now;
	char buf[256];

	ck_assert_int_eq(shim_nic_counters_read(root, "rxe0", 1, &now), 0);
	/* hw.retry_exceeded_err 2 and hw.link_downed 1; the zeros did not grow. */
	ck_assert_uint_eq(shim_nic_counters_grew(&before, &now, buf, sizeof(buf)), 2);
	ck_assert_ptr_nonnull(strstr(buf, "\"hw.link_downed\":1"));
}
END_TEST

START_TEST(small_buffer_keeps_json_whole)
{
	struct shim_nic_counters before = { .n = 0 }, now;
	char buf[30];

	ck_assert_int_eq(shim_nic_counters_read(root, "rxe0", 1, &now), 0);
	/* Room for one entry ("hw.retry_exceeded_err":2 is 24 bytes), not two. */
	ck_assert_uint_eq(shim_nic_counters_grew(&before, &now, buf, sizeof(buf)), 2);
	ck_assert_uint_lt(strlen(buf), sizeof(buf));
	ck_assert_ptr_null(strchr(buf, ','));
	ck_assert(buf[0] == '\0' || buf[strlen(buf) - 1] != ':');
	ck_assert_uint_eq(shim_nic_counters_grew(&before, &now, buf, 1), 2);
	ck_assert_str_eq(buf, "");
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("nic_counters");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, error_names);
	tcase_add_test(tc, reads_both_folders_errors_only);
	tcase_add_test(tc, read_if_keeps_what_keep_says);
	tcase_add_test(tc, missing_port_is_enoent);
	tcase_add_test(tc, grew_names_the_deltas);
	tcase_add_test(tc, new_counter_counts_from_zero);
	tcase_add_test(tc, small_buffer_keeps_json_whole);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(suite());
}
