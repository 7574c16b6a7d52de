/*
 * rdmashim stat --ab: the two arms of an RDMASHIM_AB_PERCENT test side by
 * side, from the A/B part of every stats area read (statarea.h), and one
 * verdict (shim/core/abverdict.h) that the exit status carries. Intervals
 * of the same second from several processes are summed: a second is one
 * unit of the bootstrap whichever processes counted in it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "abverdict.h"
#include "stat_snap.h"

struct merged {
	uint64_t sec;
	shim_ab_interval h;
};

static int cmp_sec(const void *a, const void *b)
{
	uint64_t x = ((const struct merged *)a)->sec, y = ((const struct merged *)b)->sec;

	return x < y ? -1 : x > y;
}

/* Every slot of every process, over seconds that are over and no older
 * than the ring, summed by second; sorted. *n set. */
static struct merged *merge(const struct snap *s, size_t *n)
{
	uint64_t now = s->now_unix_ns / 1000000000ull;
	struct merged *m = NULL;
	size_t cnt = 0, cap = 0;

	for (size_t i = 0; i < s->nproc; i++) {
		const struct shim_stat_ab *ab = s->procs[i].ab;

		if (!ab || !ab->active)
			continue;
		for (unsigned k = 0; k < SHIM_STAT_AB_INTERVALS; k++) {
			const struct shim_stat_ab_slot *sl = &ab->slot[k];
			size_t j;

			/* The current second is still being counted. */
			if (!sl->sec || sl->sec >= now || sl->sec + SHIM_STAT_AB_INTERVALS <= now)
				continue;
			for (j = 0; j < cnt && m[j].sec != sl->sec; j++)
				;
			if (j == cnt) {
				if (cnt == cap) {
					size_t c = cap ? cap * 2 : 256;
					struct merged *nm = realloc(m, c * sizeof(*m));

					if (!nm) {
						free(m);
						return NULL;
					}
					m = nm;
					cap = c;
				}
				memset(&m[cnt], 0, sizeof(m[cnt]));
				m[cnt++].sec = sl->sec;
			}
			for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
				for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
					m[j].h[a][b] += sl->hist[a][b];
		}
	}
	if (cnt)
		qsort(m, cnt, sizeof(*m), cmp_sec);
	*n = cnt;
	return m ? m : calloc(1, sizeof(*m));
}

struct arm_sum {
	uint64_t conns, live, bytes[2], fallbacks, errors, dropped;
};

static void print_quant_json(const char *name, const struct shim_ab_quant *q)
{
	printf("\"%s\":{\"judged\":%s,\"accelerated_us\":%.3f,\"control_us\":%.3f,\"ratio\":%.4f,", name,
	       q->judged ? "true" : "false", q->est_ns[0] / 1000.0, q->est_ns[1] / 1000.0, q->ratio);
	if (q->judged)
		printf("\"ci95\":[%.4f,%.4f],", q->lo, q->hi);
	else
		printf("\"ci95\":null,");
	printf("\"verdict\":\"%s\"}", shim_ab_verdict_name(q->verdict));
}

static void ratio_text(const struct shim_ab_quant *q, char *buf, size_t len)
{
	if (!q->ratio)
		snprintf(buf, len, "-");
	else if (q->judged)
		snprintf(buf, len, "%.3f [%.3f, %.3f] %s", q->ratio, q->lo, q->hi, shim_ab_verdict_name(q->verdict));
	else
		snprintf(buf, len, "%.3f (too few intervals or samples for an interval)", q->ratio);
}

