/*
 * Unit tests for the trace destination's safety (shim/core/trace.c): the
 * path may be in a shared directory where another user put something
 * first. A FIFO (with or without a reader), a symbolic link, another
 * user's file, a file its group or others may write and a file with a
 * second hard link are refused, promptly, with a reason naming the path,
 * and tracing stays off; a file the shim creates is the user's alone. The
 * same holds for a fork's child re-opening its own %p file.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "self.h"
#include "trace.h"
#include "check_run.h"

/* Bound on a call that must not block: a hang is a failure, not a stuck run. */
#define NO_HANG_S 3

static char dir[64], path[128], err[512];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/rdmashim-test-tfile-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/trace.log", dir);
	err[0] = '\0';
	umask(022);
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static off_t size_of(const char *p)
{
	struct stat st;

	ck_assert_int_eq(lstat(p, &st), 0);
	return st.st_size;
}

/* shim_trace_open on pattern is refused within the bound, tracing stays
 * off, and the clause names the variable, the pattern, the path and why. */
static void refused(const char *pattern, const char *why)
{
	double t0 = now_s();
	int rc;

	signal(SIGALRM, SIG_DFL);
	alarm(NO_HANG_S); /* SIGALRM ends the test as a failure */
	rc = shim_trace_open(pattern, SHIM_TRACE_INFO, err, sizeof(err));
	alarm(0);
	ck_assert_int_lt(rc, 0);
	ck_assert_double_lt(now_s() - t0, 1.0);
	ck_assert_int_eq(shim_trace_level, SHIM_TRACE_OFF);
	ck_assert_msg(strstr(err, "RDMASHIM_TRACE_FILE=\"") != NULL, "no variable in: %s", err);
	ck_assert_msg(strstr(err, pattern) != NULL, "no pattern in: %s", err);
	ck_assert_msg(strstr(err, path) != NULL, "no path in: %s", err);
	ck_assert_msg(strstr(err, why) != NULL, "no '%s' in: %s", why, err);
	SHIM_TRACE(SHIM_TRACE_ERROR, "never.written", -1, NULL, SHIM_REASON_NONE, NULL);
}

/* The case: nobody reads the FIFO, and a blocking open would wait
 * for a reader at the load of every process. */
START_TEST(a_fifo_with_no_reader_is_refused_without_a_hang)
{
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	refused(path, "FIFO");
}
END_TEST

/* With a reader the open succeeds at once: the type check refuses it, and
 * the reader gets nothing. */
START_TEST(a_fifo_with_a_reader_is_refused)
{
	char byte;
	int r;

	ck_assert_int_eq(mkfifo(path, 0600), 0);
	r = open(path, O_RDONLY | O_NONBLOCK);
	ck_assert_int_ge(r, 0);
	refused(path, "is not a regular file");
	ck_assert_int_le(read(r, &byte, 1), 0);
	close(r);
}
END_TEST

START_TEST(a_symbolic_link_is_refused)
{
	char target[160];
	int fd;

	snprintf(target, sizeof(target), "%s/target", dir);
	fd = open(target, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(symlink(target, path), 0);
	refused(path, "is a symbolic link");
	ck_assert_int_eq(size_of(target), 0);
}
END_TEST

/* Pre-created by another user: it would get our trace, and its owner can
 * read it. Needs root to make a file of another user's. */
START_TEST(another_users_file_is_refused)
{
	int fd;

	if (geteuid() != 0) {
		fprintf(stderr, "another_users_file_is_refused: not root, skipped\n");
		return;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fchown(fd, 65534, 65534), 0);
	close(fd);
	refused(path, "is owned by another user");
	ck_assert_int_eq(size_of(path), 0);
}
END_TEST

START_TEST(a_group_or_world_writable_file_is_refused)
{
	static const mode_t modes[] = { 0620, 0602, 0666 };

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(fchmod(fd, modes[i]), 0);
		close(fd);
		refused(path, "is writable by its group or by others");
		ck_assert_int_eq(size_of(path), 0);
	}
}
END_TEST

START_TEST(a_file_with_another_hard_link_is_refused)
{
	char other[160];
	int fd;

	snprintf(other, sizeof(other), "%s/other", dir);
	fd = open(other, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(link(other, path), 0);
	refused(path, "has other hard links");
	ck_assert_int_eq(size_of(other), 0);
}
END_TEST

/* What the shim creates is private, and the user's own existing file
 * (even one its group may read) is taken and appended to. */
START_TEST(a_created_file_is_private_and_an_own_file_is_taken)
{
	struct stat st;
	int fd;

	umask(0);
	ck_assert_int_eq(shim_trace_open(path, SHIM_TRACE_INFO, err, sizeof(err)), 0);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	ck_assert_uint_eq(st.st_uid, geteuid());
	SHIM_TRACE(SHIM_TRACE_ERROR, "written", -1, NULL, SHIM_REASON_NONE, NULL);
	ck_assert_int_gt(size_of(path), 0);

	snprintf(path, sizeof(path), "%s/own.log", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0640);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, "x\n", 2), 2);
	close(fd);
	ck_assert_int_eq(shim_trace_open(path, SHIM_TRACE_INFO, err, sizeof(err)), 0);
	SHIM_TRACE(SHIM_TRACE_ERROR, "appended", -1, NULL, SHIM_REASON_NONE, NULL);
	ck_assert_int_gt(size_of(path), 2);
}
END_TEST

