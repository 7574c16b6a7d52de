/*
 * Unit tests for the sock_diag lookup (shim/transport/shm/diag.c): it names
 * the owner and inode of a loopback TCP socket by its 4-tuple; it keeps one
 * netlink socket for its queries; a kept number the program closed and got
 * back for a file of its own is never read, written or closed; and a
 * fork's child asks through a socket of its own. It answers for
 * connections only: a listener on the tuple's local port (which the
 * kernel's lookup falls back to), a TIME_WAIT leftover and a tuple no
 * connection has are "none", for AF_INET and v4-mapped AF_INET6 alike.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
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
	if (cli >= 0)
		close(cli);
	if (srv >= 0)
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

/* A listening socket on ip (port 0: any), v6only as given for AF_INET6;
 * -1 when the host has no such address (no IPv6 loopback). */
static int listener(int family, const char *ip, int v6only, uint16_t *port)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int fd = socket(family, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		return -1;
	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	if (family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;

		a->sin_family = AF_INET;
		ck_assert_int_eq(inet_pton(AF_INET, ip, &a->sin_addr), 1);
		len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;

		a->sin6_family = AF_INET6;
		ck_assert_int_eq(inet_pton(AF_INET6, ip, &a->sin6_addr), 1);
		ck_assert_int_eq(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)), 0);
		len = sizeof(*a);
	}
	if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
		close(fd);
		return -1;
	}
	ck_assert_int_eq(listen(fd, 4), 0);
	len = sizeof(ss);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	*port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
					: ((struct sockaddr_in6 *)&ss)->sin6_port);
	return fd;
}

static struct shim_endpoint endpoint(const char *ip, uint16_t port)
{
	struct shim_endpoint e = { .port = port };

	if (strchr(ip, ':')) {
		ck_assert_int_eq(inet_pton(AF_INET6, ip, e.addr), 1);
	} else {
		e.addr[10] = e.addr[11] = 0xff;
		ck_assert_int_eq(inet_pton(AF_INET, ip, e.addr + 12), 1);
	}
	return e;
}

/* A port no connection of the listener's uses: the fixture's listener. */
static uint16_t unconnected_port(void)
{
	return srv_ep.port;
}

/*
 * Anyone may listen on a wildcard address: its listener must not "own"
 * every tuple whose local port is its port. Asked as AF_INET first, then
 * as v4-mapped AF_INET6 (diag.c asks both ways), each must say none.
 */
START_TEST(a_v4_wildcard_listener_owns_no_tuple)
{
	uint16_t port;
	int l = listener(AF_INET, "0.0.0.0", 0, &port);
	struct shim_endpoint local = endpoint("127.0.0.1", port), remote = endpoint("127.0.0.1", unconnected_port());
	uid_t uid = 12345;
	ino_t ino = 12345;

	ck_assert_int_ge(l, 0);
	ck_assert_int_eq(shim_diag_tcp_owner(&local, &remote, &uid, &ino), -ENOENT);
	ck_assert_uint_eq(uid, 12345); /* nothing reported */
	ck_assert_uint_eq(ino, 12345);
	close(l);
}
END_TEST

/* A dual-stack AF_INET6 listener on [::] takes v4 connections as
 * v4-mapped: the same tuple, asked both ways, is still none. */
START_TEST(a_dual_stack_listener_owns_no_v4_mapped_tuple)
{
	uint16_t port;
	int l = listener(AF_INET6, "::", 0, &port);
	struct shim_endpoint local = endpoint("127.0.0.1", port), remote = endpoint("127.0.0.1", unconnected_port());
	uid_t uid;
	ino_t ino;

	ck_assert_int_ge(l, 0);
	ck_assert_int_eq(shim_diag_tcp_owner(&local, &remote, &uid, &ino), -ENOENT);
	/* Written as v4-mapped IPv6 endpoints: the same tuple. */
	local = endpoint("::ffff:127.0.0.1", port);
	remote = endpoint("::ffff:127.0.0.1", unconnected_port());
	ck_assert_int_eq(shim_diag_tcp_owner(&local, &remote, &uid, &ino), -ENOENT);
	close(l);
}
END_TEST

/* A listener bound to the very local address: the address matches, the
 * state does not. And the same over IPv6 where the host has ::1. */
