/*
 * rdmashim health: is this host's RDMA fabric fit? Every device and port
 * from sysfs, without root: state, physical state, rate, link layer, MTUs,
 * RoCE GIDs, and the fault and congestion counters' deltas over a window,
 * judged by limits (fabric_health.h has the judgement, shared with the
 * shim). Exit 0 healthy, 1 degraded, 2 no usable device (or bad usage).
 *
 * RDMASHIM_SYSFS=DIR reads DIR instead of /sys: for tests with fixture
 * trees, not for production.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "doctor.h"
#include "fabric_health.h"
#include "jsonl.h"

int rdmashim_cmd_health(int argc, char **argv);
void rdmashim_health_usage(FILE *out);

void rdmashim_health_usage(FILE *out)
{
	fputs("health [--window SEC] [--max NAME=N|off]... [--json]\n"
	      "  every RDMA device and port from sysfs (no root needed): state, physical\n"
	      "  state, rate, link layer, active MTU against the netdev's MTU, RoCE GIDs,\n"
	      "  and the fault and congestion counters' growth over --window seconds\n"
	      "  (default 1). A counter growing past its limit over the window is a\n"
	      "  problem; --max sets a limit (NAME without hw., off: shown only).\n"
	      "  Defaults: 0 for link_downed, symbol_error, port_rcv_errors,\n"
	      "  port_xmit_discards, local_link_integrity_errors,\n"
	      "  excessive_buffer_overrun_errors, local_ack_timeout_err, rnr_nak_retry_err,\n"
	      "  req_cqe_error, resp_cqe_error, out_of_buffer, retry_exceeded_err,\n"
	      "  retry_rnr_exceeded_err; 100 for out_of_sequence, packet_seq_err,\n"
	      "  rcvd_seq_err, out_of_seq_request, duplicate_request; others\n"
	      "  (CNP, ECN) shown only. A counter the device lacks is left out.\n"
	      "  Exit: 0 healthy; 1 degraded (a port not ACTIVE, a counter over its\n"
	      "  limit, an MTU mismatch, a state file unreadable); 2 no usable device.\n"
	      "  RDMASHIM_SYSFS=DIR reads DIR instead of /sys (for tests).\n",
	      out);
}

/* The active MTU is not in sysfs; ask verbs, for the real /sys only (a
 * fixture tree has no device behind it). Unknown stays -1. */
void rdmashim_health_fill_active_mtu(struct shim_fh_report *r)
{
	struct ibv_device **list;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list)
		return;
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ibv_context *ctx = NULL;

		for (unsigned j = 0; j < r->n_ports; j++) {
			struct shim_fh_port *p = &r->ports[j];
			struct ibv_port_attr attr;

			if (strcmp(p->dev, name) != 0)
				continue;
			if (!ctx)
				ctx = ibv_open_device(list[i]);
			if (!ctx)
				break;
			if (ibv_query_port(ctx, (uint8_t)p->num, &attr) == 0 && attr.active_mtu >= IBV_MTU_256 &&
			    attr.active_mtu <= IBV_MTU_4096)
				p->active_mtu = 128 << attr.active_mtu;
		}
		if (ctx)
			ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
}

/* The member ,"key": with s, or null where sysfs said nothing (s empty). */
static void json_member_str(const char *key, const char *s)
{
	printf(",\"%s\":", key);
	if (*s)
		jl_put_str(s);
	else
		fputs("null", stdout);
}

/* The member ,"key": with v, or null where it is unknown (v < 0). */
static void json_member_int(const char *key, int v)
{
	printf(",\"%s\":", key);
	if (v >= 0)
		printf("%d", v);
	else
		fputs("null", stdout);
}

static void json_lines(const char *key, char (*lines)[SHIM_FH_LINE], unsigned n)
{
	printf(",\"%s\":[", key);
	for (unsigned i = 0; i < n; i++) {
		if (i)
			putchar(',');
		jl_put_str(lines[i]);
	}
	putchar(']');
}

