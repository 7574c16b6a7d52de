/* Unit tests for shim/core/config.c: the single-value parsers and shim_config_parse. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "check_run.h"

/* ---- ports ---------------------------------------------------------------- */

struct port_range {
	unsigned lo, hi;
};

static const struct {
	const char *text;
	struct port_range ranges[4]; /* ends at {0, 0} */
} valid_ports[] = {
	{ "6379", { { 6379, 6379 } } },
	{ "6379,8000-8100", { { 6379, 6379 }, { 8000, 8100 } } },
	{ " 80 , 443 ", { { 80, 80 }, { 443, 443 } } },
	{ "1-65535", { { 1, 65535 } } },
	{ "1", { { 1, 1 } } },
	{ "65535", { { 65535, 65535 } } },
	{ "5-5", { { 5, 5 } } },
	{ "443,80", { { 80, 80 }, { 443, 443 } } },
	{ "80 - 82", { { 80, 82 } } },
	{ "\t7\t", { { 7, 7 } } },
	{ "80,80", { { 80, 80 } } },
	{ "10-20,15-25", { { 10, 25 } } },
	{ "007", { { 7, 7 } } },
	{ "", { { 0, 0 } } },
	{ "   ", { { 0, 0 } } },
};

static const char *const invalid_ports[] = {
	"80-", "70000", "abc", "0", "-5", "10-5", "80,,81", "80,", "65536", ",80", "80;81", "80 81",
	"0-5", "1-65536", "+80", "0x50", "80-90-100", "99999999999999999999", "80a", "8 0", "-",
	",", "80-,81",
};

static void expected_bitmap(const struct port_range *ranges, uint8_t out[SHIM_PORT_BITMAP_BYTES])
{
	memset(out, 0, SHIM_PORT_BITMAP_BYTES);
	for (; ranges->lo; ranges++)
		for (unsigned p = ranges->lo; p <= ranges->hi; p++)
			out[p >> 3] |= (uint8_t)(1u << (p & 7));
}

static int first_difference(const uint8_t *a, const uint8_t *b)
{
	for (unsigned p = 0; p < 65536; p++)
		if (((a[p >> 3] >> (p & 7)) & 1) != ((b[p >> 3] >> (p & 7)) & 1))
			return (int)p;
	return -1;
}

START_TEST(ports_valid)
{
	uint8_t got[SHIM_PORT_BITMAP_BYTES], want[SHIM_PORT_BITMAP_BYTES];
	const char *text = valid_ports[_i].text;
	int diff;

	memset(got, 0xa5, sizeof(got)); /* the parser must clear what it does not set */
	ck_assert_msg(shim_config_parse_ports(text, got) == 0, "\"%s\" rejected", text);
	expected_bitmap(valid_ports[_i].ranges, want);
	diff = first_difference(got, want);
	ck_assert_msg(diff < 0, "\"%s\": port %d is %s", text, diff,
		      diff >= 0 && (got[diff >> 3] >> (diff & 7) & 1) ? "set but should not be" : "not set");
}
END_TEST

START_TEST(ports_invalid)
{
	uint8_t bitmap[SHIM_PORT_BITMAP_BYTES];
	const char *text = invalid_ports[_i];

	ck_assert_msg(shim_config_parse_ports(text, bitmap) == -EINVAL, "\"%s\" accepted", text);
}
END_TEST

START_TEST(ports_null_is_empty)
{
	uint8_t bitmap[SHIM_PORT_BITMAP_BYTES], zero[SHIM_PORT_BITMAP_BYTES] = { 0 };

	memset(bitmap, 0xff, sizeof(bitmap));
	ck_assert_int_eq(shim_config_parse_ports(NULL, bitmap), 0);
	ck_assert_mem_eq(bitmap, zero, sizeof(zero));
}
END_TEST

