/*
 * Configuration from the environment. Every variable is listed in
 * shim_config_vars[] (`rdmashim config` prints that table, and
 * docs/CONFIG.md's is generated from it: tools/gen-config-doc.sh).
 *
 * Parsing is all-or-nothing: one bad value leaves the shim inert (pure
 * pass-through) after one line on stderr naming the variable and the value.
 */
#ifndef RDMASHIM_CONFIG_H
#define RDMASHIM_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "faults.h"

enum shim_transport {
	SHIM_TRANSPORT_TCP = 0,
	SHIM_TRANSPORT_SHM,
	SHIM_TRANSPORT_RDMA,
	SHIM_TRANSPORT_COUNT,
};

enum shim_trace_level {
	SHIM_TRACE_OFF = 0,
	SHIM_TRACE_ERROR,
	SHIM_TRACE_WARN,
	SHIM_TRACE_INFO,
	SHIM_TRACE_DEBUG,
	SHIM_TRACE_TRACE,
};

#define SHIM_PORT_BITMAP_BYTES (65536 / 8)
/* Ceiling of RDMASHIM_RDMA_LINK_CONNS (transport/rdma/rdma_link.h sizes by it). */
#define SHIM_CFG_LINK_CONNS_MAX 128
/* Its default: a link's queues are sized for its cap when it is made. */
#define SHIM_CFG_LINK_CONNS_DEFAULT 32
#define SHIM_CFG_STR_(x) #x
#define SHIM_CFG_STR(x) SHIM_CFG_STR_(x)

/* RDMASHIM_ZEROCOPY (docs/ZEROCOPY.md). */
enum shim_zc_mode {
	SHIM_ZC_OFF = 0,
	SHIM_ZC_ON,
	SHIM_ZC_AUTO, /* on only where it measured a win: no path yet */
};

struct shim_config {
	/* True when RDMASHIM_PORTS names at least one port and nothing is bad. */
	bool enabled;
	uint8_t ports[SHIM_PORT_BITMAP_BYTES];
	/* Upgrade preference, best first; TCP never appears here. */
	enum shim_transport transports[SHIM_TRANSPORT_COUNT];
	unsigned n_transports;
	unsigned ab_percent;
	bool shadow; /* RDMASHIM_MODE=shadow: negotiate, never switch (conn/upgrade.h) */
	enum shim_trace_level trace_level;
	char trace_file[PATH_MAX]; /* empty: stderr; may hold %p */
	char stats_dir[256];       /* RDMASHIM_STATS_DIR: absolute (core/statarea.c) */
	unsigned ring_kb;
	unsigned spin_us;
	unsigned spin_adapt; /* 0 or 1: spin.h */
	unsigned unpaid_percent; /* 0 or the share of exchanges woken by bells that hands a connection back (io_tx.c) */
	unsigned shm_pairs;  /* 0 or 1: transport/shm/pair.h */
	unsigned shm_bell_line; /* 0 or 1: bells on a socketpair of the connection's (shm.h) */
	unsigned breaker_failures;
	unsigned breaker_cooldown_ms;
	unsigned cm_timeout_ms;
	unsigned upgrade_timeout_ms;
	unsigned upgrade_after_ms; /* short connections never pay for a handshake */
	unsigned upgrade_after_rounds; /* nor one that carried fewer round trips (upgrade.h) */
	unsigned plain_peer_ms;    /* 0 or how soon a peer that answers over TCP is taken for one without the shim */
	unsigned huge_pages;        /* 0 or 1: ring pools on 2 MiB pages when possible */
	unsigned rdma_links;        /* 0 or 1: transport/rdma/rdma_link.h */
	unsigned rdma_link_conns;   /* 1..SHIM_CFG_LINK_CONNS_MAX: transport/rdma/rdma_link.h */
	unsigned rdma_link_idle_ms; /* 0 or how long an empty link stays: transport/rdma/rdma_link_table.c */
	unsigned rdma_stall_ms;     /* 0 or a stalled CQ's bound: transport/rdma/rdma_link.c, shim_rdma_link_watch */
	unsigned stats;             /* 0 or 1: the live stats area (core/statarea.c) */
	enum shim_zc_mode zerocopy;
	unsigned zerocopy_min_kb;   /* the smallest zero-copy send */
	unsigned zerocopy_shm_min_kb; /* the smallest one-copy receive on shm (transport/shm/shm_zc.h) */
	unsigned mr_cache_mb;       /* the registration cache's cap (transport/rdma/mr_cache.h) */
	unsigned seccomp_trust;     /* 0 or 1: an inherited seccomp filter allows our calls (interpose/init.c) */
	unsigned test_fail_rdma_kb; /* testing only: 0 or where RDMA channels break */
	unsigned test_fail_link_kb; /* testing only: 0 or where RDMA links break */
	unsigned test_handback_after; /* testing only: 0 or the send on the channel that hands back (io_tx.c) */
	unsigned test_stamps;         /* testing only: 0 or 1, core/stamps.h */
	unsigned test_msgstamps;      /* testing only: 0 or 1, core/msgstamps.h */
	unsigned test_no_passrights;  /* testing only: 0 or 1, core/reaper.h */
	struct shim_fault_plan faults; /* testing only: RDMASHIM_TEST_FAULTS, core/faults.h */
};

struct shim_config_var {
	const char *name;
	const char *default_value; /* as the user would write it */
	const char *help;
};

extern const struct shim_config_var shim_config_vars[];
extern const size_t shim_config_var_count;

/* Returns the value of an environment-like variable, or NULL when unset. */
typedef const char *(*shim_getenv_fn)(const char *name, void *ctx);

/*
 * Fills cfg from the variables get() returns. On success returns 0. On a bad
 * value returns -EINVAL, leaves cfg disabled, and writes one line (no
 * newline) naming the variable and the value into err.
 */
int shim_config_parse(struct shim_config *cfg, shim_getenv_fn get, void *ctx, char *err,
		      size_t errlen);

/* The single-variable parsers, exposed for the unit tests and the tool. */
int shim_config_parse_ports(const char *text, uint8_t bitmap[SHIM_PORT_BITMAP_BYTES]);
int shim_config_parse_transports(const char *text, enum shim_transport *out, unsigned *count);
int shim_config_parse_level(const char *text, enum shim_trace_level *out);
int shim_config_parse_uint(const char *text, unsigned min, unsigned max, unsigned *out);

static inline bool shim_config_port_listed(const struct shim_config *cfg, uint16_t port)
{
	return cfg->ports[port >> 3] & (1u << (port & 7));
}

const char *shim_transport_name(enum shim_transport t);
const char *shim_trace_level_name(enum shim_trace_level level);

/* The process-wide configuration, read once by the constructor. */
extern struct shim_config shim_cfg;

#endif