static void json_port(const struct shim_fh_port *p, const struct shim_fh_limits *lim)
{
	const struct shim_nic_counters *c = p->counters_gone ? &p->before : &p->after;

	fputs("{\"device\":", stdout);
	jl_put_str(p->dev);
	printf(",\"port\":%u", p->num);
	json_member_str("state", p->state);
	json_member_int("state_code", p->state_code);
	json_member_str("phys_state", p->phys_state);
	json_member_str("rate", p->rate);
	json_member_str("link_layer", p->link_layer);
	json_member_int("active_mtu", p->active_mtu);
	json_member_str("netdev", p->netdev);
	json_member_int("netdev_mtu", p->netdev_mtu);
	fputs(",\"gids\":[", stdout);
	for (unsigned i = 0; i < p->n_gids; i++) {
		printf("%s{\"index\":%u,\"gid\":", i ? "," : "", p->gids[i].index);
		jl_put_str(p->gids[i].gid);
		json_member_str("type", p->gids[i].type);
		json_member_str("netdev", p->gids[i].netdev);
		putchar('}');
	}
	printf("],\"has_counters\":%s,\"counters\":[", p->has_counters ? "true" : "false");
	for (unsigned i = 0; i < c->n; i++) {
		const unsigned long long *max = shim_fh_limit_of(lim, c->name[i]);
		unsigned long long d;

		printf("%s{\"name\":", i ? "," : "");
		jl_put_str(shim_fh_bare_name(c->name[i]));
		printf(",\"folder\":\"%s\",\"value\":%llu,\"delta\":",
		       strncmp(c->name[i], "hw.", 3) == 0 ? "hw_counters" : "counters", c->value[i]);
		if (!p->counters_gone && shim_fh_delta(p, i, &d))
			printf("%llu", d);
		else
			fputs("null", stdout);
		fputs(",\"limit\":", stdout);
		if (max)
			printf("%llu", *max);
		else
			fputs("null", stdout);
		putchar('}');
	}
	putchar(']');
	json_lines("problems", (char (*)[SHIM_FH_LINE])p->problems, p->n_problems);
	json_lines("notes", (char (*)[SHIM_FH_LINE])p->notes, p->n_notes);
	printf(",\"healthy\":%s}", p->n_problems ? "false" : "true");
}

static const char *status_name(enum shim_fh_status s)
{
	return s == SHIM_FH_HEALTHY ? "healthy" : s == SHIM_FH_DEGRADED ? "degraded" : "no_device";
}

static void print_json(const struct shim_fh_report *r, const struct shim_fh_limits *lim, double window)
{
	fputs("{\"sysfs\":", stdout);
	jl_put_str(r->root);
	printf(",\"window_s\":%.3f,\"status\":\"%s\",\"exit_status\":%d", window, status_name(r->status), (int)r->status);
	json_member_str("reason", r->why);
	printf(",\"devices\":%u,\"ports_left_out\":%s,\"ports\":[", r->n_devices, r->ports_left_out ? "true" : "false");
	for (unsigned i = 0; i < r->n_ports; i++) {
		if (i)
			putchar(',');
		json_port(&r->ports[i], lim);
	}
	fputs("]}\n", stdout);
}

static void print_port(const struct shim_fh_port *p, const struct shim_fh_limits *lim, double window)
{
	const struct shim_nic_counters *c = p->counters_gone ? &p->before : &p->after;

	printf("%s port %u: %s", p->dev, p->num, p->state[0] ? p->state : "state unknown");
	if (p->phys_state[0])
		printf(" (%s)", p->phys_state);
	if (p->rate[0])
		printf(", %s", p->rate);
	if (p->link_layer[0])
		printf(", %s", p->link_layer);
	putchar('\n');
	printf("  mtu: active ");
	if (p->active_mtu > 0)
		printf("%d", p->active_mtu);
	else
		printf("unknown");
	if (p->netdev[0] && p->netdev_mtu > 0)
		printf(", netdev %s %d\n", p->netdev, p->netdev_mtu);
	else if (p->netdev[0])
		printf(", netdev %s unknown\n", p->netdev);
	else
		printf(", no netdev\n");
	for (unsigned i = 0; i < p->n_gids; i++)
		printf("  gid %u: %s %s%s%s%s\n", p->gids[i].index, p->gids[i].gid,
		       p->gids[i].type[0] ? p->gids[i].type : "type unknown", p->gids[i].netdev[0] ? " (" : "",
		       p->gids[i].netdev, p->gids[i].netdev[0] ? ")" : "");
	if (!p->has_counters)
		printf("  counters: none exposed\n");
	else if (c->n)
		printf("  counters over %.1f s (name, value, growth, limit):\n", window);
	for (unsigned i = 0; i < c->n; i++) {
		const unsigned long long *max = shim_fh_limit_of(lim, c->name[i]);
		unsigned long long d;
		char limit[32] = "-", growth[32] = "?";

		if (max)
			snprintf(limit, sizeof(limit), "%llu", *max);
		if (!p->counters_gone && shim_fh_delta(p, i, &d))
			snprintf(growth, sizeof(growth), "+%llu", d);
		printf("    %-36s %12llu %8s %6s\n", c->name[i], c->value[i], growth, limit);
	}
	for (unsigned i = 0; i < p->n_problems; i++)
		printf("  PROBLEM: %s\n", p->problems[i]);
	for (unsigned i = 0; i < p->n_notes; i++)
		printf("  note: %s\n", p->notes[i]);
}

