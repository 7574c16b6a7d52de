/*
 * Unit tests for shim/core/statarea.c and statread.c, the live stats area:
 * a reader never sees a torn description (seqlock) while a writer
 * rewrites it; the file grows past many segments and records never move;
 * a record left odd (a writer killed mid-way) reads as inconsistent, at
 * once, with its last values; the directory and file are 0700 and 0600,
 * and a link planted at the file's or the directory's name is refused,
 * not followed; a fork's child writes into a file of its own.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sched.h>
#include <stdbool.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "statarea.h"
#include "statread.h"
#include "check_run.h"

static char base[] = "/tmp/rdmashim-statarea-XXXXXX";
static char udir[128];

static void setup(void)
{
	ck_assert_ptr_nonnull(mkdtemp(base));
	snprintf(udir, sizeof(udir), "%s/%u", base, (unsigned)geteuid());
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

static struct shim_stat_desc desc(int fd)
{
	struct shim_stat_desc d = { .fd = fd, .state = SHIM_STAT_TCP, .qpn = (uint32_t)fd };

	d.local.port = (uint16_t)fd;
	d.peer.port = (uint16_t)~fd;
	return d;
}

static void open_view(struct shim_stat_view *v)
{
	const char *path = shim_statarea_path();
	int dfd;

	ck_assert_ptr_nonnull(path);
	dfd = open(udir, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(dfd, 0);
	ck_assert_int_eq(shim_stat_view_open(dfd, strrchr(path, '/') + 1, v), 0);
	close(dfd);
}

/* Tells the writer threads to end: atomic, as TSan rightly asks. */
static int stop;

static bool stopping(void)
{
	return __atomic_load_n(&stop, __ATOMIC_RELAXED);
}

static void set_stop(int v)
{
	__atomic_store_n(&stop, v, __ATOMIC_RELAXED);
}

static void *rewriter(void *arg)
{
	struct shim_stat_rec *r = arg;

	/* Unsigned and masked: under the sanitizers the reader is slow
	 * enough for this loop to pass INT_MAX. */
	for (unsigned k = 0; !stopping(); k++) {
		struct shim_stat_desc d = desc((int)(k & 0x3fffffffu) + 1);

		/* A real writer pauses between descriptions; one that never
		 * does starves a seqlock's reader, which proves nothing. */
		if ((k & 63) == 0)
			sched_yield();

		shim_stat_rec_describe(r, &d);
	}
	return NULL;
}

START_TEST(reader_never_sees_a_torn_description)
{
	struct shim_stat_desc d = desc(1);
	struct shim_stat_rec *r = shim_stat_rec_new(&d), out;
	struct shim_stat_view v;
	pthread_t t;
	unsigned ok = 0;

	ck_assert_ptr_nonnull(r);
	open_view(&v);
	set_stop(0);
	ck_assert_int_eq(pthread_create(&t, NULL, rewriter, r), 0);
	/* At most about 1 s of reads: under the sanitizers, with the writer on the
	 * other core, a read often spends its hundred tries, so the clock is
	 * read every 16 reads (at every 1024, TSan read on long past the
	 * bound before it looked). */
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 200000; i++) {
		if ((i & 15) == 0) {
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - t0.tv_sec >= (ok > 0 ? 1 : 3))
				break;
		}
		if (shim_stat_read_rec(&v, 0, &out, 100) < 0)
			continue;
		/* fd, qpn and both ports come from one desc(k): a mix of two
		 * writes shows as a mismatch. */
		ck_assert_uint_eq((uint32_t)out.d.fd, out.d.qpn);
		ck_assert_uint_eq(out.d.local.port, (uint16_t)out.d.fd);
		ck_assert_uint_eq(out.d.peer.port, (uint16_t)~out.d.fd);
		ok++;
	}
	set_stop(1);
	pthread_join(t, NULL);
	ck_assert_uint_gt(ok, 0);
	shim_stat_view_close(&v);
}
END_TEST

