/*
 * Unit tests for shim/core/reaper.c: a file a peer passed us is released
 * off the caller's thread, however long its release blocks.
 *
 * The blocking file is the one an attacker would pass: a TCP socket with
 * SO_LINGER {1, 30}, a full send queue, and a receiver that never reads
 * (its listener never accepts). Whoever closes it last waits 30 s in
 * tcp_close; closing the listener resets it and ends that wait. The first
 * test shows that it does block, so that the others prove something.
 *
 * Each test runs in a process of its own (Check's fork mode).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "reaper.h"
#include "check_run.h"

#define LINGER_S 30
#define FAST_MS 500

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* A listener that never accepts, with a receive buffer as small as can be,
 * which its connections inherit. */
static int silent_listener(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 1024;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 4096), 0);
	return fd;
}

/* A connection to it whose close waits LINGER_S: its send queue is full
 * and the receiver never reads. */
static int lingering_socket(int listener)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	struct linger lg = { .l_onoff = 1, .l_linger = LINGER_S };
	static char junk[65536];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), small = 4096;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(getsockname(listener, (struct sockaddr *)&a, &len), 0);
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	/* Until the window and our queue are full. */
	for (int quiet = 0; quiet < 20;) {
		if (send(fd, junk, sizeof(junk), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
			quiet = 0;
			continue;
		}
		quiet++;
		usleep(5000);
	}
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	return fd;
}

/* The premise: closing such a socket on our own thread blocks. */
START_TEST(a_lingering_socket_blocks_whoever_closes_it)
{
	int l = silent_listener(), fd = lingering_socket(l), go[2];
	char b = 0;
	pid_t child;

	ck_assert_int_eq(pipe(go), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* Once the parent dropped its copy, ours is the last. */
		close(l); /* the parent's copy keeps the receiver silent */
		if (read(go[0], &b, 1) != 1)
			_exit(2);
		close(fd);
		_exit(0);
	}
	close(fd);
	ck_assert_int_eq(write(go[1], &b, 1), 1);
	usleep(FAST_MS * 1000);
	/* Still in close(): it has not exited. */
	ck_assert_int_eq(waitpid(child, NULL, WNOHANG), 0);
	close(l); /* resets the connection: the child's close returns */
	ck_assert_int_eq(waitpid(child, NULL, 0), child);
}
END_TEST

START_TEST(a_lingering_socket_is_released_without_waiting)
{
	int l = silent_listener(), fd = lingering_socket(l);
	long long t0;
	struct shim_reap_counts c;
	struct stat was, now;

	ck_assert_int_eq(fstat(fd, &was), 0);
	t0 = now_ms();
	shim_reap(fd);
	ck_assert_int_lt(now_ms() - t0, FAST_MS);
	/* The number no longer names our socket at once. Another thread
	 * (TSan's, or the reaper's own) may already have taken the free
	 * number for a file of its own, as it did in one make test run. */
	ck_assert(fstat(fd, &now) < 0 || now.st_ino != was.st_ino || now.st_dev != was.st_dev);
	/* The reaper is stuck in its release until the listener goes. */
	ck_assert(!shim_reap_settled(100));
	close(l);
	ck_assert(shim_reap_settled(10000));
	shim_reap_counts(&c);
	ck_assert_uint_eq(c.sent, c.released);
}
END_TEST

/* One byte with fd attached on sock: what sendmsg returns. */
static ssize_t send_one_fd(int sock, int fd)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} control;
	char b = 'x';
	struct iovec iov = { &b, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	return sendmsg(sock, &mh, 0);
}

/* A unix socket with fd queued in it, by a message whose sender is gone:
 * releasing the socket releases fd. Our fd is closed. */
