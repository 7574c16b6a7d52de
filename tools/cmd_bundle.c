/*
 * rdmashim bundle [-o FILE.tar.gz] [TRACE...]: one tarball for a bug
 * report, holding what a maintainer asks for first: the version, the
 * configuration of this environment, health --json, stat --json and qp
 * --json (when this build has them), uname -a, the rdma-core packages' versions, the CPU model,
 * and the trace files named. MANIFEST.txt in it says how each member was
 * made and with which exit status: a command that fails here (health
 * without an RDMA device) is recorded, not fatal.
 *
 * Every command runs by fork and exec with its arguments as given, never
 * through a shell: trace file names come from the user and may hold any
 * character. Everything made is 0600 (umask 077): traces and configuration
 * name the program's peers and ports.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int rdmashim_cmd_bundle(int argc, char **argv);
void rdmashim_bundle_usage(FILE *out);

/* Each command gets this long; one that hangs (a wedged RDMA driver under
 * health) is killed and recorded so, and the bundle is still made. */
#define CMD_TIMEOUT_S 60
#define MAX_MEMBERS 256

void rdmashim_bundle_usage(FILE *out)
{
	fputs("bundle [-o FILE.tar.gz] [TRACE...]\n"
	      "  writes one gzip tarball (0600) for a bug report: rdmashim version,\n"
	      "  config, health --json, stat --json and qp --json (when present),\n"
	      "  uname -a, the rdma-core and libibverbs1 package versions, the CPU\n"
	      "  model, and the TRACE files named (plain or gzip, copied as they are).\n"
	      "  MANIFEST.txt in it gives each member's command and exit status; a\n"
	      "  command that fails is recorded, not fatal. Default FILE:\n"
	      "  rdmashim-bundle-DATE-TIME.tar.gz in the current directory. Exit: 0\n"
	      "  written; 1 tar failed; 2 bad usage or a TRACE unreadable.\n"
	      "\n"
	      "Example (rdmashim bundle cli.13970.jsonl):\n"
	      "  rdmashim bundle: wrote rdmashim-bundle-20261207-181324.tar.gz\n"
	      "  its members: version.txt config.txt health.json stat.json qp.json uname.txt\n"
	      "  rdma-core.txt cpu.txt traces/1-cli.13970.jsonl MANIFEST.txt; MANIFEST.txt:\n"
	      "  rdmashim bundle made 20261207-181324; each member, how it was made:\n"
	      "  version.txt          rdmashim version: exit status 0\n"
	      "  config.txt           rdmashim config: exit status 0\n"
	      "  health.json          rdmashim health --json: exit status 2\n"
	      "  stat.json            rdmashim stat --json: exit status 0\n"
	      "  qp.json              rdmashim qp --json: exit status 3\n"
	      "  uname.txt            uname -a: exit status 0\n"
	      "  rdma-core.txt        dpkg-query -W rdma-core libibverbs1: exit status 0\n"
	      "  cpu.txt              the first 'model name' line of /proc/cpuinfo, and its processor count\n"
	      "  traces/1-cli.13970.jsonl a copy of cli.13970.jsonl\n",
	      out);
}

struct bundle {
	char tmp[PATH_MAX];  /* the mkdtemp directory */
	char top[64];        /* the tarball's top directory, inside tmp */
	char dir[PATH_MAX];  /* tmp/top */
	char *made[MAX_MEMBERS]; /* files made, relative to dir, for the clean-up */
	unsigned n_made;
	FILE *manifest;
};

static int path_in(const struct bundle *b, const char *name, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/%s", b->dir, name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Creates name in the bundle (0600, never an existing file); its fd, open
 * for reading too: a command's stderr is read back. */
static int create_member(struct bundle *b, const char *name)
{
	char path[PATH_MAX];
	int fd;

	if (path_in(b, name, path, sizeof(path)) < 0 || b->n_made == MAX_MEMBERS)
		return -1;
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0)
		b->made[b->n_made++] = strdup(name);
	return fd;
}

static void note(struct bundle *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct bundle *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(b->manifest, fmt, ap);
	va_end(ap);
}

/* Waits for pid, at most CMD_TIMEOUT_S; the wait status, or -1 killed. */
static int wait_bounded(pid_t pid)
{
	int status = 0;

	for (int i = 0; i < CMD_TIMEOUT_S * 20; i++) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			return status;
		if (r < 0 && errno != EINTR)
			return -1;
		usleep(50000);
	}
	kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return -1;
}

