/*
 * Unit tests for the queue pairs' records (shim/core/statlink.c) and
 * `rdmashim qp` (tools/cmd_qp.c, qp_explain.c, qp_kernel.c) over them: a
 * fixture area written by the shim's own writer, in this live process,
 * holds a link in RTS with a connection on it and links stuck before
 * RTS; the command names the step each misses and its cause, takes the
 * kernel's state and PSN from saved `rdma -j resource show qp` output,
 * says so when no process is there (exit 3), and gives a clear line for
 * a garbled area or a vanished pid, never a crash. `rdmashim stat` skips
 * the link records. A gone link is kept, at most SHIM_STAT_LINKS_KEPT. A
 * fork's child lists none of its parent's queue pairs, only its own.
 * Needs build/bin/rdmashim (make all).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "config.h"
#include "reason.h"
#include "statarea.h"
#include "statlink.h"
#include "statread.h"
#include "check_run.h"

extern char *program_invocation_short_name;

static char base[] = "/tmp/rdmashim-qp-XXXXXX";
static char tool[PATH_MAX + 32];
static char out[65536];

static void setup(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	ck_assert_int_gt(n, 0);
	exe[n] = '\0';
	*strrchr(exe, '/') = '\0';
	snprintf(tool, sizeof(tool), "%s/../bin/rdmashim", exe);
	ck_assert_msg(access(tool, X_OK) == 0, "%s is not built (make all)", tool);
	ck_assert_ptr_nonnull(mkdtemp(base));
	shim_cfg.stats = 1;
	snprintf(shim_cfg.stats_dir, sizeof(shim_cfg.stats_dir), "%s", base);
}

static void teardown(void)
{
	char cmd[256];

	shim_statarea_reset_for_test();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
	ck_assert_int_eq(system(cmd), 0);
}

/* Runs the tool with args (its stderr too) into out; its exit status. */
static int run(const char *args)
{
	char cmd[PATH_MAX + 600];
	size_t len = 0, n;
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", tool, args);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	while (len + 1 < sizeof(out) && (n = fread(out + len, 1, sizeof(out) - 1 - len, f)) > 0)
		len += n;
	out[len] = '\0';
	st = pclose(f);
	ck_assert_msg(WIFEXITED(st), "%s did not exit (crash?): %s", cmd, out);
	return WEXITSTATUS(st);
}

static struct shim_stat_link *link_rec(const char *dev, uint32_t lqpn, unsigned st, bool client)
{
	struct shim_stat_desc d = { .fd = -1, .path = SHIM_TRANSPORT_RDMA, .qpn = lqpn };
	struct shim_stat_link_desc l = { .port = 1, .qp_state = (uint8_t)st, .reached = (uint8_t)st,
					 .client = client, .lqpn = lqpn, .num = lqpn, .max_conns = 32 };
	struct shim_stat_link *r;

	snprintf(l.dev, sizeof(l.dev), "%s", dev);
	d.peer.addr[10] = d.peer.addr[11] = 0xff;
	d.peer.addr[12] = 192;
	d.peer.addr[13] = 168;
	d.peer.addr[14] = 77;
	d.peer.addr[15] = 2;
	r = shim_stat_link_new(&d, &l);
	ck_assert_ptr_nonnull(r);
	return r;
}

/* The fixture: a link in RTS carrying fd 5, and links stuck or failed. */
static void fixture(void)
{
	struct shim_stat_desc cd = { .fd = 5, .path = SHIM_TRANSPORT_RDMA, .state = SHIM_STAT_SWITCHED, .qpn = 17 };
	struct shim_stat_link *rts, *mtu, *wait, *err;
	struct shim_stat_link_desc l;

	ck_assert_int_eq(shim_statarea_open_in(base), 0);
	rts = link_rec("rxe0", 17, SHIM_STAT_QP_RTS, true);
	l = rts->l;
	l.rqpn = 18;
	l.sq_psn = 4321;
	shim_stat_link_describe(rts, &l);
	shim_stat_link_conns(rts, 1, 0);
	ck_assert_ptr_nonnull(shim_stat_rec_new(&cd));

	/* INIT, its RTR refused: a 4096 path MTU on a 1024 port. */
	mtu = link_rec("rxe0", 19, SHIM_STAT_QP_INIT, false);
	l = mtu->l;
	l.failed_to = SHIM_STAT_QP_RTR;
	l.err = EINVAL;
	l.path_mtu = IBV_MTU_4096;
	l.active_mtu = IBV_MTU_1024;
	shim_stat_link_describe(mtu, &l);

	/* S in INIT, its CM request out, no reply yet. */
	wait = link_rec("rxe0", 21, SHIM_STAT_QP_INIT, false);
	(void)wait;

	/* Reached RTS, then the peer stopped acknowledging. */
	err = link_rec("rxe0", 23, SHIM_STAT_QP_RTS, true);
	l = err->l;
	l.qp_state = SHIM_STAT_QP_ERR;
	l.verbs_wc = 1;
	l.verbs_detail = IBV_WC_RETRY_EXC_ERR;
	snprintf(l.verbs_err, sizeof(l.verbs_err), "%s", ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR));
	shim_stat_link_describe(err, &l);
}

