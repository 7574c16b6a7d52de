/*
 * rdmashim stat --prom: the areas summed over the processes read, in the
 * Prometheus text exposition format (0.0.4). Labels are path, reason and,
 * on the A/B families only, arm: no per-connection series, whose number
 * would grow without bound.
 * A process that exits takes its counts with it: the sums go down then,
 * which Prometheus takes as a counter reset.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "reason.h"
#include "stat_snap.h"

static const char *path_name(unsigned p)
{
	return shim_transport_name((enum shim_transport)p);
}

static void family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void by_path(FILE *out, const char *name, const char *help, const uint64_t v[SHIM_STAT_PATHS])
{
	family(out, name, "counter", help);
	for (unsigned p = 0; p < SHIM_STAT_PATHS; p++)
		fprintf(out, "%s{path=\"%s\"} %llu\n", name, path_name(p), (unsigned long long)v[p]);
}

/* One bucket bound per power of two: the end of each fourth bucket. The
 * last bucket holds everything above its bound, so it is left to +Inf. */
static void rtt_histogram(FILE *out, const struct snap *s)
{
	family(out, "rdmashim_rtt_seconds", "histogram",
	       "Round trips as the shim sees them (a send to the next receive that returned data), by path.");
	for (unsigned p = 0; p < SHIM_STAT_PATHS; p++) {
		uint64_t h[SHIM_STAT_RTT_BUCKETS] = { 0 }, cum = 0, count = 0;
		double sum = 0;

		for (size_t i = 0; i < s->nproc; i++)
			for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
				h[b] += s->procs[i].rtt[p][b];
		for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++) {
			uint64_t lo = b ? shim_stat_rtt_upper_ns(b - 1) : 0;

			count += h[b];
			/* Each sample counted at its bucket's middle: the sum is
			 * as exact as the buckets. */
			sum += (double)h[b] * (double)(lo + shim_stat_rtt_upper_ns(b)) / 2e9;
		}
		for (unsigned b = 0; b + 1 < SHIM_STAT_RTT_BUCKETS; b++) {
			cum += h[b];
			if (b % 4 == 3)
				fprintf(out, "rdmashim_rtt_seconds_bucket{path=\"%s\",le=\"%.9g\"} %llu\n", path_name(p),
					(double)shim_stat_rtt_upper_ns(b) / 1e9, (unsigned long long)cum);
		}
		fprintf(out, "rdmashim_rtt_seconds_bucket{path=\"%s\",le=\"+Inf\"} %llu\n", path_name(p),
			(unsigned long long)count);
		fprintf(out, "rdmashim_rtt_seconds_sum{path=\"%s\"} %.9g\n", path_name(p), sum);
		fprintf(out, "rdmashim_rtt_seconds_count{path=\"%s\"} %llu\n", path_name(p), (unsigned long long)count);
	}
}

/* Under an A/B test (the snap taken with snap_filter.ab): per arm what
 * `stat --ab` sums, as counters. The round trips per arm live in a ring of
 * seconds, not a count since the start, so they are not exposed here. */
static void ab_arms(FILE *out, const struct snap *s)
{
	static const char *const arm[SHIM_STAT_ARMS] = { "accelerated", "control" };
	static const struct {
		const char *name, *help;
	} fam[] = {
		{ "rdmashim_ab_connections_total", "Connections tracked in each A/B arm (RDMASHIM_AB_PERCENT)." },
		{ "rdmashim_ab_sent_bytes_total", "Application bytes sent by each A/B arm's connections." },
		{ "rdmashim_ab_received_bytes_total", "Application bytes received by each A/B arm's connections." },
		{ "rdmashim_ab_fallbacks_total", "Connections of each A/B arm that went back from a side channel to TCP." },
		{ "rdmashim_ab_errors_total", "Connections of each A/B arm reset by the shim or hit by a local fault." },
	};
	uint64_t v[5][SHIM_STAT_ARMS] = { { 0 } };
	unsigned percent = 0;
	bool any = false;

	for (size_t i = 0; i < s->nproc; i++) {
		const struct snap_proc *p = &s->procs[i];

		if (p->error || !p->ab || !p->ab->active)
			continue;
		any = true;
		percent = (unsigned)p->ab->percent;
		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++) {
			v[0][a] += p->ab->arm[a].conns;
			v[1][a] += p->ab->arm[a].closed_bytes[0] + p->arm_live_bytes[a][0];
			v[2][a] += p->ab->arm[a].closed_bytes[1] + p->arm_live_bytes[a][1];
			v[3][a] += p->ab->arm[a].fallbacks;
			v[4][a] += p->ab->arm[a].errors;
		}
	}
	if (!any)
		return;
	family(out, "rdmashim_ab_percent", "gauge", "RDMASHIM_AB_PERCENT of the processes under an A/B test.");
	fprintf(out, "rdmashim_ab_percent %u\n", percent);
	for (unsigned f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		family(out, fam[f].name, "counter", fam[f].help);
		for (unsigned a = 0; a < SHIM_STAT_ARMS; a++)
			fprintf(out, "%s{arm=\"%s\"} %llu\n", fam[f].name, arm[a], (unsigned long long)v[f][a]);
	}
}

