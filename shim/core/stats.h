/* Per-process counters, by reason code and by event; dumped into the trace
 * at exit ("process.stats") and read by tests. */
#ifndef RDMASHIM_STATS_H
#define RDMASHIM_STATS_H

#include "reason.h"
#include "statarea.h"

extern unsigned long shim_stats_reason[SHIM_REASON_COUNT];

static inline void shim_stats_count(enum shim_reason reason)
{
	if ((unsigned)reason < SHIM_REASON_COUNT)
	{
		__atomic_add_fetch(&shim_stats_reason[reason], 1, __ATOMIC_RELAXED);
		shim_stat_reason(reason);
	}
}

/* Busy polling (spin.h): spins run, paid (hit) or not (miss), waits that
 * skipped their spin (every core had a spinner; the waiter backed off),
 * back-offs entered and ended by a probe that paid. */
enum shim_spin_stat {
	SHIM_SPIN_STAT_RUN,
	SHIM_SPIN_STAT_HIT,
	SHIM_SPIN_STAT_MISS,
	SHIM_SPIN_STAT_SKIP_CROWDED,
	SHIM_SPIN_STAT_SKIP_BACKOFF,
	SHIM_SPIN_STAT_BACKOFF,
	SHIM_SPIN_STAT_RESUME,
	SHIM_SPIN_STAT_PREEMPTED,
	SHIM_SPIN_STAT_SKIP_CONTENDED,
	SHIM_SPIN_STAT_NEAR, /* ran out, the data came within a slow wake-up after (spin.h) */
	SHIM_SPIN_STAT_STALLED, /* a gap between two looks with no switch: the CPU stalled, no contention */
	SHIM_SPIN_STAT_COUNT,
};

extern unsigned long shim_stats_spin[SHIM_SPIN_STAT_COUNT];

static inline void shim_stats_spin_count(enum shim_spin_stat what)
{
	__atomic_add_fetch(&shim_stats_spin[what], 1, __ATOMIC_RELAXED);
}

/* Zero copy (transport/rdma/mr_cache.h, docs/ZEROCOPY.md): sends and
 * receives that moved the program's own memory, the registration cache's
 * lookups and invalidations, and the large sends copied instead, by why.
 * The fallbacks' sum is zc_fallback_copies. */
enum shim_zc_stat {
	SHIM_ZC_SENDS,
	SHIM_ZC_RECVS,
	SHIM_ZC_BYTES,
	SHIM_ZC_MR_HITS,
	SHIM_ZC_MR_MISSES,
	SHIM_ZC_MR_INVALIDATIONS,
	SHIM_ZC_FB_FIRST,
	SHIM_ZC_FB_NONBLOCKING = SHIM_ZC_FB_FIRST, /* a nonblocking send */
	SHIM_ZC_FB_UNWATCHED,  /* memory the cache can not watch */
	SHIM_ZC_FB_REG_FAILED, /* the registration failed (RLIMIT_MEMLOCK) */
	SHIM_ZC_FB_RACED,      /* the mapping changed while it was registered */
	SHIM_ZC_FB_TOO_BIG,    /* larger than RDMASHIM_MR_CACHE_MB */
	SHIM_ZC_FB_CACHE_FULL, /* every entry held by a send */
	SHIM_ZC_FB_CHANNEL,    /* the channel could not take it (unproven peer, staged bytes) */
	SHIM_ZC_FB_NO_PEER,    /* shm: no pidfd of the peer's process (shm_zc.c) */
	SHIM_ZC_FB_DENIED,     /* shm: the kernel refused the write (another user, Yama) */
	SHIM_ZC_STAT_COUNT,
};

_Static_assert(SHIM_ZC_STAT_COUNT <= SHIM_STAT_ZC, "the stats area has room for every zc counter");
extern unsigned long shim_stats_zc[SHIM_ZC_STAT_COUNT];

/* Its name in process.stats ("zc_sends", "mr_cache_hits", a fallback's
 * reason). */
const char *shim_zc_stat_name(enum shim_zc_stat what);

static inline void shim_stats_zc_add(enum shim_zc_stat what, unsigned long n)
{
	__atomic_add_fetch(&shim_stats_zc[what], n, __ATOMIC_RELAXED);
	shim_stat_zc((unsigned)what, n);
}

/* Emits one trace line with every non-zero counter ("reasons", "spin" and, once anything
 * counted, "zc" objects). */
void shim_stats_trace(void);

#endif