START_TEST(growth_keeps_records_in_place)
{
	enum { N = 1000 };
	static struct shim_stat_rec *recs[N];
	struct shim_stat_view early, v;
	struct shim_stat_rec out;

	for (int i = 0; i < N; i++) {
		struct shim_stat_desc d = desc(i + 1);

		recs[i] = shim_stat_rec_new(&d);
		ck_assert_ptr_nonnull(recs[i]);
		if (i == 0)
			open_view(&early);
	}
	/* Counted through the first pointers after every growth. */
	for (int i = 0; i < N; i++)
		shim_stat_io(recs[i], 1, 0, (uint64_t)i * 10);
	open_view(&v);
	ck_assert_uint_ge(v.nrec, N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(shim_stat_read_rec(&v, (uint64_t)i, &out, 4), 0);
		ck_assert_int_eq(out.d.fd, i + 1);
		ck_assert_uint_eq(out.bytes[1][0], (uint64_t)i * 10);
		ck_assert_uint_eq(out.msgs[1][0], 1);
	}
	/* A view mapped before the growth still reads what it mapped. */
	ck_assert_uint_eq(early.nrec, SHIM_STAT_FIRST_SEG);
	ck_assert_int_eq(shim_stat_read_rec(&early, 5, &out, 4), 0);
	ck_assert_int_eq(out.d.fd, 6);
	/* Freed: its counts go to the header's, its record is free. */
	shim_stat_rec_free(recs[7]);
	ck_assert_int_eq(shim_stat_read_rec(&v, 7, &out, 4), 0);
	ck_assert_uint_eq(out.d.state, SHIM_STAT_FREE);
	ck_assert_uint_eq(v.hdr->closed_bytes[1][0], 70);
	ck_assert_uint_eq(v.hdr->conns, N);
	shim_stat_view_close(&early);
	shim_stat_view_close(&v);
}
END_TEST

