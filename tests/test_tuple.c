/* Unit tests for shim/core/tuple.c: endpoints, formatting, the tuple hash and A/B. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "tuple.h"
#include "check_run.h"

static struct sockaddr_in v4(const char *ip, uint16_t port)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	ck_assert_int_eq(inet_pton(AF_INET, ip, &sin.sin_addr), 1);
	return sin;
}

static struct sockaddr_in6 v6(const char *ip, uint16_t port)
{
	struct sockaddr_in6 sin6;

	memset(&sin6, 0, sizeof(sin6));
	sin6.sin6_family = AF_INET6;
	sin6.sin6_port = htons(port);
	ck_assert_int_eq(inet_pton(AF_INET6, ip, &sin6.sin6_addr), 1);
	return sin6;
}

static struct shim_endpoint ep4(const char *ip, uint16_t port)
{
	struct sockaddr_in sin = v4(ip, port);
	struct shim_endpoint ep;

	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sin, sizeof(sin), &ep), 0);
	return ep;
}

static struct shim_endpoint ep6(const char *ip, uint16_t port)
{
	struct sockaddr_in6 sin6 = v6(ip, port);
	struct shim_endpoint ep;

	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sin6, sizeof(sin6), &ep), 0);
	return ep;
}

/* ---- conversion ----------------------------------------------------------- */

START_TEST(v4_is_held_as_mapped)
{
	static const uint8_t want[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1 };
	struct shim_endpoint ep = ep4("127.0.0.1", 80);

	ck_assert_mem_eq(ep.addr, want, 16);
	ck_assert_uint_eq(ep.port, 80);
	ck_assert(shim_endpoint_is_v4(&ep));
}
END_TEST

START_TEST(v6_is_held_as_is)
{
	static const uint8_t want[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 };
	struct shim_endpoint ep = ep6("2001:db8::1", 65535);

	ck_assert_mem_eq(ep.addr, want, 16);
	ck_assert_uint_eq(ep.port, 65535);
	ck_assert(!shim_endpoint_is_v4(&ep));
	ep = ep6("::1", 443);
	ck_assert(!shim_endpoint_is_v4(&ep));
	ck_assert_uint_eq(ep.addr[15], 1);
	ck_assert_uint_eq(ep.port, 443);
}
END_TEST

START_TEST(v4_and_v4_mapped_are_equal)
{
	struct shim_endpoint a = ep4("10.1.2.3", 6379), b = ep6("::ffff:10.1.2.3", 6379);
	struct shim_endpoint c = ep6("::ffff:10.1.2.4", 6379), d = ep4("10.1.2.3", 6380);

	ck_assert(shim_endpoint_equal(&a, &b));
	ck_assert(shim_endpoint_equal(&b, &a));
	ck_assert(shim_endpoint_is_v4(&b));
	ck_assert(!shim_endpoint_equal(&a, &c));
	ck_assert(!shim_endpoint_equal(&a, &d));
	/* ::10.1.2.3 (v4-compatible, deprecated) is not the same endpoint. */
	struct shim_endpoint e = ep6("::10.1.2.3", 6379);
	ck_assert(!shim_endpoint_equal(&a, &e));
	ck_assert(!shim_endpoint_is_v4(&e));
}
END_TEST

START_TEST(short_lengths_einval)
{
	struct sockaddr_in sin = v4("127.0.0.1", 80);
	struct sockaddr_in6 sin6 = v6("::1", 80);
	struct shim_endpoint ep;

	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sin, sizeof(sin) - 1, &ep), -EINVAL);
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sin, 4, &ep), -EINVAL);
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sin6, sizeof(sin6) - 1, &ep), -EINVAL);
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sin6, sizeof(sin), &ep), -EINVAL);
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sin, 1, &ep), -EINVAL);
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sin, 0, &ep), -EINVAL);
	ck_assert_int_eq(shim_endpoint_from_sockaddr(NULL, sizeof(sin), &ep), -EINVAL);
	/* A longer buffer is fine (sockaddr_storage). */
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, &sin, sizeof(sin));
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&ss, sizeof(ss), &ep), 0);
	ck_assert_uint_eq(ep.port, 80);
}
END_TEST

START_TEST(other_families_eafnosupport)
{
	struct sockaddr_un sun;
	struct sockaddr_storage ss;
	struct shim_endpoint ep;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	strcpy(sun.sun_path, "/tmp/x");
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&sun, sizeof(sun), &ep), -EAFNOSUPPORT);
	memset(&ss, 0, sizeof(ss));
	ss.ss_family = AF_UNSPEC;
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&ss, sizeof(ss), &ep), -EAFNOSUPPORT);
	ss.ss_family = AF_NETLINK;
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&ss, sizeof(ss), &ep), -EAFNOSUPPORT);
}
END_TEST

/* ---- formatting ----------------------------------------------------------- */

