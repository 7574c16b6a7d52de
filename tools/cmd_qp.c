/*
 * rdmashim qp: the RDMA queue pairs (links) of the processes under the
 * shim on this host, from their stats areas (shim/core/statlink.h), with
 * the kernel's own view of each (`rdma -j resource show qp`) where it is
 * there: its state and send PSN win over the shim's. A QP not in RTS is
 * explained: the step of RESET -> INIT -> RTR -> RTS it misses, and the
 * likely cause in words (qp_explain.c).
 * Exit: 0 every live QP in RTS; 1 some live QP not in RTS; 2 bad usage;
 * 3 no process under the shim to read (or not the one --pid names);
 * 4 the areas' directory or --kernel-json FILE can not be read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qp_kernel.h"
#include "qp_explain.h"
#include "reason.h"
#include "stat_snap.h"

int rdmashim_cmd_qp(int argc, char **argv);
void rdmashim_qp_usage(FILE *out);

void rdmashim_qp_usage(FILE *out)
{
	fputs("rdmashim qp [--pid PID] [--dir DIR] [--json] [--no-kernel | --kernel-json FILE]\n"
	      "  One row per RDMA queue pair (a link: one RC QP carries the connections\n"
	      "  between two processes) of every process under the shim that you may read:\n"
	      "  pid, program, device and port, local and remote QP numbers, state, send\n"
	      "  PSN, the connections on it (count and fds), age, the last verbs error. A\n"
	      "  QP not in RTS gets a line with the step of RESET -> INIT -> RTR -> RTS it\n"
	      "  misses and the likely cause. A link that failed is kept a while, marked\n"
	      "  gone. State and send PSN come from the kernel (rdma -j resource show qp)\n"
	      "  when it lists the QP, else from the shim.\n"
	      "  --pid PID         only that process\n"
	      "  --dir DIR         the areas' directory (default RDMASHIM_STATS_DIR or\n"
	      "                    /run/rdmashim)\n"
	      "  --json            one JSON document\n"
	      "  --no-kernel       do not ask the kernel\n"
	      "  --kernel-json F   the kernel's view from F, saved `rdma -j resource show qp`\n"
	      "                    output (- for standard input), instead of asking\n"
	      "  exit: 0 every live QP in RTS (or none); 1 some live QP not in RTS;\n"
	      "  2 bad usage; 3 no process under the shim to read; 4 DIR or F unreadable\n",
	      out);
}

struct qp_opts {
	struct snap_filter f;
	const char *dir, *kernel_file;
	bool json, no_kernel;
};

static int parse(int argc, char **argv, struct qp_opts *o)
{
	const char *env = getenv("RDMASHIM_STATS_DIR");

	memset(o, 0, sizeof(*o));
	o->f.path = -1;
	o->f.links = true;
	o->dir = env && *env ? env : "/run/rdmashim";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--no-kernel")) {
			o->no_kernel = true;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			rdmashim_qp_usage(stdout);
			exit(0);
		} else if (!strcmp(a, "--pid") && v) {
			o->f.pid = (int)strtol(v, &end, 10);
			if (*end || !*v || o->f.pid <= 0) {
				fprintf(stderr, "rdmashim qp: bad value for --pid: %s\n", v);
				return -EINVAL;
			}
			i++;
		} else if (!strcmp(a, "--dir") && v) {
			o->dir = v;
			i++;
		} else if (!strcmp(a, "--kernel-json") && v) {
			o->kernel_file = v;
			i++;
		} else {
			fprintf(stderr, "rdmashim qp: unknown option or missing value: %s\n", a);
			return -EINVAL;
		}
	}
	if (o->no_kernel && o->kernel_file) {
		fprintf(stderr, "rdmashim qp: --no-kernel and --kernel-json exclude each other\n");
		return -EINVAL;
	}
	return 0;
}

int rdmashim_cmd_qp(int argc, char **argv)
{
	struct kqps k = { 0 };
	struct qp_opts o;
	struct snap s;
	const char *kernel = "none";
	size_t readable = 0;
	int rc, bad;

	if (parse(argc, argv, &o) < 0)
		return 2;
	rc = snap_take(&s, o.dir, &o.f);
	if (rc < 0) {
		fprintf(stderr, "rdmashim qp: %s: %s\n", o.dir, strerror(-rc));
		return 4;
	}
	if (o.kernel_file) {
		rc = kqp_from_file(&k, o.kernel_file);
		if (rc < 0) {
			fprintf(stderr, "rdmashim qp: %s: %s\n", o.kernel_file, strerror(-rc));
			snap_free(&s);
			return 4;
		}
		kernel = "file";
	} else if (!o.no_kernel) {
		/* No tool, no device, no netlink: the shim's view alone. */
		kernel = kqp_from_tool(&k) == 0 ? "rdma" : "unavailable";
	}
	for (size_t i = 0; i < s.nproc; i++)
		readable += !s.procs[i].error;
	if (o.json)
		bad = qp_print_json(stdout, &s, &k, kernel);
	else
		bad = qp_print_table(stdout, &s, &k, kernel);
	if (!readable && !o.json) {
		if (o.f.pid)
			printf("process %d: no stats area (not running, not under the shim, no connection "
			       "tracked yet, or RDMASHIM_STATS=0)\n", o.f.pid);
		else
			printf("no process under the shim%s (stats areas in %s)\n", s.nproc ? " that you may read" : "",
			       o.dir);
	}
	kqp_free(&k);
	snap_free(&s);
	if (!readable)
		return 3;
	return bad ? 1 : 0;
}