START_TEST(rts_and_stuck_links_explained)
{
	char want[128];

	fixture();
	ck_assert_int_eq(run("qp --dir"), 2); /* --dir wants a value */
	snprintf(want, sizeof(want), "qp --no-kernel --dir %s", base);
	ck_assert_int_eq(run(want), 1);
	ck_assert_msg(strstr(out, "LQPN") && strstr(out, "rxe0"), "%s", out);
	ck_assert_msg(strstr(out, "missing INIT -> RTR: MTU mismatch: the path MTU (4096) is larger than the port's "
				  "active MTU (1024)"), "%s", out);
	ck_assert_msg(strstr(out, "missing INIT -> RTR: waiting for the peer's CM reply"), "%s", out);
	ck_assert_msg(strstr(out, "retry count exceeded"), "%s", out);
	snprintf(want, sizeof(want), "%-7d %-15.15s rxe0          1       17       18 RTS          4321     1 5 ",
		 (int)getpid(), program_invocation_short_name);
	ck_assert_msg(strstr(out, want), "no row '%s' in:\n%s", want, out);

	snprintf(want, sizeof(want), "qp --no-kernel --json --dir %s", base);
	ck_assert_int_eq(run(want), 1);
	snprintf(want, sizeof(want), "{\"pid\":%d,\"program\":\"%s\",\"device\":\"rxe0\",\"port\":1,\"lqpn\":17,"
		 "\"rqpn\":18,\"state\":\"RTS\"", (int)getpid(), program_invocation_short_name);
	ck_assert_msg(strstr(out, want), "no '%s' in:\n%s", want, out);
	ck_assert_msg(strstr(out, "\"sq_psn\":4321"), "%s", out);
	ck_assert_msg(strstr(out, "\"connections\":[{\"fd\":5,"), "%s", out);
	ck_assert_msg(strstr(out, "\"lqpn\":19,\"rqpn\":null,\"state\":\"INIT\""), "%s", out);
	ck_assert_msg(strstr(out, "\"missing_step\":\"INIT -> RTR\",\"cause\":\"MTU mismatch"), "%s", out);
	ck_assert_msg(strstr(out, "\"failed_step\":\"RTR\",\"errno\":22"), "%s", out);
	ck_assert_msg(strstr(out, "\"last_verbs_error\":{\"what\":\"transport retry counter exceeded\",\"code\":12,"
				  "\"wc_status\":true"), "%s", out);
	ck_assert_msg(strstr(out, "\"kernel\":\"none\""), "%s", out);
}
END_TEST

START_TEST(kernel_view_wins)
{
	char f[256], args[512];
	FILE *k;

	fixture();
	snprintf(f, sizeof(f), "%s/kernel.json", base);
	k = fopen(f, "w");
	ck_assert_ptr_nonnull(k);
	/* As iproute2 prints it, with a QP of another device and garbage. */
	fputs("[{\"ifindex\":3,\"ifname\":\"rxe0\",\"port\":1,\"lqpn\":17,\"rqpn\":18,\"type\":\"RC\","
	      "\"state\":\"RTS\",\"rq-psn\":77,\"sq-psn\":999,\"path-mig-state\":\"MIGRATED\",\"pid\":1,"
	      "\"comm\":\"x\"},{\"ifname\":\"rxe0\",\"lqpn\":21,\"state\":\"ERR\"},"
	      "{\"ifname\":\"mlx5_0\",\"lqpn\":17,\"state\":\"INIT\"},{\"lqpn\":\"x\",,,}]]]{{\"", k);
	fclose(k);
	snprintf(args, sizeof(args), "qp --json --kernel-json %s --dir %s", f, base);
	ck_assert_int_eq(run(args), 1);
	ck_assert_msg(strstr(out, "\"kernel\":\"file\""), "%s", out);
	ck_assert_msg(strstr(out, "\"kernel_state\":\"RTS\",\"sq_psn\":999,\"rq_psn\":77,\"kernel_pid\":1"), "%s", out);
	ck_assert_msg(strstr(out, "\"lqpn\":21,\"rqpn\":null,\"state\":\"ERR\",\"shim_state\":\"INIT\""), "%s", out);
	ck_assert_msg(strstr(out, "the kernel has the QP in ERR"), "%s", out);
}
END_TEST