START_TEST(formatting)
{
	char buf[SHIM_ENDPOINT_STRLEN];
	struct shim_endpoint ep;

	ep = ep4("127.0.0.1", 80);
	shim_endpoint_format(&ep, buf, sizeof(buf));
	ck_assert_str_eq(buf, "127.0.0.1:80");
	ep = ep6("::1", 80);
	shim_endpoint_format(&ep, buf, sizeof(buf));
	ck_assert_str_eq(buf, "[::1]:80");
	ep = ep6("::ffff:192.168.0.1", 443);
	shim_endpoint_format(&ep, buf, sizeof(buf));
	ck_assert_str_eq(buf, "192.168.0.1:443");
	ep = ep6("2001:db8::1", 65535);
	shim_endpoint_format(&ep, buf, sizeof(buf));
	ck_assert_str_eq(buf, "[2001:db8::1]:65535");
	ep = ep4("0.0.0.0", 0);
	shim_endpoint_format(&ep, buf, sizeof(buf));
	ck_assert_str_eq(buf, "0.0.0.0:0");
	/* The longest texts fit SHIM_ENDPOINT_STRLEN. */
	ep = ep6("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", 65535);
	shim_endpoint_format(&ep, buf, sizeof(buf));
	ck_assert_str_eq(buf, "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");
	ep = ep6("1234:5678:9abc:def0:1234:5678:9abc:def0", 65535);
	shim_endpoint_format(&ep, buf, sizeof(buf));
	ck_assert_str_eq(buf, "[1234:5678:9abc:def0:1234:5678:9abc:def0]:65535");
}
END_TEST

START_TEST(formatting_truncates_safely)
{
	char buf[8 + 4];
	struct shim_endpoint ep = ep4("127.0.0.1", 6379);

	memset(buf, '#', sizeof(buf));
	shim_endpoint_format(&ep, buf, 8);
	ck_assert_str_eq(buf, "127.0.0");
	ck_assert_int_eq(buf[8], '#');
}
END_TEST

/* ---- hash and A/B --------------------------------------------------------- */

/* xorshift64*: a fixed seed keeps every run identical. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

static struct shim_endpoint random_endpoint(int v6_too)
{
	struct shim_endpoint ep;
	uint64_t r = rng();

	memset(&ep, 0, sizeof(ep));
	if (!v6_too || (r & 1)) {
		ep.addr[10] = ep.addr[11] = 0xff;
		/* Mostly a few hosts, as in a real cluster: 10.0.0.0/24. */
		ep.addr[12] = 10;
		ep.addr[15] = (uint8_t)(r >> 8);
	} else {
		uint64_t s = rng();

		memcpy(ep.addr, &r, 8);
		memcpy(ep.addr + 8, &s, 8);
	}
	ep.port = (uint16_t)(1 + (rng() % 65535));
	return ep;
}

static struct shim_tuple random_tuple(void)
{
	struct shim_tuple t = { random_endpoint(1), random_endpoint(1) };

	return t;
}

static struct shim_tuple swapped(const struct shim_tuple *t)
{
	struct shim_tuple s = { t->peer, t->local };

	return s;
}

START_TEST(hash_symmetric)
{
	for (int i = 0; i < 10000; i++) {
		struct shim_tuple t = random_tuple(), s = swapped(&t);

		ck_assert_msg(shim_tuple_hash(&t) == shim_tuple_hash(&s), "tuple %d: hash differs when swapped", i);
	}
	/* Same address both ends, ports differ: only the ports order the pair. */
	struct shim_tuple t = { ep4("127.0.0.1", 40000), ep4("127.0.0.1", 6379) }, s = swapped(&t);
	ck_assert(shim_tuple_hash(&t) == shim_tuple_hash(&s));
	/* The v4 and the v4-mapped spelling of a connection hash alike. */
	struct shim_tuple m = { ep6("::ffff:127.0.0.1", 40000), ep6("::ffff:127.0.0.1", 6379) };
	ck_assert(shim_tuple_hash(&t) == shim_tuple_hash(&m));
}
END_TEST

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

