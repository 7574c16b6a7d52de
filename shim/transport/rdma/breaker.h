/*
 * Per-peer circuit breaker for RDMA attempts (one uthash table keyed by the
 * peer's IP, v4-mapped like shim_endpoint).
 *
 *   closed --N consecutive failures--> open --cooldown--> half-open
 *   half-open --the one probe succeeds--> closed
 *   half-open --the probe fails--> open (a new cooldown)
 *
 * Time comes in as a parameter (milliseconds on any monotonic clock), so the
 * unit tests drive it without sleeping. Thread-safe: one mutex per table.
 */
#ifndef RDMASHIM_BREAKER_H
#define RDMASHIM_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

enum shim_breaker_verdict {
	SHIM_BREAKER_ALLOW, /* closed: attempt */
	SHIM_BREAKER_PROBE, /* half-open: this attempt is the one probe */
	SHIM_BREAKER_SKIP,  /* open (or a probe is out): do not attempt */
};

enum shim_breaker_state {
	SHIM_BREAKER_CLOSED,
	SHIM_BREAKER_OPEN,
	SHIM_BREAKER_HALF_OPEN,
};

struct shim_breaker;

/* failures: how many consecutive failures open it (>= 1). */
struct shim_breaker *shim_breaker_new(unsigned failures, unsigned cooldown_ms);
void shim_breaker_free(struct shim_breaker *b);

/* Whether to attempt a connection to peer now. */
enum shim_breaker_verdict shim_breaker_check(struct shim_breaker *b, const uint8_t peer[16], uint64_t now_ms);
/* The outcome of an attempt check() allowed. */
void shim_breaker_record(struct shim_breaker *b, const uint8_t peer[16], bool ok, uint64_t now_ms);
/* For tests and the tool: the peer's state (CLOSED when unknown). */
enum shim_breaker_state shim_breaker_state_of(struct shim_breaker *b, const uint8_t peer[16], uint64_t now_ms);
const char *shim_breaker_state_name(enum shim_breaker_state st);

/* The process-wide breaker, configured from shim_cfg on first use. */
struct shim_breaker *shim_breaker_global(void);
/* Fork handler half: true takes the global breaker's lock, false drops it. */
void shim_breaker_atfork(bool prepare);
uint64_t shim_breaker_now_ms(void);

#endif
