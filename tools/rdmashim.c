/*
 * The rdmashim command: runs unmodified programs under the shim and explains
 * its configuration. This file dispatches and holds the small commands; run
 * lives in cmd_run.c, config in cmd_config.c, health in cmd_health.c,
 * doctor in cmd_doctor.c, trace in cmd_trace.c, bundle in cmd_bundle.c,
 * stat in cmd_stat.c, qp in cmd_qp.c.
 *
 * Exit status: 0 success; 2 bad usage or a bad value (one line on stderr);
 * for run, 127 when the program can not be exec'd, else the program's own;
 * for health, 0 healthy, 1 degraded, 2 no usable device; for doctor, 1
 * when a check FAILs; for trace, 1 when a line of a file was bad; for qp,
 * 1 some QP not in RTS, 3 no process under the shim, 4 unreadable input.
 * `rdmashim help CMD` prints CMD's short help (CMD --help); the long form
 * is the manual, docs/man/rdmashim.1.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "reason.h"
#include "version.h"

/* cmd_run.c */
int rdmashim_cmd_run(int argc, char **argv);
void rdmashim_run_usage(FILE *out);
/* cmd_config.c */
int rdmashim_cmd_config(int argc, char **argv);
/* cmd_doctor.c */
int rdmashim_cmd_doctor(int argc, char **argv);
/* cmd_stat.c */
int rdmashim_cmd_stat(int argc, char **argv);
void rdmashim_stat_usage(FILE *out);

/* cmd_qp.c */
int rdmashim_cmd_qp(int argc, char **argv);
void rdmashim_qp_usage(FILE *out);

/* cmd_health.c */
int rdmashim_cmd_health(int argc, char **argv);
void rdmashim_health_usage(FILE *out);
/* cmd_trace.c */
int rdmashim_cmd_trace(int argc, char **argv);
void rdmashim_trace_usage(FILE *out);
/* cmd_bundle.c */
int rdmashim_cmd_bundle(int argc, char **argv);
void rdmashim_bundle_usage(FILE *out);

static void usage(FILE *out)
{
	fputs("usage: rdmashim COMMAND [ARGS]\n"
	      "\n"
	      "Runs unmodified programs with librdmashim.so preloaded: TCP connections on\n"
	      "whitelisted ports may move to shared memory (same host) or RDMA, and fall\n"
	      "back to plain TCP whenever the peer or the path can not follow.\n"
	      "\n"
	      "commands:\n"
	      "  run [OPTIONS] [--] CMD [ARGS...]  run CMD under the shim\n"
	      "  config [--markdown]              show and check the RDMASHIM_* settings\n"
	      "                                   of this environment\n"
	      "  health [--window SEC] [--max NAME=N|off]... [--json]\n"
	      "                                   judge this host's RDMA ports (see below)\n"
	      "  doctor [PEER]                    checklist: can this host (and PEER) run\n"
	      "                                   RDMA under the shim? PASS/WARN/FAIL, each\n"
	      "                                   with its fix\n"
	      "  stat [OPTIONS]                   live connections and counters of the\n"
	      "                                   processes under the shim (help stat)\n"
	      "  qp [OPTIONS]                     the RDMA queue pairs of the processes under\n"
	      "                                   the shim, and why one is not in RTS (help qp)\n"
	      "  trace [OPTIONS] FILE...          one timeline per connection from trace\n"
	      "                                   files, or --summary counts (see below)\n"
	      "  bundle [-o FILE] [TRACE...]      one tarball for a bug report (see below)\n"
	      "  reasons                          list the reason codes of traces and stats\n"
	      "  version                          print the version\n"
	      "  help [CMD]                       print this help, or CMD's own\n"
	      "\n",
	      out);
	rdmashim_run_usage(out);
	fputs("\n", out);
	rdmashim_health_usage(out);
	fputs("\n", out);
	rdmashim_trace_usage(out);
	fputs("\n", out);
	rdmashim_bundle_usage(out);
	fputs("\n"
	      "exit status: 0 ok; 2 bad usage or value (one line on stderr);\n"
	      "run: 127 if CMD can not be executed, else CMD's own status;\n"
	      "health: 0 healthy, 1 degraded, 2 no usable device;\n"
	      "doctor: 0 no FAIL line, 1 some FAIL line;\n"
	      "trace: 1 some line of a file was bad;\n"
	      "qp: 1 some QP not in RTS, 3 no process under the shim, 4 unreadable input.\n"
	      "Manual: rdmashim(1), the commands; rdmashim(7), the variables, reasons,\n"
	      "trace events and files. Operating guide: docs/OPERATIONS.md.\n",
	      out);
}

