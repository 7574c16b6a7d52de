/*
 * Unit tests for shim/core/trace.c: the line format (checked byte for byte and by a
 * small strict JSON parser), JSON escaping, %p expansion and the file output.
 */
#include <arpa/inet.h>
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compiler.h" /* SHIM_TRACE() uses unlikely() */
#include "trace.h"
#include "check_run.h"

/* ---- a strict JSON checker (RFC 8259), enough for one trace line ---------- */

#define MAX_KEYS 32

struct json {
	const char *p, *end;
	int depth;
	/* Top-level members, in order: key text and raw value span. */
	unsigned nkeys;
	char keys[MAX_KEYS][64];
	const char *values[MAX_KEYS];
	size_t value_lens[MAX_KEYS];
};

static bool j_value(struct json *j);

static void j_ws(struct json *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static bool j_lit(struct json *j, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
		return false;
	j->p += n;
	return true;
}

/* Parses a string; copies its raw inside to out (may be NULL). */
static bool j_string(struct json *j, char *out, size_t outlen)
{
	const char *start;

	if (j->p >= j->end || *j->p != '"')
		return false;
	start = ++j->p;
	while (j->p < j->end && *j->p != '"') {
		unsigned char c = (unsigned char)*j->p;

		if (c < 0x20)
			return false;
		if (c == '\\') {
			j->p++;
			if (j->p >= j->end)
				return false;
			if (*j->p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (j->p + i >= j->end || !isxdigit((unsigned char)j->p[i]))
						return false;
				j->p += 4;
			} else if (!strchr("\"\\/bfnrt", *j->p) || *j->p == '\0') {
				return false;
			}
		}
		j->p++;
	}
	if (j->p >= j->end)
		return false;
	if (out) {
		size_t n = (size_t)(j->p - start);

		if (n >= outlen)
			n = outlen - 1;
		memcpy(out, start, n);
		out[n] = '\0';
	}
	j->p++;
	return true;
}

static bool j_digits(struct json *j)
{
	const char *s = j->p;

	while (j->p < j->end && isdigit((unsigned char)*j->p))
		j->p++;
	return j->p > s;
}

static bool j_number(struct json *j)
{
	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p < j->end && *j->p == '0')
		j->p++;
	else if (!j_digits(j))
		return false;
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (!j_digits(j))
			return false;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (!j_digits(j))
			return false;
	}
	return true;
}

static bool j_members(struct json *j, char close, bool object)
{
	bool top = object && j->depth == 1;

	j_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return true;
	}
	for (;;) {
		j_ws(j);
		if (object) {
			char key[64];

			if (!j_string(j, key, sizeof(key)))
				return false;
			if (top) {
				for (unsigned i = 0; i < j->nkeys; i++)
					if (strcmp(j->keys[i], key) == 0)
						return false; /* duplicate member */
				if (j->nkeys == MAX_KEYS)
					return false;
				strcpy(j->keys[j->nkeys], key);
			}
			j_ws(j);
			if (j->p >= j->end || *j->p != ':')
				return false;
			j->p++;
			j_ws(j);
		}
		const char *start = j->p;
		if (!j_value(j))
			return false;
		if (top) {
			j->values[j->nkeys] = start;
			j->value_lens[j->nkeys] = (size_t)(j->p - start);
			j->nkeys++;
		}
		j_ws(j);
		if (j->p >= j->end)
			return false;
		if (*j->p == close) {
			j->p++;
			return true;
		}
		if (*j->p != ',')
			return false;
		j->p++;
	}
}

static bool j_value(struct json *j)
{
	bool ok;

	if (j->p >= j->end)
		return false;
	switch (*j->p) {
	case '{':
	case '[': {
		bool object = *j->p == '{';

		if (++j->depth > 16)
			return false;
		j->p++;
		ok = j_members(j, object ? '}' : ']', object);
		j->depth--;
		return ok;
	}
	case '"':
		return j_string(j, NULL, 0);
	case 't':
		return j_lit(j, "true");
	case 'f':
		return j_lit(j, "false");
	case 'n':
		return j_lit(j, "null");
	default:
		return j_number(j);
	}
}

