/*
 * Unit tests for the rendezvous peer check (shim/transport/shm/rendezvous.c,
 * shim_rv_verify_peer): the fd the peer names must be the TCP socket
 * sock_diag names, judged by the text of its /proc link ("socket:[INODE]"),
 * which is read and never followed: the peer chose the number, and a
 * file behind it (a FIFO, a file on FUSE or NFS) is never stat()ed or
 * opened. A peer that exited is refused even when another process got its
 * pid and holds the socket under the number it named (where the kernel has
 * SO_PEERPIDFD). Here the test process plays both ends: the rendezvous is
 * a socketpair or a listener of its own, the TCP connection a loopback one.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rendezvous.h"
#include "tuple.h"
#include "check_run.h"

/*
 * Following a /proc fd link is what must never happen: count every stat()
 * or open() of one this process makes (the library's calls resolve to
 * these; the rest go through to the kernel).
 */
static int follows;

static int is_proc_fd_link(const char *path)
{
	return strncmp(path, "/proc/", 6) == 0 && strstr(path, "/fd/") != NULL;
}

int stat(const char *restrict path, struct stat *restrict st)
{
	if (is_proc_fd_link(path))
		follows++;
	return fstatat(AT_FDCWD, path, st, 0);
}

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	va_start(ap, flags);
	if (flags & (O_CREAT | O_TMPFILE))
		mode = (mode_t)va_arg(ap, int);
	va_end(ap);
	if (is_proc_fd_link(path))
		follows++;
	return openat(AT_FDCWD, path, flags, mode);
}

static int lsn, cli, srv, rv[2];
static struct shim_endpoint cli_ep, srv_ep;

static void endpoint_of(int fd, bool peer, struct shim_endpoint *ep)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	ck_assert_int_eq(peer ? getpeername(fd, (struct sockaddr *)&ss, &len)
			      : getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	ck_assert_int_eq(shim_endpoint_from_sockaddr((struct sockaddr *)&ss, len, ep), 0);
}

static void setup(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	lsn = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(bind(lsn, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(lsn, 1), 0);
	ck_assert_int_eq(getsockname(lsn, (struct sockaddr *)&a, &len), 0);
	cli = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(cli, (struct sockaddr *)&a, sizeof(a)), 0);
	srv = accept(lsn, NULL, NULL);
	ck_assert_int_ge(srv, 0);
	endpoint_of(cli, false, &cli_ep);
	endpoint_of(cli, true, &srv_ep);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, rv), 0);
	follows = 0;
}

static void teardown(void)
{
	close(rv[0]);
	close(rv[1]);
	close(cli);
	close(srv);
	close(lsn);
}

