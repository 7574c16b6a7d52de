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
	SHIM_SPIN_STAT_COUNT,
};

extern unsigned long shim_stats_spin[SHIM_SPIN_STAT_COUNT];

static inline void shim_stats_spin_count(enum shim_spin_stat what)
{
	__atomic_add_fetch(&shim_stats_spin[what], 1, __ATOMIC_RELAXED);
}

/* Emits one trace line with every non-zero counter ("reasons" and "spin" objects). */
void shim_stats_trace(void);

#endif