/* True when line[0..len) is exactly one JSON object and one newline. */
static bool json_line(const char *line, size_t len, struct json *j)
{
	memset(j, 0, sizeof(*j));
	if (len < 3 || line[len - 1] != '\n' || memchr(line, '\n', len - 1) || line[0] != '{')
		return false;
	j->p = line;
	j->end = line + len - 1;
	if (!j_value(j))
		return false;
	return j->p == j->end;
}

static int json_key_index(const struct json *j, const char *key)
{
	for (unsigned i = 0; i < j->nkeys; i++)
		if (strcmp(j->keys[i], key) == 0)
			return (int)i;
	return -1;
}

/* The raw value text of key, e.g. "\"info\"" or "42", or "" if absent. */
static const char *json_raw(const struct json *j, const char *key)
{
	static char buf[2048];
	int i = json_key_index(j, key);

	if (i < 0)
		return "";
	snprintf(buf, sizeof(buf), "%.*s", (int)j->value_lens[i], j->values[i]);
	return buf;
}

START_TEST(checker_self_test)
{
	static const char *const good[] = {
		"{}\n", "{\"a\":1}\n", "{\"a\":\"x\\\"y\\\\z\\u0001\",\"b\":[1,-2.5e3,true,false,null,{}]}\n",
		"{\"a\" : { \"b\" : [ ] } }\n",
	};
	static const char *const bad[] = {
		"{}", "{}\n\n", "{\"a\":1,}\n", "{\"a\":1}}\n", "{\"a\":\"x}\n", "{\"a\":01}\n", "{\"a\":1\n",
		"{\"a\":\"\x01\"}\n", "{\"a\":\"\\x\"}\n", "{\"a\":1,\"a\":2}\n", "{a:1}\n", "[]\n", "{\"a\":-}\n",
		"{\"a\":\"\\u12g4\"}\n", "{\"a\":1.}\n", "{\"a\":tru}\n", "{\"a\"1}\n",
	};
	struct json j;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		ck_assert_msg(json_line(good[i], strlen(good[i]), &j), "good[%zu] rejected", i);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!json_line(bad[i], strlen(bad[i]), &j), "bad[%zu] accepted", i);
	ck_assert(json_line("{\"x\":1,\"y\":\"z\"}\n", 16, &j));
	ck_assert_uint_eq(j.nkeys, 2);
	ck_assert_str_eq(json_raw(&j, "y"), "\"z\"");
}
END_TEST

/* ---- shim_trace_format ---------------------------------------------------- */

static struct shim_endpoint ep(const char *ip, uint16_t port)
{
	struct shim_endpoint e;

	memset(&e, 0, sizeof(e));
	if (strchr(ip, ':')) {
		ck_assert_int_eq(inet_pton(AF_INET6, ip, e.addr), 1);
	} else {
		e.addr[10] = e.addr[11] = 0xff;
		ck_assert_int_eq(inet_pton(AF_INET, ip, e.addr + 12), 1);
	}
	e.port = port;
	return e;
}

static struct shim_tuple conn_tuple;

static struct shim_trace_record record(void)
{
	struct shim_trace_record rec = {
		.level = SHIM_TRACE_INFO,
		.event = "conn.track",
		.fd = 7,
		.tuple = &conn_tuple,
		.reason = SHIM_REASON_WHITELISTED,
		.ts = { .tv_sec = 1700000000, .tv_nsec = 123456789 },
		.pid = 42,
		.tid = 43,
	};

	conn_tuple.local = ep("127.0.0.1", 40000);
	conn_tuple.peer = ep("127.0.0.1", 6379);
	return rec;
}

static size_t format(char *buf, size_t len, const struct shim_trace_record *rec, const char *extra, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, extra);
	n = shim_trace_format(buf, len, rec, extra, ap);
	va_end(ap);
	return n;
}

#define BASE_LINE                                                                                   \
	"{\"ts\":\"2023-11-14T22:13:20.123456Z\",\"pid\":42,\"tid\":43,\"level\":\"info\","      \
	"\"event\":\"conn.track\",\"fd\":7,\"local\":\"127.0.0.1:40000\",\"peer\":\"127.0.0.1:6379\"," \
	"\"reason\":\"whitelisted\""