static void status_text(int st, char *out, size_t len)
{
	if (st < 0)
		snprintf(out, len, "killed after %d s", CMD_TIMEOUT_S);
	else if (WIFEXITED(st))
		snprintf(out, len, "exit status %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(out, len, "killed by signal %d", WTERMSIG(st));
	else
		snprintf(out, len, "status %d", st);
}

/*
 * Runs argv (argv[0] looked up in PATH unless it holds a '/') with stdout
 * to fd out and stderr to fd err; stdin is /dev/null. The wait status, -1
 * when killed for its time, -2 when it could not start (127 in the child
 * when the exec failed).
 */
static int run(char *const argv[], int out, int err)
{
	pid_t pid = fork();

	if (pid < 0)
		return -2;
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);

		if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
			_exit(127);
		execvp(argv[0], argv);
		dprintf(2, "%s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	return wait_bounded(pid);
}

static void remove_member(struct bundle *b, const char *name)
{
	char path[PATH_MAX];

	if (path_in(b, name, path, sizeof(path)) == 0)
		unlink(path);
	for (unsigned i = 0; i < b->n_made; i++)
		if (b->made[i] && strcmp(b->made[i], name) == 0) {
			free(b->made[i]);
			b->made[i] = NULL;
		}
}

/*
 * Runs argv with its stdout in member name and its stderr in name.stderr
 * (left out when empty); records both in the manifest. An optional
 * command of ours that this build does not have (another branch adds it)
 * is left out and the manifest says so. Returns the wait status as run()
 * does.
 */
static int capture(struct bundle *b, const char *name, char *const argv[], bool optional)
{
	char errname[128], st_text[64], cmd[512] = "", errline[256];
	int out, err, st;
	size_t o = 0;
	ssize_t n;

	/* Ourselves (a path) by the name a reader knows. */
	for (int i = 0; argv[i] && o < sizeof(cmd); i++)
		o += (size_t)snprintf(cmd + o, sizeof(cmd) - o, "%s%s", i ? " " : "",
				      i || !strchr(argv[0], '/') ? argv[i] : "rdmashim");
	snprintf(errname, sizeof(errname), "%s.stderr", name);
	out = create_member(b, name);
	err = create_member(b, errname);
	if (out < 0 || err < 0) {
		note(b, "%-20s could not be created: %s\n", name, strerror(errno));
		if (out >= 0)
			close(out);
		if (err >= 0)
			close(err);
		return -2;
	}
	st = run(argv, out, err);
	n = pread(err, errline, sizeof(errline) - 1, 0);
	errline[n > 0 ? n : 0] = '\0';
	close(out);
	close(err);
	if (optional && st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2 && strstr(errline, "unknown command")) {
		remove_member(b, name);
		remove_member(b, errname);
		note(b, "%-20s (left out: this rdmashim has no '%s' command)\n", name, argv[1]);
		return st;
	}
	if (st == -2)
		snprintf(st_text, sizeof(st_text), "could not start");
	else
		status_text(st, st_text, sizeof(st_text));
	note(b, "%-20s %s: %s\n", name, cmd, st_text);
	if (n > 0)
		note(b, "%-20s   its stderr: %s\n", "", errname);
	else
		remove_member(b, errname);
	return st;
}

static void cpu_model(struct bundle *b)
{
	FILE *in = fopen("/proc/cpuinfo", "re");
	char line[512];
	int fd = create_member(b, "cpu.txt");
	unsigned n = 0;
	bool shown = false;

	if (fd < 0)
		goto out;
	while (in && fgets(line, sizeof(line), in)) {
		if (strncmp(line, "processor", 9) == 0)
			n++;
		if (!shown && strncmp(line, "model name", 10) == 0) {
			dprintf(fd, "%s", line);
			shown = true;
		}
	}
	dprintf(fd, "processors\t: %u\n", n);
	note(b, "%-20s the first 'model name' line of /proc/cpuinfo, and its processor count%s\n", "cpu.txt",
	     in ? "" : " (unreadable)");
	close(fd);
out:
	if (in)
		fclose(in);
}

static int copy_trace(struct bundle *b, const char *src, unsigned idx)
{
	char name[NAME_MAX + 16], buf[65536];
	const char *base = strrchr(src, '/');
	int in, out, rc = 0;
	ssize_t n;

	base = base ? base + 1 : src;
	if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		base = "trace";
	/* Numbered: two traces of one name from two directories both fit. */
	snprintf(name, sizeof(name), "traces/%u-%.*s", idx, NAME_MAX - 12, base);
	in = open(src, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (in < 0)
		return -errno;
	out = create_member(b, name);
	if (out < 0) {
		rc = -errno;
		close(in);
		return rc;
	}
	while ((n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || write(out, buf, (size_t)n) != n) {
			rc = -errno;
			break;
		}
	}
	close(in);
	close(out);
	fprintf(b->manifest, "%-20s a copy of %s%s\n", name, src, rc ? " (cut: read or write failed)" : "");
	return rc;
}

static void clean_up(struct bundle *b)
{
	char path[PATH_MAX];

	for (unsigned i = 0; i < b->n_made; i++) {
		if (b->made[i] && path_in(b, b->made[i], path, sizeof(path)) == 0)
			unlink(path);
		free(b->made[i]);
	}
	if (path_in(b, "traces", path, sizeof(path)) == 0)
		rmdir(path);
	rmdir(b->dir);
	rmdir(b->tmp);
}

/* tar -czf - -C TMP TOP, its stdout in out: the archive is 0600 because
 * this process created it, whatever tar's own umask handling. */
static int make_tarball(struct bundle *b, const char *out_path)
{
	char *argv[] = { "tar", "-czf", "-", "-C", b->tmp, b->top, NULL };
	char st_text[64];
	int fd, st;

	fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0600);
	if (fd < 0) {
		fprintf(stderr, "rdmashim bundle: %s: %s\n", out_path, strerror(errno));
		return 1;
	}
	/* An existing file keeps its mode through O_TRUNC. */
	if (fchmod(fd, 0600) < 0) {
		fprintf(stderr, "rdmashim bundle: %s: %s\n", out_path, strerror(errno));
		close(fd);
		return 1;
	}
	st = run(argv, fd, 2);
	close(fd);
	if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		status_text(st, st_text, sizeof(st_text));
		fprintf(stderr, "rdmashim bundle: tar failed (%s); %s removed\n", st == -2 ? "could not start" : st_text,
			out_path);
		unlink(out_path);
		return 1;
	}
	return 0;
}

