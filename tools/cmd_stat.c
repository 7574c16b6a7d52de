/*
 * rdmashim stat: the live connections of every process under the shim that
 * the caller may read, from their stats areas (shim/core/statarea.h), as a
 * table, JSON or Prometheus text; --watch prints what moved per interval.
 * Files of the caller's own dead processes are removed on the way.
 * Exit 0; 2 bad usage; 1 the areas' directory can not be read. With --ab,
 * the verdict's status (cmd_stat_ab.c).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "jsonl.h"
#include "reason.h"
#include "stat_snap.h"
#include "stats.h"
#include "statread.h"

int rdmashim_cmd_stat(int argc, char **argv);
void rdmashim_stat_usage(FILE *out);

void rdmashim_stat_usage(FILE *out)
{
	fputs("rdmashim stat [--pid PID] [--port PORT] [--path tcp|shm|rdma] [--dir DIR]\n"
	      "              [--keep-dead] [--json | --prom | --prom-file DIR]\n"
	      "              [--watch [-i SEC] [-n COUNT]]\n"
	      "rdmashim stat --ab [--seed S] [--margin PCT] [--quantile 50|99]\n"
	      "              [--max-fallback PCT] [--max-errors PCT] [--pid PID] [--dir DIR] [--json]\n"
	      "  One row per live connection of every process under the shim that you may\n"
	      "  read: pid, program, fd, local and peer address, path, state, the last\n"
	      "  reason (name and code), bytes and messages each way, round trip p50/p99\n"
	      "  (a send to the next receive that returned data, as the shim sees it), age,\n"
	      "  RDMA queue pair and A/B arm (accelerated, control; - with no A/B test).\n"
	      "  Then each process's totals (closed connections included) and its count\n"
	      "  of every reason. A process you may not read is listed as \"permission\n"
	      "  denied\". Files of your own dead processes are removed.\n"
	      "  --pid, --port (local or peer), --path  show only those connections\n"
	      "  --dir DIR      the areas' directory (default RDMASHIM_STATS_DIR or\n"
	      "                 /run/rdmashim)\n"
	      "  --keep-dead    read dead processes' files too (marked dead), keep them\n"
	      "  --json         one JSON document\n"
	      "  --prom         Prometheus text exposition, summed over processes\n"
	      "  --prom-file D  the same written to D/rdmashim.prom (temporary file + rename)\n"
	      "  --watch        again every -i SEC (default 1), bytes and messages per\n"
	      "                 interval; -n COUNT intervals then stop (default: until killed)\n"
	      "  --ab           the two arms of an RDMASHIM_AB_PERCENT test side by side\n"
	      "                 (connections, bytes, fallbacks, errors, round trips n, p50,\n"
	      "                 p99), the ratio accelerated/control with a 95% interval from\n"
	      "                 a bootstrap over whole seconds, and a verdict; exit 0 BETTER,\n"
	      "                 1 WORSE, 3 EQUIVALENT, 4 INCONCLUSIVE, 5 INSUFFICIENT_DATA,\n"
	      "                 6 the areas can not be read\n"
	      "  --seed S       the bootstrap's seed (default: from the clock; printed)\n"
	      "  --margin PCT   BETTER/WORSE beyond, EQUIVALENT within (default 5)\n"
	      "  --quantile Q   the verdict's quantile: 50 (default) or 99\n"
	      "  --max-fallback PCT  WORSE when more of the accelerated arm's connections\n"
	      "                 fell back to TCP (default 10)\n"
	      "  --max-errors PCT  WORSE when more of them met an error (default 1)\n"
	      "\n"
	      "Example: redis-server and a client under the shim on shm, the client also\n"
	      "connected to a redis-server without the shim (rdmashim stat):\n"
	      "  PID     PROGRAM           FD LOCAL                 PEER                  PATH STATE      REASON(CODE)               TX_BYTES     RX_BYTES   TX_MSGS   RX_MSGS   P50_US   P99_US    AGE_S    QPN ARM\n"
	      "  13970   python3            4 127.0.0.1:55982       127.0.0.1:6379        shm  switched   upgraded(6)                    1800         2100       300       300     14.3     98.3      3.8      0 -\n"
	      "  13970   python3            7 127.0.0.1:43346       127.0.0.1:6380        tcp  kernel     peer_no_shim(7)                  66           77        11        11      5.1      5.1      3.8      0 -\n"
	      "  13951   redis-server      11 127.0.0.1:6379        127.0.0.1:55982       shm  switched   upgraded(6)                    2100         1800       300       300     49.2    131.1      3.8      0 -\n"
	      "  process 13970 python3 (uid 0): 2 live of 2 connections; sent 1866 B in 311 msgs, received 2177 B in 311 msgs\n"
	      "    reasons: whitelisted(1)=2 upgraded(6)=1 peer_no_shim(7)=1\n"
	      "  process 13951 redis-server (uid 0): 1 live of 102 connections; sent 282149 B in 40301 msgs, received 1621877 B in 40301 msgs\n"
	      "    reasons: whitelisted(1)=102 upgraded(6)=101\n"
	      "\n"
	      "Example: redis-benchmark -c 4 against redis-server, both at\n"
	      "RDMASHIM_AB_PERCENT=50 (rdmashim stat --ab):\n"
	      "  A/B: 1 process(es) with RDMASHIM_AB_PERCENT=50; 30 interval(s) of 1 s with both arms (30 seen); bootstrap 2000, seed 1796668732589726; margin 5%; verdict on p50\n"
	      "  ARM             CONNS   LIVE       TX_BYTES       RX_BYTES FALLBACKS  ERRORS          N     P50_US     P99_US\n"
	      "  accelerated         3      2       56477957        7844194         0       0      95759       17.5       65.6\n"
	      "  control             2      2       38876040        5399450         0       0      65936       29.1       87.2\n"
	      "  ratio accelerated/control, 95% interval:\n"
	      "    p50 0.602 [0.587, 0.621] BETTER\n"
	      "    p99 0.752 [0.687, 0.821] BETTER\n"
	      "  fallback rate 0.00% (limit 10%), error rate 0.00% (limit 1%) in the accelerated arm\n"
	      "  verdict: BETTER (the interval lies wholly below 1 - margin)\n",
	      out);
}

struct opts {
	struct snap_filter f;
	const char *dir, *prom_dir;
	bool json, prom, watch, ab, seed_set;
	struct stat_ab_opts abo;
	double interval;
	long count;
};

static const char *path_name(unsigned p)
{
	return shim_transport_name((enum shim_transport)p);
}

/* A connection's A/B arm (statarea.h), "-" outside an A/B test. */
static const char *arm_name(unsigned arm)
{
	return arm == SHIM_STAT_ARM_ACCEL ? "accelerated" : arm == SHIM_STAT_ARM_CONTROL ? "control" : "-";
}

