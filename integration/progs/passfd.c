/*
 * passfd: hands connected TCP sockets to another process with SCM_RIGHTS.
 *
 *   passfd serve [--port P] [--bind ADDR] [--max-conns N] [--timeout SEC]
 *       Listens and prints "READY <port>". A receiver process (forked, then
 *       exec'd as "passfd recv-serve FD", so it shares no memory with the
 *       acceptor) gets every accepted connection over a UNIX socketpair and
 *       echoes it until EOF (one thread per connection). The acceptor closes
 *       its copy right after sending. Exits with the receiver's status once
 *       N connections were handed over and served.
 *
 *   passfd connect --host H --port P -- CMD [ARG...]
 *       Connects, then hands the connected socket to a child (forked, exec'd
 *       as "passfd recv-exec FD -- CMD ...") that receives it with recvmsg()
 *       and execs CMD ARG... --fd N, N being the received descriptor; e.g.
 *       CMD = echo_client --bytes 1M. Exits with CMD's status.
 *
 * The receiving side in both modes is what the scenario looks at: under the
 * shim it must trace conn.track with how=scm_rights.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *self_exe;

static void die(const char *what)
{
	fprintf(stderr, "passfd: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void on_alarm(int sig)
{
	static const char msg[] = "passfd: timeout\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing to do */
	}
	_exit(3);
}

static socklen_t make_addr(const char *host, int port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(host, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
			die("bad address");
		return sizeof(*in6);
	}
	struct sockaddr_in *in = (struct sockaddr_in *)ss;

	in->sin_family = AF_INET;
	in->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
		die("bad address");
	return sizeof(*in);
}

static void send_fd(int unix_fd, int fd)
{
	char byte = 'F';
	struct iovec iov = { &byte, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	memset(u.buf, 0, sizeof(u.buf));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	while (sendmsg(unix_fd, &mh, 0) < 0)
		if (errno != EINTR)
			die("sendmsg SCM_RIGHTS");
}

/* Returns the received fd, or -1 at EOF. */
static int recv_fd(int unix_fd)
{
	char byte;
	struct iovec iov = { &byte, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	ssize_t n;
	int fd;

	do
		n = recvmsg(unix_fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		die("recvmsg");
	if (n == 0)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof(int))) {
		fprintf(stderr, "passfd: message without exactly one fd\n");
		exit(2);
	}
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* Forks a child that execs self with argv; gives it `keep` (CLOEXEC cleared). */
static pid_t spawn_self(int keep, char **argv)
{
	pid_t pid = fork();

	if (pid < 0)
		die("fork");
	if (pid == 0) {
		if (fcntl(keep, F_SETFD, 0) < 0)
			die("fcntl");
		execv(self_exe, argv);
		fprintf(stderr, "passfd: exec %s: %s\n", self_exe, strerror(errno));
		_exit(127);
	}
	return pid;
}

static int wait_status(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	fprintf(stderr, "passfd: child %d killed by signal %d\n", (int)pid, WTERMSIG(status));
	return 128 + WTERMSIG(status);
}

/* ---- serve ---- */

static long errors;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *echo_thread(void *arg)
{
	int fd = (int)(intptr_t)arg, rc = 0;
	char buf[32 * 1024];

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -1 : 0;
			break;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = send(fd, buf + off, (size_t)(n - off), MSG_NOSIGNAL);

			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				rc = -1;
				goto out;
			}
			off += w;
		}
	}
out:
	if (rc == 0)
		shutdown(fd, SHUT_WR);
	else
		fprintf(stderr, "passfd: echo: %s\n", strerror(errno));
	close(fd);
	pthread_mutex_lock(&lock);
	errors += rc < 0;
	pthread_mutex_unlock(&lock);
	return NULL;
}

static int recv_serve(int unix_fd)
{
	pthread_t threads[1024];
	int n = 0;

	for (;;) {
		int fd = recv_fd(unix_fd);

		if (fd < 0)
			break;
		if (n == 1024) {
			fprintf(stderr, "passfd: too many connections\n");
			return 2;
		}
		if (pthread_create(&threads[n++], NULL, echo_thread, (void *)(intptr_t)fd) != 0)
			die("pthread_create");
	}
	for (int i = 0; i < n; i++)
		pthread_join(threads[i], NULL);
	close(unix_fd);
	return errors ? 1 : 0;
}