int rdmashim_cmd_bundle(int argc, char **argv)
{
	static struct bundle bundle;
	struct bundle *b = &bundle;
	char out_default[96], stamp[32], self[PATH_MAX];
	const char *out_path = NULL, *tmpdir = getenv("TMPDIR");
	int first_trace = argc, rc, fd;
	time_t now = time(NULL);
	struct tm tm;
	ssize_t n;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-o") == 0) {
			if (i + 1 >= argc || !*argv[i + 1]) {
				fprintf(stderr, "rdmashim bundle: -o needs a file name\n");
				return 2;
			}
			out_path = argv[++i];
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			rdmashim_bundle_usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--") == 0) {
			first_trace = i + 1;
			break;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "rdmashim bundle: unknown option '%s' (try 'rdmashim help bundle')\n", argv[i]);
			return 2;
		} else {
			first_trace = i;
			break;
		}
	}
	/* Every trace readable before anything is made: a typo is told at once. */
	for (int i = first_trace; i < argc; i++) {
		if (access(argv[i], R_OK) < 0) {
			fprintf(stderr, "rdmashim bundle: %s: %s\n", argv[i], strerror(errno));
			return 2;
		}
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		fprintf(stderr, "rdmashim bundle: can not find this program (/proc/self/exe): %s\n", strerror(errno));
		return 2;
	}
	self[n] = '\0';
	umask(077);
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
	snprintf(out_default, sizeof(out_default), "rdmashim-bundle-%s.tar.gz", stamp);
	if (!out_path)
		out_path = out_default;
	snprintf(b->tmp, sizeof(b->tmp), "%s/rdmashim-bundle.XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	snprintf(b->top, sizeof(b->top), "rdmashim-bundle-%s", stamp);
	if (!mkdtemp(b->tmp) || snprintf(b->dir, sizeof(b->dir), "%s/%s", b->tmp, b->top) >= (int)sizeof(b->dir) ||
	    mkdir(b->dir, 0700) < 0) {
		fprintf(stderr, "rdmashim bundle: can not make a temporary directory in %s: %s\n", b->tmp,
			strerror(errno));
		return 2;
	}
	fd = create_member(b, "MANIFEST.txt");
	b->manifest = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!b->manifest) {
		fprintf(stderr, "rdmashim bundle: can not write in %s: %s\n", b->dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		clean_up(b);
		return 2;
	}
	note(b, "rdmashim bundle made %s; each member, how it was made:\n", stamp);
	{
		char *version[] = { self, "version", NULL }, *config[] = { self, "config", NULL };
		char *health[] = { self, "health", "--json", NULL }, *stat[] = { self, "stat", "--json", NULL };
		char *qp[] = { self, "qp", "--json", NULL };
		char *uname[] = { "uname", "-a", NULL };
		char *dpkg[] = { "dpkg-query", "-W", "rdma-core", "libibverbs1", NULL };

		capture(b, "version.txt", version, false);
		capture(b, "config.txt", config, false);
		capture(b, "health.json", health, false);
		capture(b, "stat.json", stat, true);
		capture(b, "qp.json", qp, true);
		capture(b, "uname.txt", uname, false);
		capture(b, "rdma-core.txt", dpkg, false);
	}
	cpu_model(b);
	if (first_trace < argc) {
		char traces[PATH_MAX];

		if (path_in(b, "traces", traces, sizeof(traces)) < 0 || mkdir(traces, 0700) < 0) {
			fprintf(stderr, "rdmashim bundle: can not make %s: %s\n", traces, strerror(errno));
			fclose(b->manifest);
			clean_up(b);
			return 2;
		}
	}
	for (int i = first_trace; i < argc; i++) {
		rc = copy_trace(b, argv[i], (unsigned)(i - first_trace + 1));
		if (rc < 0)
			fprintf(stderr, "rdmashim bundle: %s: %s (recorded in MANIFEST.txt)\n", argv[i], strerror(-rc));
	}
	fclose(b->manifest);
	rc = make_tarball(b, out_path);
	clean_up(b);
	if (rc == 0)
		printf("rdmashim bundle: wrote %s\n", out_path);
	return rc;
}
