/*
 * rdmashim run [OPTIONS] [--] CMD [ARGS...]
 *
 * Checks every option value with the shim's own parser, exports it as the
 * RDMASHIM_* variable the shim reads, prepends the shim to LD_PRELOAD and
 * execs CMD. Nothing is started when anything is wrong: one line on stderr
 * naming the option and the value, exit 2.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "trace.h"

int rdmashim_cmd_run(int argc, char **argv);
void rdmashim_run_usage(FILE *out);
int rdmashim_locate_library(char out[PATH_MAX], char *why, size_t len);
/* cmd_config.c */
int rdmashim_check_trace_file(const char *pattern, char *path, size_t len, const char **why);

#define SHIM_LIB_NAME "librdmashim.so"
/* Separators the dynamic loader splits LD_PRELOAD at. */
#define PRELOAD_SEPARATORS ": \t\n"

struct run_option {
	const char *flag;
	const char *metavar;
	const char *var;
	const char *hint;
};

static const struct run_option run_options[] = {
	{ "--ports", "LIST", "RDMASHIM_PORTS", "e.g. 6379,8000-8100" },
	{ "--transports", "LIST", "RDMASHIM_TRANSPORTS", "shm,rdma | rdma,shm | shm | rdma | tcp" },
	{ "--ab", "PCT", "RDMASHIM_AB_PERCENT", "0-100" },
	{ "--trace", "LEVEL", "RDMASHIM_TRACE", "off|error|warn|info|debug|trace" },
	{ "--trace-file", "PATH", "RDMASHIM_TRACE_FILE", "%p becomes the pid" },
	{ "--ring-kb", "N", "RDMASHIM_RING_KB", "power of two, 4-65536" },
	{ "--spin-us", "N", "RDMASHIM_SPIN_US", "0-1000000" },
};
#define N_RUN_OPTIONS (sizeof(run_options) / sizeof(run_options[0]))

void rdmashim_run_usage(FILE *out)
{
	fputs("run options (each sets the variable shown, after checking the value the way\n"
	      "the shim will; --opt=VALUE works too; 'rdmashim config' explains them all):\n",
	      out);
	for (size_t i = 0; i < N_RUN_OPTIONS; i++) {
		char left[32];

		snprintf(left, sizeof(left), "%s %s", run_options[i].flag, run_options[i].metavar);
		fprintf(out, "  %-18s %-20s %s\n", left, run_options[i].var, run_options[i].hint);
	}
	fputs("\nThe shim library is $RDMASHIM_LIB if set, else ../lib/" SHIM_LIB_NAME "\n"
	      "relative to this program; it is put first in LD_PRELOAD.\n",
	      out);
}

/* Turns shim_config_parse's line into a clause for our own line. */
static const char *clause_of(char *err)
{
	static const char prefix[] = "rdmashim: ";
	char *cut = strstr(err, "; the shim stays inert");

	if (cut)
		*cut = '\0';
	return strncmp(err, prefix, sizeof(prefix) - 1) == 0 ? err + sizeof(prefix) - 1 : err;
}

struct one_var {
	const char *name;
	const char *value;
};

/* An environment that holds one variable: every other one takes its default. */
static const char *one_var_get(const char *name, void *ctx)
{
	const struct one_var *one = ctx;

	return strcmp(name, one->name) == 0 ? one->value : NULL;
}

static const char *env_get(const char *name, void *ctx)
{
	(void)ctx;
	return getenv(name);
}

/* Scratch for the parser: the config holds a PATH_MAX buffer and a bitmap. */
static struct shim_config scratch_cfg;
static char err_line[PATH_MAX + 512];

static int check_option(const struct run_option *opt, const char *value)
{
	struct one_var one = { opt->var, value };
	char path[PATH_MAX];

	if (shim_config_parse(&scratch_cfg, one_var_get, &one, err_line, sizeof(err_line)) < 0) {
		fprintf(stderr, "rdmashim run: %s \"%s\": %s\n", opt->flag, value, clause_of(err_line));
		return -1;
	}
	/* The largest pid the kernel hands out has 7 digits; leave room for 10. */
	if (strcmp(opt->var, "RDMASHIM_TRACE_FILE") == 0 &&
	    shim_trace_expand_path(path, sizeof(path), value, INT_MAX) < 0) {
		fprintf(stderr, "rdmashim run: %s \"%s\": path too long once %%p is expanded\n",
			opt->flag, value);
		return -1;
	}
	return 0;
}

/* Where the shim library is: RDMASHIM_LIB, else ../lib beside this
 * program. 0, or -1 with one sentence in why (rdmashim doctor shows it
 * too). */
