/* Per-process counters, by reason code and by event; dumped into the trace
 * at exit ("process.stats") and read by tests. */
#ifndef RDMASHIM_STATS_H
#define RDMASHIM_STATS_H

#include "reason.h"

extern unsigned long shim_stats_reason[SHIM_REASON_COUNT];

static inline void shim_stats_count(enum shim_reason reason)
{
	if ((unsigned)reason < SHIM_REASON_COUNT)
		__atomic_add_fetch(&shim_stats_reason[reason], 1, __ATOMIC_RELAXED);
}

/* Emits one trace line with every non-zero counter. */
void shim_stats_trace(void);

#endif