void stat_print_prom(FILE *out, const struct snap *s)
{
	uint64_t v[4][SHIM_STAT_PATHS] = { { 0 } }, conns = 0, reasons[SHIM_REASON_COUNT] = { 0 };
	unsigned live[SHIM_STAT_PATHS] = { 0 }, readable = 0, denied = 0;

	for (size_t i = 0; i < s->nproc; i++) {
		const struct snap_proc *p = &s->procs[i];

		if (p->error) {
			denied++;
			continue;
		}
		readable++;
		conns += p->hdr.conns;
		for (unsigned path = 0; path < SHIM_STAT_PATHS; path++) {
			v[0][path] += p->bytes[path][0];
			v[1][path] += p->bytes[path][1];
			v[2][path] += p->msgs[path][0];
			v[3][path] += p->msgs[path][1];
			live[path] += p->live[path];
		}
		for (unsigned r = 0; r < SHIM_REASON_COUNT; r++)
			reasons[r] += p->hdr.reasons[r];
	}
	family(out, "rdmashim_processes", "gauge", "Processes under the shim whose stats were read.");
	fprintf(out, "rdmashim_processes %u\n", readable);
	family(out, "rdmashim_processes_unreadable", "gauge",
	       "Processes, or users' directories of them, that this reader may not read.");
	fprintf(out, "rdmashim_processes_unreadable %u\n", denied);
	family(out, "rdmashim_connections", "gauge", "Live tracked connections, by the path they are on.");
	for (unsigned p = 0; p < SHIM_STAT_PATHS; p++)
		fprintf(out, "rdmashim_connections{path=\"%s\"} %u\n", path_name(p), live[p]);
	family(out, "rdmashim_connections_tracked_total", "counter", "Connections tracked since the processes began.");
	fprintf(out, "rdmashim_connections_tracked_total %llu\n", (unsigned long long)conns);
	by_path(out, "rdmashim_sent_bytes_total", "Application bytes sent, by the path that carried them.", v[0]);
	by_path(out, "rdmashim_received_bytes_total", "Application bytes received, by the path that carried them.",
		v[1]);
	by_path(out, "rdmashim_sent_messages_total", "Send calls that moved bytes, by path.", v[2]);
	by_path(out, "rdmashim_received_messages_total", "Receive calls that returned bytes, by path.", v[3]);
	family(out, "rdmashim_reasons_total", "counter",
	       "Decisions the shim made about connections, by reason (rdmashim reasons).");
	for (unsigned r = 0; r < SHIM_REASON_COUNT; r++)
		fprintf(out, "rdmashim_reasons_total{reason=\"%s\"} %llu\n", shim_reason_name((enum shim_reason)r),
			(unsigned long long)reasons[r]);
	rtt_histogram(out, s);
	ab_arms(out, s);
}

int stat_write_prom_file(const char *dir, const struct snap *s)
{
	char tmp[4096], final[4096];
	FILE *f;
	int fd, rc = 0;

	if (snprintf(final, sizeof(final), "%s/rdmashim.prom", dir) >= (int)sizeof(final) ||
	    snprintf(tmp, sizeof(tmp), "%s/.rdmashim.prom.XXXXXX", dir) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	/* A reader (node_exporter's textfile collector) sees the old file or
	 * the new one whole: written aside, then renamed over it. */
	fd = mkstemp(tmp);
	if (fd < 0)
		return -errno;
	fchmod(fd, 0644);
	f = fdopen(fd, "w");
	if (!f) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return rc;
	}
	stat_print_prom(f, s);
	if (fflush(f) != 0 || fsync(fd) != 0)
		rc = -errno;
	if (fclose(f) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, final) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}