START_TEST(port_listed_reads_the_bitmap)
{
	struct shim_config cfg;

	memset(&cfg, 0, sizeof(cfg));
	ck_assert_int_eq(shim_config_parse_ports("1,8,9,65535", cfg.ports), 0);
	ck_assert(shim_config_port_listed(&cfg, 1));
	ck_assert(shim_config_port_listed(&cfg, 8));
	ck_assert(shim_config_port_listed(&cfg, 9));
	ck_assert(shim_config_port_listed(&cfg, 65535));
	ck_assert(!shim_config_port_listed(&cfg, 0));
	ck_assert(!shim_config_port_listed(&cfg, 2));
	ck_assert(!shim_config_port_listed(&cfg, 7));
	ck_assert(!shim_config_port_listed(&cfg, 10));
	ck_assert(!shim_config_port_listed(&cfg, 65534));
}
END_TEST

/* ---- transports ----------------------------------------------------------- */

static const struct {
	const char *text;
	unsigned count;
	enum shim_transport order[2];
} valid_transports[] = {
	{ "shm,rdma", 2, { SHIM_TRANSPORT_SHM, SHIM_TRANSPORT_RDMA } },
	{ "rdma,shm", 2, { SHIM_TRANSPORT_RDMA, SHIM_TRANSPORT_SHM } },
	{ "rdma", 1, { SHIM_TRANSPORT_RDMA } },
	{ "shm", 1, { SHIM_TRANSPORT_SHM } },
	{ "tcp", 0, { 0 } },
	{ " shm , rdma ", 2, { SHIM_TRANSPORT_SHM, SHIM_TRANSPORT_RDMA } },
	{ "SHM,Rdma", 2, { SHIM_TRANSPORT_SHM, SHIM_TRANSPORT_RDMA } },
};

static const char *const invalid_transports[] = {
	"tcp,shm", "shm,tcp", "shm,shm", "tcp,tcp", "foo", "", "   ", "shm,", ",shm", "shm rdma",
	"shm;rdma", "shmrdma", "sh", "shm,,rdma", "rdma,shm,rdma",
};

START_TEST(transports_valid)
{
	enum shim_transport out[SHIM_TRANSPORT_COUNT];
	unsigned count = 99;
	const char *text = valid_transports[_i].text;

	ck_assert_msg(shim_config_parse_transports(text, out, &count) == 0, "\"%s\" rejected", text);
	ck_assert_uint_eq(count, valid_transports[_i].count);
	for (unsigned i = 0; i < count; i++)
		ck_assert_msg(out[i] == valid_transports[_i].order[i], "\"%s\": position %u is %s", text, i,
			      shim_transport_name(out[i]));
}
END_TEST

START_TEST(transports_invalid)
{
	enum shim_transport out[SHIM_TRANSPORT_COUNT];
	unsigned count = 99;
	const char *text = invalid_transports[_i];

	ck_assert_msg(shim_config_parse_transports(text, out, &count) == -EINVAL, "\"%s\" accepted", text);
	ck_assert_uint_eq(count, 0);
}
END_TEST

/* ---- level ---------------------------------------------------------------- */

static const struct {
	const char *text;
	enum shim_trace_level level;
} valid_levels[] = {
	{ "off", SHIM_TRACE_OFF },     { "error", SHIM_TRACE_ERROR }, { "warn", SHIM_TRACE_WARN },
	{ "info", SHIM_TRACE_INFO },   { "debug", SHIM_TRACE_DEBUG }, { "trace", SHIM_TRACE_TRACE },
	{ "INFO", SHIM_TRACE_INFO },   { " debug ", SHIM_TRACE_DEBUG },
};

static const char *const invalid_levels[] = {
	"", " ", "verbose", "info,debug", "in fo", "5", "inf", "infoo", "warning", "off off",
};

START_TEST(level_valid)
{
	enum shim_trace_level level = (enum shim_trace_level)-1;

	ck_assert_int_eq(shim_config_parse_level(valid_levels[_i].text, &level), 0);
	ck_assert_int_eq(level, valid_levels[_i].level);
}
END_TEST