START_TEST(format_exact_line)
{
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX];
	struct json j;
	size_t n = format(buf, sizeof(buf), &rec, NULL);

	ck_assert_str_eq(buf, BASE_LINE "}\n");
	ck_assert_uint_eq(n, strlen(buf));
	ck_assert(json_line(buf, n, &j));
	/* Fields in the documented order. */
	static const char *const order[] = { "ts", "pid", "tid", "level", "event", "fd", "local", "peer", "reason" };
	ck_assert_uint_eq(j.nkeys, 9);
	for (unsigned i = 0; i < 9; i++)
		ck_assert_str_eq(j.keys[i], order[i]);
	/* An empty extra format is no extra. */
	ck_assert_uint_eq(format(buf, sizeof(buf), &rec, ""), n);
	ck_assert_str_eq(buf, BASE_LINE "}\n");
}
END_TEST

START_TEST(format_timestamp)
{
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX];
	struct json j;

	rec.ts.tv_sec = 0;
	rec.ts.tv_nsec = 999999999;
	ck_assert(json_line(buf, format(buf, sizeof(buf), &rec, NULL), &j));
	ck_assert_str_eq(json_raw(&j, "ts"), "\"1970-01-01T00:00:00.999999Z\"");
	rec.ts.tv_sec = 951782400; /* 2000-02-29, a leap day */
	rec.ts.tv_nsec = 1000;
	ck_assert(json_line(buf, format(buf, sizeof(buf), &rec, NULL), &j));
	ck_assert_str_eq(json_raw(&j, "ts"), "\"2000-02-29T00:00:00.000001Z\"");
}
END_TEST

START_TEST(format_levels)
{
	static const char *const names[] = { "off", "error", "warn", "info", "debug", "trace" };
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX], want[16];
	struct json j;

	for (int l = SHIM_TRACE_ERROR; l <= SHIM_TRACE_TRACE; l++) {
		rec.level = (enum shim_trace_level)l;
		ck_assert(json_line(buf, format(buf, sizeof(buf), &rec, NULL), &j));
		snprintf(want, sizeof(want), "\"%s\"", names[l]);
		ck_assert_str_eq(json_raw(&j, "level"), want);
	}
}
END_TEST

START_TEST(format_without_fd)
{
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX];
	struct json j;

	rec.fd = -1;
	ck_assert(json_line(buf, format(buf, sizeof(buf), &rec, NULL), &j));
	ck_assert_int_eq(json_key_index(&j, "fd"), -1);
	ck_assert_int_ge(json_key_index(&j, "local"), 0);
	ck_assert_ptr_null(strstr(buf, "\"fd\""));
	/* fd 0 is a real fd. */
	rec.fd = 0;
	ck_assert(json_line(buf, format(buf, sizeof(buf), &rec, NULL), &j));
	ck_assert_str_eq(json_raw(&j, "fd"), "0");
}
END_TEST

START_TEST(format_listener_has_no_peer)
{
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX];
	struct json j;

	conn_tuple.local = ep("0.0.0.0", 6379);
	memset(&conn_tuple.peer, 0, sizeof(conn_tuple.peer));
	ck_assert(json_line(buf, format(buf, sizeof(buf), &rec, NULL), &j));
	ck_assert_str_eq(json_raw(&j, "local"), "\"0.0.0.0:6379\"");
	ck_assert_int_eq(json_key_index(&j, "peer"), -1);
	ck_assert_str_eq(json_raw(&j, "reason"), "\"whitelisted\"");
}
END_TEST

START_TEST(format_without_tuple_or_reason)
{
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX];
	struct json j;

	rec.tuple = NULL;
	rec.reason = SHIM_REASON_NONE;
	ck_assert(json_line(buf, format(buf, sizeof(buf), &rec, NULL), &j));
	ck_assert_int_eq(json_key_index(&j, "local"), -1);
	ck_assert_int_eq(json_key_index(&j, "peer"), -1);
	ck_assert_int_eq(json_key_index(&j, "reason"), -1);
	ck_assert_uint_eq(j.nkeys, 6);
}
END_TEST

