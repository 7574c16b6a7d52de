/*
 * Unit tests for the pair channels (shim/transport/shm/pair.c): what a kept
 * pair brings is found by the connection it names and by nothing else; the
 * pending table is bounded; a pair that sends anything but a well-formed
 * HINT is dropped; and a pair fd that the program closed and whose number
 * it got back for a file of its own is never read, written or closed.
 *
 * Each test runs in a process of its own (Check's fork mode), with fresh
 * tables. Pairs are socketpairs here: both ends are this process, of our
 * own user, as a pair must be.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pair.h"
#include "wire.h"

static struct shim_tuple tuple_of(uint16_t client_port)
{
	struct shim_tuple t;

	memset(&t, 0, sizeof(t));
	t.local.addr[10] = t.local.addr[11] = 0xff;
	t.local.addr[12] = 127;
	t.local.addr[15] = 1;
	t.local.port = 6379;
	t.peer = t.local;
	t.peer.port = client_port;
	return t;
}

/* A HINT naming t (S's view), as C builds it. */
static struct shim_msg_hint hint_for(const struct shim_tuple *t)
{
	struct shim_msg_hint h;

	memset(&h, 0, sizeof(h));
	shim_msg_init(&h.hdr, SHIM_MSG_HINT, sizeof(h));
	memcpy(h.client_addr, t->peer.addr, 16);
	memcpy(h.server_addr, t->local.addr, 16);
	h.client_port = t->peer.port;
	h.server_port = t->local.port;
	h.ring_bytes = 4096;
	h.tcp_fd = 3;
	return h;
}

/* Sends msg with two fresh fds (a socketpair end and a memfd) on fd. */
static void send_with_two(int fd, const void *msg, size_t len)
{
	int sp[2], fds[2];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(fds))];
	} control;
	struct iovec iov = { (void *)msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	fds[0] = sp[1];
	fds[1] = memfd_create("test-ring", MFD_CLOEXEC);
	ck_assert_int_ge(fds[1], 0);
	memset(&control, 0, sizeof(control));
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	ck_assert_int_eq(sendmsg(fd, &mh, 0), (ssize_t)len);
	close(sp[0]);
	close(sp[1]);
	close(fds[1]);
}