START_TEST(level_invalid)
{
	enum shim_trace_level level = SHIM_TRACE_DEBUG;

	ck_assert_msg(shim_config_parse_level(invalid_levels[_i], &level) == -EINVAL, "\"%s\" accepted",
		      invalid_levels[_i]);
	ck_assert_int_eq(level, SHIM_TRACE_DEBUG); /* untouched on failure */
}
END_TEST

START_TEST(level_and_transport_names)
{
	ck_assert_str_eq(shim_trace_level_name(SHIM_TRACE_OFF), "off");
	ck_assert_str_eq(shim_trace_level_name(SHIM_TRACE_TRACE), "trace");
	ck_assert_str_eq(shim_trace_level_name((enum shim_trace_level)99), "?");
	ck_assert_str_eq(shim_transport_name(SHIM_TRANSPORT_TCP), "tcp");
	ck_assert_str_eq(shim_transport_name(SHIM_TRANSPORT_SHM), "shm");
	ck_assert_str_eq(shim_transport_name(SHIM_TRANSPORT_RDMA), "rdma");
	ck_assert_str_eq(shim_transport_name(SHIM_TRANSPORT_COUNT), "?");
	/* Every name parses back to its level. */
	for (int l = SHIM_TRACE_OFF; l <= SHIM_TRACE_TRACE; l++) {
		enum shim_trace_level back;

		ck_assert_int_eq(shim_config_parse_level(shim_trace_level_name((enum shim_trace_level)l), &back), 0);
		ck_assert_int_eq(back, l);
	}
}
END_TEST

/* ---- uint ----------------------------------------------------------------- */

static const struct {
	const char *text;
	unsigned min, max;
	int rc;
	unsigned value;
} uint_cases[] = {
	{ "0", 0, 100, 0, 0 },
	{ "100", 0, 100, 0, 100 },
	{ "101", 0, 100, -EINVAL, 0 },
	{ "3", 4, 65536, -EINVAL, 0 },
	{ "4", 4, 65536, 0, 4 },
	{ " 42 ", 0, 100, 0, 42 },
	{ "042", 0, 100, 0, 42 },
	{ "", 0, 100, -EINVAL, 0 },
	{ "  ", 0, 100, -EINVAL, 0 },
	{ "-1", 0, 100, -EINVAL, 0 },
	{ "+1", 0, 100, -EINVAL, 0 },
	{ "1e3", 0, 100000, -EINVAL, 0 },
	{ "12 3", 0, 100000, -EINVAL, 0 },
	{ "0x10", 0, 100, -EINVAL, 0 },
	{ "4294967295", 0, UINT_MAX, 0, UINT_MAX },
	{ "4294967296", 0, UINT_MAX, -EINVAL, 0 },
	{ "18446744073709551616", 0, UINT_MAX, -EINVAL, 0 },
	{ "99999999999999999999999999", 0, 100, -EINVAL, 0 },
};

START_TEST(uint_table)
{
	unsigned value = 12345;
	int rc = shim_config_parse_uint(uint_cases[_i].text, uint_cases[_i].min, uint_cases[_i].max, &value);

	ck_assert_msg(rc == uint_cases[_i].rc, "\"%s\" in %u-%u: rc %d, want %d", uint_cases[_i].text,
		      uint_cases[_i].min, uint_cases[_i].max, rc, uint_cases[_i].rc);
	if (rc == 0)
		ck_assert_uint_eq(value, uint_cases[_i].value);
	else
		ck_assert_uint_eq(value, 12345); /* untouched on failure */
}
END_TEST

/* ---- shim_config_parse over a fake environment ----------------------------- */

struct fake_env {
	const char *vars[48][2]; /* name, value; ends at a NULL name */
	unsigned lookups;
};