/*
 * A fork's child re-opens its own %p file: a FIFO another user put at the
 * child's name must not hang the child, which runs on without a trace and
 * says so on stderr (here: a pipe the test reads).
 */
START_TEST(a_forked_child_refuses_a_fifo_at_its_name)
{
	char pattern[128], line[1024] = "";
	int status, p[2];
	double t0;
	pid_t pid;
	ssize_t n;

	snprintf(pattern, sizeof(pattern), "%s/t.%%p.log", dir);
	ck_assert_int_eq(shim_trace_open(pattern, SHIM_TRACE_INFO, err, sizeof(err)), 0);
	ck_assert_int_eq(pipe(p), 0);
	t0 = now_s();
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char mine[160];

		dup2(p[1], 2);
		shim_self_forget();
		snprintf(mine, sizeof(mine), "%s/t.%d.log", dir, (int)getpid());
		if (mkfifo(mine, 0600) < 0)
			_exit(2);
		signal(SIGALRM, SIG_DFL);
		alarm(NO_HANG_S);
		shim_trace_after_fork();
		_exit(shim_trace_level == SHIM_TRACE_OFF ? 0 : 1);
	}
	close(p[1]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status), "the child hung (signal %d)", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert_double_lt(now_s() - t0, 1.0);
	n = read(p[0], line, sizeof(line) - 1);
	close(p[0]);
	ck_assert_int_gt(n, 0);
	line[n] = '\0';
	ck_assert_msg(strstr(line, "RDMASHIM_TRACE_FILE=") && strstr(line, "FIFO") &&
			      strstr(line, "without a trace") && strchr(line, '\n') == line + n - 1,
		      "stderr: %s", line);
	/* The parent's own file is untouched and still its trace. */
	ck_assert_int_eq(shim_trace_level, SHIM_TRACE_INFO);
}
END_TEST

/* ---- RLIMIT_FSIZE ---------------------------------------------------------- */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "r");
	static char data[8192];

	ck_assert_ptr_nonnull(f);
	*len = fread(data, 1, sizeof(data) - 1, f);
	data[*len] = '\0';
	fclose(f);
	return data;
}

/* RLIMIT_FSIZE at 0, as sshd's pre-auth child sets it: a trace line past
 * it would kill the process with SIGXFSZ; it is dropped, however the limit
 * was set (here by the real setrlimit, which the shim does not hook). Run
 * in a child: the limit and the trace are process-wide. */
START_TEST(file_limit_zero_drops_lines)
{
	char dir[] = "/tmp/rdmashim-test-flimit-XXXXXX", path[128];
	size_t len;
	pid_t pid;
	int status;
	char *data;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t.log", dir);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct rlimit none = { 0, RLIM_INFINITY };

		if (shim_trace_open(path, SHIM_TRACE_INFO, NULL, 0) < 0)
			_exit(2);
		SHIM_TRACE(SHIM_TRACE_INFO, "before", -1, NULL, SHIM_REASON_NONE, NULL);
		if (setrlimit(RLIMIT_FSIZE, &none) < 0)
			_exit(3);
		SHIM_TRACE(SHIM_TRACE_ERROR, "after", -1, NULL, SHIM_REASON_NONE, NULL);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	data = read_file(path, &len);
	ck_assert_ptr_nonnull(strstr(data, "\"event\":\"before\""));
	ck_assert_ptr_null(strstr(data, "\"after\""));
	unlink(path);
	rmdir(dir);
}
END_TEST

/* Under a small limit only whole lines below it are written. */
START_TEST(line_past_limit_is_dropped)
{
	char dir[] = "/tmp/rdmashim-test-flimit-XXXXXX", path[128];
	pid_t pid;
	int status;
	size_t len;
	char *data;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/t.log", dir);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct rlimit small = { 300, RLIM_INFINITY };

		if (shim_trace_open(path, SHIM_TRACE_INFO, NULL, 0) < 0)
			_exit(2);
		if (setrlimit(RLIMIT_FSIZE, &small) < 0)
			_exit(3);
		for (int i = 0; i < 10; i++)
			SHIM_TRACE(SHIM_TRACE_INFO, "line", i, NULL, SHIM_REASON_NONE, NULL);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
	data = read_file(path, &len);
	ck_assert_uint_le(len, 300);
	ck_assert_ptr_nonnull(strstr(data, "\"event\":\"line\""));
	ck_assert_msg(data[len - 1] == '\n', "only whole lines: %s", data);
	unlink(path);
	rmdir(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("trace_file");
	TCase *tc = tcase_create("destination");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, a_fifo_with_no_reader_is_refused_without_a_hang);
	tcase_add_test(tc, a_fifo_with_a_reader_is_refused);
	tcase_add_test(tc, a_symbolic_link_is_refused);
	tcase_add_test(tc, another_users_file_is_refused);
	tcase_add_test(tc, a_group_or_world_writable_file_is_refused);
	tcase_add_test(tc, a_file_with_another_hard_link_is_refused);
	tcase_add_test(tc, a_created_file_is_private_and_an_own_file_is_taken);
	tcase_add_test(tc, a_forked_child_refuses_a_fifo_at_its_name);
	tcase_add_test(tc, file_limit_zero_drops_lines);
	tcase_add_test(tc, line_past_limit_is_dropped);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