int stat_ab(const char *dir, const struct snap_filter *f, const struct stat_ab_opts *o)
{
	static const char *const arm_name[SHIM_STAT_ARMS] = { "accelerated", "control" };
	struct snap_filter ff = *f;
	struct shim_ab_params p;
	struct shim_ab_result r;
	struct arm_sum arm[SHIM_STAT_ARMS];
	struct shim_ab_input in;
	shim_ab_interval *iv;
	struct merged *m;
	struct snap s;
	size_t nint = 0;
	unsigned procs = 0, percent = 0;
	int rc;

	ff.ab = true;
	rc = snap_take(&s, dir, &ff);
	if (rc < 0) {
		fprintf(stderr, "rdmashim stat: %s: %s\n", dir, strerror(-rc));
		return 6;
	}
	memset(arm, 0, sizeof(arm));
	for (size_t i = 0; i < s.nproc; i++) {
		const struct snap_proc *sp = &s.procs[i];

		if (!sp->ab || !sp->ab->active)
			continue;
		procs++;
		percent = (unsigned)sp->ab->percent;
		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++) {
			arm[a].conns += sp->ab->arm[a].conns;
			arm[a].live += sp->arm_live[a];
			arm[a].fallbacks += sp->ab->arm[a].fallbacks;
			arm[a].errors += sp->ab->arm[a].errors;
			arm[a].dropped += sp->ab->arm[a].dropped;
			for (unsigned w = 0; w < 2; w++)
				arm[a].bytes[w] += sp->ab->arm[a].closed_bytes[w] + sp->arm_live_bytes[a][w];
		}
	}
	m = merge(&s, &nint);
	iv = m ? malloc((nint ? nint : 1) * sizeof(*iv)) : NULL;
	if (!iv) {
		free(m);
		snap_free(&s);
		fprintf(stderr, "rdmashim stat: out of memory\n");
		return 6;
	}
	for (size_t i = 0; i < nint; i++)
		memcpy(iv[i], m[i].h, sizeof(iv[i]));
	memset(&in, 0, sizeof(in));
	in.nint = nint;
	in.iv = iv;
	for (unsigned a = 0; a < SHIM_STAT_ARMS; a++) {
		in.conns[a] = arm[a].conns;
		in.fallbacks[a] = arm[a].fallbacks;
		in.errors[a] = arm[a].errors;
	}
	shim_ab_params_default(&p);
	p.seed = o->seed;
	p.margin = o->margin_pct / 100.0;
	p.quantile = o->quantile;
	p.max_fallback = o->max_fallback_pct / 100.0;
	p.max_error = o->max_error_pct / 100.0;
	rc = shim_ab_judge(&in, &p, &r);
	if (rc < 0) {
		fprintf(stderr, "rdmashim stat: the verdict: %s\n", strerror(-rc));
		free(iv);
		free(m);
		snap_free(&s);
		return 6;
	}
	if (o->json) {
		printf("{\"time_unix\":%.3f,\"processes\":%u,\"ab_percent\":%u,\"seed\":%llu,\"bootstrap\":%u,"
		       "\"margin_pct\":%g,\"quantile\":\"p%.0f\",\"max_fallback_pct\":%g,\"max_error_pct\":%g,"
		       "\"intervals\":%zu,\"intervals_seen\":%zu,\"arms\":{",
		       (double)s.now_unix_ns / 1e9, procs, percent, (unsigned long long)o->seed, p.boot, o->margin_pct,
		       o->quantile * 100, o->max_fallback_pct, o->max_error_pct, r.intervals, nint);
		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
			printf("%s\"%s\":{\"connections\":%llu,\"live\":%llu,\"tx_bytes\":%llu,\"rx_bytes\":%llu,"
			       "\"fallbacks\":%llu,\"errors\":%llu,\"fallback_rate\":%.4f,\"error_rate\":%.4f,"
			       "\"samples\":%llu,\"dropped\":%llu,\"p50_us\":%.3f,\"p99_us\":%.3f}",
			       a ? "," : "", arm_name[a], (unsigned long long)arm[a].conns, (unsigned long long)arm[a].live,
			       (unsigned long long)arm[a].bytes[0], (unsigned long long)arm[a].bytes[1],
			       (unsigned long long)arm[a].fallbacks, (unsigned long long)arm[a].errors,
			       r.fallback_rate[a], r.error_rate[a], (unsigned long long)r.n[a],
			       (unsigned long long)arm[a].dropped, r.p50.est_ns[a] / 1000.0, r.p99.est_ns[a] / 1000.0);
		printf("},");
		print_quant_json("p50", &r.p50);
		printf(",");
		print_quant_json("p99", &r.p99);
		printf(",\"guard_fallback\":%s,\"guard_error\":%s,\"verdict\":\"%s\",\"why\":\"%s\",\"exit_status\":%d}\n",
		       r.guard_fallback ? "true" : "false", r.guard_error ? "true" : "false",
		       shim_ab_verdict_name(r.verdict), r.why, shim_ab_verdict_exit(r.verdict));
	} else {
		char b50[96], b99[96];

		printf("A/B: %u process(es) with RDMASHIM_AB_PERCENT=%u; %zu interval(s) of 1 s with both arms "
		       "(%zu seen); bootstrap %u, seed %llu; margin %g%%; verdict on p%.0f\n",
		       procs, percent, r.intervals, nint, p.boot, (unsigned long long)o->seed, o->margin_pct,
		       o->quantile * 100);
		printf("%-12s %8s %6s %14s %14s %9s %7s %10s %10s %10s\n", "ARM", "CONNS", "LIVE", "TX_BYTES",
		       "RX_BYTES", "FALLBACKS", "ERRORS", "N", "P50_US", "P99_US");
		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
			printf("%-12s %8llu %6llu %14llu %14llu %9llu %7llu %10llu %10.1f %10.1f\n", arm_name[a],
			       (unsigned long long)arm[a].conns, (unsigned long long)arm[a].live,
			       (unsigned long long)arm[a].bytes[0], (unsigned long long)arm[a].bytes[1],
			       (unsigned long long)arm[a].fallbacks, (unsigned long long)arm[a].errors,
			       (unsigned long long)r.n[a], r.p50.est_ns[a] / 1000.0, r.p99.est_ns[a] / 1000.0);
		ratio_text(&r.p50, b50, sizeof(b50));
		ratio_text(&r.p99, b99, sizeof(b99));
		printf("ratio accelerated/control, 95%% interval:\n  p50 %s\n  p99 %s\n", b50, b99);
		printf("fallback rate %.2f%% (limit %g%%), error rate %.2f%% (limit %g%%) in the accelerated arm\n",
		       r.fallback_rate[0] * 100, o->max_fallback_pct, r.error_rate[0] * 100, o->max_error_pct);
		printf("verdict: %s (%s)\n", shim_ab_verdict_name(r.verdict), r.why);
	}
	fflush(stdout);
	free(iv);
	free(m);
	snap_free(&s);
	return shim_ab_verdict_exit(r.verdict);
}