static const char *fake_get(const char *name, void *ctx)
{
	struct fake_env *env = ctx;

	env->lookups++;
	for (unsigned i = 0; i < sizeof(env->vars) / sizeof(env->vars[0]) && env->vars[i][0]; i++)
		if (strcmp(env->vars[i][0], name) == 0)
			return env->vars[i][1];
	return NULL;
}

static int parse(struct fake_env *env, struct shim_config *cfg, char *err, size_t errlen)
{
	memset(cfg, 0x5a, sizeof(*cfg)); /* the parser must set every field */
	return shim_config_parse(cfg, fake_get, env, err, errlen);
}

static bool bitmap_empty(const struct shim_config *cfg)
{
	for (size_t i = 0; i < SHIM_PORT_BITMAP_BYTES; i++)
		if (cfg->ports[i])
			return false;
	return true;
}

START_TEST(parse_defaults)
{
	struct fake_env env = { .vars = { { NULL } } };
	struct shim_config cfg;
	char err[256];

	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
	ck_assert(!cfg.enabled);
	ck_assert(bitmap_empty(&cfg));
	ck_assert_uint_eq(cfg.n_transports, 2);
	ck_assert_int_eq(cfg.transports[0], SHIM_TRANSPORT_SHM);
	ck_assert_int_eq(cfg.transports[1], SHIM_TRANSPORT_RDMA);
	ck_assert_uint_eq(cfg.ab_percent, 100);
	ck_assert_int_eq(cfg.trace_level, SHIM_TRACE_OFF);
	ck_assert_str_eq(cfg.trace_file, "");
	ck_assert_uint_eq(cfg.ring_kb, 1024);
	ck_assert_uint_eq(cfg.spin_us, 50);
	ck_assert_uint_eq(cfg.spin_adapt, 1);
	ck_assert_uint_eq(cfg.unpaid_percent, 25);
	ck_assert_uint_eq(cfg.shm_pairs, 1);
	ck_assert_uint_eq(cfg.huge_pages, 1);
	ck_assert_uint_eq(cfg.rdma_links, 1);
	ck_assert_uint_eq(cfg.rdma_link_conns, 32);
	ck_assert_uint_eq(cfg.rdma_link_idle_ms, 60000);
	ck_assert_uint_eq(cfg.test_fail_rdma_kb, 0);
	ck_assert_uint_eq(cfg.test_handback_after, 0);
	ck_assert_uint_eq(cfg.test_stamps, 0);
	ck_assert_uint_eq(cfg.breaker_failures, 3);
	ck_assert_uint_eq(cfg.breaker_cooldown_ms, 30000);
	ck_assert_uint_eq(cfg.cm_timeout_ms, 2000);
	ck_assert_uint_eq(cfg.upgrade_timeout_ms, 3000);
	ck_assert_uint_eq(cfg.plain_peer_ms, 50);
	/* Every documented variable was asked for. */
	ck_assert_uint_ge(env.lookups, shim_config_var_count);
}
END_TEST

/* The documented defaults are the ones the parser applies. */
START_TEST(parse_documented_defaults_agree)
{
	struct fake_env unset = { .vars = { { NULL } } }, spelled = { .vars = { { NULL } } };
	struct shim_config a, b;
	char err[256];

	ck_assert_uint_le(shim_config_var_count, 47);
	for (size_t i = 0; i < shim_config_var_count; i++) {
		spelled.vars[i][0] = shim_config_vars[i].name;
		spelled.vars[i][1] = shim_config_vars[i].default_value;
		ck_assert_ptr_nonnull(shim_config_vars[i].help);
		ck_assert_int_eq(strncmp(shim_config_vars[i].name, "RDMASHIM_", 9), 0);
	}
	ck_assert_int_eq(parse(&unset, &a, err, sizeof(err)), 0);
	ck_assert_int_eq(parse(&spelled, &b, err, sizeof(err)), 0);
	ck_assert(a.enabled == b.enabled);
	ck_assert_mem_eq(a.ports, b.ports, sizeof(a.ports));
	ck_assert_uint_eq(a.n_transports, b.n_transports);
	ck_assert_uint_eq(a.ab_percent, b.ab_percent);
	ck_assert_uint_eq(a.ring_kb, b.ring_kb);
	ck_assert_uint_eq(a.spin_us, b.spin_us);
	ck_assert_uint_eq(a.upgrade_timeout_ms, b.upgrade_timeout_ms);
}
END_TEST