static void endpoint(const struct shim_endpoint *ep, char *buf, size_t len)
{
	shim_endpoint_format(ep, buf, len);
}

static double age_s(const struct snap *s, const struct shim_stat_rec *r)
{
	return s->now_unix_ns > r->born_unix_ns ? (double)(s->now_unix_ns - r->born_unix_ns) / 1e9 : 0;
}

/* The previous look, for --watch: a connection is its pid, slot and gen. */
static const struct snap_conn *find_prev(const struct snap *prev, const struct snap *s, const struct snap_conn *c)
{
	if (!prev)
		return NULL;
	for (size_t i = 0; i < prev->nconn; i++) {
		const struct snap_conn *o = &prev->conns[i];

		if (o->slot == c->slot && o->rec.gen == c->rec.gen &&
		    prev->procs[o->proc].pid == s->procs[c->proc].pid)
			return o;
	}
	return NULL;
}

/* Sent and received bytes and messages: totals, or since prev. */
static void moved(const struct snap_conn *c, const struct snap_conn *o, uint64_t out[4])
{
	memset(out, 0, 4 * sizeof(uint64_t));
	for (unsigned p = 0; p < SHIM_STAT_PATHS; p++) {
		out[0] += c->rec.bytes[p][0];
		out[1] += c->rec.bytes[p][1];
		out[2] += c->rec.msgs[p][0];
		out[3] += c->rec.msgs[p][1];
		if (o) {
			out[0] -= o->rec.bytes[p][0];
			out[1] -= o->rec.bytes[p][1];
			out[2] -= o->rec.msgs[p][0];
			out[3] -= o->rec.msgs[p][1];
		}
	}
}