static bool is_help(const char *arg)
{
	return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

static int cmd_reasons(int argc, char **argv)
{
	int width = (int)strlen("name");

	if (argc > 1 && is_help(argv[1])) {
		printf("usage: rdmashim reasons\n"
		       "Lists every reason code that trace lines (\"reason\") and the process.stats\n"
		       "line carry, one a line: code (its number, which never changes), name (as\n"
		       "the trace writes it), meaning.\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "rdmashim reasons: takes no arguments\n");
		return 2;
	}
	for (int r = 0; r < SHIM_REASON_COUNT; r++) {
		int n = (int)strlen(shim_reason_name((enum shim_reason)r));

		if (n > width)
			width = n;
	}
	printf("%4s  %-*s  %s\n", "code", width, "name", "meaning");
	for (int r = 0; r < SHIM_REASON_COUNT; r++)
		printf("%4d  %-*s  %s\n", r, width, shim_reason_name((enum shim_reason)r),
		       shim_reason_text((enum shim_reason)r));
	return 0;
}

static int cmd_version(int argc, char **argv)
{
	if (argc > 1 && is_help(argv[1])) {
		printf("usage: rdmashim version\n"
		       "Prints \"rdmashim VERSION\": the version of this command and of the library\n"
		       "built with it (the trace's process.start line names the library's).\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "rdmashim version: takes no arguments\n");
		return 2;
	}
	printf("rdmashim %s\n", RDMASHIM_VERSION);
	return 0;
}

static int cmd_help(int argc, char **argv);

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
	{ "run", rdmashim_cmd_run },
	{ "config", rdmashim_cmd_config },
	{ "health", rdmashim_cmd_health },
	{ "stat", rdmashim_cmd_stat },
	{ "qp", rdmashim_cmd_qp },
	{ "doctor", rdmashim_cmd_doctor },
	{ "trace", rdmashim_cmd_trace },
	{ "bundle", rdmashim_cmd_bundle },
	{ "reasons", cmd_reasons },
	{ "version", cmd_version },
	{ "--version", cmd_version },
	{ "help", cmd_help },
	{ "--help", cmd_help },
	{ "-h", cmd_help },
};

/* help: the whole usage; help CMD: CMD's own short help (CMD --help). */
static int cmd_help(int argc, char **argv)
{
	if (argc < 2 || is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (argc > 2) {
		fprintf(stderr, "rdmashim help: takes at most one command\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		char *args[] = { argv[1], "--help", NULL };

		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].fn(2, args); /* help's own names were handled above */
	}
	fprintf(stderr, "rdmashim help: unknown command '%s' (try 'rdmashim help')\n", argv[1]);
	return 2;
}

int main(int argc, char **argv)
{
	int rc;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[1], commands[i].name) != 0)
			continue;
		rc = commands[i].fn(argc - 1, argv + 1);
		/* A failed write to stdout (a closed pipe, a full disk) is a failure. */
		if (fflush(stdout) != 0 || ferror(stdout)) {
			fprintf(stderr, "rdmashim: error writing to standard output\n");
			return rc ? rc : 1;
		}
		return rc;
	}
	fprintf(stderr, "rdmashim: unknown command '%s' (try 'rdmashim help')\n", argv[1]);
	return 2;
}
