/*
 * The rdmashim command: runs unmodified programs under the shim and explains
 * its configuration. This file dispatches and holds the small commands; run
 * lives in cmd_run.c, config in cmd_config.c, health in cmd_health.c,
 * doctor in cmd_doctor.c, stat in cmd_stat.c.
 *
 * Exit status: 0 success; 2 bad usage or a bad value (one line on stderr);
 * for run, 127 when the program can not be exec'd, else the program's own;
 * for health, 0 healthy, 1 degraded, 2 no usable device; for doctor, 1
 * when a check FAILs.
 */
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

/* cmd_health.c */
int rdmashim_cmd_health(int argc, char **argv);
void rdmashim_health_usage(FILE *out);

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
	      "  health [--window SEC] [--json]   judge this host's RDMA ports (see below)\n"
	      "  doctor                           checklist: can this host run RDMA under\n"
	      "                                   the shim? PASS/WARN/FAIL, each with its fix\n"
	      "  stat [OPTIONS]                   live connections and counters of the\n"
	      "                                   processes under the shim (help stat)\n"
	      "  reasons                          list the reason codes of traces and stats\n"
	      "  version                          print the version\n"
	      "  help [COMMAND]                   print this help, or COMMAND's (run,\n"
	      "                                   health, stat)\n"
	      "\n",
	      out);
	rdmashim_run_usage(out);
	fputs("\n", out);
	rdmashim_health_usage(out);
	fputs("\n"
	      "exit status: 0 ok; 2 bad usage or value (one line on stderr);\n"
	      "run: 127 if CMD can not be executed, else CMD's own status;\n"
	      "health: 0 healthy, 1 degraded, 2 no usable device;\n"
	      "doctor: 0 no FAIL line, 1 some FAIL line.\n"
	      "Operating guide: docs/OPERATIONS.md.\n",
	      out);
}

static int cmd_reasons(int argc, char **argv)
{
	int width = (int)strlen("name");

	(void)argv;
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
	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "rdmashim version: takes no arguments\n");
		return 2;
	}
	printf("rdmashim %s\n", RDMASHIM_VERSION);
	return 0;
}

static int cmd_help(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "stat"))
		rdmashim_stat_usage(stdout);
	else if (argc > 1 && !strcmp(argv[1], "run"))
		rdmashim_run_usage(stdout);
	else if (argc > 1 && !strcmp(argv[1], "health"))
		rdmashim_health_usage(stdout);
	else
		usage(stdout);
	return 0;
}

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
	{ "run", rdmashim_cmd_run },
	{ "config", rdmashim_cmd_config },
	{ "health", rdmashim_cmd_health },
	{ "stat", rdmashim_cmd_stat },
	{ "doctor", rdmashim_cmd_doctor },
	{ "reasons", cmd_reasons },
	{ "version", cmd_version },
	{ "--version", cmd_version },
	{ "help", cmd_help },
	{ "--help", cmd_help },
	{ "-h", cmd_help },
};

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