static void us(uint64_t ns, char *buf, size_t len)
{
	if (!ns)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f", (double)ns / 1000.0);
}

/* Zero copy's counters (stats.h), once any counted: a line of the text
 * output, or a "zc" member of the process's JSON object. */
static void print_zc(const struct shim_stat_hdr *h, bool json)
{
	bool any = false;

	for (unsigned i = 0; i < SHIM_ZC_STAT_COUNT; i++)
		any |= h->zc[i] != 0;
	if (!any)
		return;
	printf(json ? ",\"zc\":{" : "  zero copy:");
	for (unsigned i = 0; i < SHIM_ZC_STAT_COUNT; i++) {
		const char *pre = i >= SHIM_ZC_FB_FIRST ? "zc_fallback_" : "";

		if (i >= SHIM_ZC_FB_FIRST && !h->zc[i])
			continue;
		if (json)
			printf("%s\"%s%s\":%llu", i ? "," : "", pre, shim_zc_stat_name((enum shim_zc_stat)i),
			       (unsigned long long)h->zc[i]);
		else
			printf(" %s%s=%llu", pre, shim_zc_stat_name((enum shim_zc_stat)i), (unsigned long long)h->zc[i]);
	}
	printf(json ? "}" : "\n");
}

static void print_table(const struct snap *s, const struct snap *prev, bool watch)
{
	printf("%-7s %-15s %4s %-21s %-21s %-4s %-10s %-22s %12s %12s %9s %9s %8s %8s %8s %6s %s\n", "PID", "PROGRAM",
	       "FD", "LOCAL", "PEER", "PATH", "STATE", "REASON(CODE)", watch ? "+TX_BYTES" : "TX_BYTES",
	       watch ? "+RX_BYTES" : "RX_BYTES", watch ? "+TX_MSGS" : "TX_MSGS", watch ? "+RX_MSGS" : "RX_MSGS",
	       "P50_US", "P99_US", "AGE_S", "QPN", "ARM");
	for (size_t i = 0; i < s->nconn; i++) {
		const struct snap_conn *c = &s->conns[i];
		const struct snap_proc *p = &s->procs[c->proc];
		char l[SHIM_ENDPOINT_STRLEN], r[SHIM_ENDPOINT_STRLEN], why[48], p50[16], p99[16];
		uint64_t m[4];

		endpoint(&c->rec.d.local, l, sizeof(l));
		endpoint(&c->rec.d.peer, r, sizeof(r));
		snprintf(why, sizeof(why), "%s(%u)", shim_reason_name((enum shim_reason)c->rec.d.reason),
			 c->rec.d.reason);
		us(shim_stat_quantile_ns(c->rec.rtt, 0.5), p50, sizeof(p50));
		us(shim_stat_quantile_ns(c->rec.rtt, 0.99), p99, sizeof(p99));
		moved(c, watch ? find_prev(prev, s, c) : NULL, m);
		printf("%-7d %-15.15s %4d %-21s %-21s %-4s %-10s %-22s %12llu %12llu %9llu %9llu %8s %8s %8.1f %6u %s%s\n",
		       p->pid, p->hdr.comm, c->rec.d.fd, l, r, path_name(c->rec.d.path),
		       shim_stat_state_name(c->rec.d.state), why, (unsigned long long)m[0], (unsigned long long)m[1],
		       (unsigned long long)m[2], (unsigned long long)m[3], p50, p99, age_s(s, &c->rec), c->rec.d.qpn,
		       arm_name(c->rec.d.arm), c->inconsistent ? "  inconsistent" : "");
	}
	for (size_t i = 0; i < s->nproc; i++) {
		const struct snap_proc *p = &s->procs[i];
		uint64_t t[4] = { 0 };
		unsigned live = 0;

		if (p->error) {
			if (p->pid)
				printf("process %d (uid %u): %s\n", p->pid, p->uid, p->error);
			else
				printf("processes of uid %u: %s\n", p->uid, p->error);
			continue;
		}
		for (unsigned path = 0; path < SHIM_STAT_PATHS; path++) {
			t[0] += p->bytes[path][0];
			t[1] += p->bytes[path][1];
			t[2] += p->msgs[path][0];
			t[3] += p->msgs[path][1];
			live += p->live[path];
		}
		printf("process %d %s (uid %u)%s%s: %u live of %llu connections; sent %llu B in %llu msgs, "
		       "received %llu B in %llu msgs\n  reasons:",
		       p->pid, p->hdr.comm, p->uid, p->dead ? " dead" : "", p->hdr_inconsistent ? " inconsistent" : "", live,
		       (unsigned long long)p->hdr.conns, (unsigned long long)t[0], (unsigned long long)t[2],
		       (unsigned long long)t[1], (unsigned long long)t[3]);
		for (unsigned r = 0; r < SHIM_REASON_COUNT; r++)
			if (p->hdr.reasons[r])
				printf(" %s(%u)=%llu", shim_reason_name((enum shim_reason)r), r,
				       (unsigned long long)p->hdr.reasons[r]);
		printf("\n");
		print_zc(&p->hdr, false);
	}
	if (s->removed)
		printf("removed %u file(s) of dead processes\n", s->removed);
}

