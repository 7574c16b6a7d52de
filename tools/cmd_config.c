/*
 * rdmashim config: reads this environment exactly as the shim will (same
 * parser, same getenv), shows every variable with its value and meaning, then
 * the effective result. Exit 2 with the shim's own error line when the shim
 * would stay inert because of a bad value.
 *
 * rdmashim config --markdown: the same table (name, default, meaning) as
 * Markdown, whatever the environment holds: docs/CONFIG.md's generated block
 * is this output (tools/gen-config-doc.sh, checked by integration/t_docs.sh).
 *
 * rdmashim config --man: the same table as man(7) paragraphs, for the
 * ENVIRONMENT section of docs/man/rdmashim.7 (the same script writes it).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "trace.h"

int rdmashim_cmd_config(int argc, char **argv);
int rdmashim_check_trace_file(const char *pattern, char *path, size_t len, const char **why);

/*
 * Whether the shim would take pattern as its trace file (it expands %p with
 * its own pid; ours stands in into path), by the shim's own rules
 * (trace.h). Leaves nothing behind: a file made only for the check is
 * removed. Returns 0, or -errno with *why. Empty means stderr, always fine.
 */
int rdmashim_check_trace_file(const char *pattern, char *path, size_t len, const char **why)
{
	int fd, rc;

	*why = NULL;
	snprintf(path, len, "%s", pattern);
	if (!*pattern)
		return 0;
	rc = shim_trace_expand_path(path, len, pattern, getpid());
	if (rc < 0) {
		snprintf(path, len, "%s", pattern);
		*why = "is too long once %p is expanded";
		return rc;
	}
	/* As the shim opens it, without O_CREAT: nothing made yet. */
	fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (fd >= 0) {
		*why = shim_trace_file_refusal(fd);
		close(fd);
		return *why ? -EPERM : 0;
	}
	if (errno != ENOENT) {
		rc = -errno;
		*why = shim_trace_open_failure(rc);
		return rc;
	}
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		if (rc == -EEXIST)
			return 0; /* made meanwhile: the shim will judge it */
		*why = shim_trace_open_failure(rc);
		return rc;
	}
	close(fd);
	unlink(path);
	return 0;
}

static const char *env_get(const char *name, void *ctx)
{
	(void)ctx;
	return getenv(name);
}

static unsigned count_ports(const struct shim_config *cfg)
{
	unsigned n = 0;

	for (size_t i = 0; i < SHIM_PORT_BITMAP_BYTES; i++)
		n += (unsigned)__builtin_popcount(cfg->ports[i]);
	return n;
}

static void print_variables(void)
{
	int width = 0;

	for (size_t i = 0; i < shim_config_var_count; i++) {
		int n = (int)strlen(shim_config_vars[i].name);

		if (n > width)
			width = n;
	}
	for (size_t i = 0; i < shim_config_var_count; i++) {
		const struct shim_config_var *var = &shim_config_vars[i];
		const char *value = getenv(var->name);

		if (value)
			printf("%-*s = \"%s\"\n", width, var->name, value);
		else
			printf("%-*s = \"%s\" (default)\n", width, var->name, var->default_value);
		printf("    %s\n", var->help);
	}
}

/* text with '|' escaped, so that it stays in its Markdown table cell */
static void print_cell(const char *text)
{
	for (const char *c = text; *c; c++) {
		if (*c == '|')
			putchar('\\');
		putchar(*c);
	}
}

static void print_markdown(void)
{
	printf("| variable | default | meaning |\n");
	printf("|---|---|---|\n");
	for (size_t i = 0; i < shim_config_var_count; i++) {
		const struct shim_config_var *var = &shim_config_vars[i];

		printf("| `%s` | ", var->name);
		if (var->default_value[0]) {
			printf("`");
			print_cell(var->default_value);
			printf("`");
		} else {
			printf("(empty)");
		}
		printf(" | ");
		print_cell(var->help);
		printf(" |\n");
	}
}

/* text as roff: a backslash printed as such; a line never starts with a
 * control character (the callers start each text on a line of its own). */
