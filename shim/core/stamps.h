/*
 * Upgrade stamps (RDMASHIM_TEST_STAMPS=1, testing only): when each
 * connection's upgrade started in this process and when each of its
 * directions switched here, kept in memory and written into the trace at
 * exit, one "upgrade.stamps" line per connection at level warn.
 *
 * Why: integration/bench/upgrade_time.sh times an upgrade across both
 * processes. Taking the times from the trace's own lines meant running it
 * at info, which writes several lines (a few microseconds each) inside
 * the span being measured. With the stamps, the benchmark runs the trace
 * at warn, which writes nothing on the way. Times are CLOCK_MONOTONIC
 * nanoseconds (shim_now_ns), one clock for every process of the host.
 */
#ifndef RDMASHIM_STAMPS_H
#define RDMASHIM_STAMPS_H

#include "tuple.h"

/* Keeps one connection's stamps (0: that step did not happen here). Safe
 * from any thread; past the first SHIM_STAMPS_MAX connections of the
 * process, stamps are counted as dropped. */
void shim_stamps_keep(const struct shim_tuple *t, const char *role, unsigned long long start_ns,
		      unsigned long long tx_ns, unsigned long long rx_ns);

/* Writes every kept stamp into the trace (at exit). */
void shim_stamps_trace(void);

#define SHIM_STAMPS_MAX 16384

#endif