static void json_conn(const struct snap *s, const struct snap *prev, const struct snap_conn *c, bool watch)
{
	const struct snap_proc *p = &s->procs[c->proc];
	char l[SHIM_ENDPOINT_STRLEN], r[SHIM_ENDPOINT_STRLEN];
	uint64_t m[4], n = 0;

	endpoint(&c->rec.d.local, l, sizeof(l));
	endpoint(&c->rec.d.peer, r, sizeof(r));
	moved(c, NULL, m);
	for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
		n += c->rec.rtt[b];
	printf("{\"pid\":%d,\"program\":", p->pid);
	jl_put_str(p->hdr.comm);
	printf(",\"fd\":%d,\"local\":\"%s\",\"peer\":\"%s\",\"role\":\"%s\",\"path\":\"%s\",\"state\":\"%s\","
	       "\"reason\":\"%s\",\"reason_code\":%u,\"tx_bytes\":%llu,\"rx_bytes\":%llu,\"tx_msgs\":%llu,"
	       "\"rx_msgs\":%llu,\"rtt_samples\":%llu,\"rtt_p50_us\":%.3f,\"rtt_p99_us\":%.3f,\"age_s\":%.3f,"
	       "\"qpn\":%u,\"arm\":%s,\"consistent\":%s",
	       c->rec.d.fd, l, r, c->rec.d.role ? "server" : "client", path_name(c->rec.d.path),
	       shim_stat_state_name(c->rec.d.state), shim_reason_name((enum shim_reason)c->rec.d.reason),
	       c->rec.d.reason, (unsigned long long)m[0], (unsigned long long)m[1], (unsigned long long)m[2],
	       (unsigned long long)m[3], (unsigned long long)n,
	       (double)shim_stat_quantile_ns(c->rec.rtt, 0.5) / 1000.0,
	       (double)shim_stat_quantile_ns(c->rec.rtt, 0.99) / 1000.0, age_s(s, &c->rec), c->rec.d.qpn,
	       c->rec.d.arm == SHIM_STAT_ARM_ACCEL     ? "\"accelerated\""
	       : c->rec.d.arm == SHIM_STAT_ARM_CONTROL ? "\"control\""
						       : "null",
	       c->inconsistent ? "false" : "true");
	if (watch) {
		moved(c, find_prev(prev, s, c), m);
		printf(",\"delta\":{\"tx_bytes\":%llu,\"rx_bytes\":%llu,\"tx_msgs\":%llu,\"rx_msgs\":%llu}",
		       (unsigned long long)m[0], (unsigned long long)m[1], (unsigned long long)m[2],
		       (unsigned long long)m[3]);
	}
	printf("}");
}