START_TEST(parse_full_environment)
{
	struct fake_env env = { .vars = {
		{ "RDMASHIM_PORTS", "6379,8000-8001" },
		{ "RDMASHIM_TRANSPORTS", "rdma" },
		{ "RDMASHIM_AB_PERCENT", "25" },
		{ "RDMASHIM_TRACE", "debug" },
		{ "RDMASHIM_TRACE_FILE", "/tmp/rdmashim.%p.log" },
		{ "RDMASHIM_RING_KB", "4" },
		{ "RDMASHIM_SPIN_US", "0" },
		{ "RDMASHIM_BREAKER_FAILURES", "7" },
		{ "RDMASHIM_BREAKER_COOLDOWN_MS", "0" },
		{ "RDMASHIM_CM_TIMEOUT_MS", "1" },
		{ "RDMASHIM_UPGRADE_TIMEOUT_MS", "600000" },
		{ "RDMASHIM_HUGE_PAGES", "0" },
		{ "RDMASHIM_RDMA_LINK_CONNS", "8" },
		{ "RDMASHIM_RDMA_LINK_IDLE_MS", "0" },
		{ "RDMASHIM_TEST_FAIL_RDMA_KB", "2048" },
		{ "RDMASHIM_TEST_HANDBACK_AFTER", "3" },
		{ "RDMASHIM_TEST_STAMPS", "1" },
		{ NULL } } };
	struct shim_config cfg;
	char err[256];

	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert(cfg.enabled);
	ck_assert(shim_config_port_listed(&cfg, 6379));
	ck_assert(shim_config_port_listed(&cfg, 8000));
	ck_assert(shim_config_port_listed(&cfg, 8001));
	ck_assert(!shim_config_port_listed(&cfg, 6380));
	ck_assert(!shim_config_port_listed(&cfg, 8002));
	ck_assert_uint_eq(cfg.n_transports, 1);
	ck_assert_int_eq(cfg.transports[0], SHIM_TRANSPORT_RDMA);
	ck_assert_uint_eq(cfg.ab_percent, 25);
	ck_assert_int_eq(cfg.trace_level, SHIM_TRACE_DEBUG);
	ck_assert_str_eq(cfg.trace_file, "/tmp/rdmashim.%p.log");
	ck_assert_uint_eq(cfg.ring_kb, 4);
	ck_assert_uint_eq(cfg.spin_us, 0);
	ck_assert_uint_eq(cfg.rdma_link_conns, 8);
	ck_assert_uint_eq(cfg.rdma_link_idle_ms, 0);
	ck_assert_uint_eq(cfg.breaker_failures, 7);
	ck_assert_uint_eq(cfg.breaker_cooldown_ms, 0);
	ck_assert_uint_eq(cfg.cm_timeout_ms, 1);
	ck_assert_uint_eq(cfg.upgrade_timeout_ms, 600000);
	ck_assert_uint_eq(cfg.huge_pages, 0);
	ck_assert_uint_eq(cfg.test_fail_rdma_kb, 2048);
	ck_assert_uint_eq(cfg.test_handback_after, 3);
	ck_assert_uint_eq(cfg.test_stamps, 1);
}
END_TEST

START_TEST(parse_tcp_only_is_valid)
{
	struct fake_env env = { .vars = { { "RDMASHIM_PORTS", "80" }, { "RDMASHIM_TRANSPORTS", "tcp" }, { NULL } } };
	struct shim_config cfg;
	char err[256];

	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert(cfg.enabled);
	ck_assert_uint_eq(cfg.n_transports, 0);
}
END_TEST