START_TEST(format_v6_tuple)
{
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX];
	struct json j;

	conn_tuple.local = ep("::1", 40000);
	conn_tuple.peer = ep("2001:db8::2", 6379);
	ck_assert(json_line(buf, format(buf, sizeof(buf), &rec, NULL), &j));
	ck_assert_str_eq(json_raw(&j, "local"), "\"[::1]:40000\"");
	ck_assert_str_eq(json_raw(&j, "peer"), "\"[2001:db8::2]:6379\"");
}
END_TEST

START_TEST(format_extra_fields)
{
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX];
	struct json j;
	size_t n = format(buf, sizeof(buf), &rec, "\"bytes\":%d,\"via\":\"%s\",\"ok\":%s", 5, "shm", "true");

	ck_assert_str_eq(buf, BASE_LINE ",\"bytes\":5,\"via\":\"shm\",\"ok\":true}\n");
	ck_assert_uint_eq(n, strlen(buf));
	ck_assert(json_line(buf, n, &j));
	ck_assert_uint_eq(j.nkeys, 12);
	ck_assert_str_eq(j.keys[9], "bytes");
	ck_assert_str_eq(json_raw(&j, "via"), "\"shm\"");
}
END_TEST

START_TEST(format_overlong_extra_dropped)
{
	static char blob[4000];
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX];
	struct json j;
	size_t n;

	memset(blob, 'x', sizeof(blob) - 1);
	n = format(buf, sizeof(buf), &rec, "\"blob\":\"%s\"", blob);
	ck_assert_uint_lt(n, sizeof(buf));
	ck_assert_uint_eq(n, strlen(buf));
	ck_assert_str_eq(buf, BASE_LINE "}\n");
	ck_assert(json_line(buf, n, &j));
	ck_assert_int_eq(json_key_index(&j, "blob"), -1);
}
END_TEST

/*
 * Around the edge: for every extra length, the line holds the whole extra part
 * or none of it, ends with "}\n", stays within the buffer and parses.
 */
START_TEST(format_extra_at_every_length)
{
	static char blob[SHIM_TRACE_LINE_MAX];
	struct shim_trace_record rec = record();
	char buf[SHIM_TRACE_LINE_MAX + 8];
	size_t base = strlen(BASE_LINE "}\n"), kept = 0, dropped = 0;
	struct json j;

	for (size_t len = 0; len < sizeof(blob); len++) {
		memset(blob, 'x', len);
		blob[len] = '\0';
		memset(buf, '#', sizeof(buf));
		size_t n = format(buf, SHIM_TRACE_LINE_MAX, &rec, "\"blob\":\"%s\"", blob);

		ck_assert_uint_lt(n, SHIM_TRACE_LINE_MAX);
		ck_assert_uint_eq(strlen(buf), n);
		ck_assert_int_eq(buf[SHIM_TRACE_LINE_MAX], '#');
		ck_assert_msg(json_line(buf, n, &j), "extra of %zu: not JSON: %s", len, buf);
		if (json_key_index(&j, "blob") >= 0) {
			/* Kept whole: the base, a comma, "blob":"...". */
			ck_assert_uint_eq(n, base + 1 + 9 + len);
			kept++;
		} else {
			ck_assert_uint_eq(n, base);
			dropped++;
		}
	}
	/* Both sides of the edge were exercised, and it is a single edge. */
	ck_assert_uint_gt(kept, 0);
	ck_assert_uint_gt(dropped, 0);
	/* The longest kept line uses the whole buffer: SHIM_TRACE_LINE_MAX - 1 bytes and the NUL. */
	ck_assert_uint_eq(kept, (SHIM_TRACE_LINE_MAX - 1) - (base + 1 + 9) + 1);
}
END_TEST

/* Buffers too small for the fixed fields: still one closed, terminated line. */
START_TEST(format_small_buffers_stay_bounded)
{
	struct shim_trace_record rec = record();
	char buf[512];

	ck_assert_uint_eq(format(buf, 0, &rec, NULL), 0);
	ck_assert_uint_eq(format(buf, 7, &rec, NULL), 0);
	for (size_t len = 8; len < sizeof(buf) - 8; len++) {
		memset(buf, '#', sizeof(buf));
		size_t n = format(buf, len, &rec, "\"k\":%d", 1);

		ck_assert_uint_lt(n, len);
		ck_assert_uint_eq(strlen(buf), n);
		ck_assert_int_eq(buf[0], '{');
		ck_assert_int_eq(buf[n - 2], '}');
		ck_assert_int_eq(buf[n - 1], '\n');
		ck_assert_int_eq(buf[len], '#');
	}
}
END_TEST