/* The peer (this process) names fd as its end of the connection, cli's. */
static int verify_named(int fd)
{
	struct shim_rv_owner owner = { 0 };

	return shim_rv_verify_peer(rv[0], &cli_ep, &srv_ep, fd, &owner);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(the_socket_itself_passes_and_another_does_not)
{
	ck_assert_int_eq(verify_named(cli), 0);
	ck_assert_int_eq(verify_named(srv), -EPERM);
	ck_assert_int_eq(verify_named(lsn), -EPERM);
	ck_assert_int_eq(verify_named(rv[1]), -EPERM);
	ck_assert_int_eq(follows, 0);
}
END_TEST

/* Files that are no socket: refused by their link's text, never opened. A
 * FIFO with no writer would block an open() for reading. */
START_TEST(a_fifo_or_a_file_is_refused_without_being_followed)
{
	char dir[] = "/tmp/rdmashim-test-rv-XXXXXX", fifo[64], file[64];
	int f, r;
	double t0;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(file, sizeof(file), "%s/file", dir);
	ck_assert_int_eq(mkfifo(fifo, 0600), 0);
	r = openat(AT_FDCWD, fifo, O_RDONLY | O_NONBLOCK);
	ck_assert_int_ge(r, 0);
	f = openat(AT_FDCWD, file, O_WRONLY | O_CREAT, 0600);
	ck_assert_int_ge(f, 0);
	t0 = now_s();
	ck_assert_int_eq(verify_named(r), -EPERM);
	ck_assert_int_eq(verify_named(f), -EPERM);
	ck_assert_double_lt(now_s() - t0, 1.0);
	ck_assert_int_eq(follows, 0);
	close(r);
	close(f);
	unlink(fifo);
	unlink(file);
	rmdir(dir);
}
END_TEST

/* A number the peer does not hold: -ENOENT, which the caller reads as a
 * peer that closed its connection meanwhile. */
START_TEST(a_number_not_open_is_enoent)
{
	int spare;

	/* The lookup's own netlink socket opens first, not at our number. */
	ck_assert_int_eq(verify_named(cli), 0);
	spare = dup(cli);
	close(spare);
	ck_assert_int_eq(verify_named(spare), -ENOENT);
	ck_assert_int_eq(follows, 0);
}
END_TEST

/*
 * The pid race: the process on the rendezvous exits, and its pid goes to
 * another process that holds the socket under the number named. The pid
 * is steered by ns_last_pid (root, and a free number: retried, the host
 * forks meanwhile too). Only a kernel with SO_PEERPIDFD can tell.
 */
static bool set_last_pid(pid_t pid)
{
	FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
	bool ok;

	if (!f)
		return false;
	ok = fprintf(f, "%d", (int)(pid - 1)) > 0;
	return fclose(f) == 0 && ok;
}

START_TEST(a_peer_whose_pid_went_to_another_process_is_refused)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
				    (size_t)snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1,
						     "rdmashim-test-rv-%d", (int)getpid()));
	int l = socket(AF_UNIX, SOCK_SEQPACKET, 0), conn, hold[2], status, pfd;
	struct shim_rv_owner owner = { 0 };
	pid_t first, second = -1;
	socklen_t pl = sizeof(pfd);

	if (getsockopt(rv[0], SOL_SOCKET, 77 /* SO_PEERPIDFD */, &pfd, &pl) < 0) {
		fprintf(stderr, "no SO_PEERPIDFD here: the pid race stays open, skipped\n");
		return;
	}
	close(pfd);
	ck_assert_int_eq(bind(l, (struct sockaddr *)&sun, len), 0);
	ck_assert_int_eq(listen(l, 1), 0);
	first = fork();
	ck_assert_int_ge(first, 0);
	if (first == 0)
		_exit(connect(socket(AF_UNIX, SOCK_SEQPACKET, 0), (struct sockaddr *)&sun, len) == 0 ? 0 : 1);
	conn = accept(l, NULL, NULL);
	ck_assert_int_ge(conn, 0);
	ck_assert_int_eq(waitpid(first, &status, 0), first);
	ck_assert_int_eq(status, 0);
	ck_assert_int_eq(pipe(hold), 0);
	for (int tries = 0; tries < 50 && second != first; tries++) {
		if (!set_last_pid(first)) {
			fprintf(stderr, "ns_last_pid not writable: skipped\n");
			close(conn);
			close(l);
			return;
		}
		second = fork();
		ck_assert_int_ge(second, 0);
		if (second == 0) {
			char byte;

			/* Holds cli, under cli's number, until told. */
			close(hold[1]);
			if (getpid() == first)
				(void)!read(hold[0], &byte, 1);
			_exit(0);
		}
		if (second != first)
			ck_assert_int_eq(waitpid(second, &status, 0), second);
	}
	if (second != first) {
		fprintf(stderr, "pid %d not had again: skipped\n", (int)first);
	} else {
		/* The number is held by cli's socket in a live process of pid
		 * `first`: everything the old check looked at, but not the
		 * process that came to the rendezvous. */
		ck_assert_int_eq(shim_rv_verify_peer(conn, &cli_ep, &srv_ep, cli, &owner), -ENOENT);
		close(hold[1]);
		ck_assert_int_eq(waitpid(second, &status, 0), second);
	}
	close(hold[0]);
	close(conn);
	close(l);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rendezvous");
	TCase *tc = tcase_create("verify_peer");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, the_socket_itself_passes_and_another_does_not);
	tcase_add_test(tc, a_fifo_or_a_file_is_refused_without_being_followed);
	tcase_add_test(tc, a_number_not_open_is_enoent);
	tcase_add_test(tc, a_peer_whose_pid_went_to_another_process_is_refused);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