int rdmashim_locate_library(char out[PATH_MAX], char *why, size_t len)
{
	const char *env = getenv("RDMASHIM_LIB");
	char exe[PATH_MAX], candidate[PATH_MAX + sizeof("/../lib/" SHIM_LIB_NAME)];
	struct stat st;
	char *slash;

	if (env && *env) {
		if (!realpath(env, out)) {
			snprintf(why, len, "RDMASHIM_LIB=\"%s\": %s", env, strerror(errno));
			return -1;
		}
	} else {
		if (!realpath("/proc/self/exe", exe)) {
			snprintf(why, len, "can not resolve /proc/self/exe (%s); set RDMASHIM_LIB", strerror(errno));
			return -1;
		}
		slash = strrchr(exe, '/');
		if (slash)
			*slash = '\0';
		snprintf(candidate, sizeof(candidate), "%s/../lib/" SHIM_LIB_NAME, exe);
		if (!realpath(candidate, out)) {
			snprintf(why, len, "no shim library at %s (%s); set RDMASHIM_LIB", candidate, strerror(errno));
			return -1;
		}
	}
	if (stat(out, &st) < 0 || !S_ISREG(st.st_mode) || access(out, R_OK) < 0) {
		snprintf(why, len, "%s is not a readable file", out);
		return -1;
	}
	/* The loader would split such a path into pieces and load none of them. */
	if (strpbrk(out, PRELOAD_SEPARATORS)) {
		snprintf(why, len,
			 "the shim library path \"%s\" holds a space or colon, which LD_PRELOAD can not carry; "
			 "install it elsewhere",
			 out);
		return -1;
	}
	return 0;
}

static int set_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	char *value;
	int rc;

	if (old && old[strspn(old, PRELOAD_SEPARATORS)] != '\0')
		rc = asprintf(&value, "%s:%s", lib, old);
	else
		rc = asprintf(&value, "%s", lib);
	if (rc < 0)
		return -1;
	rc = setenv("LD_PRELOAD", value, 1);
	free(value);
	return rc;
}

static const struct run_option *find_option(const char *arg, const char **inline_value)
{
	for (size_t i = 0; i < N_RUN_OPTIONS; i++) {
		size_t n = strlen(run_options[i].flag);

		if (strncmp(arg, run_options[i].flag, n) != 0)
			continue;
		if (arg[n] == '\0') {
			*inline_value = NULL;
			return &run_options[i];
		}
		if (arg[n] == '=') {
			*inline_value = arg + n + 1;
			return &run_options[i];
		}
	}
	return NULL;
}

int rdmashim_cmd_run(int argc, char **argv)
{
	const char *values[N_RUN_OPTIONS] = { NULL };
	char lib[PATH_MAX], why[PATH_MAX + 256];
	int i = 1;

	while (i < argc) {
		const char *arg = argv[i], *value;
		const struct run_option *opt;

		if (strcmp(arg, "--") == 0) {
			i++;
			break;
		}
		if (arg[0] != '-' || arg[1] == '\0')
			break; /* the command */
		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			fputs("usage: rdmashim run [OPTIONS] [--] CMD [ARGS...]\n\n", stdout);
			rdmashim_run_usage(stdout);
			return 0;
		}
		opt = find_option(arg, &value);
		if (!opt) {
			fprintf(stderr, "rdmashim run: unknown option '%s' (try 'rdmashim help')\n", arg);
			return 2;
		}
		if (!value) {
			if (i + 1 >= argc) {
				fprintf(stderr, "rdmashim run: %s needs a value (%s %s)\n", opt->flag, opt->flag,
					opt->metavar);
				return 2;
			}
			value = argv[++i];
		}
		if (check_option(opt, value) < 0)
			return 2;
		values[opt - run_options] = value;
		i++;
	}
	if (i >= argc) {
		fprintf(stderr, "rdmashim run: no command given (rdmashim run [OPTIONS] -- CMD [ARGS...])\n");
		return 2;
	}
	if (rdmashim_locate_library(lib, why, sizeof(why)) < 0) {
		fprintf(stderr, "rdmashim run: %s\n", why);
		return 2;
	}
	for (size_t o = 0; o < N_RUN_OPTIONS; o++) {
		if (values[o] && setenv(run_options[o].var, values[o], 1) < 0) {
			fprintf(stderr, "rdmashim run: can not set %s: %s\n", run_options[o].var, strerror(errno));
			return 2;
		}
	}
	/* The options are good; a bad variable inherited from the environment
	 * would still leave the shim inert, so say so before starting anything. */
	if (shim_config_parse(&scratch_cfg, env_get, NULL, err_line, sizeof(err_line)) < 0) {
		fprintf(stderr, "rdmashim run: %s (from the environment)\n", clause_of(err_line));
		return 2;
	}
	/* The shim opens the trace only when it is enabled; check what it will open. */
	if (scratch_cfg.enabled && scratch_cfg.trace_level != SHIM_TRACE_OFF) {
		char path[PATH_MAX];
		const char *why;
		int rc = rdmashim_check_trace_file(scratch_cfg.trace_file, path, sizeof(path), &why);

		if (rc < 0) {
			fprintf(stderr, "rdmashim run: RDMASHIM_TRACE_FILE=\"%s\" refused: %s %s\n",
				scratch_cfg.trace_file, path, why);
			return 2;
		}
	}
	if (set_preload(lib) < 0) {
		fprintf(stderr, "rdmashim run: can not set LD_PRELOAD: %s\n", strerror(errno));
		return 2;
	}
	fflush(stdout);
	execvp(argv[i], argv + i);
	fprintf(stderr, "rdmashim run: can not run %s: %s\n", argv[i], strerror(errno));
	return 127;
}
