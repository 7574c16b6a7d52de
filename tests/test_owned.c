/*
 * Unit tests for shim/core/owned.c, the shim's kept fds: a number the
 * program closed and got back for a file of its own is never taken for
 * ours, nor closed by the shim. Epoll sets need the marker for that: every
 * epoll file has the same device and inode, so the fstat check alone takes
 * the program's set for ours (the first test shows it, and must keep
 * showing it: otherwise the marker tests prove nothing).
 *
 * Each test runs in a process of its own (Check's fork mode).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "owned.h"
#include "check_run.h"

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* The program closes our number and makes an epoll set of its own there. */
static int program_takes(int number)
{
	close(number);
	int ep = epoll_create1(EPOLL_CLOEXEC);

	ck_assert_int_eq(ep, number);
	return ep;
}

START_TEST(epoll_files_share_one_inode)
{
	int a = epoll_create1(EPOLL_CLOEXEC), b = epoll_create1(EPOLL_CLOEXEC);
	struct stat sa, sb;

	ck_assert_int_eq(fstat(a, &sa), 0);
	ck_assert_int_eq(fstat(b, &sb), 0);
	ck_assert(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);
	/* So a plain take of an epoll set can not tell them apart. */
	struct shim_owned_fd o;

	ck_assert_int_eq(shim_owned_take(&o, a), 0);
	program_takes(a);
	ck_assert(shim_owned_still(&o));
}
END_TEST

START_TEST(our_epoll_set_is_ours_and_the_programs_is_not)
{
	struct shim_owned_fd o;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	ck_assert_int_eq(shim_owned_take_epoll(&o, ep), 0);
	ck_assert(shim_owned_still(&o));
	ck_assert(shim_owned_still(&o)); /* the check changes nothing */
	program_takes(ep);
	ck_assert(!shim_owned_still(&o));
	shim_owned_close(&o);
	ck_assert(fd_open(ep)); /* not ours: left alone */
	ck_assert_int_eq(o.fd, -1);
}
END_TEST

START_TEST(the_marker_never_shows_in_a_wait)
{
	struct shim_owned_fd o;
	struct epoll_event ev;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	ck_assert_int_eq(shim_owned_take_epoll(&o, ep), 0);
	ck_assert_int_eq(epoll_wait(ep, &ev, 1, 20), 0);
	ck_assert(shim_owned_still(&o));
	ck_assert_int_eq(epoll_wait(ep, &ev, 1, 0), 0);
	shim_owned_close(&o);
	ck_assert(!fd_open(ep)); /* ours: closed */
}
END_TEST

/* The program closes every fd it did not open (the marker among them):
 * none of our sets is taken for ours after, and a new set gets a new
 * marker. */
START_TEST(a_closed_marker_makes_no_set_ours)
{
	struct shim_owned_fd o, o2;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	ck_assert_int_eq(shim_owned_take_epoll(&o, ep), 0);
	for (int fd = 3; fd < 64; fd++)
		if (fd != ep)
			close(fd);
	ck_assert(!shim_owned_still(&o));
	int ep2 = epoll_create1(EPOLL_CLOEXEC);

	ck_assert_int_eq(shim_owned_take_epoll(&o2, ep2), 0);
	ck_assert(shim_owned_still(&o2));
	ck_assert(!shim_owned_still(&o));
}
END_TEST

static int open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 256; fd++)
		n += fd_open(fd);
	return n;
}

/* The marker is one fd for all our sets, and goes with the last of them,
 * closed or let go: a process holds no fd of ours for sets it no longer
 * has. */
START_TEST(the_marker_goes_with_the_last_set)
{
	struct shim_owned_fd a, b;
	int before = open_fds();

	ck_assert_int_eq(shim_owned_take_epoll(&a, epoll_create1(EPOLL_CLOEXEC)), 0);
	ck_assert_int_eq(shim_owned_take_epoll(&b, epoll_create1(EPOLL_CLOEXEC)), 0);
	ck_assert_int_eq(open_fds(), before + 3);
	shim_owned_close(&a);
	ck_assert_int_eq(open_fds(), before + 2);
	ck_assert(shim_owned_still(&b));
	/* The last one is the program's now: let go, not closed. */
	int theirs = epoll_create1(EPOLL_CLOEXEC);

	ck_assert_int_eq(dup3(theirs, b.fd, O_CLOEXEC), b.fd);
	close(theirs);
	theirs = b.fd;

	ck_assert(!shim_owned_still(&b));
	shim_owned_forget(&b);
	ck_assert_int_eq(open_fds(), before + 1);
	ck_assert(fd_open(theirs));
	/* A new set makes a new marker. */
	ck_assert_int_eq(shim_owned_take_epoll(&a, epoll_create1(EPOLL_CLOEXEC)), 0);
	ck_assert(shim_owned_still(&a));
	shim_owned_close(&a);
	ck_assert_int_eq(open_fds(), before + 1);
}
END_TEST

START_TEST(a_reused_socket_number_is_not_ours)
{
	struct shim_owned_fd o;
	int sp[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	ck_assert_int_eq(shim_owned_take(&o, sp[0]), 0);
	ck_assert(shim_owned_still(&o));
	close(sp[0]);
	int again = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	ck_assert_int_eq(again, sp[0]);
	ck_assert(!shim_owned_still(&o));
	shim_owned_close(&o);
	ck_assert(fd_open(again));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("owned");
	TCase *tc = tcase_create("owned");

	tcase_add_test(tc, epoll_files_share_one_inode);
	tcase_add_test(tc, our_epoll_set_is_ours_and_the_programs_is_not);
	tcase_add_test(tc, the_marker_never_shows_in_a_wait);
	tcase_add_test(tc, a_closed_marker_makes_no_set_ours);
	tcase_add_test(tc, the_marker_goes_with_the_last_set);
	tcase_add_test(tc, a_reused_socket_number_is_not_ours);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