/* A pair kept at our S end; returns the C end to send on. */
static int server_pair(void)
{
	int sp[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
	shim_pair_keep_server(sp[1]);
	return sp[0];
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

START_TEST(a_hint_is_found_by_its_connection_only)
{
	int c = server_pair();
	struct shim_tuple mine = tuple_of(40000), other = tuple_of(40001);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;

	send_with_two(c, &h, sizeof(h));
	ck_assert(!shim_pair_claim(&other, &got, 1000));
	ck_assert(shim_pair_claim(&mine, &got, 1000));
	ck_assert_uint_eq(got.msg.client_port, 40000);
	ck_assert(fd_open(got.rv_fd) && fd_open(got.memfd));
	close(got.rv_fd);
	close(got.memfd);
	/* Taken once: it is the caller's now. */
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
}
END_TEST

START_TEST(pending_hints_are_bounded_oldest_first)
{
	int c = server_pair();
	struct shim_pair_hint got;
	unsigned long long t = 1000;

	/* One at a time, so that each drain finds one: 130 HINTs, 128 kept. */
	for (uint16_t i = 0; i < 130; i++) {
		struct shim_tuple ti = tuple_of((uint16_t)(41000 + i)), none = tuple_of(1);
		struct shim_msg_hint h = hint_for(&ti);

		send_with_two(c, &h, sizeof(h));
		ck_assert(!shim_pair_claim(&none, &got, ++t));
	}
	struct shim_tuple first = tuple_of(41000), second = tuple_of(41001), last = tuple_of(41129);

	ck_assert(!shim_pair_claim(&first, &got, t));
	ck_assert(!shim_pair_claim(&second, &got, t));
	ck_assert(shim_pair_claim(&last, &got, t));
	close(got.rv_fd);
	close(got.memfd);
}
END_TEST

START_TEST(pending_hints_expire)
{
	int c = server_pair();
	struct shim_tuple mine = tuple_of(40000), none = tuple_of(1);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;

	send_with_two(c, &h, sizeof(h));
	ck_assert(!shim_pair_claim(&none, &got, 1000)); /* read in at t=1000 */
	ck_assert(!shim_pair_claim(&mine, &got, 1000 + 2000000000ull));
}
END_TEST

START_TEST(a_pair_that_sends_anything_else_is_dropped)
{
	int c = server_pair();
	struct shim_tuple mine = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_msg_switch_at at;
	struct shim_pair_hint got;

	memset(&at, 0, sizeof(at));
	shim_msg_init(&at.hdr, SHIM_MSG_SWITCH_AT, sizeof(at));
	ck_assert_int_eq(send(c, &at, sizeof(at), 0), (ssize_t)sizeof(at));
	send_with_two(c, &h, sizeof(h));
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
	/* S closed its end: the next HINT can not even be sent. */
	ck_assert_int_lt(send(c, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT), 0);
}
END_TEST

START_TEST(a_hint_without_its_two_fds_is_not_kept)
{
	int c = server_pair();
	struct shim_tuple mine = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;

	ck_assert_int_eq(send(c, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
}
END_TEST

/* The program closes the fd of our client pair and gets its number back
 * for a pipe of its own: a HINT must not be written into that pipe. */
START_TEST(a_reused_client_pair_number_is_never_written)
{
	struct shim_endpoint server = tuple_of(1).local;
	struct shim_tuple t = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&t);
	int sp[2], p[2], kept, rvp[2], memfd = memfd_create("test-ring", MFD_CLOEXEC);
	char byte;
	pid_t pid;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
	kept = sp[1];
	shim_pair_keep_client(kept, &server);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rvp), 0);
	/* Sent while the pair is ours. */
	ck_assert_int_eq(shim_pair_send_hint(&server, &h, rvp[1], memfd, 1000, &pid), 0);
	ck_assert_int_eq(pid, getpid());
	/* Behind the shim's back: the number now names a pipe. */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(dup2(p[1], kept), kept);
	ck_assert_int_eq(shim_pair_send_hint(&server, &h, rvp[1], memfd, 2000, &pid), -ENOENT);
	ck_assert_int_lt(read(p[0], &byte, 1), 0); /* nothing was written into it */
	ck_assert(fd_open(kept));                  /* nor was it closed */
}
END_TEST

/* The same at S: a number reused for a pipe is neither read nor closed. */
START_TEST(a_reused_server_pair_number_is_never_read)
{
	int c = server_pair(), p[2], kept;
	struct shim_tuple mine = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;
	char byte = 'x';

	/* The kept end is the lowest free number after c, as socketpair made it. */
	kept = c + 1;
	ck_assert(fd_open(kept));
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	send_with_two(c, &h, sizeof(h));
	ck_assert_int_eq(dup2(p[0], kept), kept);
	ck_assert_int_eq(write(p[1], &byte, 1), 1);
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
	ck_assert(fd_open(kept));
	ck_assert_int_eq(read(kept, &byte, 1), 1); /* its byte is still there */
	/* A fork's child lets every pair go: not this number, which is no pair. */
	shim_pair_atfork_prepare();
	shim_pair_atfork_child();
	ck_assert(fd_open(kept));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("pair");
	TCase *tc = tcase_create("pair");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, a_hint_is_found_by_its_connection_only);
	tcase_add_test(tc, pending_hints_are_bounded_oldest_first);
	tcase_add_test(tc, pending_hints_expire);
	tcase_add_test(tc, a_pair_that_sends_anything_else_is_dropped);
	tcase_add_test(tc, a_hint_without_its_two_fds_is_not_kept);
	tcase_add_test(tc, a_reused_client_pair_number_is_never_written);
	tcase_add_test(tc, a_reused_server_pair_number_is_never_read);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
