/* The A/B verdict: a paired bootstrap over whole intervals; see abverdict.h. */
#include "abverdict.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void shim_ab_params_default(struct shim_ab_params *p)
{
	memset(p, 0, sizeof(*p));
	p->boot = 2000;
	p->margin = 0.05;
	p->quantile = 0.5;
	p->max_fallback = 0.10;
	p->max_error = 0.01;
	p->min_samples_p50 = 100;
	p->min_samples_p99 = 1000;
	p->min_intervals = 10;
}

static const char *const verdict_names[] = {
	"BETTER", "WORSE", "EQUIVALENT", "INCONCLUSIVE", "INSUFFICIENT_DATA",
};

const char *shim_ab_verdict_name(enum shim_ab_verdict v)
{
	return (unsigned)v < sizeof(verdict_names) / sizeof(verdict_names[0]) ? verdict_names[v] : "?";
}

int shim_ab_verdict_exit(enum shim_ab_verdict v)
{
	static const int code[] = { 0, 1, 3, 4, 5 };

	return (unsigned)v < sizeof(code) / sizeof(code[0]) ? code[v] : 4;
}

double shim_ab_quantile_ns(const uint64_t hist[SHIM_STAT_RTT_BUCKETS], double q)
{
	uint64_t total = 0, seen = 0;
	double want;

	for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
		total += hist[b];
	if (!total)
		return 0;
	want = q * (double)total;
	for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++) {
		if (!hist[b])
			continue;
		if ((double)(seen + hist[b]) >= want) {
			double lo = b ? (double)shim_stat_rtt_upper_ns(b - 1) : 0;
			double hi = (double)shim_stat_rtt_upper_ns(b);
			double in = (want - (double)seen) / (double)hist[b];

			if (in < 0)
				in = 0;
			return lo + (hi - lo) * in;
		}
		seen += hist[b];
	}
	return (double)shim_stat_rtt_upper_ns(SHIM_STAT_RTT_BUCKETS - 1);
}

/* splitmix64: small, fast, and the same sequence for a seed everywhere. */
static uint64_t next_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The value at fraction f of sorted v[0..n) (nearest rank, interpolated). */
static double percentile(const double *v, size_t n, double f)
{
	double pos = f * (double)(n - 1);
	size_t i = (size_t)pos;

	if (i + 1 >= n)
		return v[n - 1];
	return v[i] + (v[i + 1] - v[i]) * (pos - (double)i);
}

static enum shim_ab_verdict classify(double lo, double hi, double margin)
{
	if (hi < 1.0 - margin)
		return SHIM_AB_BETTER;
	if (lo > 1.0 + margin)
		return SHIM_AB_WORSE;
	if (lo >= 1.0 - margin && hi <= 1.0 + margin)
		return SHIM_AB_EQUIVALENT;
	return SHIM_AB_INCONCLUSIVE;
}

/* Sum of the used intervals' histograms, interval k weighted w[k]. */
static void sum_hist(const shim_ab_interval *iv, const size_t *use, const unsigned *w, size_t k,
		     uint64_t out[SHIM_STAT_ARMS][SHIM_STAT_RTT_BUCKETS])
{
	memset(out, 0, sizeof(uint64_t) * SHIM_STAT_ARMS * SHIM_STAT_RTT_BUCKETS);
	for (size_t i = 0; i < k; i++) {
		unsigned m = w ? w[i] : 1;

		if (!m)
			continue;
		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
			for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
				out[a][b] += (uint64_t)m * iv[use[i]][a][b];
	}
}