START_TEST(record_left_odd_reads_inconsistent)
{
	struct shim_stat_desc d = desc(42);
	struct shim_stat_rec *r = shim_stat_rec_new(&d), out;
	struct shim_stat_view v;
	struct timespec t0, t1;

	ck_assert_ptr_nonnull(r);
	shim_stat_io(r, 0, 1, 1234);
	/* As a writer SIGKILLed between its two increments leaves it. */
	__atomic_add_fetch(&r->seq, 1, __ATOMIC_RELEASE);
	open_view(&v);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	ck_assert_int_eq(shim_stat_read_rec(&v, 0, &out, 8), -EAGAIN);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ck_assert_int_lt((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000, 1000);
	ck_assert_int_eq(out.d.fd, 42);
	ck_assert_uint_eq(out.bytes[0][1], 1234);
	shim_stat_view_close(&v);
}
END_TEST

START_TEST(modes_and_names)
{
	struct shim_stat_desc d = desc(3);
	struct stat st;

	ck_assert_ptr_nonnull(shim_stat_rec_new(&d));
	ck_assert_int_eq(lstat(udir, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 07777, 0700);
	ck_assert_int_eq(lstat(shim_statarea_path(), &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_uint_eq(st.st_uid, geteuid());
	/* Named by pid and start time; gone at exit. */
	char want[64];

	snprintf(want, sizeof(want), "/%d-%llu.stat", (int)getpid(),
		 (unsigned long long)shim_stat_start_ticks(getpid()));
	ck_assert_str_eq(strrchr(shim_statarea_path(), '/'), want);
	char keep[512];

	snprintf(keep, sizeof(keep), "%s", shim_statarea_path());
	shim_statarea_exit();
	ck_assert_int_eq(access(keep, F_OK), -1);
}
END_TEST

START_TEST(planted_link_at_the_file_is_refused)
{
	char name[512], target[256];
	struct stat st;

	ck_assert_int_eq(mkdir(udir, 0700), 0);
	snprintf(target, sizeof(target), "%s/target", base);
	snprintf(name, sizeof(name), "%s/%d-%llu.stat", udir, (int)getpid(),
		 (unsigned long long)shim_stat_start_ticks(getpid()));
	ck_assert_int_eq(symlink(target, name), 0);
	ck_assert_int_eq(shim_statarea_open_in(base), -EEXIST);
	/* Not followed: nothing made at the link's target. */
	ck_assert_int_eq(lstat(target, &st), -1);
	ck_assert_int_eq(lstat(name, &st), 0);
	ck_assert(S_ISLNK(st.st_mode));
	/* And once refused, the process keeps no area. */
	struct shim_stat_desc d = desc(1);

	ck_assert_ptr_null(shim_stat_rec_new(&d));
}
END_TEST

START_TEST(bad_directories_are_refused)
{
	char other[256];

	/* A link in place of the user's directory. */
	snprintf(other, sizeof(other), "%s/elsewhere", base);
	ck_assert_int_eq(mkdir(other, 0700), 0);
	ck_assert_int_eq(symlink(other, udir), 0);
	ck_assert_int_eq(shim_stat_dir_open(base, geteuid(), true), -EPERM);
	ck_assert_int_eq(unlink(udir), 0);
	/* Open to others. */
	ck_assert_int_eq(mkdir(udir, 0755), 0);
	ck_assert_int_eq(chmod(udir, 0755), 0);
	ck_assert_int_eq(shim_stat_dir_open(base, geteuid(), true), -EPERM);
	ck_assert_int_eq(chmod(udir, 0700), 0);
	int fd = shim_stat_dir_open(base, geteuid(), true);

	ck_assert_int_ge(fd, 0);
	close(fd);
	/* A base others can write to without the sticky bit. */
	ck_assert_int_eq(chmod(base, 0777), 0);
	ck_assert_int_eq(shim_stat_dir_open(base, geteuid(), true), -EPERM);
	ck_assert_int_eq(chmod(base, 01777), 0);
}
END_TEST

START_TEST(fork_child_writes_its_own_file)
{
	struct shim_stat_desc d = desc(9);
	struct shim_stat_rec *r = shim_stat_rec_new(&d), out;
	char parent_path[512];
	struct shim_stat_view v;
	int status;
	pid_t pid;

	ck_assert_ptr_nonnull(r);
	snprintf(parent_path, sizeof(parent_path), "%s", shim_statarea_path());
	pid = fork();
	if (pid == 0) {
		shim_statarea_atfork_child();
		/* The inherited record, where it was, in the child's file. */
		shim_stat_io(r, 0, 0, 555);
		_exit(strcmp(shim_statarea_path(), parent_path) && access(shim_statarea_path(), F_OK) == 0 ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	open_view(&v);
	ck_assert_int_eq(shim_stat_read_rec(&v, 0, &out, 4), 0);
	ck_assert_uint_eq(out.bytes[0][0], 0);
	ck_assert_int_eq(v.hdr->pid, getpid());
	shim_stat_view_close(&v);
}
END_TEST


/* The A/B part: per-arm counts, and a round trip in its second's slot. */
START_TEST(ab_arms_counted)
{
	struct shim_stat_desc d = desc(3);
	struct shim_stat_rec *r;
	struct shim_stat_view v;
	static struct shim_stat_ab ab;
	uint64_t now = 5000000000000ull, n = 0;

	shim_cfg.ab_percent = 50;
	d.arm = SHIM_STAT_ARM_CONTROL;
	r = shim_stat_rec_new(&d);
	ck_assert_ptr_nonnull(r);
	shim_stat_ab_conn(SHIM_STAT_ARM_CONTROL);
	shim_stat_ab_conn(SHIM_STAT_ARM_ACCEL);
	shim_stat_ab_fallback(SHIM_STAT_ARM_ACCEL);
	shim_stat_ab_error(SHIM_STAT_ARM_ACCEL);
	shim_stat_ab_conn(SHIM_STAT_ARM_NONE); /* no arm: nothing */
	for (int i = 0; i < 7; i++)
		shim_stat_ab_rtt(SHIM_STAT_ARM_ACCEL, now, 50000);
	shim_stat_ab_rtt(SHIM_STAT_ARM_CONTROL, now, 90000);
	shim_stat_io(r, 0, 0, 100);
	shim_stat_io(r, 0, 1, 40);
	shim_stat_rec_free(r);
	open_view(&v);
	shim_stat_read_ab(&v, &ab, 4);
	ck_assert_uint_eq(ab.active, 1);
	ck_assert_uint_eq(ab.percent, 50);
	ck_assert_uint_eq(ab.arm[0].conns, 1);
	ck_assert_uint_eq(ab.arm[1].conns, 1);
	ck_assert_uint_eq(ab.arm[0].fallbacks, 1);
	ck_assert_uint_eq(ab.arm[0].errors, 1);
	ck_assert_uint_eq(ab.arm[1].closed_bytes[0], 100);
	ck_assert_uint_eq(ab.arm[1].closed_bytes[1], 40);
	for (unsigned k = 0; k < SHIM_STAT_AB_INTERVALS; k++) {
		if (!ab.slot[k].sec)
			continue;
		ck_assert_uint_eq(ab.slot[k].hist[0][shim_stat_rtt_bucket(50000)], 7);
		ck_assert_uint_eq(ab.slot[k].hist[1][shim_stat_rtt_bucket(90000)], 1);
		n++;
	}
	ck_assert_uint_eq(n, 1);
	shim_stat_view_close(&v);
	shim_cfg.ab_percent = 100;
}
END_TEST

/* One slot reused second after second (a ring's length apart), each
 * second's samples in a bucket of its own: a reader never sees a slot
 * that mixes two seconds. */
static void *slot_roller(void *arg)
{
	uint64_t now = *(uint64_t *)arg;

	while (!stopping()) {
		now += (uint64_t)SHIM_STAT_AB_INTERVALS * 1000000000ull;
		unsigned b = 1 + (unsigned)((now / 1000000000ull) % 80);

		for (int i = 0; i < 50; i++)
			shim_stat_ab_rtt(SHIM_STAT_ARM_ACCEL, now, shim_stat_rtt_upper_ns(b) - 1);
	}
	return NULL;
}

START_TEST(ab_reader_never_mixes_seconds)
{
	struct shim_stat_desc d = desc(1);
	struct shim_stat_view v;
	static struct shim_stat_ab ab;
	uint64_t start = 7000000000000ull;
	unsigned seen = 0;
	pthread_t t;

	shim_cfg.ab_percent = 50;
	ck_assert_ptr_nonnull(shim_stat_rec_new(&d));
	open_view(&v);
	set_stop(0);
	ck_assert_int_eq(pthread_create(&t, NULL, slot_roller, &start), 0);
	/* At most about 2 s of reads once a slot was seen (5 s before): a
	 * read copies all the slots, which TSan instruments byte by byte:
	 * the full count took it longer than every other suite together;
	 * a plain build makes them all well within the bound. */
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 3000; i++) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec >= (seen > 0 ? 2 : 5))
			break;
		shim_stat_read_ab(&v, &ab, 100);
		for (unsigned k = 0; k < SHIM_STAT_AB_INTERVALS; k++) {
			const struct shim_stat_ab_slot *sl = &ab.slot[k];

			if (!sl->sec)
				continue;
			/* Which bucket this second's samples go to (the
			 * writer's seconds are its clock plus the area's
			 * offset: find it from the one nonzero bucket). */
			unsigned nz = 0;

			for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
				nz += sl->hist[0][b] != 0;
			ck_assert_uint_le(nz, 1);
			seen++;
		}
	}
	set_stop(1);
	pthread_join(t, NULL);
	ck_assert_uint_gt(seen, 0);
	shim_stat_view_close(&v);
	shim_cfg.ab_percent = 100;
}
END_TEST

START_TEST(quantiles_from_buckets)
{
	uint64_t h[SHIM_STAT_RTT_BUCKETS] = { 0 };

	ck_assert_uint_eq(shim_stat_quantile_ns(h, 0.5), 0);
	h[shim_stat_rtt_bucket(10000)] = 99;
	h[shim_stat_rtt_bucket(1000000)] = 1;
	ck_assert_uint_ge(shim_stat_quantile_ns(h, 0.5), 10000);
	ck_assert_uint_le(shim_stat_quantile_ns(h, 0.5), 12500);
	ck_assert_uint_le(shim_stat_quantile_ns(h, 0.99), 12500);
	ck_assert_uint_ge(shim_stat_quantile_ns(h, 1.0), 1000000);
	/* Every value falls below its bucket's upper bound. */
	for (uint64_t ns = 1; ns < (1ull << 29); ns = ns * 3 / 2 + 1)
		ck_assert_uint_lt(ns, shim_stat_rtt_upper_ns(shim_stat_rtt_bucket(ns)));
}
END_TEST

static Suite *statarea_suite(void)
{
	Suite *s = suite_create("statarea");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, reader_never_sees_a_torn_description);
	tcase_add_test(tc, growth_keeps_records_in_place);
	tcase_add_test(tc, record_left_odd_reads_inconsistent);
	tcase_add_test(tc, modes_and_names);
	tcase_add_test(tc, planted_link_at_the_file_is_refused);
	tcase_add_test(tc, bad_directories_are_refused);
	tcase_add_test(tc, fork_child_writes_its_own_file);
	tcase_add_test(tc, quantiles_from_buckets);
	tcase_add_test(tc, ab_arms_counted);
	tcase_add_test(tc, ab_reader_never_mixes_seconds);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(statarea_suite());
}
