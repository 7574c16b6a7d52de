/*
 * Unit tests for shim/core/msgstamps.c: the per-message stamps a benchmark
 * reads (RDMASHIM_TEST_MSGSTAMPS). The histogram's quantiles are within a
 * sixteenth of the truth; a call's phases add up to its total exactly; a
 * call that moved nothing on a channel leaves nothing; a receive says how
 * it found its data; the line fits the trace even with every figure at
 * its widest; calls from several threads all count; the line comes out at
 * warn and not coarser.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler.h" /* SHIM_TRACE() uses unlikely() */
#include "msgstamps.h"
#include "trace.h"
#include "check_run.h"

/* ---- the accumulator ---- */

START_TEST(small_values_have_a_bucket_each)
{
	for (unsigned long long v = 0; v < 2 * SHIM_MSGSTAT_SUB; v++) {
		ck_assert_uint_eq(shim_msgstat_bucket(v), v);
		ck_assert_uint_eq(shim_msgstat_bucket_mid((unsigned)v), v);
	}
}
END_TEST

/* Every value lands in a bucket whose middle is within 1/16 of it, and the
 * buckets grow with the values. */
START_TEST(buckets_are_within_a_sixteenth)
{
	unsigned prev = 0;

	for (unsigned long long v = 1; v < (1ull << 42); v = v + 1 + v / 7) {
		unsigned b = shim_msgstat_bucket(v);
		unsigned long long mid = shim_msgstat_bucket_mid(b);
		unsigned long long diff = mid > v ? mid - v : v - mid;

		ck_assert_uint_lt(b, SHIM_MSGSTAT_BUCKETS);
		ck_assert_uint_ge(b, prev);
		ck_assert_msg(diff * 16 <= v, "value %llu bucket %u mid %llu", v, b, mid);
		prev = b;
	}
	/* Beyond the last octave: the last bucket, never past the array. */
	ck_assert_uint_eq(shim_msgstat_bucket(~0ull), SHIM_MSGSTAT_BUCKETS - 1);
}
END_TEST

START_TEST(quantiles_of_a_known_spread)
{
	static struct shim_msgstat st;

	ck_assert_uint_eq(shim_msgstat_quantile(&st, 0.5), 0);
	for (unsigned long long v = 1; v <= 10000; v++)
		shim_msgstat_add(&st, v * 10);
	ck_assert_uint_eq(st.n, 10000);
	ck_assert_uint_eq(st.sum_ns, 10ull * 10000 * 10001 / 2);
	unsigned long long p50 = shim_msgstat_quantile(&st, 0.5), p90 = shim_msgstat_quantile(&st, 0.9);

	ck_assert_msg(p50 >= 50000 - 50000 / 16 && p50 <= 50000 + 50000 / 16, "p50 %llu", p50);
	ck_assert_msg(p90 >= 90000 - 90000 / 16 && p90 <= 90000 + 90000 / 16, "p90 %llu", p90);
}
END_TEST

START_TEST(one_value_is_its_own_median)
{
	static struct shim_msgstat st;

	shim_msgstat_add(&st, 12345);
	unsigned long long p50 = shim_msgstat_quantile(&st, 0.5);

	ck_assert_msg(p50 >= 12345 - 12345 / 16 && p50 <= 12345 + 12345 / 16, "p50 %llu", p50);
	ck_assert_uint_eq(shim_msgstat_quantile(&st, 1.0), p50);
}
END_TEST

/* ---- one call ---- */

/* A figure of a formatted line: [n, mean, p50]; false if absent. */
static bool figure(const char *line, const char *name, unsigned long long v[3])
{
	char key[64];
	const char *at;

	snprintf(key, sizeof(key), "\"%s\":[", name);
	at = strstr(line, key);
	if (!at)
		return false;
	ck_assert_int_eq(sscanf(at + strlen(key), "%llu,%llu,%llu", &v[0], &v[1], &v[2]), 3);
	return true;
}

static unsigned long long count_of(const char *line, const char *name)
{
	char key[64];
	const char *at;
	unsigned long long n = 0;

	snprintf(key, sizeof(key), "\"%s\":", name);
	at = strstr(line, key);
	ck_assert_ptr_nonnull(at);
	ck_assert_int_eq(sscanf(at + strlen(key), "%llu", &n), 1);
	return n;
}

static void busy(unsigned us)
{
	usleep(us);
}

