/* Per-reason counters; see stats.h. */
#include "stats.h"

#include <stdbool.h>
#include <stdio.h>

#include "faults.h"
#include "trace.h"

unsigned long shim_stats_reason[SHIM_REASON_COUNT];
unsigned long shim_stats_spin[SHIM_SPIN_STAT_COUNT];
unsigned long shim_stats_zc[SHIM_ZC_STAT_COUNT];

static const char *const spin_names[SHIM_SPIN_STAT_COUNT] = {
	"runs", "hits", "misses", "skipped_crowded", "skipped_backoff", "backoffs", "resumes",
	"preempted", "skipped_contended", "near_misses", "stalled",
};

static const char *const zc_names[SHIM_ZC_STAT_COUNT] = {
	"zc_sends", "zc_recvs", "zc_bytes", "mr_cache_hits", "mr_cache_misses", "mr_cache_invalidations",
	"nonblocking", "unwatched", "reg_failed", "raced", "too_big", "cache_full", "channel", "no_peer",
	"denied",
};

const char *shim_zc_stat_name(enum shim_zc_stat what)
{
	return (unsigned)what < SHIM_ZC_STAT_COUNT ? zc_names[what] : "?";
}

/* Appends "name":n (a comma before it past the first) to buf[*off, size).
 * False when it does not fit, and the list ends there. */
static bool put_count(char *buf, size_t size, size_t *off, const char *name, unsigned long n)
{
	return shim_trace_put(buf, size, off, *off ? ",\"%s\":%lu" : "\"%s\":%lu", name, n);
}

/* The "zc" object: its non-zero counters, zc_fallback_copies and its
 * non-zero reasons; empty when nothing counted. */
static void zc_object(char *out, size_t size)
{
	unsigned long v[SHIM_ZC_STAT_COUNT], fb = 0, any = 0;
	size_t off = 0;
	bool ok = true;

	for (unsigned i = 0; i < SHIM_ZC_STAT_COUNT; i++) {
		v[i] = __atomic_load_n(&shim_stats_zc[i], __ATOMIC_RELAXED);
		any |= v[i];
		if (i >= SHIM_ZC_FB_FIRST)
			fb += v[i];
	}
	out[0] = '\0';
	if (!any)
		return;
	ok = shim_trace_put(out, size, &off, ",\"zc\":{");
	for (unsigned i = 0; i < SHIM_ZC_FB_FIRST && ok; i++)
		if (v[i])
			ok = shim_trace_put(out, size, &off, "\"%s\":%lu,", zc_names[i], v[i]);
	ok = ok && shim_trace_put(out, size, &off, "\"zc_fallback_copies\":%lu,\"zc_fallback\":{", fb);
	for (unsigned i = SHIM_ZC_FB_FIRST, n = 0; i < SHIM_ZC_STAT_COUNT && ok; i++)
		if (v[i])
			ok = shim_trace_put(out, size, &off, n++ ? ",\"%s\":%lu" : "\"%s\":%lu", zc_names[i], v[i]);
	ok = ok && shim_trace_put(out, size, &off, "}}");
	if (!ok)
		out[0] = '\0';
}

void shim_stats_trace(void)
{
	char body[SHIM_TRACE_LINE_MAX / 2], spin[SHIM_TRACE_LINE_MAX / 4], faults[SHIM_TRACE_LINE_MAX / 8];
	char zc[SHIM_TRACE_LINE_MAX / 4];
	size_t off = 0, soff = 0, foff = 0;

	body[0] = '\0';
	for (unsigned r = 0; r < SHIM_REASON_COUNT; r++) {
		unsigned long n = __atomic_load_n(&shim_stats_reason[r], __ATOMIC_RELAXED);

		if (n && !put_count(body, sizeof(body), &off, shim_reason_name((enum shim_reason)r), n))
			break;
	}
	spin[0] = '\0';
	for (unsigned i = 0; i < SHIM_SPIN_STAT_COUNT; i++) {
		unsigned long n = __atomic_load_n(&shim_stats_spin[i], __ATOMIC_RELAXED);

		if (n && !put_count(spin, sizeof(spin), &soff, spin_names[i], n))
			break;
	}
	/* Test-only faults struck (faults.h): only where some were armed. */
	faults[0] = '\0';
	for (unsigned k = 0; k < SHIM_FAULT_KINDS; k++) {
		unsigned long n = shim_faults_injected((enum shim_fault_kind)k);

		if (n && !put_count(faults, sizeof(faults), &foff, shim_fault_name((enum shim_fault_kind)k), n))
			break;
	}
	zc_object(zc, sizeof(zc));
	SHIM_TRACE(SHIM_TRACE_INFO, "process.stats", -1, NULL, SHIM_REASON_NONE,
		   "\"reasons\":{%s},\"spin\":{%s}%s%s%s%s", body, spin, foff ? ",\"faults\":{" : "", faults,
		   foff ? "}" : "", zc);
}
