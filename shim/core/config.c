/* Environment parsing; see config.h for the contract. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct shim_config shim_cfg;

const struct shim_config_var shim_config_vars[] = {
	{ "RDMASHIM_PORTS", "",
	  "TCP ports to accelerate: comma-separated ports and ranges (6379,8000-8100); "
	  "unset or empty: the shim is inert" },
	{ "RDMASHIM_TRANSPORTS", "shm,rdma",
	  "upgrade preference from shm, rdma; 'tcp' alone never upgrades (still traced)" },
	{ "RDMASHIM_AB_PERCENT", "100",
	  "0-100: share of whitelisted connections, by a hash of the 4-tuple, that may upgrade" },
	{ "RDMASHIM_MODE", "on",
	  "on: upgrade connections; shadow: negotiate up to the switch (both ends proven, the transport "
	  "chosen), then stay on TCP, traced upgrade.shadow and counted" },
	{ "RDMASHIM_TRACE", "off", "trace level: off, error, warn, info, debug, trace" },
	{ "RDMASHIM_TRACE_FILE", "",
	  "trace destination (%p becomes the pid); empty: stderr; a regular file of this user's only, "
	  "not group- or world-writable (created 0600)" },
	{ "RDMASHIM_RING_KB", "1024", "side-channel ring size per direction, KiB (power of two, 4-65536)" },
	{ "RDMASHIM_SPIN_US", "50", "busy-poll time before sleeping, microseconds (0-1000000)" },
	{ "RDMASHIM_SPIN_ADAPT", "1",
	  "1: skip the busy poll when every CPU has a spinner, a waiter's spins keep finding nothing, "
	  "or a spin lost its core to another thread, and poll longer than RDMASHIM_SPIN_US (up to a few "
	  "wake-ups, at most 4 times RDMASHIM_SPIN_US and 1 ms) where waking costs more than it; 0: every wait with a channel to watch "
	  "spins RDMASHIM_SPIN_US" },
	{ "RDMASHIM_UNPAID_PERCENT", "25",
	  "a connection on shm goes back to TCP when, in two windows of 64 exchanges in a row, at least this "
	  "share of them had to wake the sleeping receiver with a bell both ways (0: never)" },
	{ "RDMASHIM_BREAKER_FAILURES", "3", "consecutive failed RDMA attempts that open a peer's breaker" },
	{ "RDMASHIM_BREAKER_COOLDOWN_MS", "30000", "how long an open breaker skips attempts, ms" },
	{ "RDMASHIM_CM_TIMEOUT_MS", "2000", "bound on each RDMA connection-manager wait, ms" },
	{ "RDMASHIM_UPGRADE_TIMEOUT_MS", "3000", "bound on a whole upgrade attempt, ms" },
	{ "RDMASHIM_UPGRADE_AFTER_MS", "2",
	  "a connection starts its upgrade at its first data call once it is this old, ms (0: at once)" },
	{ "RDMASHIM_UPGRADE_AFTER_ROUNDS", "1",
	  "and once it carried this many round trips on TCP and began the next, or 256 KiB, or lived 25 times "
	  "RDMASHIM_UPGRADE_AFTER_MS (0: age alone)" },
	{ "RDMASHIM_PLAIN_PEER_MS", "50",
	  "a client stops waiting for a peer that answered over TCP this long after it began to wait, ms "
	  "(0: wait the whole RDMASHIM_UPGRADE_TIMEOUT_MS)" },
	{ "RDMASHIM_SHM_PAIRS", "1",
	  "1: two processes that upgraded a connection keep its rendezvous and upgrade the next ones over it "
	  "(one message each way); 0: every connection takes its own named rendezvous" },
	{ "RDMASHIM_SHM_BELL_LINE", "1",
	  "1: a shm connection wakes a sleeping peer with a message on a socketpair of its own (its bell "
	  "line) instead of a byte on TCP; 0: on TCP" },
	{ "RDMASHIM_RDMA_LINKS", "1",
	  "1: RDMA connections between the same two processes share one queue pair (a link), and a later one "
	  "is set up by one message each way on it; 0: every connection makes its own with rdma_cm" },
	{ "RDMASHIM_RDMA_LINK_CONNS", SHIM_CFG_STR(SHIM_CFG_LINK_CONNS_DEFAULT),
	  "the most connections one link carries (the device may allow fewer: its receives must cover every "
	  "connection's credits); a connection beyond makes a new link" },
	{ "RDMASHIM_RDMA_LINK_IDLE_MS", "60000",
	  "a link that carried no connection for this long is closed, its queue pair and memory freed; the "
	  "next connection between the two processes makes a new one (0: kept while both processes live)" },
	{ "RDMASHIM_RDMA_STALL_MS", "500",
	  "a link whose peer's tail words stand ahead of what its completions delivered for this long has a CQ "
	  "that stopped delivering: the link breaks (cq_stall) and its connections fail over to TCP (0: never "
	  "looked at)" },
	{ "RDMASHIM_HUGE_PAGES", "1",
	  "1: back RDMA ring pools with 2 MiB huge pages when the system has them; 0: 4 KiB pages" },
	{ "RDMASHIM_ZEROCOPY", "auto",
	  "large blocking sends over RDMA from the program's own memory, and one copy instead of two on shared "
	  "memory (docs/ZEROCOPY.md): on: at or above RDMASHIM_ZEROCOPY_MIN_KB (RDMA) or "
	  "RDMASHIM_ZEROCOPY_SHM_MIN_KB (shm); off: always copy; auto: only on a path where it measured a win" },
	{ "RDMASHIM_ZEROCOPY_MIN_KB", "256", "the smallest send that goes zero copy over RDMA, KiB (4-1048576)" },
	{ "RDMASHIM_ZEROCOPY_SHM_MIN_KB", "256",
	  "on shared memory, the smallest blocking receive that offers its buffer to the peer's sends, and "
	  "the least a send must still have to take it, KiB (4-1048576)" },
	{ "RDMASHIM_MR_CACHE_MB", "64",
	  "the most program memory the zero-copy registration cache keeps registered (pinned), MiB "
	  "(0-1048576; 0: zero copy never)" },
	{ "RDMASHIM_SECCOMP_TRUST", "0",
	  "1: a seccomp filter the process inherited at start (a container runtime's, systemd's "
	  "SystemCallFilter=) allows the shim's own calls: upgrade as usual; 0: such a process stays "
	  "pass-through, as its filter may kill it for a call of ours" },
	{ "RDMASHIM_STATS", "1",
	  "1: keep this process's live counters in a file of its own under RDMASHIM_STATS_DIR for "
	  "'rdmashim stat'; 0: none (the data path then counts nothing)" },
	{ "RDMASHIM_STATS_DIR", "/run/rdmashim",
	  "where the live counters go: one directory per user inside (0700), one file per process (0600); "
	  "an absolute path" },
	{ "RDMASHIM_TEST_FAIL_RDMA_KB", "0",
	  "testing only: break each RDMA channel after it sent this many KiB (0: never)" },
	{ "RDMASHIM_TEST_FAIL_LINK_KB", "0",
	  "testing only: break each RDMA link (its queue pair, so every connection on it) after this many KiB "
	  "were posted on it in all (0: never)" },
	{ "RDMASHIM_TEST_HANDBACK_AFTER", "0",
	  "testing only: each shm connection goes back to TCP, as unpaid, at its Nth send on the channel "
	  "(0: never)" },
	{ "RDMASHIM_TEST_STAMPS", "0",
	  "testing only: 1: keep when each upgrade started and each direction switched, and write them into "
	  "the trace at exit (upgrade.stamps, level warn)" },
	{ "RDMASHIM_TEST_MSGSTAMPS", "0",
	  "testing only: 1: time each send and receive on a channel by phase (copy, post, spin, sleep, ...) "
	  "and write the figures into the trace at exit (msg.stamps, level warn)" },
	{ "RDMASHIM_TEST_NO_PASSRIGHTS", "0",
	  "testing only: 1: never ask the kernel to refuse descriptors on the shim's sockets (SO_PASSRIGHTS, "
	  "Linux 6.16), as on older kernels, so that the defences that do not depend on it are tested alone" },
	{ "RDMASHIM_TEST_FAULTS", "",
	  "testing only: faults to inject, KIND@N[,KIND@N...]: the Nth attempt of KIND in the process fails "
	  "(ring_alloc, bell_loss, peer_stall, verify_fail, rv_silent, switch_late, stat_kill; on RDMA "
	  "cm_timeout, cm_reject, qp_error (N: a byte offset), cq_lost, reg_fail, link_qp_lost, cq_stall; traced as "
	  "fault.injected)" },
};
const size_t shim_config_var_count = sizeof(shim_config_vars) / sizeof(shim_config_vars[0]);

static const char *const transport_names[SHIM_TRANSPORT_COUNT] = { "tcp", "shm", "rdma" };
static const char *const level_names[] = { "off", "error", "warn", "info", "debug", "trace" };

const char *shim_transport_name(enum shim_transport t)
{
	return (unsigned)t < SHIM_TRANSPORT_COUNT ? transport_names[t] : "?";
}

const char *shim_trace_level_name(enum shim_trace_level level)
{
	return (unsigned)level < sizeof(level_names) / sizeof(level_names[0]) ? level_names[level] : "?";
}

/* Parses a decimal number at *p, advancing *p; no sign, no overflow. */
static int parse_decimal(const char **p, unsigned long max, unsigned long *out)
{
	unsigned long v = 0;
	const char *s = *p;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	while (isdigit((unsigned char)*s)) {
		v = v * 10 + (unsigned long)(*s - '0');
		if (v > max)
			return -ERANGE;
		s++;
	}
	*p = s;
	*out = v;
	return 0;
}