/* RDMASHIM_MODE: on by default, shadow, nothing else. */
START_TEST(parse_mode)
{
	struct fake_env env = { .vars = { { "RDMASHIM_PORTS", "80" }, { NULL } } };
	struct shim_config cfg;
	char err[256];

	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert(!cfg.shadow);
	env.vars[1][0] = "RDMASHIM_MODE";
	env.vars[1][1] = "shadow";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert(cfg.shadow);
	env.vars[1][1] = "on";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert(!cfg.shadow);
	env.vars[1][1] = "dry-run";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "RDMASHIM_MODE"));
}
END_TEST

/* RDMASHIM_ZEROCOPY: auto by default, on, off, nothing else; its
 * threshold and the cache's cap. */
START_TEST(parse_zerocopy)
{
	struct fake_env env = { .vars = { { "RDMASHIM_PORTS", "80" }, { NULL } } };
	struct shim_config cfg;
	char err[256];

	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert_int_eq(cfg.zerocopy, SHIM_ZC_AUTO);
	ck_assert_uint_eq(cfg.zerocopy_min_kb, 256);
	ck_assert_uint_eq(cfg.mr_cache_mb, 64);
	env.vars[1][0] = "RDMASHIM_ZEROCOPY";
	env.vars[1][1] = "on";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert_int_eq(cfg.zerocopy, SHIM_ZC_ON);
	env.vars[1][1] = "off";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert_int_eq(cfg.zerocopy, SHIM_ZC_OFF);
	env.vars[1][1] = "yes";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "RDMASHIM_ZEROCOPY"));
	env.vars[1][0] = "RDMASHIM_ZEROCOPY_MIN_KB";
	env.vars[1][1] = "2";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), -EINVAL);
	env.vars[1][1] = "64";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert_uint_eq(cfg.zerocopy_min_kb, 64);
	env.vars[1][0] = "RDMASHIM_MR_CACHE_MB";
	env.vars[1][1] = "0";
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert_uint_eq(cfg.mr_cache_mb, 0);
}
END_TEST

START_TEST(parse_empty_ports_valid_but_inert)
{
	static const char *const empties[] = { "", "   ", "\t" };

	for (size_t i = 0; i < sizeof(empties) / sizeof(empties[0]); i++) {
		struct fake_env env = { .vars = { { "RDMASHIM_PORTS", empties[i] }, { NULL } } };
		struct shim_config cfg;
		char err[256];

		ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
		ck_assert_str_eq(err, "");
		ck_assert(!cfg.enabled);
		ck_assert(bitmap_empty(&cfg));
	}
}
END_TEST

START_TEST(parse_ab_150_rejected)
{
	struct fake_env env = { .vars = { { "RDMASHIM_PORTS", "6379" }, { "RDMASHIM_AB_PERCENT", "150" }, { NULL } } };
	struct shim_config cfg;
	char err[512];

	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "RDMASHIM_AB_PERCENT"));
	ck_assert_ptr_nonnull(strstr(err, "150"));
	ck_assert_ptr_null(strchr(err, '\n'));
	ck_assert(!cfg.enabled);
	ck_assert(bitmap_empty(&cfg));
}
END_TEST