static void print_json(const struct snap *s, const struct snap *prev, bool watch, double interval)
{
	printf("{\"time_unix\":%.3f,", (double)s->now_unix_ns / 1e9);
	if (watch)
		printf("\"interval_s\":%.3f,", interval);
	printf("\"removed_dead\":%u,\"processes\":[", s->removed);
	for (size_t i = 0; i < s->nproc; i++) {
		const struct snap_proc *p = &s->procs[i];

		printf("%s{\"pid\":", i ? "," : "");
		if (p->pid)
			printf("%d", p->pid);
		else
			printf("null");
		printf(",\"uid\":%u,\"error\":", p->uid);
		if (p->error) {
			jl_put_str(p->error);
			printf("}");
			continue;
		}
		printf("null,\"program\":");
		jl_put_str(p->hdr.comm);
		printf(",\"dead\":%s,\"consistent\":%s,\"connections_ever\":%llu,\"by_path\":{", p->dead ? "true" : "false",
		       p->hdr_inconsistent ? "false" : "true",
		       (unsigned long long)p->hdr.conns);
		for (unsigned path = 0; path < SHIM_STAT_PATHS; path++)
			printf("%s\"%s\":{\"live\":%u,\"tx_bytes\":%llu,\"rx_bytes\":%llu,\"tx_msgs\":%llu,"
			       "\"rx_msgs\":%llu}",
			       path ? "," : "", path_name(path), p->live[path], (unsigned long long)p->bytes[path][0],
			       (unsigned long long)p->bytes[path][1], (unsigned long long)p->msgs[path][0],
			       (unsigned long long)p->msgs[path][1]);
		printf("},\"reasons\":{");
		for (unsigned r = 0, first = 1; r < SHIM_REASON_COUNT; r++)
			if (p->hdr.reasons[r]) {
				printf("%s\"%s\":%llu", first ? "" : ",", shim_reason_name((enum shim_reason)r),
				       (unsigned long long)p->hdr.reasons[r]);
				first = 0;
			}
		printf("}");
		print_zc(&p->hdr, true);
		printf("}");
	}
	printf("],\"connections\":[");
	for (size_t i = 0; i < s->nconn; i++) {
		if (i)
			printf(",");
		json_conn(s, prev, &s->conns[i], watch);
	}
	printf("]}\n");
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	const char *env = getenv("RDMASHIM_STATS_DIR");

	memset(o, 0, sizeof(*o));
	o->f.path = -1;
	o->dir = env && *env ? env : "/run/rdmashim";
	o->interval = 1;
	o->abo.margin_pct = 5;
	o->abo.quantile = 0.5;
	o->abo.max_fallback_pct = 10;
	o->abo.max_error_pct = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--prom")) {
			o->prom = true;
		} else if (!strcmp(a, "--keep-dead")) {
			o->f.keep_dead = true;
		} else if (!strcmp(a, "--watch")) {
			o->watch = true;
		} else if (!strcmp(a, "--ab")) {
			o->ab = true;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			rdmashim_stat_usage(stdout);
			exit(0);
		} else if (!v) {
			fprintf(stderr, "rdmashim stat: unknown option or missing value: %s\n", a);
			return -EINVAL;
		} else {
			i++;
			if (!strcmp(a, "--pid")) {
				o->f.pid = (int)strtol(v, &end, 10);
				if (*end || o->f.pid <= 0)
					goto bad;
			} else if (!strcmp(a, "--port")) {
				o->f.port = (int)strtol(v, &end, 10);
				if (*end || o->f.port <= 0 || o->f.port > 65535)
					goto bad;
			} else if (!strcmp(a, "--path")) {
				o->f.path = !strcmp(v, "tcp") ? 0 : !strcmp(v, "shm") ? 1 : !strcmp(v, "rdma") ? 2 : -2;
				if (o->f.path == -2)
					goto bad;
			} else if (!strcmp(a, "--seed")) {
				o->abo.seed = strtoull(v, &end, 10);
				if (*end || !*v || *v == '-')
					goto bad;
				o->seed_set = true;
			} else if (!strcmp(a, "--margin")) {
				o->abo.margin_pct = strtod(v, &end);
				if (*end || !(o->abo.margin_pct >= 0) || o->abo.margin_pct >= 100)
					goto bad;
			} else if (!strcmp(a, "--quantile")) {
				if (strcmp(v, "50") && strcmp(v, "99"))
					goto bad;
				o->abo.quantile = !strcmp(v, "50") ? 0.5 : 0.99;
			} else if (!strcmp(a, "--max-fallback") || !strcmp(a, "--max-errors")) {
				double pct = strtod(v, &end);

				if (*end || !(pct >= 0) || pct > 100)
					goto bad;
				*(a[6] == 'f' ? &o->abo.max_fallback_pct : &o->abo.max_error_pct) = pct;
			} else if (!strcmp(a, "--dir")) {
				o->dir = v;
			} else if (!strcmp(a, "--prom-file")) {
				o->prom_dir = v;
			} else if (!strcmp(a, "-i")) {
				o->interval = strtod(v, &end);
				if (*end || !(o->interval > 0) || o->interval > 86400)
					goto bad;
			} else if (!strcmp(a, "-n")) {
				o->count = strtol(v, &end, 10);
				if (*end || o->count <= 0)
					goto bad;
			} else {
				fprintf(stderr, "rdmashim stat: unknown option %s\n", a);
				return -EINVAL;
			}
			continue;
bad:
			fprintf(stderr, "rdmashim stat: bad value for %s: %s\n", a, v);
			return -EINVAL;
		}
	}
	if (o->ab && (o->prom || o->prom_dir || o->watch)) {
		fprintf(stderr, "rdmashim stat: --ab goes with neither --prom, --prom-file nor --watch\n");
		return -EINVAL;
	}
	if (o->json + o->prom + (o->prom_dir != NULL) > 1) {
		fprintf(stderr, "rdmashim stat: --json, --prom and --prom-file exclude each other\n");
		return -EINVAL;
	}
	return 0;
}