static void print_roff(const char *text)
{
	if (*text == '.' || *text == '\'')
		fputs("\\&", stdout);
	for (const char *c = text; *c; c++) {
		if (*c == '\\')
			fputs("\\e", stdout);
		else
			putchar(*c);
	}
}

static void print_man(void)
{
	for (size_t i = 0; i < shim_config_var_count; i++) {
		const struct shim_config_var *var = &shim_config_vars[i];

		printf(".TP\n.B %s\n", var->name);
		print_roff(var->help);
		printf(".\n");
		if (var->default_value[0]) {
			printf("Default:\n.BR \"");
			for (const char *c = var->default_value; *c; c++) {
				if (*c == '"')
					fputs("\\(dq", stdout); /* a quote inside a quoted argument */
				else if (*c == '\\')
					fputs("\\e", stdout);
				else
					putchar(*c);
			}
			printf("\" .\n");
		} else {
			printf("Default: empty.\n");
		}
	}
}

static void print_transports(const struct shim_config *cfg)
{
	if (cfg->n_transports == 0) {
		printf("none (tcp only: never upgrades)\n");
		return;
	}
	for (unsigned i = 0; i < cfg->n_transports; i++)
		printf("%s%s", i ? "," : "", shim_transport_name(cfg->transports[i]));
	printf(" (best first, then tcp)\n");
}

int rdmashim_cmd_config(int argc, char **argv)
{
	static struct shim_config cfg;
	static char err[PATH_MAX + 512], trace_path[PATH_MAX];
	const char *why = NULL;
	int trace_rc = 0;
	unsigned ports;

	if (argc > 1) {
		if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
			printf("usage: rdmashim config [--markdown | --man]\n"
			       "Shows every RDMASHIM_* variable (NAME = \"value\", or the default and\n"
			       "\"(default)\"; its meaning below it), then the effective result: enabled or\n"
			       "inert, ports (how many), transports, ab percent, trace level -> file.\n"
			       "Exit 2, with the shim's own line on stderr, when a value is bad or the\n"
			       "trace file would be refused: the shim would stay inert.\n"
			       "--markdown: print the variables' table (name, default, meaning) as Markdown\n"
			       "and nothing else, whatever the environment holds (docs/CONFIG.md).\n"
			       "--man: the same table as man(7) paragraphs (rdmashim(7), ENVIRONMENT).\n");
			return 0;
		}
		if (argc == 2 && strcmp(argv[1], "--markdown") == 0) {
			print_markdown();
			return 0;
		}
		if (argc == 2 && strcmp(argv[1], "--man") == 0) {
			print_man();
			return 0;
		}
		fprintf(stderr, "rdmashim config: takes no arguments but --markdown or --man\n");
		return 2;
	}
	print_variables();
	printf("\n");
	if (shim_config_parse(&cfg, env_get, NULL, err, sizeof(err)) < 0) {
		printf("effective:   inert: a value is invalid (see the line on stderr)\n");
		fflush(stdout);
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	if (cfg.trace_level != SHIM_TRACE_OFF)
		trace_rc = rdmashim_check_trace_file(cfg.trace_file, trace_path, sizeof(trace_path), &why);
	ports = count_ports(&cfg);
	if (trace_rc < 0 && cfg.enabled)
		printf("effective:   inert: the trace file is refused (see the line on stderr)\n");
	else if (cfg.enabled)
		printf("effective:   enabled\n");
	else
		printf("effective:   inert: RDMASHIM_PORTS names no port (pass-through)\n");
	printf("ports:       %u\n", ports);
	printf("transports:  ");
	print_transports(&cfg);
	printf("ab percent:  %u\n", cfg.ab_percent);
	printf("trace:       %s", shim_trace_level_name(cfg.trace_level));
	if (cfg.trace_level != SHIM_TRACE_OFF)
		printf(" -> %s", cfg.trace_file[0] ? cfg.trace_file : "stderr");
	printf("\n");
	if (trace_rc < 0) {
		fflush(stdout);
		fprintf(stderr,
			"rdmashim: RDMASHIM_TRACE_FILE=\"%s\" refused: %s %s; the shim stays inert (pass-through)\n",
			cfg.trace_file, trace_path, why);
		return 2;
	}
	return 0;
}
