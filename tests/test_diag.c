/*
 * Unit tests for the sock_diag lookup (shim/transport/shm/diag.c): it names
 * the owner and inode of a loopback TCP socket by its 4-tuple; it keeps one
 * netlink socket for its queries; a kept number the program closed and got
 * back for a file of its own is never read, written or closed; and a
 * fork's child asks through a socket of its own.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "diag.h"
#include "tuple.h"
#include "check_run.h"

static int lsn, cli, srv;
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
	ck_assert_int_ge(lsn, 0);
	ck_assert_int_eq(bind(lsn, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(lsn, 1), 0);
	ck_assert_int_eq(getsockname(lsn, (struct sockaddr *)&a, &len), 0);
	cli = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(cli, (struct sockaddr *)&a, sizeof(a)), 0);
	srv = accept(lsn, NULL, NULL);
	ck_assert_int_ge(srv, 0);
	endpoint_of(cli, false, &cli_ep);
	endpoint_of(cli, true, &srv_ep);
}

static void teardown(void)
{
	close(cli);
	close(srv);
	close(lsn);
}

static ino_t inode_of(int fd)
{
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	return st.st_ino;
}

/* What the lookup says of the client's socket must be that socket. */
static void lookup_names_the_client(void)
{
	uid_t uid;
	ino_t ino;

	ck_assert_int_eq(shim_diag_tcp_owner(&cli_ep, &srv_ep, &uid, &ino), 0);
	ck_assert_uint_eq(uid, geteuid());
	ck_assert_uint_eq(ino, inode_of(cli));
}

/* The highest fd open: the kept netlink socket, opened after setup's. */
static int highest_fd(void)
{
	int hi = -1;

	for (int fd = 0; fd < 256; fd++)
		if (fcntl(fd, F_GETFD) >= 0)
			hi = fd;
	return hi;
}

START_TEST(it_names_a_loopback_socket_and_nothing_else)
{
	struct shim_endpoint nobody = srv_ep;
	uid_t uid;
	ino_t ino;

	lookup_names_the_client();
	/* The server's end, asked the other way round. */
	ck_assert_int_eq(shim_diag_tcp_owner(&srv_ep, &cli_ep, &uid, &ino), 0);
	ck_assert_uint_eq(ino, inode_of(srv));
	nobody.port = (uint16_t)(srv_ep.port + 1);
	ck_assert_int_eq(shim_diag_tcp_owner(&cli_ep, &nobody, &uid, &ino), -ENOENT);
}
END_TEST

START_TEST(one_socket_serves_every_query)
{
	int kept;

	lookup_names_the_client();
	kept = highest_fd();
	for (int i = 0; i < 20; i++)
		lookup_names_the_client();
	ck_assert_int_eq(highest_fd(), kept);
}
END_TEST

/* The program closes our socket and gets its number back for a pipe. */
START_TEST(a_reused_number_is_never_used)
{
	int kept, p[2];
	char byte = 'x';

	lookup_names_the_client();
	kept = highest_fd();
	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(dup2(p[0], kept), kept);
	ck_assert_int_eq(write(p[1], &byte, 1), 1);
	lookup_names_the_client();
	ck_assert(fcntl(kept, F_GETFD) >= 0);       /* not closed */
	ck_assert_int_eq(read(kept, &byte, 1), 1); /* nor read */
	ck_assert_int_lt(read(p[0], &byte, 1), 0); /* nor written (nothing more) */
}
END_TEST

START_TEST(a_forked_child_asks_through_its_own)
{
	pid_t pid;
	int status;

	lookup_names_the_client();
	shim_diag_atfork_prepare();
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		uid_t uid;
		ino_t ino;

		shim_diag_atfork_child();
		_exit(shim_diag_tcp_owner(&cli_ep, &srv_ep, &uid, &ino) == 0 && ino == inode_of(cli) ? 0 : 1);
	}
	shim_diag_atfork_parent();
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's socket still answers the parent alone. */
	lookup_names_the_client();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("diag");
	TCase *tc = tcase_create("diag");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, it_names_a_loopback_socket_and_nothing_else);
	tcase_add_test(tc, one_socket_serves_every_query);
	tcase_add_test(tc, a_reused_number_is_never_used);
	tcase_add_test(tc, a_forked_child_asks_through_its_own);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
