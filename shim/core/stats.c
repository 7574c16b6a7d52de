/* Per-reason counters; see stats.h. */
#include "stats.h"

#include <stdio.h>

#include "faults.h"
#include "trace.h"

unsigned long shim_stats_reason[SHIM_REASON_COUNT];
unsigned long shim_stats_spin[SHIM_SPIN_STAT_COUNT];

static const char *const spin_names[SHIM_SPIN_STAT_COUNT] = {
	"runs", "hits", "misses", "skipped_crowded", "skipped_backoff", "backoffs", "resumes",
	"preempted", "skipped_contended", "near_misses",
};

/* Appends "name":n (a comma before it past the first) to buf[*off, size).
 * False when it does not fit, and the list ends there. */
static bool put_count(char *buf, size_t size, size_t *off, const char *name, unsigned long n)
{
	int w = snprintf(buf + *off, size - *off, "%s\"%s\":%lu", *off ? "," : "", name, n);

	if (w < 0 || (size_t)w >= size - *off) {
		/* snprintf wrote what fit: a member cut short would leave the
		 * line invalid JSON. The list ends at the last whole one. */
		buf[*off] = '\0';
		return false;
	}
	*off += (size_t)w;
	return true;
}

void shim_stats_trace(void)
{
	char body[SHIM_TRACE_LINE_MAX / 2], spin[SHIM_TRACE_LINE_MAX / 4], faults[SHIM_TRACE_LINE_MAX / 8];
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
	SHIM_TRACE(SHIM_TRACE_INFO, "process.stats", -1, NULL, SHIM_REASON_NONE,
		   "\"reasons\":{%s},\"spin\":{%s}%s%s%s", body, spin, foff ? ",\"faults\":{" : "", faults,
		   foff ? "}" : "");
}