static const char *skip_blanks(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

int shim_config_parse_ports(const char *text, uint8_t bitmap[SHIM_PORT_BITMAP_BYTES])
{
	const char *p = text;
	unsigned long lo, hi;

	memset(bitmap, 0, SHIM_PORT_BITMAP_BYTES);
	if (!text || !*skip_blanks(text))
		return 0;
	for (;;) {
		p = skip_blanks(p);
		if (parse_decimal(&p, 65535, &lo) < 0 || lo == 0)
			return -EINVAL;
		hi = lo;
		p = skip_blanks(p);
		if (*p == '-') {
			p = skip_blanks(p + 1);
			if (parse_decimal(&p, 65535, &hi) < 0 || hi < lo)
				return -EINVAL;
			p = skip_blanks(p);
		}
		for (unsigned long port = lo; port <= hi; port++)
			bitmap[port >> 3] |= (uint8_t)(1u << (port & 7));
		if (*p == '\0')
			return 0;
		if (*p != ',')
			return -EINVAL;
		p++;
	}
}

static int lookup_name(const char *word, size_t len, const char *const *names, unsigned count)
{
	for (unsigned i = 0; i < count; i++)
		if (strlen(names[i]) == len && strncasecmp(word, names[i], len) == 0)
			return (int)i;
	return -EINVAL;
}

int shim_config_parse_transports(const char *text, enum shim_transport *out, unsigned *count)
{
	bool seen[SHIM_TRANSPORT_COUNT] = { false };
	const char *p = text;
	unsigned n = 0;

	*count = 0;
	if (!*skip_blanks(text))
		return -EINVAL;
	for (;;) {
		p = skip_blanks(p);
		size_t len = strcspn(p, ", \t");
		int t = lookup_name(p, len, transport_names, SHIM_TRANSPORT_COUNT);

		if (t < 0 || seen[t])
			return -EINVAL;
		seen[t] = true;
		if (t != SHIM_TRANSPORT_TCP)
			out[n++] = (enum shim_transport)t;
		p = skip_blanks(p + len);
		if (*p == '\0')
			break;
		if (*p != ',')
			return -EINVAL;
		p++;
	}
	/* "tcp" only makes sense alone: it means "never upgrade". */
	if (seen[SHIM_TRANSPORT_TCP] && n > 0)
		return -EINVAL;
	*count = n;
	return 0;
}

int shim_config_parse_level(const char *text, enum shim_trace_level *out)
{
	const char *p = skip_blanks(text);
	size_t len = strcspn(p, " \t");
	int level = lookup_name(p, len, level_names, sizeof(level_names) / sizeof(level_names[0]));

	if (level < 0 || *skip_blanks(p + len))
		return -EINVAL;
	*out = (enum shim_trace_level)level;
	return 0;
}

int shim_config_parse_uint(const char *text, unsigned min, unsigned max, unsigned *out)
{
	const char *p = skip_blanks(text);
	unsigned long v;

	if (parse_decimal(&p, max, &v) < 0 || *skip_blanks(p) || v < min)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

static const char *default_of(const char *name)
{
	for (size_t i = 0; i < shim_config_var_count; i++)
		if (strcmp(shim_config_vars[i].name, name) == 0)
			return shim_config_vars[i].default_value;
	return "";
}

static int bad_value(char *err, size_t errlen, const char *name, const char *value, const char *why)
{
	snprintf(err, errlen, "rdmashim: %s=\"%s\" is invalid (%s); the shim stays inert (pass-through)",
		 name, value, why);
	return -EINVAL;
}

struct uint_var {
	const char *name;
	unsigned min, max;
	size_t offset;
	const char *why;
};

static const struct uint_var uint_vars[] = {
	{ "RDMASHIM_AB_PERCENT", 0, 100, offsetof(struct shim_config, ab_percent),
	  "expected an integer 0-100" },
	{ "RDMASHIM_RING_KB", 4, 65536, offsetof(struct shim_config, ring_kb),
	  "expected a power of two 4-65536" },
	{ "RDMASHIM_SPIN_US", 0, 1000000, offsetof(struct shim_config, spin_us),
	  "expected microseconds 0-1000000" },
	{ "RDMASHIM_SPIN_ADAPT", 0, 1, offsetof(struct shim_config, spin_adapt), "expected 0 or 1" },
	{ "RDMASHIM_UNPAID_PERCENT", 0, 100, offsetof(struct shim_config, unpaid_percent),
	  "expected an integer 0-100" },
	{ "RDMASHIM_SHM_PAIRS", 0, 1, offsetof(struct shim_config, shm_pairs), "expected 0 or 1" },
	{ "RDMASHIM_SHM_BELL_LINE", 0, 1, offsetof(struct shim_config, shm_bell_line), "expected 0 or 1" },
	{ "RDMASHIM_BREAKER_FAILURES", 1, 1000, offsetof(struct shim_config, breaker_failures),
	  "expected an integer 1-1000" },
	{ "RDMASHIM_BREAKER_COOLDOWN_MS", 0, 86400000, offsetof(struct shim_config, breaker_cooldown_ms),
	  "expected milliseconds 0-86400000" },
	{ "RDMASHIM_CM_TIMEOUT_MS", 1, 600000, offsetof(struct shim_config, cm_timeout_ms),
	  "expected milliseconds 1-600000" },
	{ "RDMASHIM_UPGRADE_TIMEOUT_MS", 1, 600000, offsetof(struct shim_config, upgrade_timeout_ms),
	  "expected milliseconds 1-600000" },
	{ "RDMASHIM_UPGRADE_AFTER_MS", 0, 600000, offsetof(struct shim_config, upgrade_after_ms),
	  "expected milliseconds 0-600000" },
	{ "RDMASHIM_UPGRADE_AFTER_ROUNDS", 0, 1000, offsetof(struct shim_config, upgrade_after_rounds),
	  "expected a count of round trips 0-1000" },
	{ "RDMASHIM_PLAIN_PEER_MS", 0, 600000, offsetof(struct shim_config, plain_peer_ms),
	  "expected milliseconds 0-600000" },
	{ "RDMASHIM_HUGE_PAGES", 0, 1, offsetof(struct shim_config, huge_pages), "expected 0 or 1" },
	{ "RDMASHIM_RDMA_LINKS", 0, 1, offsetof(struct shim_config, rdma_links), "expected 0 or 1" },
	{ "RDMASHIM_RDMA_LINK_CONNS", 1, SHIM_CFG_LINK_CONNS_MAX, offsetof(struct shim_config, rdma_link_conns),
	  "expected a count of connections 1-128" },
	{ "RDMASHIM_RDMA_LINK_IDLE_MS", 0, 86400000, offsetof(struct shim_config, rdma_link_idle_ms),
	  "expected milliseconds 0-86400000" },
	{ "RDMASHIM_RDMA_STALL_MS", 0, 600000, offsetof(struct shim_config, rdma_stall_ms),
	  "expected milliseconds 0-600000" },
	{ "RDMASHIM_ZEROCOPY_MIN_KB", 4, 1048576, offsetof(struct shim_config, zerocopy_min_kb),
	  "expected KiB 4-1048576" },
	{ "RDMASHIM_ZEROCOPY_SHM_MIN_KB", 4, 1048576, offsetof(struct shim_config, zerocopy_shm_min_kb),
	  "expected KiB 4-1048576" },
	{ "RDMASHIM_MR_CACHE_MB", 0, 1048576, offsetof(struct shim_config, mr_cache_mb), "expected MiB 0-1048576" },
	{ "RDMASHIM_SECCOMP_TRUST", 0, 1, offsetof(struct shim_config, seccomp_trust), "expected 0 or 1" },
	{ "RDMASHIM_STATS", 0, 1, offsetof(struct shim_config, stats), "expected 0 or 1" },
	{ "RDMASHIM_TEST_FAIL_LINK_KB", 0, 4194304, offsetof(struct shim_config, test_fail_link_kb),
	  "expected KiB 0-4194304" },
	{ "RDMASHIM_TEST_FAIL_RDMA_KB", 0, 4194304, offsetof(struct shim_config, test_fail_rdma_kb),
	  "expected KiB 0-4194304" },
	{ "RDMASHIM_TEST_HANDBACK_AFTER", 0, 1000000000, offsetof(struct shim_config, test_handback_after),
	  "expected a count of sends 0-1000000000" },
	{ "RDMASHIM_TEST_STAMPS", 0, 1, offsetof(struct shim_config, test_stamps), "expected 0 or 1" },
	{ "RDMASHIM_TEST_MSGSTAMPS", 0, 1, offsetof(struct shim_config, test_msgstamps), "expected 0 or 1" },
	{ "RDMASHIM_TEST_NO_PASSRIGHTS", 0, 1, offsetof(struct shim_config, test_no_passrights),
	  "expected 0 or 1" },
};

static const char *value_of(shim_getenv_fn get, void *ctx, const char *name)
{
	const char *v = get(name, ctx);

	return v ? v : default_of(name);
}

static int parse_all(struct shim_config *cfg, shim_getenv_fn get, void *ctx, char *err, size_t errlen)
{
	const char *v;

	v = value_of(get, ctx, "RDMASHIM_PORTS");
	if (shim_config_parse_ports(v, cfg->ports) < 0)
		return bad_value(err, errlen, "RDMASHIM_PORTS", v,
				 "expected ports 1-65535 and ranges LO-HI, comma-separated");
	v = value_of(get, ctx, "RDMASHIM_TRANSPORTS");
	if (shim_config_parse_transports(v, cfg->transports, &cfg->n_transports) < 0)
		return bad_value(err, errlen, "RDMASHIM_TRANSPORTS", v,
				 "expected shm and/or rdma in order of preference, or tcp alone");
	v = value_of(get, ctx, "RDMASHIM_MODE");
	if (strcmp(v, "on") && strcmp(v, "shadow"))
		return bad_value(err, errlen, "RDMASHIM_MODE", v, "expected on or shadow");
	cfg->shadow = !strcmp(v, "shadow");
	v = value_of(get, ctx, "RDMASHIM_ZEROCOPY");
	if (!strcmp(v, "off"))
		cfg->zerocopy = SHIM_ZC_OFF;
	else if (!strcmp(v, "on"))
		cfg->zerocopy = SHIM_ZC_ON;
	else if (!strcmp(v, "auto"))
		cfg->zerocopy = SHIM_ZC_AUTO;
	else
		return bad_value(err, errlen, "RDMASHIM_ZEROCOPY", v, "expected auto, on or off");
	v = value_of(get, ctx, "RDMASHIM_TRACE");
	if (shim_config_parse_level(v, &cfg->trace_level) < 0)
		return bad_value(err, errlen, "RDMASHIM_TRACE", v,
				 "expected off, error, warn, info, debug or trace");
	v = value_of(get, ctx, "RDMASHIM_TRACE_FILE");
	if (strlen(v) >= sizeof(cfg->trace_file))
		return bad_value(err, errlen, "RDMASHIM_TRACE_FILE", v, "path too long");
	strcpy(cfg->trace_file, v);
	v = value_of(get, ctx, "RDMASHIM_STATS_DIR");
	if (v[0] != '/' || strlen(v) >= sizeof(cfg->stats_dir))
		return bad_value(err, errlen, "RDMASHIM_STATS_DIR", v, "expected an absolute path");
	strcpy(cfg->stats_dir, v);
	v = value_of(get, ctx, "RDMASHIM_TEST_FAULTS");
	char why[256];

	if (shim_faults_parse(v, &cfg->faults, why, sizeof(why)) < 0)
		return bad_value(err, errlen, "RDMASHIM_TEST_FAULTS", v, why);
	for (size_t i = 0; i < sizeof(uint_vars) / sizeof(uint_vars[0]); i++) {
		const struct uint_var *u = &uint_vars[i];
		unsigned *field = (unsigned *)((char *)cfg + u->offset);

		v = value_of(get, ctx, u->name);
		if (shim_config_parse_uint(v, u->min, u->max, field) < 0)
			return bad_value(err, errlen, u->name, v, u->why);
	}
	if (cfg->ring_kb & (cfg->ring_kb - 1))
		return bad_value(err, errlen, "RDMASHIM_RING_KB", value_of(get, ctx, "RDMASHIM_RING_KB"),
				 "expected a power of two 4-65536");
	return 0;
}

int shim_config_parse(struct shim_config *cfg, shim_getenv_fn get, void *ctx, char *err, size_t errlen)
{
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	if (errlen)
		err[0] = '\0';
	rc = parse_all(cfg, get, ctx, err, errlen);
	if (rc < 0) {
		memset(cfg->ports, 0, sizeof(cfg->ports));
		cfg->enabled = false;
		return rc;
	}
	cfg->enabled = false;
	for (size_t i = 0; i < SHIM_PORT_BITMAP_BYTES && !cfg->enabled; i++)
		cfg->enabled = cfg->ports[i] != 0;
	return 0;
}