/* ---- shim_json_escape ----------------------------------------------------- */

START_TEST(escape_specials)
{
	char out[256];

	shim_json_escape(out, sizeof(out), "plain text 123");
	ck_assert_str_eq(out, "plain text 123");
	shim_json_escape(out, sizeof(out), "a\"b\\c");
	ck_assert_str_eq(out, "a\\\"b\\\\c");
	shim_json_escape(out, sizeof(out), "\n\t\r\x01\x1f ");
	ck_assert_str_eq(out, "\\u000a\\u0009\\u000d\\u0001\\u001f ");
	shim_json_escape(out, sizeof(out), "/ caf\xc3\xa9 \x7f");
	ck_assert_str_eq(out, "/ caf\xc3\xa9 \x7f"); /* UTF-8 and DEL need no escape */
	shim_json_escape(out, sizeof(out), "");
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(escape_every_byte_parses)
{
	char src[256], out[256 * 6 + 1], line[256 * 6 + 16];
	struct json j;
	size_t k = 0;

	for (int c = 1; c < 256; c++)
		src[k++] = (char)c;
	src[k] = '\0';
	shim_json_escape(out, sizeof(out), src);
	snprintf(line, sizeof(line), "{\"s\":\"%s\"}\n", out);
	ck_assert_msg(json_line(line, strlen(line), &j), "escaped bytes do not parse");
	/* 31 controls as \uXXXX, " and \ doubled, the other 222 bytes as is. */
	ck_assert_uint_eq(strlen(out), 31 * 6 + 2 * 2 + 222);
}
END_TEST

START_TEST(escape_truncates_whole_escapes)
{
	char out[16];

	memset(out, '#', sizeof(out));
	shim_json_escape(out, 4, "ab\"cd");
	ck_assert_str_eq(out, "ab"); /* "ab\" would split the escape */
	ck_assert_int_eq(out[4], '#');
	shim_json_escape(out, 5, "ab\"cd");
	ck_assert_str_eq(out, "ab\\\"");
	shim_json_escape(out, 8, "\x01\x02");
	ck_assert_str_eq(out, "\\u0001"); /* the second would not fit whole */
	shim_json_escape(out, 1, "abc");
	ck_assert_str_eq(out, "");
	memset(out, '#', sizeof(out));
	shim_json_escape(out, 0, "abc");
	ck_assert_int_eq(out[0], '#'); /* nothing written at all */
	/* Whatever the cut, the result still makes a valid JSON string. */
	for (size_t len = 1; len < sizeof(out); len++) {
		char line[64];
		struct json j;

		shim_json_escape(out, len, "a\"\\\n\x01z");
		ck_assert_uint_lt(strlen(out), len);
		snprintf(line, sizeof(line), "{\"s\":\"%s\"}\n", out);
		ck_assert_msg(json_line(line, strlen(line), &j), "cut at %zu: %s", len, line);
	}
}
END_TEST

/* ---- shim_trace_expand_path ----------------------------------------------- */

START_TEST(expand_path)
{
	char out[64];

	ck_assert_int_eq(shim_trace_expand_path(out, sizeof(out), "/tmp/trace.%p.log", 1234), 0);
	ck_assert_str_eq(out, "/tmp/trace.1234.log");
	ck_assert_int_eq(shim_trace_expand_path(out, sizeof(out), "/var/log/shim.log", 1234), 0);
	ck_assert_str_eq(out, "/var/log/shim.log");
	ck_assert_int_eq(shim_trace_expand_path(out, sizeof(out), "%p-%p", 7), 0);
	ck_assert_str_eq(out, "7-7");
	ck_assert_int_eq(shim_trace_expand_path(out, sizeof(out), "%p", 4194304), 0);
	ck_assert_str_eq(out, "4194304");
	ck_assert_int_eq(shim_trace_expand_path(out, sizeof(out), "a%d%", 7), 0);
	ck_assert_str_eq(out, "a%d%"); /* only %p is special */
	ck_assert_int_eq(shim_trace_expand_path(out, sizeof(out), "", 7), 0);
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(expand_path_too_long)
{
	char out[16];

	memset(out, '#', sizeof(out));
	/* "abc" needs 4 bytes with its terminator. */
	ck_assert_int_eq(shim_trace_expand_path(out, 4, "abc", 1), 0);
	ck_assert_str_eq(out, "abc");
	ck_assert_int_eq(shim_trace_expand_path(out, 3, "abc", 1), -ENAMETOOLONG);
	/* The pid counts after expansion: "x1234" needs 6. */
	ck_assert_int_eq(shim_trace_expand_path(out, 6, "x%p", 1234), 0);
	ck_assert_str_eq(out, "x1234");
	ck_assert_int_eq(shim_trace_expand_path(out, 5, "x%p", 1234), -ENAMETOOLONG);
	ck_assert_int_eq(shim_trace_expand_path(out, 0, "", 1), -ENAMETOOLONG);
	ck_assert_int_eq(shim_trace_expand_path(out, 0, "a", 1), -ENAMETOOLONG);
	/* A PATH_MAX pattern that grows past PATH_MAX. */
	static char pattern[PATH_MAX], path[PATH_MAX];
	memset(pattern, 'a', PATH_MAX - 3);
	memcpy(pattern + PATH_MAX - 3, "%p", 3);
	ck_assert_int_eq(shim_trace_expand_path(path, sizeof(path), pattern, 1), 0);
	ck_assert_int_eq(shim_trace_expand_path(path, sizeof(path), pattern, 12), 0);
	ck_assert_uint_eq(strlen(path), PATH_MAX - 1);
	ck_assert_int_eq(shim_trace_expand_path(path, sizeof(path), pattern, 123), -ENAMETOOLONG);
}
END_TEST

/* ---- the file output ------------------------------------------------------ */

static char tmpdir[] = "/tmp/rdmashim-test-trace-XXXXXX";

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	static char data[8192];

	ck_assert_ptr_nonnull(f);
	*len = fread(data, 1, sizeof(data) - 1, f);
	data[*len] = '\0';
	fclose(f);
	return data;
}

START_TEST(open_and_emit)
{
	char pattern[128], path[128];
	struct shim_tuple t = { ep("10.0.0.1", 40000), ep("10.0.0.2", 6379) };
	struct json j;
	size_t len;
	char *data, *nl;

	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	snprintf(pattern, sizeof(pattern), "%s/t.%%p.log", tmpdir);
	snprintf(path, sizeof(path), "%s/t.%d.log", tmpdir, (int)getpid());
	ck_assert_int_eq(shim_trace_level, SHIM_TRACE_OFF);
	ck_assert_int_eq(shim_trace_open(pattern, SHIM_TRACE_INFO, NULL, 0), 0);
	ck_assert_int_eq(shim_trace_level, SHIM_TRACE_INFO);
	ck_assert(shim_trace_enabled(SHIM_TRACE_ERROR));
	ck_assert(shim_trace_enabled(SHIM_TRACE_INFO));
	ck_assert(!shim_trace_enabled(SHIM_TRACE_DEBUG));

	errno = 1234;
	SHIM_TRACE(SHIM_TRACE_INFO, "conn.track", 9, &t, SHIM_REASON_WHITELISTED, "\"n\":%d", 1);
	ck_assert_int_eq(errno, 1234); /* the trace never changes the program's errno */
	SHIM_TRACE(SHIM_TRACE_DEBUG, "filtered", 9, &t, SHIM_REASON_NONE, NULL);
	SHIM_TRACE(SHIM_TRACE_WARN, "second", -1, NULL, SHIM_REASON_TIMEOUT, NULL);

	data = read_file(path, &len);
	nl = strchr(data, '\n');
	ck_assert_ptr_nonnull(nl);
	ck_assert_msg(json_line(data, (size_t)(nl - data + 1), &j), "first line: %s", data);
	ck_assert_str_eq(json_raw(&j, "event"), "\"conn.track\"");
	ck_assert_str_eq(json_raw(&j, "peer"), "\"10.0.0.2:6379\"");
	ck_assert_str_eq(json_raw(&j, "n"), "1");
	ck_assert_int_eq(atoi(json_raw(&j, "pid")), getpid());
	ck_assert_int_eq(atoi(json_raw(&j, "tid")), getpid()); /* the main thread */
	ck_assert_msg(json_line(nl + 1, len - (size_t)(nl + 1 - data), &j), "second line: %s", nl + 1);
	ck_assert_str_eq(json_raw(&j, "event"), "\"second\"");
	ck_assert_str_eq(json_raw(&j, "reason"), "\"timeout\"");
	ck_assert_ptr_null(strstr(data, "filtered"));
	unlink(path);
	rmdir(tmpdir);
}
END_TEST

/* A trace write that fails (here: past RLIMIT_FSIZE, EFBIG; a device such
 * as /dev/full is no trace file) leaves errno as it was. */
START_TEST(failed_write_keeps_errno)
{
	struct rlimit none = { 0, 0 };
	char dir[] = "/tmp/rdmashim-test-trace-XXXXXX", path[64];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/full.log", dir);
	ck_assert_int_eq(shim_trace_open(path, SHIM_TRACE_INFO, NULL, 0), 0);
	unlink(path);
	rmdir(dir);
	signal(SIGXFSZ, SIG_IGN);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &none), 0);
	errno = EINTR;
	SHIM_TRACE(SHIM_TRACE_ERROR, "lost", 3, NULL, SHIM_REASON_NONE, NULL);
	ck_assert_int_eq(errno, EINTR);
	errno = 0;
	SHIM_TRACE(SHIM_TRACE_ERROR, "lost", 3, NULL, SHIM_REASON_NONE, NULL);
	ck_assert_int_eq(errno, 0);
}
END_TEST