START_TEST(no_process_says_so)
{
	char args[256];

	snprintf(args, sizeof(args), "qp --no-kernel --dir %s", base);
	ck_assert_int_eq(run(args), 3);
	ck_assert_msg(strstr(out, "no process under the shim"), "%s", out);
	/* A pid that can not be: above any pid_max. */
	snprintf(args, sizeof(args), "qp --no-kernel --pid 2147483000 --dir %s", base);
	ck_assert_int_eq(run(args), 3);
	ck_assert_msg(strstr(out, "process 2147483000: no stats area"), "%s", out);
	ck_assert_int_eq(run("qp --pid x"), 2);
	ck_assert_msg(strstr(out, "bad value for --pid"), "%s", out);
	snprintf(args, sizeof(args), "qp --no-kernel --kernel-json /nonexistent --dir %s", base);
	ck_assert_int_eq(run(args), 2);
	snprintf(args, sizeof(args), "qp --kernel-json /nonexistent --dir %s", base);
	ck_assert_int_eq(run(args), 4);
}
END_TEST

START_TEST(garbled_area_is_a_clear_line)
{
	char dir[256], name[512], args[512], junk[4096];
	int fd;

	/* A file named for this live process, of an area's size, not one. */
	snprintf(dir, sizeof(dir), "%s/%u", base, (unsigned)geteuid());
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	snprintf(name, sizeof(name), "%s/%d-%llu.stat", dir, (int)getpid(),
		 (unsigned long long)shim_stat_start_ticks(getpid()));
	fd = open(name, O_CREAT | O_WRONLY, 0600);
	ck_assert_int_ge(fd, 0);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 131 + 7);
	for (size_t at = 0; at < SHIM_STAT_HDR_SIZE + SHIM_STAT_REC_SIZE; at += sizeof(junk))
		ck_assert_int_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	snprintf(args, sizeof(args), "qp --no-kernel --dir %s", base);
	ck_assert_int_eq(run(args), 3);
	ck_assert_msg(strstr(out, "unreadable area"), "%s", out);
	snprintf(args, sizeof(args), "qp --no-kernel --json --dir %s", base);
	ck_assert_int_eq(run(args), 3);
	ck_assert_msg(strstr(out, "\"error\":\"unreadable area"), "%s", out);
}
END_TEST

START_TEST(garbled_link_record_never_crashes)
{
	struct shim_stat_link *r;
	char args[256];

	ck_assert_int_eq(shim_statarea_open_in(base), 0);
	r = link_rec("rxe0", 30, SHIM_STAT_QP_INIT, false);
	shim_stat_seq_begin(&r->seq);
	memset(&r->l, 0xa5, sizeof(r->l)); /* no NUL in dev or verbs_err, every value out of range */
	r->conns = ~0ull;
	shim_stat_seq_end(&r->seq);
	snprintf(args, sizeof(args), "qp --no-kernel --dir %s", base);
	ck_assert_int_le(run(args), 1);
	ck_assert_msg(strstr(out, "LQPN"), "%s", out);
	snprintf(args, sizeof(args), "qp --no-kernel --json --dir %s", base);
	ck_assert_int_le(run(args), 1);
	ck_assert_msg(strstr(out, "\"qps\":[{"), "%s", out);
}
END_TEST

START_TEST(stat_skips_link_records)
{
	char args[256];

	fixture();
	snprintf(args, sizeof(args), "stat --json --dir %s", base);
	ck_assert_int_eq(run(args), 0);
	ck_assert_msg(strstr(out, "\"fd\":5,"), "%s", out);
	ck_assert_msg(!strstr(out, "\"fd\":-1,"), "a link record read as a connection:\n%s", out);
	ck_assert_msg(strstr(out, "\"rdma\":{\"live\":1,"), "%s", out);
}
END_TEST