/* Both lines of a transport and direction, one after the other in buf. */
static bool both(enum shim_transport t, enum shim_msg_dir dir, char *buf, size_t len)
{
	size_t half = len / 2;

	if (!shim_msgstamps_format(t, dir, SHIM_MSG_PART_SPANS, buf, half))
		return false;
	ck_assert_ptr_nonnull(strstr(buf, "\"part\":\"spans\""));
	ck_assert(shim_msgstamps_format(t, dir, SHIM_MSG_PART_PHASES, buf + strlen(buf), len - strlen(buf)));
	ck_assert_ptr_nonnull(strstr(buf, "\"part\":\"phases\""));
	return true;
}

/* One send: shim path, copy, post, return. With one message, each mean is
 * the message's own figure: the phases add up to the total exactly. */
START_TEST(a_send_adds_up)
{
	static const char *const phases[] = { "shim", "reap", "copy", "post", "completion", "bell", "frames", "return" };
	unsigned long long v[3], sum = 0, total[3], to[3], after[3];
	char line[1024], other[512];

	shim_msgstamps_reset();
	shim_msgstamp_begin();
	busy(100);
	shim_msgstamp_op(SHIM_TRANSPORT_RDMA, SHIM_MSG_TX);
	busy(100);
	shim_msgstamp_mark(SHIM_MSG_COPY);
	busy(100);
	shim_msgstamp_mark(SHIM_MSG_POST);
	shim_msgstamp_posted();
	busy(100);
	shim_msgstamp_mark(SHIM_MSG_BELL);
	shim_msgstamp_end(64);

	ck_assert(both(SHIM_TRANSPORT_RDMA, SHIM_MSG_TX, line, sizeof(line)));
	ck_assert_ptr_nonnull(strstr(line, "\"transport\":\"rdma\",\"dir\":\"tx\",\"part\":\"spans\",\"msgs\":1,"));
	ck_assert(!both(SHIM_TRANSPORT_RDMA, SHIM_MSG_RX, other, sizeof(other)));
	ck_assert(!both(SHIM_TRANSPORT_SHM, SHIM_MSG_TX, other, sizeof(other)));
	for (unsigned i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
		if (figure(line, phases[i], v))
			sum += v[1];
	ck_assert(figure(line, "total", total));
	ck_assert_uint_eq(sum, total[1]);
	ck_assert_uint_ge(total[1], 400000);
	/* Each mark landed in its phase: about 100 us each. */
	ck_assert(figure(line, "copy", v));
	ck_assert_uint_ge(v[1], 100000);
	ck_assert(!figure(line, "reap", v));
	/* "to" ends at the post, "after" starts there: together the total. */
	ck_assert(figure(line, "to", to));
	ck_assert(figure(line, "after", after));
	ck_assert_uint_eq(to[1] + after[1], total[1]);
	ck_assert_uint_ge(to[1], 300000);
	/* No previous call in this thread: no program time before it. */
	ck_assert(!figure(line, "app", v));
}
END_TEST

/* TCP, an error, EAGAIN, or a mark outside any call: nothing. */
START_TEST(calls_off_the_channel_leave_nothing)
{
	char line[1024];

	shim_msgstamps_reset();
	shim_msgstamp_mark(SHIM_MSG_COPY); /* no call open */
	shim_msgstamp_begin();
	shim_msgstamp_end(64); /* no channel op: a TCP call */
	shim_msgstamp_begin();
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	shim_msgstamp_end(-11); /* EAGAIN */
	shim_msgstamp_begin();
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_TX);
	shim_msgstamp_end(0);
	shim_msgstamp_end(64); /* a second end: the call is closed */
	for (unsigned t = 0; t < SHIM_TRANSPORT_COUNT; t++)
		for (unsigned d = 0; d < SHIM_MSG_DIRS; d++)
			ck_assert(!both((enum shim_transport)t, (enum shim_msg_dir)d, line, sizeof(line)));
}
END_TEST

/* Receives: found at once, by a spin, by the arm's re-check, after a sleep;
 * the wake-up to data only for the last; the program's time between calls
 * as "app". */