int shim_ab_judge(const struct shim_ab_input *in, const struct shim_ab_params *p, struct shim_ab_result *out)
{
	uint64_t all[SHIM_STAT_ARMS][SHIM_STAT_RTT_BUCKETS], rep[SHIM_STAT_ARMS][SHIM_STAT_RTT_BUCKETS];
	struct shim_ab_quant *qs[2];
	size_t *use = NULL, k = 0;
	unsigned *w = NULL;
	double *r50 = NULL, *r99 = NULL;
	uint64_t rng = p->seed;
	int rc = 0;

	if (!(p->margin >= 0 && p->margin < 1) || (p->quantile != 0.5 && p->quantile != 0.99) || !p->boot)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->p50.q = 0.5;
	out->p99.q = 0.99;
	qs[0] = &out->p50;
	qs[1] = &out->p99;
	use = malloc((in->nint ? in->nint : 1) * sizeof(*use));
	w = malloc((in->nint ? in->nint : 1) * sizeof(*w));
	r50 = malloc(p->boot * sizeof(*r50));
	r99 = malloc(p->boot * sizeof(*r99));
	if (!use || !w || !r50 || !r99) {
		rc = -ENOMEM;
		goto out;
	}
	/* Paired: an interval counts when both arms have samples in it. */
	for (size_t i = 0; i < in->nint; i++) {
		uint64_t n[SHIM_STAT_ARMS] = { 0 };

		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
			for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
				n[a] += in->iv[i][a][b];
		if (n[0] && n[1]) {
			use[k++] = i;
			out->n[0] += n[0];
			out->n[1] += n[1];
		}
	}
	out->intervals = k;
	sum_hist(in->iv, use, NULL, k, all);
	for (unsigned j = 0; j < 2; j++) {
		struct shim_ab_quant *q = qs[j];
		uint64_t need = j ? p->min_samples_p99 : p->min_samples_p50;

		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
			q->est_ns[a] = shim_ab_quantile_ns(all[a], q->q);
		q->ratio = q->est_ns[1] > 0 ? q->est_ns[0] / q->est_ns[1] : 0;
		q->judged = k >= p->min_intervals && out->n[0] >= need && out->n[1] >= need;
		q->verdict = SHIM_AB_INSUFFICIENT_DATA;
	}
	if (out->p50.judged || out->p99.judged) {
		for (unsigned r = 0; r < p->boot; r++) {
			memset(w, 0, k * sizeof(*w));
			for (size_t i = 0; i < k; i++)
				w[next_rand(&rng) % k]++;
			sum_hist(in->iv, use, w, k, rep);
			for (unsigned j = 0; j < 2; j++) {
				double c = shim_ab_quantile_ns(rep[1], qs[j]->q);

				(j ? r99 : r50)[r] = c > 0 ? shim_ab_quantile_ns(rep[0], qs[j]->q) / c : 0;
			}
		}
		for (unsigned j = 0; j < 2; j++) {
			struct shim_ab_quant *q = qs[j];
			double *v = j ? r99 : r50;

			if (!q->judged)
				continue;
			qsort(v, p->boot, sizeof(*v), cmp_double);
			q->lo = percentile(v, p->boot, 0.025);
			q->hi = percentile(v, p->boot, 0.975);
			q->verdict = classify(q->lo, q->hi, p->margin);
		}
	}
	for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
		if (in->conns[a]) {
			out->fallback_rate[a] = (double)in->fallbacks[a] / (double)in->conns[a];
			out->error_rate[a] = (double)in->errors[a] / (double)in->conns[a];
		}
	/* The guardrails look at the accelerated arm only: the control arm
	 * never leaves TCP, and a change that breaks connections is WORSE
	 * whatever its round trips. */
	out->guard_fallback = in->conns[0] && out->fallback_rate[0] > p->max_fallback;
	out->guard_error = in->conns[0] && out->error_rate[0] > p->max_error;
	if (out->guard_error || out->guard_fallback) {
		out->verdict = SHIM_AB_WORSE;
		out->why = out->guard_error ? "the accelerated arm's error rate is over its limit"
					    : "the accelerated arm's fallback rate is over its limit";
	} else {
		const struct shim_ab_quant *q = p->quantile == 0.5 ? &out->p50 : &out->p99;

		out->verdict = q->verdict;
		out->why = !q->judged ? (k < p->min_intervals ? "too few intervals with samples in both arms"
							      : "too few samples in an arm for this quantile")
				      : q->verdict == SHIM_AB_BETTER	 ? "the interval lies wholly below 1 - margin"
				      : q->verdict == SHIM_AB_WORSE	 ? "the interval lies wholly above 1 + margin"
				      : q->verdict == SHIM_AB_EQUIVALENT ? "the interval lies inside the margin"
									 : "the interval crosses the margin";
	}
out:
	free(use);
	free(w);
	free(r50);
	free(r99);
	return rc;
}
