/*
 * Start-up: resolve the real symbols, read the configuration, open the trace,
 * reserve the fd table and adopt inherited sockets. Any failure leaves the
 * shim inert after one line on stderr; the program itself runs on untouched.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "atfork.h"
#include "close.h"
#include "config.h"
#include "faults.h"
#include "fdtable.h"
#include "layers.h"
#include "bypass.h"
#include "seccomp_state.h"
#include "real.h"
#include "sock.h"
#include "msgstamps.h"
#include "stamps.h"
#include "statarea.h"
#include "stats.h"
#include "trace.h"
#include "upgrade.h"
#include "version.h"

/* Upper bound on the fd table, whatever RLIMIT_NOFILE says (8 MiB reserved). */
#define SHIM_FD_TABLE_MAX (1u << 20)

/*
 * secure_getenv: in a process that gained privilege at exec (setuid,
 * setgid, file capabilities: AT_SECURE), every variable reads as unset, so
 * the shim stays inert there and a user can not make a privileged program
 * create or append to a file of the user's choosing (RDMASHIM_TRACE_FILE),
 * nor change what it does with its connections.
 */
static const char *env_get(const char *name, void *ctx)
{
	(void)ctx;
	return secure_getenv(name);
}

/* One line on stderr, written raw: stdio buffering is the program's. */
static void say(const char *line)
{
	struct iovec iov[2] = { { (void *)line, strlen(line) }, { (void *)"\n", 1 } };
	long rc = syscall(SYS_writev, 2, iov, 2);

	(void)rc;
}

static void say_prefixed(const char *clause)
{
	struct iovec iov[3] = { { (void *)"rdmashim: ", 10 }, { (void *)clause, strlen(clause) }, { (void *)"\n", 1 } };
	long rc = syscall(SYS_writev, 2, iov, 3);

	(void)rc;
}

static size_t fd_table_size(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_max == RLIM_INFINITY ||
	    rl.rlim_max > SHIM_FD_TABLE_MAX)
		return SHIM_FD_TABLE_MAX;
	return rl.rlim_max < 1024 ? 1024 : (size_t)rl.rlim_max;
}

__attribute__((constructor)) static void shim_init(void)
{
	char err[PATH_MAX + 256];
	int rc;

	shim_real_resolve();
	shim_layers_register();
	if (shim_config_parse(&shim_cfg, env_get, NULL, err, sizeof(err)) < 0) {
		say(err);
		return;
	}
	if (!shim_cfg.enabled)
		return;
	rc = shim_trace_open(shim_cfg.trace_file, shim_cfg.trace_level, err, sizeof(err) - 64);
	if (rc < 0) {
		size_t n = strlen(err);

		snprintf(err + n, sizeof(err) - n, "; the shim stays inert (pass-through)");
		say_prefixed(err);
		shim_cfg.enabled = false;
		return;
	}
	rc = shim_fdtable_init(fd_table_size());
	if (rc < 0) {
		snprintf(err, sizeof(err), "rdmashim: fd table reservation failed (%s); the shim stays inert",
			 strerror(-rc));
		say(err);
		shim_cfg.enabled = false;
		return;
	}
	/* Test-only faults (faults.h): armed once tracing is up, so that
	 * the first strike is traced. */
	shim_faults_arm(&shim_cfg.faults);
	SHIM_TRACE(SHIM_TRACE_INFO, "process.start", -1, NULL, SHIM_REASON_NONE,
		   "\"version\":\"%s\",\"transports\":%u,\"ab_percent\":%u,\"mode\":\"%s\"", RDMASHIM_VERSION,
		   shim_cfg.n_transports, shim_cfg.ab_percent, shim_cfg.shadow ? "shadow" : "on");
	shim_atfork_register();
	/* A filter inherited: the process is a sandbox from its first call,
	 * before any connection is adopted or made, unless the operator says
	 * that filter lets the shim's calls through. */
	if (shim_seccomp_mode() > 0) {
		if (!shim_cfg.seccomp_trust)
			shim_bypass_sandboxed("inherited", false);
		else
			SHIM_TRACE(SHIM_TRACE_INFO, "process.seccomp_trusted", -1, NULL, SHIM_REASON_NONE, NULL);
	}
	shim_sock_adopt_inherited();
}

__attribute__((destructor)) static void shim_fini(void)
{
	/* A sandboxed process makes no call of ours at exit: its filter may
	 * refuse the listing of /proc/self/fd by killing it, and its
	 * connections are the kernel's (io/bypass.c). */
	if (!shim_cfg.enabled || shim_upgrade_barred())
		return;
	shim_close_at_exit();
	shim_stats_trace();
	if (shim_cfg.test_stamps)
		shim_stamps_trace();
	if (shim_cfg.test_msgstamps)
		shim_msgstamps_trace();
	shim_statarea_exit();
}