START_TEST(receives_say_how_they_found_data)
{
	unsigned long long v[3], wake[3], total[3], sum = 0;
	static const char *const phases[] = { "shim", "reap", "copy", "publish", "credit", "spin", "yield",
					      "arm", "sleep", "disarm", "drain", "return" };
	char line[1024];

	shim_msgstamps_reset();
	/* At once. */
	shim_msgstamp_begin();
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	shim_msgstamp_seen();
	shim_msgstamp_mark(SHIM_MSG_COPY);
	shim_msgstamp_end(64);
	busy(200);
	/* By a spin. */
	shim_msgstamp_begin();
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	shim_msgstamp_mark(SHIM_MSG_SHIM);
	shim_msgstamp_note(SHIM_MSG_WAITED);
	shim_msgstamp_mark(SHIM_MSG_YIELD);
	shim_msgstamp_mark(SHIM_MSG_SPIN);
	shim_msgstamp_note(SHIM_MSG_SPIN_HIT);
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	shim_msgstamp_seen();
	shim_msgstamp_mark(SHIM_MSG_COPY);
	shim_msgstamp_end(64);
	/* By the arm. */
	shim_msgstamp_begin();
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	shim_msgstamp_note(SHIM_MSG_WAITED);
	shim_msgstamp_mark(SHIM_MSG_ARM);
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	shim_msgstamp_seen();
	shim_msgstamp_mark(SHIM_MSG_COPY);
	shim_msgstamp_end(64);
	/* After a sleep: 300 us asleep, then 100 us to the data. */
	shim_msgstamp_begin();
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	shim_msgstamp_note(SHIM_MSG_WAITED);
	shim_msgstamp_mark(SHIM_MSG_ARM);
	busy(300);
	shim_msgstamp_mark(SHIM_MSG_SLEEP);
	shim_msgstamp_note(SHIM_MSG_WOKE);
	busy(100);
	shim_msgstamp_mark(SHIM_MSG_DISARM);
	shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	shim_msgstamp_seen();
	shim_msgstamp_mark(SHIM_MSG_COPY);
	shim_msgstamp_mark(SHIM_MSG_PUBLISH);
	shim_msgstamp_end(64);

	ck_assert(both(SHIM_TRANSPORT_SHM, SHIM_MSG_RX, line, sizeof(line)));
	ck_assert_uint_eq(count_of(line, "msgs"), 4);
	ck_assert_ptr_nonnull(strstr(line, "\"found\":{\"now\":1,\"spin\":1,\"arm\":1,\"sleep\":1}"));
	ck_assert(figure(line, "wake", wake));
	ck_assert_uint_eq(wake[0], 1);
	ck_assert_uint_ge(wake[1], 100000);
	ck_assert(figure(line, "sleep", v));
	ck_assert_uint_eq(v[0], 1);
	ck_assert_uint_ge(v[1], 300000);
	ck_assert(figure(line, "copy", v));
	ck_assert_uint_eq(v[0], 4);
	/* The three after the first had a previous call: the first one's
	 * 200 us pause shows in the mean. */
	ck_assert(figure(line, "app", v));
	ck_assert_uint_eq(v[0], 3);
	ck_assert_uint_ge(v[1] * 3, 200000);
	/* Over several messages the means, weighted by their counts, still
	 * add up to the total's (each mean rounds down by under 1 ns). */
	for (unsigned i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
		if (figure(line, phases[i], v))
			sum += v[0] * v[1];
	ck_assert(figure(line, "total", total));
	ck_assert_uint_le(sum, total[0] * total[1] + total[0]);
	ck_assert_uint_ge(sum + 12 * total[0], total[0] * total[1]);
}
END_TEST

/* Every figure present and wide: each line still fits, whole. */
START_TEST(the_widest_lines_fit)
{
	char line[SHIM_TRACE_LINE_MAX - 160];
	/* Characters per figure beyond its name and digits: "name":[n,m,p], */
	const size_t punct = 8;

	shim_msgstamps_reset();
	for (unsigned i = 0; i < 3; i++) {
		shim_msgstamp_begin();
		shim_msgstamp_op(SHIM_TRANSPORT_RDMA, SHIM_MSG_RX);
		shim_msgstamp_note(SHIM_MSG_WAITED);
		for (unsigned p = 0; p < SHIM_MSG_PHASES; p++)
			shim_msgstamp_mark((enum shim_msg_phase)p);
		shim_msgstamp_note(SHIM_MSG_WOKE);
		shim_msgstamp_mark(SHIM_MSG_REAP);
		shim_msgstamp_seen();
		shim_msgstamp_end(64);
	}
	for (unsigned part = 0; part < SHIM_MSG_PARTS; part++) {
		size_t head, names = 0, figures = 0;
		char *ns;

		ck_assert(shim_msgstamps_format(SHIM_TRANSPORT_RDMA, SHIM_MSG_RX, (enum shim_msg_part)part, line,
						sizeof(line)));
		ck_assert_str_eq(line + strlen(line) - 2, "]}");
		ns = strstr(line, ",\"ns\":{");
		ck_assert_ptr_nonnull(ns);
		head = (size_t)(ns - line);
		for (char *q = ns + 7; *q == '"'; figures++) {
			char *close = strchr(q + 1, '"');

			names += (size_t)(close - q - 1);
			q = strchr(close, ']') + 2;
		}
		ck_assert_uint_eq(figures, (part == SHIM_MSG_PART_SPANS ? 5 : SHIM_MSG_PHASES));
		/* The widest a run meets: every count and every time at 10
		 * digits (ten billion messages; a mean of ten seconds), the
		 * head's counts too. Wider, the line ends at its last whole
		 * figure (below). */
		size_t widest = head + 5 * 10 + 8 + names + figures * (punct + 3 * 10);

		ck_assert_msg(widest < sizeof(line), "part %u: %zu of %zu", part, widest, sizeof(line));
		/* Too little room: the figures that fit, whole, and the brace. */
		ck_assert(shim_msgstamps_format(SHIM_TRANSPORT_RDMA, SHIM_MSG_RX, (enum shim_msg_part)part, line,
						head + 40));
		ck_assert_str_eq(line + strlen(line) - 2, "]}");
		ck_assert_uint_lt(strlen(line), head + 40);
	}
}
END_TEST

#define THREADS 4
#define PER_THREAD 1000

static void *send_many(void *arg)
{
	(void)arg;
	for (unsigned i = 0; i < PER_THREAD; i++) {
		shim_msgstamp_begin();
		shim_msgstamp_op(SHIM_TRANSPORT_SHM, SHIM_MSG_TX);
		shim_msgstamp_mark(SHIM_MSG_COPY);
		shim_msgstamp_mark(SHIM_MSG_POST);
		shim_msgstamp_posted();
		shim_msgstamp_end(64);
	}
	return NULL;
}

START_TEST(calls_from_threads_all_count)
{
	pthread_t t[THREADS];
	unsigned long long v[3];
	char line[1024];

	shim_msgstamps_reset();
	for (uintptr_t i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, send_many, NULL), 0);
	for (unsigned i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	ck_assert(both(SHIM_TRANSPORT_SHM, SHIM_MSG_TX, line, sizeof(line)));
	ck_assert_uint_eq(count_of(line, "msgs"), THREADS * PER_THREAD);
	ck_assert(figure(line, "post", v));
	ck_assert_uint_eq(v[0], THREADS * PER_THREAD);
	ck_assert(figure(line, "app", v));
	ck_assert_uint_eq(v[0], THREADS * (PER_THREAD - 1));
}
END_TEST

static char tmpdir[] = "/tmp/rdmashim-msgstamps-XXXXXX";
static char path[128];

static unsigned trace_lines(enum shim_trace_level level, char *first, size_t len)
{
	char pattern[128], buf[2048];
	unsigned n = 0;
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(pattern, sizeof(pattern), "%s/t.log", tmpdir);
	snprintf(path, sizeof(path), "%s", pattern);
	ck_assert_int_eq(shim_trace_open(pattern, level, NULL, 0), 0);
	shim_msgstamps_trace();
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(buf, sizeof(buf), f)) {
		if (!n)
			snprintf(first, len, "%s", buf);
		n++;
	}
	fclose(f);
	unlink(path);
	rmdir(tmpdir);
	return n;
}