START_TEST(parse_ring_kb_power_of_two)
{
	static const struct {
		const char *value;
		int rc;
	} cases[] = {
		{ "1000", -EINVAL }, { "3", -EINVAL }, { "2", -EINVAL }, { "6", -EINVAL }, { "65535", -EINVAL },
		{ "131072", -EINVAL }, { "0", -EINVAL }, { "4", 0 }, { "8", 0 }, { "4096", 0 }, { "65536", 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fake_env env = {
			.vars = { { "RDMASHIM_PORTS", "80" }, { "RDMASHIM_RING_KB", cases[i].value }, { NULL } }
		};
		struct shim_config cfg;
		char err[512];
		int rc = parse(&env, &cfg, err, sizeof(err));

		ck_assert_msg(rc == cases[i].rc, "RING_KB=%s: rc %d", cases[i].value, rc);
		if (rc == 0) {
			ck_assert_uint_eq(cfg.ring_kb, strtoul(cases[i].value, NULL, 10));
			ck_assert(cfg.enabled);
		} else {
			ck_assert_ptr_nonnull(strstr(err, "RDMASHIM_RING_KB"));
			ck_assert_msg(strstr(err, cases[i].value) != NULL, "\"%s\" does not name the value", err);
			ck_assert(!cfg.enabled);
			ck_assert(bitmap_empty(&cfg));
		}
	}
}
END_TEST

/* One bad value per variable: rejected, named, ports cleared, shim disabled. */
static const struct {
	const char *name, *value;
} bad_values[] = {
	{ "RDMASHIM_PORTS", "80,abc" },
	{ "RDMASHIM_PORTS", "6379,70000" },
	{ "RDMASHIM_TRANSPORTS", "foo" },
	{ "RDMASHIM_TRANSPORTS", "" },
	{ "RDMASHIM_AB_PERCENT", "101" },
	{ "RDMASHIM_AB_PERCENT", "-1" },
	{ "RDMASHIM_TRACE", "loud" },
	{ "RDMASHIM_RING_KB", "131072" },
	{ "RDMASHIM_SPIN_US", "1000001" },
	{ "RDMASHIM_SPIN_ADAPT", "2" },
	{ "RDMASHIM_UNPAID_PERCENT", "101" },
	{ "RDMASHIM_SHM_PAIRS", "2" },
	{ "RDMASHIM_BREAKER_FAILURES", "0" },
	{ "RDMASHIM_BREAKER_COOLDOWN_MS", "86400001" },
	{ "RDMASHIM_CM_TIMEOUT_MS", "0" },
	{ "RDMASHIM_UPGRADE_TIMEOUT_MS", "abc" },
	{ "RDMASHIM_HUGE_PAGES", "2" },
	{ "RDMASHIM_RDMA_LINK_CONNS", "0" },
	{ "RDMASHIM_RDMA_LINK_CONNS", "129" },
	{ "RDMASHIM_RDMA_LINK_IDLE_MS", "86400001" },
	{ "RDMASHIM_RDMA_LINK_IDLE_MS", "-1" },
	{ "RDMASHIM_TEST_FAIL_RDMA_KB", "4194305" },
	{ "RDMASHIM_TEST_HANDBACK_AFTER", "1000000001" },
	{ "RDMASHIM_TEST_STAMPS", "2" },
	{ "RDMASHIM_TEST_FAULTS", "bell_loss@0" },
	{ "RDMASHIM_TEST_FAULTS", "nope@1" },
};

START_TEST(parse_bad_value_disables)
{
	struct fake_env env = { .vars = { { bad_values[_i].name, bad_values[_i].value },
					  { "RDMASHIM_PORTS", "6379,8000-8100" },
					  { NULL } } };
	struct shim_config cfg;
	char err[512], want[128];

	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), -EINVAL);
	ck_assert(!cfg.enabled);
	ck_assert_msg(bitmap_empty(&cfg), "ports not cleared after %s", bad_values[_i].name);
	snprintf(want, sizeof(want), "%s=\"%s\"", bad_values[_i].name, bad_values[_i].value);
	ck_assert_msg(strstr(err, want) != NULL, "\"%s\" does not contain %s", err, want);
	ck_assert_int_eq(strncmp(err, "rdmashim: ", 10), 0);
	ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