static int one_look(const struct opts *o, struct snap *s, const struct snap *prev)
{
	struct snap_filter f = o->f;
	int rc;

	/* The A/B families of the Prometheus text need each area's A/B part. */
	f.ab = o->prom || o->prom_dir;
	rc = snap_take(s, o->dir, &f);

	if (rc < 0) {
		fprintf(stderr, "rdmashim stat: %s: %s\n", o->dir, strerror(-rc));
		return 1;
	}
	if (o->prom_dir) {
		rc = stat_write_prom_file(o->prom_dir, s);
		if (rc < 0) {
			fprintf(stderr, "rdmashim stat: %s/rdmashim.prom: %s\n", o->prom_dir, strerror(-rc));
			return 1;
		}
	} else if (o->prom) {
		stat_print_prom(stdout, s);
	} else if (o->json) {
		print_json(s, prev, o->watch, o->interval);
	} else {
		if (o->f.pid && !s->nproc)
			printf("process %d: no stats area (not under the shim, no connection tracked yet, "
			       "or RDMASHIM_STATS=0)\n", o->f.pid);
		print_table(s, prev, o->watch);
	}
	fflush(stdout);
	return 0;
}

int rdmashim_cmd_stat(int argc, char **argv)
{
	struct snap cur, prev = { 0 };
	struct opts o;
	int rc;

	if (parse_opts(argc, argv, &o) < 0)
		return 2;
	if (o.ab) {
		if (!o.seed_set) {
			struct timespec now;

			clock_gettime(CLOCK_REALTIME, &now);
			o.abo.seed = (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000;
		}
		o.abo.json = o.json;
		return stat_ab(o.dir, &o.f, &o.abo);
	}
	rc = one_look(&o, &cur, NULL);
	for (long n = 1; rc == 0 && o.watch && (!o.count || n < o.count); n++) {
		struct timespec ts = { (time_t)o.interval, (long)((o.interval - (double)(time_t)o.interval) * 1e9) };

		snap_free(&prev);
		prev = cur;
		nanosleep(&ts, NULL);
		if (!o.json && !o.prom && !o.prom_dir)
			printf("\n");
		rc = one_look(&o, &cur, &prev);
	}
	snap_free(&prev);
	snap_free(&cur);
	return rc;
}