START_TEST(gone_links_kept_then_bounded)
{
	struct shim_stat_link *r[SHIM_STAT_LINKS_KEPT + 2];
	char args[256];
	unsigned gone = 0;

	ck_assert_int_eq(shim_statarea_open_in(base), 0);
	for (unsigned i = 0; i < SHIM_STAT_LINKS_KEPT + 2; i++) {
		struct shim_stat_link_desc l;

		r[i] = link_rec("rxe0", 100 + i, SHIM_STAT_QP_INIT, false);
		l = r[i]->l;
		l.reason = SHIM_REASON_PEER_NO_SHIM;
		shim_stat_link_describe(r[i], &l);
	}
	/* One ends cleanly: its record goes at once. */
	shim_stat_link_end(link_rec("rxe0", 99, SHIM_STAT_QP_RTS, true), false);
	for (unsigned i = 0; i < SHIM_STAT_LINKS_KEPT + 2; i++)
		shim_stat_link_end(r[i], true);
	snprintf(args, sizeof(args), "qp --no-kernel --json --dir %s", base);
	ck_assert_int_eq(run(args), 0); /* gone QPs do not count as not in RTS */
	for (const char *p = out; (p = strstr(p, "\"gone\":true")); p++)
		gone++;
	ck_assert_uint_eq(gone, SHIM_STAT_LINKS_KEPT);
	ck_assert_msg(!strstr(out, "\"lqpn\":99,") && !strstr(out, "\"lqpn\":100,") && strstr(out, "\"lqpn\":109,"),
		      "%s", out);
	ck_assert_msg(strstr(out, "\"missing_step\":\"INIT -> RTR\",\"cause\":\"peer not listening"), "%s", out);
	ck_assert_msg(strstr(out, "\"reason\":\"peer_no_shim\""), "%s", out);
}
END_TEST

/* A fork's child has none of its parent's queue pairs: the tool, asked
 * about the child (alive, its own area), lists none; the parent's stay. */
START_TEST(fork_child_has_no_parent_links)
{
	char args[256];
	int sync[2], status;
	pid_t pid;
	char c;

	fixture();
	shim_stat_link_end(link_rec("rxe0", 40, SHIM_STAT_QP_INIT, false), true); /* kept, the parent's */
	ck_assert_int_eq(pipe(sync), 0);
	pid = fork();
	if (pid == 0) {
		shim_statarea_atfork_child();
		shim_statlink_atfork_child();
		/* A new link of the child's own takes a freed record. */
		link_rec("rxe1", 50, SHIM_STAT_QP_RTS, true);
		close(sync[0]);
		ck_assert_int_eq(write(sync[1], "x", 1), 1);
		pause();
		_exit(0);
	}
	close(sync[1]);
	ck_assert_int_eq(read(sync[0], &c, 1), 1);
	snprintf(args, sizeof(args), "qp --no-kernel --json --pid %d --dir %s", (int)pid, base);
	ck_assert_int_eq(run(args), 0);
	ck_assert_msg(strstr(out, "\"lqpn\":50,") && !strstr(out, "\"lqpn\":17,") && !strstr(out, "\"lqpn\":40,"),
		      "%s", out);
	snprintf(args, sizeof(args), "qp --no-kernel --json --pid %d --dir %s", (int)getpid(), base);
	ck_assert_int_eq(run(args), 1);
	ck_assert_msg(strstr(out, "\"lqpn\":17,") && strstr(out, "\"lqpn\":40,") && !strstr(out, "\"lqpn\":50,"),
		      "%s", out);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("qp");
	TCase *tc = tcase_create("qp");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, rts_and_stuck_links_explained);
	tcase_add_test(tc, kernel_view_wins);
	tcase_add_test(tc, no_process_says_so);
	tcase_add_test(tc, garbled_area_is_a_clear_line);
	tcase_add_test(tc, garbled_link_record_never_crashes);
	tcase_add_test(tc, stat_skips_link_records);
	tcase_add_test(tc, gone_links_kept_then_bounded);
	tcase_add_test(tc, fork_child_has_no_parent_links);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