START_TEST(parse_trace_file_too_long)
{
	static char path[PATH_MAX + 16];
	struct fake_env env = { .vars = { { "RDMASHIM_PORTS", "80" }, { "RDMASHIM_TRACE_FILE", path }, { NULL } } };
	struct shim_config cfg;
	static char err[PATH_MAX + 512];

	memset(path, 'a', PATH_MAX);
	path[PATH_MAX] = '\0';
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "RDMASHIM_TRACE_FILE"));
	ck_assert(!cfg.enabled);
	/* One shorter fits. */
	path[PATH_MAX - 1] = '\0';
	ck_assert_int_eq(parse(&env, &cfg, err, sizeof(err)), 0);
	ck_assert_uint_eq(strlen(cfg.trace_file), PATH_MAX - 1);
}
END_TEST

START_TEST(parse_small_error_buffer)
{
	struct fake_env env = { .vars = { { "RDMASHIM_TRACE", "loud" }, { NULL } } };
	struct shim_config cfg;
	char err[16 + 4];

	memset(err, '#', sizeof(err));
	ck_assert_int_eq(parse(&env, &cfg, err, 16), -EINVAL);
	ck_assert_uint_eq(strlen(err), 15);
	ck_assert_int_eq(err[16], '#'); /* nothing written past errlen */
	/* No buffer at all is allowed too. */
	ck_assert_int_eq(parse(&env, &cfg, NULL, 0), -EINVAL);
}
END_TEST

/* A parse after a bad one starts clean: nothing sticks from earlier calls. */
START_TEST(parse_is_stateless)
{
	struct fake_env bad = { .vars = { { "RDMASHIM_PORTS", "80" }, { "RDMASHIM_SPIN_US", "x" }, { NULL } } };
	struct fake_env good = { .vars = { { "RDMASHIM_PORTS", "81" }, { NULL } } };
	struct shim_config cfg;
	char err[512];

	ck_assert_int_eq(parse(&bad, &cfg, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(parse(&good, &cfg, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
	ck_assert(cfg.enabled);
	ck_assert(!shim_config_port_listed(&cfg, 80));
	ck_assert(shim_config_port_listed(&cfg, 81));
}
END_TEST

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase_create("ports");
	tcase_add_loop_test(tc, ports_valid, 0, N(valid_ports));
	tcase_add_loop_test(tc, ports_invalid, 0, N(invalid_ports));
	tcase_add_test(tc, ports_null_is_empty);
	tcase_add_test(tc, port_listed_reads_the_bitmap);
	suite_add_tcase(s, tc);

	tc = tcase_create("transports");
	tcase_add_loop_test(tc, transports_valid, 0, N(valid_transports));
	tcase_add_loop_test(tc, transports_invalid, 0, N(invalid_transports));
	suite_add_tcase(s, tc);

	tc = tcase_create("level_uint");
	tcase_add_loop_test(tc, level_valid, 0, N(valid_levels));
	tcase_add_loop_test(tc, level_invalid, 0, N(invalid_levels));
	tcase_add_test(tc, level_and_transport_names);
	tcase_add_loop_test(tc, uint_table, 0, N(uint_cases));
	suite_add_tcase(s, tc);

	tc = tcase_create("parse");
	tcase_add_test(tc, parse_defaults);
	tcase_add_test(tc, parse_documented_defaults_agree);
	tcase_add_test(tc, parse_full_environment);
	tcase_add_test(tc, parse_tcp_only_is_valid);
	tcase_add_test(tc, parse_mode);
	tcase_add_test(tc, parse_zerocopy);
	tcase_add_test(tc, parse_empty_ports_valid_but_inert);
	tcase_add_test(tc, parse_ab_150_rejected);
	tcase_add_test(tc, parse_ring_kb_power_of_two);
	tcase_add_loop_test(tc, parse_bad_value_disables, 0, N(bad_values));
	tcase_add_test(tc, parse_trace_file_too_long);
	tcase_add_test(tc, parse_small_error_buffer);
	tcase_add_test(tc, parse_is_stateless);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(config_suite());
}