static int serve(const char *bind_addr, int port, long max_conns)
{
	struct sockaddr_storage ss;
	socklen_t len = make_addr(bind_addr, port, &ss);
	int sv[2], one = 1, lfd;
	char fdarg[16];

	lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ss, len) < 0)
		die("bind");
	if (listen(lfd, 128) < 0)
		die("listen");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair");
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	char *argv[] = { "passfd", "recv-serve", fdarg, NULL };
	pid_t child = spawn_self(sv[1], argv);

	close(sv[1]);
	len = sizeof(ss);
	if (getsockname(lfd, (struct sockaddr *)&ss, &len) < 0)
		die("getsockname");
	printf("READY %d\n", ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
							     : ((struct sockaddr_in *)&ss)->sin_port));
	fflush(stdout);
	for (long done = 0; max_conns <= 0 || done < max_conns; done++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED) {
				done--;
				continue;
			}
			die("accept4");
		}
		send_fd(sv[0], fd);
		close(fd); /* the receiver owns it now */
	}
	close(lfd);
	shutdown(sv[0], SHUT_WR);
	int rc = wait_status(child);

	close(sv[0]);
	return rc;
}

/* ---- connect ---- */

static int connect_and_pass(const char *host, int port, char **cmd)
{
	struct sockaddr_storage ss;
	socklen_t len = make_addr(host, port, &ss);
	int sv[2], fd, argc = 0;
	char fdarg[16];

	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	while (connect(fd, (struct sockaddr *)&ss, len) < 0)
		if (errno != EINTR)
			die("connect");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair");
	while (cmd[argc])
		argc++;
	char **argv = calloc((size_t)argc + 5, sizeof(*argv));

	if (!argv)
		die("calloc");
	snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
	argv[0] = "passfd";
	argv[1] = "recv-exec";
	argv[2] = fdarg;
	argv[3] = "--";
	memcpy(argv + 4, cmd, (size_t)argc * sizeof(*argv));
	pid_t child = spawn_self(sv[1], argv);

	close(sv[1]);
	send_fd(sv[0], fd);
	close(fd);
	close(sv[0]);
	free(argv);
	return wait_status(child);
}

static int recv_exec(int unix_fd, char **cmd)
{
	int fd = recv_fd(unix_fd), argc = 0;
	char fdarg[16];

	if (fd < 0) {
		fprintf(stderr, "passfd: no fd received\n");
		return 2;
	}
	close(unix_fd);
	if (fcntl(fd, F_SETFD, 0) < 0)
		die("fcntl");
	while (cmd[argc])
		argc++;
	char **argv = calloc((size_t)argc + 3, sizeof(*argv));

	if (!argv)
		die("calloc");
	memcpy(argv, cmd, (size_t)argc * sizeof(*argv));
	snprintf(fdarg, sizeof(fdarg), "%d", fd);
	argv[argc] = "--fd";
	argv[argc + 1] = fdarg;
	execvp(argv[0], argv);
	fprintf(stderr, "passfd: exec %s: %s\n", argv[0], strerror(errno));
	return 127;
}

static void usage(void)
{
	fprintf(stderr, "usage: passfd serve [--port P] [--bind ADDR] [--max-conns N] [--timeout SEC]\n"
			"       passfd connect --host H --port P [--timeout SEC] -- CMD [ARG...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *host = "127.0.0.1";
	int port = 0, timeout_s = 120, i;
	long max_conns = 0;
	static char exe[4096];
	ssize_t n;

	if (argc < 2)
		usage();
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n < 0)
		die("readlink /proc/self/exe");
	exe[n] = '\0';
	self_exe = exe;
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm((unsigned)timeout_s);

	if (!strcmp(argv[1], "recv-serve") && argc == 3)
		return recv_serve(atoi(argv[2]));
	if (!strcmp(argv[1], "recv-exec") && argc >= 5 && !strcmp(argv[3], "--"))
		return recv_exec(atoi(argv[2]), argv + 4);

	for (i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		}
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--bind") || !strcmp(argv[i], "--host"))
			host = argv[i + 1];
		else if (!strcmp(argv[i], "--max-conns"))
			max_conns = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--timeout"))
			timeout_s = atoi(argv[i + 1]);
		else
			usage();
		i++;
	}
	if (timeout_s > 0)
		alarm((unsigned)timeout_s);
	if (!strcmp(argv[1], "serve"))
		return serve(host, port, max_conns);
	if (!strcmp(argv[1], "connect") && port > 0 && i < argc)
		return connect_and_pass(host, port, argv + i);
	usage();
	return 2;
}