START_TEST(open_failure_leaves_trace_off)
{
	ck_assert_int_eq(shim_trace_open("/nonexistent-dir-rdmashim/t.log", SHIM_TRACE_DEBUG, NULL, 0), -ENOENT);
	ck_assert_int_eq(shim_trace_level, SHIM_TRACE_OFF);
	ck_assert(!shim_trace_enabled(SHIM_TRACE_ERROR));
	/* Level off opens nothing, whatever the path. */
	ck_assert_int_eq(shim_trace_open("/nonexistent-dir-rdmashim/t.log", SHIM_TRACE_OFF, NULL, 0), 0);
	ck_assert_int_eq(shim_trace_level, SHIM_TRACE_OFF);
}
END_TEST

static Suite *trace_suite(void)
{
	Suite *s = suite_create("trace");
	TCase *tc;

	tc = tcase_create("format");
	tcase_add_test(tc, checker_self_test);
	tcase_add_test(tc, format_exact_line);
	tcase_add_test(tc, format_timestamp);
	tcase_add_test(tc, format_levels);
	tcase_add_test(tc, format_without_fd);
	tcase_add_test(tc, format_listener_has_no_peer);
	tcase_add_test(tc, format_without_tuple_or_reason);
	tcase_add_test(tc, format_v6_tuple);
	tcase_add_test(tc, format_extra_fields);
	tcase_add_test(tc, format_overlong_extra_dropped);
	tcase_add_test(tc, format_extra_at_every_length);
	tcase_add_test(tc, format_small_buffers_stay_bounded);
	suite_add_tcase(s, tc);

	tc = tcase_create("escape_path");
	tcase_add_test(tc, escape_specials);
	tcase_add_test(tc, escape_every_byte_parses);
	tcase_add_test(tc, escape_truncates_whole_escapes);
	tcase_add_test(tc, expand_path);
	tcase_add_test(tc, expand_path_too_long);
	suite_add_tcase(s, tc);

	tc = tcase_create("output");
	/* In this order they also pass with CK_FORK=no (the trace is process-wide). */
	tcase_add_test(tc, open_failure_leaves_trace_off);
	tcase_add_test(tc, open_and_emit);
	tcase_add_test(tc, failed_write_keeps_errno);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(trace_suite());
}