START_TEST(hash_distinguishes)
{
	enum { N = 10000 };
	static uint64_t hashes[N];
	static struct shim_tuple tuples[N];
	int dups = 0;

	/* Client ports on one host pair: the common case the A/B split must spread. */
	for (int i = 0; i < N; i++) {
		tuples[i].local = ep4("10.0.0.1", (uint16_t)(20000 + i));
		tuples[i].peer = ep4("10.0.0.2", 6379);
		hashes[i] = shim_tuple_hash(&tuples[i]);
	}
	qsort(hashes, N, sizeof(hashes[0]), cmp_u64);
	for (int i = 1; i < N; i++)
		dups += hashes[i] == hashes[i - 1];
	ck_assert_int_eq(dups, 0);
	/* Each part of the tuple matters. */
	struct shim_tuple base = { ep4("10.0.0.1", 40000), ep4("10.0.0.2", 6379) };
	struct shim_tuple other_port = { ep4("10.0.0.1", 40001), ep4("10.0.0.2", 6379) };
	struct shim_tuple other_peer_port = { ep4("10.0.0.1", 40000), ep4("10.0.0.2", 6380) };
	struct shim_tuple other_ip = { ep4("10.0.0.3", 40000), ep4("10.0.0.2", 6379) };
	struct shim_tuple crossed = { ep4("10.0.0.1", 6379), ep4("10.0.0.2", 40000) };
	uint64_t h = shim_tuple_hash(&base);
	ck_assert(h != shim_tuple_hash(&other_port));
	ck_assert(h != shim_tuple_hash(&other_peer_port));
	ck_assert(h != shim_tuple_hash(&other_ip));
	ck_assert(h != shim_tuple_hash(&crossed));
	/* Deterministic. */
	ck_assert(h == shim_tuple_hash(&base));
}
END_TEST

START_TEST(hash_random_sample_distinct)
{
	enum { N = 10000 };
	static uint64_t hashes[N];
	int dups = 0;

	for (int i = 0; i < N; i++) {
		struct shim_tuple t = random_tuple();

		hashes[i] = shim_tuple_hash(&t);
	}
	qsort(hashes, N, sizeof(hashes[0]), cmp_u64);
	for (int i = 1; i < N; i++)
		dups += hashes[i] == hashes[i - 1];
	/* Random tuples may repeat (small address set), but hardly ever. */
	ck_assert_int_le(dups, 2);
}
END_TEST

static int count_selected(unsigned percent, int n, int sequential)
{
	int selected = 0;

	for (int i = 0; i < n; i++) {
		struct shim_tuple t;

		if (sequential) {
			t.local = ep4("10.0.0.1", (uint16_t)(1024 + i));
			t.peer = ep4("10.0.0.2", 6379);
		} else {
			t = random_tuple();
		}
		selected += shim_tuple_ab_selected(&t, percent);
	}
	return selected;
}

START_TEST(ab_zero_and_hundred)
{
	ck_assert_int_eq(count_selected(0, 10000, 0), 0);
	ck_assert_int_eq(count_selected(100, 10000, 0), 10000);
	ck_assert_int_eq(count_selected(0, 10000, 1), 0);
	ck_assert_int_eq(count_selected(100, 10000, 1), 10000);
	/* Above 100 means all, not a wrap-around. */
	ck_assert_int_eq(count_selected(1000, 1000, 0), 1000);
}
END_TEST

START_TEST(ab_fifty_is_about_half)
{
	int random = count_selected(50, 10000, 0), sequential = count_selected(50, 10000, 1);

	ck_assert_msg(random >= 4000 && random <= 6000, "50%% selected %d of 10000 random tuples", random);
	ck_assert_msg(sequential >= 4000 && sequential <= 6000, "50%% selected %d of 10000 client ports",
		      sequential);
	int ten = count_selected(10, 10000, 0);
	ck_assert_msg(ten >= 700 && ten <= 1300, "10%% selected %d of 10000", ten);
}
END_TEST

START_TEST(ab_symmetric_and_monotonic)
{
	for (int i = 0; i < 2000; i++) {
		struct shim_tuple t = random_tuple(), s = swapped(&t);
		bool before = false;

		for (unsigned p = 0; p <= 100; p++) {
			bool a = shim_tuple_ab_selected(&t, p);

			ck_assert_msg(a == shim_tuple_ab_selected(&s, p), "tuple %d at %u%%: ends disagree", i, p);
			/* Raising the percentage only adds connections. */
			ck_assert_msg(a || !before, "tuple %d: selected below %u%% but not at it", i, p);
			before = a;
		}
	}
}
END_TEST

static Suite *tuple_suite(void)
{
	Suite *s = suite_create("tuple");
	TCase *tc;

	tc = tcase_create("endpoint");
	tcase_add_test(tc, v4_is_held_as_mapped);
	tcase_add_test(tc, v6_is_held_as_is);
	tcase_add_test(tc, v4_and_v4_mapped_are_equal);
	tcase_add_test(tc, short_lengths_einval);
	tcase_add_test(tc, other_families_eafnosupport);
	tcase_add_test(tc, formatting);
	tcase_add_test(tc, formatting_truncates_safely);
	suite_add_tcase(s, tc);

	tc = tcase_create("hash");
	tcase_add_test(tc, hash_symmetric);
	tcase_add_test(tc, hash_distinguishes);
	tcase_add_test(tc, hash_random_sample_distinct);
	tcase_add_test(tc, ab_zero_and_hundred);
	tcase_add_test(tc, ab_fifty_is_about_half);
	tcase_add_test(tc, ab_symmetric_and_monotonic);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(tuple_suite());
}
