/*
 * Unit tests for shim/core/stamps.c: the upgrade stamps a benchmark reads
 * (RDMASHIM_TEST_STAMPS). What is kept comes out once per connection, with
 * its numbers and 4-tuple, only at warn or finer; past the cap the rest is
 * counted, not written; keeps from several threads all come out.
 */
#include <arpa/inet.h>
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compiler.h" /* SHIM_TRACE() uses unlikely() */
#include "stamps.h"
#include "trace.h"
#include "check_run.h"

static char tmpdir[] = "/tmp/rdmashim-stamps-XXXXXX";
static char path[128];

static struct shim_tuple tuple(uint16_t local_port, uint16_t peer_port)
{
	struct shim_tuple t;

	memset(&t, 0, sizeof(t));
	t.local.addr[10] = t.local.addr[11] = t.peer.addr[10] = t.peer.addr[11] = 0xff;
	ck_assert_int_eq(inet_pton(AF_INET, "127.0.0.1", t.local.addr + 12), 1);
	ck_assert_int_eq(inet_pton(AF_INET, "127.0.0.1", t.peer.addr + 12), 1);
	t.local.port = local_port;
	t.peer.port = peer_port;
	return t;
}

static void open_trace(enum shim_trace_level level)
{
	char pattern[128];

	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(pattern, sizeof(pattern), "%s/t.log", tmpdir);
	snprintf(path, sizeof(path), "%s", pattern);
	ck_assert_int_eq(shim_trace_open(pattern, level, NULL, 0), 0);
}

/* The trace file's lines, NUL-separated in a buffer the caller frees; *n says how many. */
static char *read_lines(unsigned *n)
{
	FILE *f = fopen(path, "r");
	char *data;
	long len;

	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	data = calloc(1, (size_t)len + 1);
	ck_assert_ptr_nonnull(data);
	ck_assert_uint_eq(fread(data, 1, (size_t)len, f), (size_t)len);
	fclose(f);
	*n = 0;
	for (char *p = data; (p = strchr(p, '\n')); p++, (*n)++)
		*p = '\0';
	return data;
}

static void clean(void)
{
	unlink(path);
	rmdir(tmpdir);
}

START_TEST(kept_stamps_come_out_once_each)
{
	struct shim_tuple c = tuple(40000, 6379), s = tuple(6379, 40000);
	unsigned n;
	char *lines, *second;

	open_trace(SHIM_TRACE_WARN);
	shim_stamps_keep(&c, "client", 1000, 3000, 4000);
	shim_stamps_keep(&s, "server", 1500, 2500, 0);
	shim_stamps_trace();
	lines = read_lines(&n);
	ck_assert_uint_eq(n, 2);
	second = lines + strlen(lines) + 1;
	ck_assert_ptr_nonnull(strstr(lines, "\"event\":\"upgrade.stamps\""));
	ck_assert_ptr_nonnull(strstr(lines, "\"local\":\"127.0.0.1:40000\",\"peer\":\"127.0.0.1:6379\""));
	ck_assert_ptr_nonnull(strstr(lines, "\"role\":\"client\",\"start_ns\":1000,\"tx_ns\":3000,\"rx_ns\":4000}"));
	ck_assert_ptr_nonnull(strstr(second, "\"local\":\"127.0.0.1:6379\",\"peer\":\"127.0.0.1:40000\""));
	ck_assert_ptr_nonnull(strstr(second, "\"role\":\"server\",\"start_ns\":1500,\"tx_ns\":2500,\"rx_ns\":0}"));
	free(lines);
	clean();
}
END_TEST

/* Stamps are for a benchmark that asked for them at warn: a coarser trace gets none. */
START_TEST(coarser_trace_gets_none)
{
	struct shim_tuple c = tuple(40000, 6379);
	unsigned n;

	open_trace(SHIM_TRACE_ERROR);
	shim_stamps_keep(&c, "client", 1, 2, 3);
	shim_stamps_trace();
	free(read_lines(&n));
	ck_assert_uint_eq(n, 0);
	clean();
}
END_TEST

START_TEST(past_the_cap_counted_not_written)
{
	struct shim_tuple c = tuple(40000, 6379);
	unsigned n;
	char *lines, *last;

	open_trace(SHIM_TRACE_WARN);
	for (unsigned i = 0; i < SHIM_STAMPS_MAX + 3; i++)
		shim_stamps_keep(&c, "client", i + 1, 0, 0);
	shim_stamps_trace();
	lines = read_lines(&n);
	ck_assert_uint_eq(n, SHIM_STAMPS_MAX + 1);
	last = lines;
	for (unsigned i = 0; i + 1 < n; i++)
		last += strlen(last) + 1;
	ck_assert_ptr_nonnull(strstr(last, "\"event\":\"upgrade.stamps_dropped\""));
	ck_assert_ptr_nonnull(strstr(last, "\"dropped\":3}"));
	free(lines);
	clean();
}
END_TEST

#define THREADS 4
#define PER_THREAD 1000

static void *keep_many(void *arg)
{
	struct shim_tuple c = tuple((uint16_t)(40000 + (uintptr_t)arg), 6379);

	for (unsigned i = 0; i < PER_THREAD; i++)
		shim_stamps_keep(&c, "client", i + 1, i + 2, i + 3);
	return NULL;
}

START_TEST(keeps_from_threads_all_come_out)
{
	pthread_t t[THREADS];
	unsigned n, per_port[THREADS] = { 0 };
	char *lines, *p;

	open_trace(SHIM_TRACE_WARN);
	for (uintptr_t i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, keep_many, (void *)i), 0);
	for (unsigned i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
	shim_stamps_trace();
	lines = read_lines(&n);
	ck_assert_uint_eq(n, THREADS * PER_THREAD);
	p = lines;
	for (unsigned i = 0; i < n; i++, p += strlen(p) + 1) {
		char *at = strstr(p, "\"local\":\"127.0.0.1:4000");

		ck_assert_ptr_nonnull(at);
		per_port[at[strlen("\"local\":\"127.0.0.1:4000")] - '0']++;
	}
	for (unsigned i = 0; i < THREADS; i++)
		ck_assert_uint_eq(per_port[i], PER_THREAD);
	free(lines);
	clean();
}
END_TEST

static Suite *stamps_suite(void)
{
	Suite *s = suite_create("stamps");
	TCase *tc = tcase_create("stamps");

	/* Each test runs in a child of its own (Check's default): the stamps are process-wide. */
	tcase_add_test(tc, kept_stamps_come_out_once_each);
	tcase_add_test(tc, coarser_trace_gets_none);
	tcase_add_test(tc, past_the_cap_counted_not_written);
	tcase_add_test(tc, keeps_from_threads_all_come_out);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(stamps_suite());
}