static int socket_holding(int fd)
{
	int sp[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	ck_assert_int_eq(send_one_fd(sp[0], fd), 1);
	close(fd);
	close(sp[0]);
	return sp[1];
}

/* A unix socket with such a file queued in it: releasing the socket
 * releases the file. */
START_TEST(a_socket_holding_a_lingering_one_is_released_without_waiting)
{
	int l = silent_listener(), holder = socket_holding(lingering_socket(l));
	long long t0 = now_ms();

	shim_reap(holder);
	ck_assert_int_lt(now_ms() - t0, FAST_MS);
	close(l);
	ck_assert(shim_reap_settled(10000));
}
END_TEST

/* The reaper takes each file at once, often before the caller closed its
 * own number: were it to close first, the caller's close would be the
 * last. Many rounds, so that the race shows if it is there. */
START_TEST(the_reaper_never_closes_before_the_caller)
{
	int l = silent_listener();
	long long worst = 0;

	for (int i = 0; i < 20; i++) {
		int holder = socket_holding(lingering_socket(l));
		long long t0 = now_ms();

		shim_reap(holder);
		if (now_ms() - t0 > worst)
			worst = now_ms() - t0;
	}
	ck_assert_int_lt(worst, FAST_MS);
	close(l);
	ck_assert(shim_reap_settled(20000));
}
END_TEST

/* A burst (a thousand upgrades at once release three fds each) fills the
 * queue faster than the reaper empties it: that is no stuck release, and
 * must bar nothing. */
START_TEST(a_burst_is_not_a_jam)
{
	struct shim_reap_counts c;
	int p[2];

	for (int i = 0; i < 3000; i++) {
		ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
		shim_reap(p[0]);
		shim_reap(p[1]);
		ck_assert_msg(!shim_reap_jammed(), "jammed at release %d", 2 * i);
	}
	ck_assert(shim_reap_settled(20000));
	shim_reap_counts(&c);
	ck_assert_uint_eq(c.parked, 0);
	ck_assert_uint_eq(c.defused, 0);
	ck_assert_uint_eq(c.sent, c.released);
}
END_TEST

/*
 * With the reaper stuck, its queue fills: each call still returns at once,
 * the process stops taking new side channels, an INET socket is reset in
 * place, anything else is kept open; once the release moves, all of it
 * goes and side channels may start again.
 */
START_TEST(a_full_queue_never_blocks_and_bars_new_channels)
{
	int l = silent_listener(), stuck = lingering_socket(l), more = lingering_socket(l), p[2];
	long long t0 = now_ms(), worst = 0;
	struct shim_reap_counts c;
	int calls = 0;

	shim_reap(stuck);
	ck_assert(!shim_reap_settled(100));
	ck_assert(!shim_reap_jammed());
	while (!shim_reap_jammed() && calls < 100000) {
		long long t = now_ms();

		ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
		shim_reap(p[0]);
		shim_reap(p[1]);
		calls += 2;
		if (now_ms() - t > worst)
			worst = now_ms() - t;
	}
	ck_assert(shim_reap_jammed());
	ck_assert_int_lt(worst, FAST_MS);
	t0 = now_ms();
	shim_reap(more);
	ck_assert_int_lt(now_ms() - t0, FAST_MS);
	shim_reap_counts(&c);
	ck_assert_uint_eq(c.defused, 1);
	ck_assert_uint_ge(c.parked, 1); /* the pipe end whose send found it full */
	close(l);
	ck_assert(shim_reap_settled(20000));
	/* The next release finds room again, and takes the parked ones along. */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	shim_reap(p[0]);
	shim_reap(p[1]);
	ck_assert(shim_reap_settled(10000));
	ck_assert(!shim_reap_jammed());
	shim_reap_counts(&c);
	ck_assert_uint_eq(c.sent, c.released);
}
END_TEST

/* A fork's child has a reaper of its own. */
START_TEST(a_forked_child_releases_without_waiting)
{
	int l = silent_listener(), status;
	pid_t child;

	shim_reap(dup(0)); /* the parent's reaper exists before the fork */
	ck_assert(shim_reap_settled(5000));
	/* Its thread ends once idle: a fork from a process with threads may
	 * start none (TSan refuses it), and the shim forks from none. */
	usleep(300 * 1000);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		int fd = lingering_socket(l);
		long long t0 = now_ms();

		shim_reap(fd);
		_exit(now_ms() - t0 < FAST_MS && fcntl(fd, F_GETFD) < 0 ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	close(l);
}
END_TEST

/* A program that closes numbers it did not open (a daemon's close-all
 * loop) and gets them back for sockets of its own: the shim never sends
 * into them, nor reads them, and makes itself a new pair. */
START_TEST(numbers_the_program_took_back_are_never_touched)
{
	int before[64], nb = 0, ours[2], n = 0, mine[2], p[2];
	char b;

	for (int fd = 0; fd < 64; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			before[nb++] = fd;
	shim_reap(dup(0));
	ck_assert(shim_reap_settled(5000));
	for (int fd = 0; fd < 64 && n < 2; fd++) {
		bool was = false;

		for (int i = 0; i < nb; i++)
			was |= before[i] == fd;
		if (!was && fcntl(fd, F_GETFD) >= 0)
			ours[n++] = fd;
	}
	ck_assert_int_eq(n, 2);
	/* Its thread ends once idle, then the program takes the numbers
	 * (dup2 closes ours) for a socketpair of its own, with a message of
	 * its own queued. */
	usleep(300 * 1000);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, p), 0);
	for (int i = 0; i < 2; i++) {
		mine[i] = dup2(p[i], ours[i]);
		ck_assert_int_eq(mine[i], ours[i]);
		close(p[i]);
	}
	ck_assert_int_eq(send(mine[0], "m", 1, 0), 1);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	shim_reap(p[0]);
	shim_reap(p[1]);
	ck_assert(shim_reap_settled(5000));
	/* The program's message is there, alone: nothing read, nothing sent. */
	ck_assert_int_eq(recv(mine[1], &b, 1, MSG_DONTWAIT), 1);
	ck_assert_int_eq(b, 'm');
	ck_assert_int_lt(recv(mine[1], &b, 1, MSG_DONTWAIT), 0);
	ck_assert_int_lt(recv(mine[0], &b, 1, MSG_DONTWAIT), 0);
}
END_TEST

/* Where the kernel has SO_PASSRIGHTS (6.16), a socket that asked refuses
 * fds; RDMASHIM_TEST_NO_PASSRIGHTS makes the shim ask nothing. */
START_TEST(refused_rights_refuse_fds_where_the_kernel_can)
{
	int sp[2], p[2], rc;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	shim_cfg.test_no_passrights = 1;
	ck_assert_int_eq(shim_reap_refuse_rights(sp[1]), -ENOPROTOOPT);
	ck_assert_int_eq(send_one_fd(sp[0], p[0]), 1);
	shim_cfg.test_no_passrights = 0;
	rc = shim_reap_refuse_rights(sp[1]);
	if (rc == -ENOPROTOOPT || rc == -EINVAL)
		return; /* a kernel before 6.16: the other defences hold alone */
	ck_assert_int_eq(rc, 0);
	ck_assert_int_lt(send_one_fd(sp[0], p[0]), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("reaper");
	TCase *tc = tcase_create("reaper");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, a_lingering_socket_blocks_whoever_closes_it);
	tcase_add_test(tc, a_lingering_socket_is_released_without_waiting);
	tcase_add_test(tc, a_socket_holding_a_lingering_one_is_released_without_waiting);
	tcase_add_test(tc, the_reaper_never_closes_before_the_caller);
	tcase_add_test(tc, a_burst_is_not_a_jam);
	tcase_add_test(tc, a_full_queue_never_blocks_and_bars_new_channels);
	tcase_add_test(tc, a_forked_child_releases_without_waiting);
	tcase_add_test(tc, numbers_the_program_took_back_are_never_touched);
	tcase_add_test(tc, refused_rights_refuse_fds_where_the_kernel_can);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