START_TEST(the_line_comes_out_at_warn)
{
	char first[4096];

	shim_msgstamps_reset();
	send_many(NULL);
	ck_assert_uint_eq(trace_lines(SHIM_TRACE_WARN, first, sizeof(first)), 2);
	ck_assert_ptr_nonnull(strstr(first, "\"level\":\"warn\",\"event\":\"msg.stamps\""));
	ck_assert_ptr_nonnull(strstr(first, "\"transport\":\"shm\",\"dir\":\"tx\",\"part\":\"spans\",\"msgs\":1000,"));
	ck_assert_str_eq(first + strlen(first) - 4, "]}}\n");
}
END_TEST

START_TEST(coarser_trace_gets_none)
{
	char first[4096];

	shim_msgstamps_reset();
	send_many(NULL);
	ck_assert_uint_eq(trace_lines(SHIM_TRACE_ERROR, first, sizeof(first)), 0);
}
END_TEST

static Suite *msgstamps_suite(void)
{
	Suite *s = suite_create("msgstamps");
	TCase *tc = tcase_create("msgstamps");

	/* Each test runs in a child of its own (Check's default): the figures are process-wide. */
	tcase_add_test(tc, small_values_have_a_bucket_each);
	tcase_add_test(tc, buckets_are_within_a_sixteenth);
	tcase_add_test(tc, quantiles_of_a_known_spread);
	tcase_add_test(tc, one_value_is_its_own_median);
	tcase_add_test(tc, a_send_adds_up);
	tcase_add_test(tc, calls_off_the_channel_leave_nothing);
	tcase_add_test(tc, receives_say_how_they_found_data);
	tcase_add_test(tc, the_widest_lines_fit);
	tcase_add_test(tc, calls_from_threads_all_count);
	tcase_add_test(tc, the_line_comes_out_at_warn);
	tcase_add_test(tc, coarser_trace_gets_none);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(msgstamps_suite());
}
