/*
 * The A/B verdict of `rdmashim stat --ab`: two arms' round-trip histograms
 * per one-second interval (statarea.h, struct shim_stat_ab) in, a quantile
 * per arm, their ratio (accelerated / control) with a 95 % bootstrap
 * confidence interval, and one verdict out. Pure computation: no clock,
 * no I/O, a seeded generator of its own, so a seed reproduces a result.
 *
 * The method (docs/OPERATIONS.md, "A/B verdict"):
 *  - the unit is the interval: only intervals where both arms have samples
 *    are used, and the bootstrap draws whole intervals with replacement,
 *    both arms of a drawn interval together (paired: a second of load hits
 *    both arms alike, so the pairing takes it out of the ratio, and round
 *    trips within one second, which are not independent, stay together);
 *  - a quantile is read from the summed histogram, interpolated linearly
 *    inside its log-linear bucket;
 *  - the 95 % interval is the 2.5th and 97.5th percentiles of the
 *    replicates' ratios.
 */
#ifndef RDMASHIM_ABVERDICT_H
#define RDMASHIM_ABVERDICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "statarea.h"

enum shim_ab_verdict {
	SHIM_AB_BETTER,
	SHIM_AB_WORSE,
	SHIM_AB_EQUIVALENT,
	SHIM_AB_INCONCLUSIVE,
	SHIM_AB_INSUFFICIENT_DATA,
};

/* One interval: a histogram per arm (index 0 accelerated, 1 control). */
typedef uint64_t shim_ab_interval[SHIM_STAT_ARMS][SHIM_STAT_RTT_BUCKETS];

struct shim_ab_input {
	size_t nint;
	const shim_ab_interval *iv;
	uint64_t conns[SHIM_STAT_ARMS], fallbacks[SHIM_STAT_ARMS], errors[SHIM_STAT_ARMS];
};

struct shim_ab_params {
	uint64_t seed;
	unsigned boot;         /* bootstrap replicates (default 2000) */
	double margin;         /* fraction: 0.05 is 5 % */
	double quantile;       /* the verdict's: 0.5 or 0.99 */
	double max_fallback;   /* the accelerated arm's fallbacks / connections above this: WORSE */
	double max_error;      /* its errors / connections above this: WORSE */
	uint64_t min_samples_p50, min_samples_p99; /* per arm, for that quantile to be judged */
	unsigned min_intervals;
};

void shim_ab_params_default(struct shim_ab_params *p);

struct shim_ab_quant {
	double q;
	bool judged;           /* enough samples and intervals for this quantile */
	double est_ns[SHIM_STAT_ARMS];
	double ratio, lo, hi;  /* accelerated / control; lo, hi: 95 % interval (judged only) */
	enum shim_ab_verdict verdict;
};

struct shim_ab_result {
	size_t intervals;      /* used: both arms have samples */
	uint64_t n[SHIM_STAT_ARMS]; /* samples in those intervals */
	struct shim_ab_quant p50, p99;
	double fallback_rate[SHIM_STAT_ARMS], error_rate[SHIM_STAT_ARMS];
	bool guard_fallback, guard_error; /* a guardrail made the verdict WORSE */
	enum shim_ab_verdict verdict;
	const char *why; /* one phrase */
};

/* 0, or -ENOMEM (no result then); -EINVAL for parameters out of range. */
int shim_ab_judge(const struct shim_ab_input *in, const struct shim_ab_params *p, struct shim_ab_result *out);

/* The q-th quantile (0 < q <= 1) of hist in ns, interpolated in its
 * bucket; 0 with no sample. */
double shim_ab_quantile_ns(const uint64_t hist[SHIM_STAT_RTT_BUCKETS], double q);

const char *shim_ab_verdict_name(enum shim_ab_verdict v);
/* The exit status that tells scripts the verdict: 0 BETTER, 1 WORSE,
 * 3 EQUIVALENT, 4 INCONCLUSIVE, 5 INSUFFICIENT_DATA (2 is bad usage). */
int shim_ab_verdict_exit(enum shim_ab_verdict v);

#endif