START_TEST(a_listener_on_the_exact_address_owns_no_tuple)
{
	uint16_t port;
	int l = listener(AF_INET, "127.0.0.1", 0, &port);
	struct shim_endpoint local = endpoint("127.0.0.1", port), remote = endpoint("127.0.0.1", unconnected_port());
	uid_t uid;
	ino_t ino;

	ck_assert_int_ge(l, 0);
	ck_assert_int_eq(shim_diag_tcp_owner(&local, &remote, &uid, &ino), -ENOENT);
	close(l);
	l = listener(AF_INET6, "::", 1, &port);
	if (l < 0)
		return; /* no IPv6 here */
	local = endpoint("::1", port);
	remote = endpoint("::1", unconnected_port());
	ck_assert_int_eq(shim_diag_tcp_owner(&local, &remote, &uid, &ino), -ENOENT);
	close(l);
}
END_TEST

static int tcp_state(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	ck_assert_int_eq(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	return ti.tcpi_state;
}

static void wait_state(int fd, int state)
{
	for (int i = 0; i < 200 && tcp_state(fd) != state; i++)
		nanosleep(&(struct timespec){ .tv_nsec = 5000000 }, NULL);
	ck_assert_int_eq(tcp_state(fd), state);
}

/* The client's end once both closed, client first: a TIME_WAIT leftover
 * the kernel keeps under the tuple, held by no process. */
START_TEST(a_time_wait_leftover_is_no_connection)
{
	uid_t uid;
	ino_t ino;

	close(cli);
	cli = -1;
	wait_state(srv, TCP_CLOSE_WAIT);
	close(srv);
	srv = -1;
	/* The server's end is gone once the client's ACK of its FIN came,
	 * the client's end is in TIME_WAIT then. */
	for (int i = 0; i < 200 && shim_diag_tcp_owner(&srv_ep, &cli_ep, &uid, &ino) != -ENOENT; i++)
		nanosleep(&(struct timespec){ .tv_nsec = 5000000 }, NULL);
	ck_assert_int_eq(shim_diag_tcp_owner(&cli_ep, &srv_ep, &uid, &ino), -ENOENT);
}
END_TEST

/* A connection still answers, with its own uid and inode: a v4-mapped one
 * between dual-stack sockets, and one half-closed (FIN_WAIT2 at the end
 * that shut down, CLOSE_WAIT at the other). */
START_TEST(a_v4_mapped_and_a_half_closed_connection_answer)
{
	uint16_t port;
	int l = listener(AF_INET6, "::", 0, &port), c, a;
	struct sockaddr_in6 to = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
	struct shim_endpoint c_ep, a_ep;
	uid_t uid;
	ino_t ino;

	ck_assert_int_ge(l, 0);
	ck_assert_int_eq(inet_pton(AF_INET6, "::ffff:127.0.0.1", &to.sin6_addr), 1);
	c = socket(AF_INET6, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&to, sizeof(to)), 0);
	a = accept(l, NULL, NULL);
	ck_assert_int_ge(a, 0);
	endpoint_of(c, false, &c_ep);
	endpoint_of(c, true, &a_ep);
	ck_assert_int_eq(shim_diag_tcp_owner(&c_ep, &a_ep, &uid, &ino), 0);
	ck_assert_uint_eq(uid, geteuid());
	ck_assert_uint_eq(ino, inode_of(c));
	ck_assert_int_eq(shim_diag_tcp_owner(&a_ep, &c_ep, &uid, &ino), 0);
	ck_assert_uint_eq(ino, inode_of(a));

	ck_assert_int_eq(shutdown(cli, SHUT_WR), 0);
	wait_state(cli, TCP_FIN_WAIT2);
	wait_state(srv, TCP_CLOSE_WAIT);
	lookup_names_the_client();
	ck_assert_int_eq(shim_diag_tcp_owner(&srv_ep, &cli_ep, &uid, &ino), 0);
	ck_assert_uint_eq(ino, inode_of(srv));
	close(a);
	close(c);
	close(l);
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
	tcase_add_test(tc, a_v4_wildcard_listener_owns_no_tuple);
	tcase_add_test(tc, a_dual_stack_listener_owns_no_v4_mapped_tuple);
	tcase_add_test(tc, a_listener_on_the_exact_address_owns_no_tuple);
	tcase_add_test(tc, a_time_wait_leftover_is_no_connection);
	tcase_add_test(tc, a_v4_mapped_and_a_half_closed_connection_answer);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