static void print_text(const struct shim_fh_report *r, const struct shim_fh_limits *lim, double window)
{
	unsigned bad = 0;

	if (r->status == SHIM_FH_NO_DEVICE) {
		printf("health: %s\n", r->why);
		return;
	}
	for (unsigned i = 0; i < r->n_ports; i++) {
		print_port(&r->ports[i], lim, window);
		bad += r->ports[i].n_problems != 0;
	}
	if (r->ports_left_out)
		printf("note: more than %d ports; the rest are left out\n", SHIM_FH_PORTS_MAX);
	if (r->status == SHIM_FH_HEALTHY) {
		printf("health: healthy (%u port(s))\n", r->n_ports);
		return;
	}
	printf("health: degraded (%u of %u port(s)):", bad, r->n_ports);
	for (unsigned i = 0, shown = 0; i < r->n_ports; i++)
		if (r->ports[i].n_problems)
			printf("%s %s port %u: %s", shown++ ? ";" : "", r->ports[i].dev, r->ports[i].num,
			       r->ports[i].problems[0]);
	putchar('\n');
}

static int parse_window(const char *s, double *window)
{
	char *end;

	errno = 0;
	*window = strtod(s, &end);
	return errno || end == s || *end || !isfinite(*window) || *window < 0 || *window > 3600 ? -EINVAL : 0;
}

int rdmashim_cmd_health(int argc, char **argv)
{
	static struct shim_fh_report report; /* large: off the stack */
	struct shim_fh_limits lim;
	const char *sysroot = getenv("RDMASHIM_SYSFS");
	double window = 1.0;
	bool json = false;
	struct timespec ts;

	shim_fh_limits_default(&lim);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--json") == 0) {
			json = true;
		} else if (strcmp(a, "--window") == 0 || strcmp(a, "--max") == 0) {
			const char *v = i + 1 < argc ? argv[++i] : NULL;
			int rc;

			if (!v) {
				fprintf(stderr, "rdmashim health: %s needs a value\n", a);
				return 2;
			}
			rc = a[2] == 'w' ? parse_window(v, &window) : shim_fh_limits_set(&lim, v);
			if (rc < 0) {
				fprintf(stderr, "rdmashim health: bad %s '%s' (%s)\n", a, v,
					a[2] == 'w' ? "seconds from 0 to 3600" : "NAME=N or NAME=off");
				return 2;
			}
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			rdmashim_health_usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "rdmashim health: unknown argument '%s' (try 'rdmashim help')\n", a);
			return 2;
		}
	}
	if (sysroot && !*sysroot)
		sysroot = NULL;
	shim_fh_scan(sysroot, &report);
	if (report.n_ports) {
		if (!sysroot)
			rdmashim_health_fill_active_mtu(&report);
		ts.tv_sec = (time_t)window;
		ts.tv_nsec = (long)((window - (double)ts.tv_sec) * 1e9);
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	shim_fh_judge(&report, &lim);
	if (json)
		print_json(&report, &lim, window);
	else
		print_text(&report, &lim, window);
	return (int)report.status;
}
