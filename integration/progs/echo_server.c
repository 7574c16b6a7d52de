/*
 * echo_server: a TCP echo server in several process/thread shapes, for the
 * integration scenarios. It echoes every byte until the peer's EOF, then
 * flushes, shuts its own direction down and closes.
 *
 *   echo_server [--shape epoll|threads|prefork|forkconn|exec] [--port P]
 *               [--bind 127.0.0.1|::1|::ffff:127.0.0.1] [--max-conns N]
 *               [--workers N] [--timeout SEC]
 *   echo_server --serve-fd FD        (used by --shape exec: serve one fd)
 *
 * Shapes:
 *   epoll     one process, nonblocking sockets, edge-triggered epoll loop
 *   threads   one thread per connection, blocking I/O
 *   prefork   --workers processes all accept() on the inherited listener;
 *             READY comes once every worker has started
 *   forkconn  the parent accepts and forks a child per connection; the
 *             child does the I/O, the parent closes its copy at once
 *   exec      like forkconn, but the child execs "echo_server --serve-fd N"
 *
 * Prints "READY <port>" on stdout once listening. With --max-conns N it exits
 * after N connections were served: status 0 if every one ended cleanly, 1 if
 * any read, write or shutdown failed (each failure is reported on stderr with
 * the connection's byte counts: a peer that read everything and closed never
 * makes any of them fail). --timeout (default 120 s) bounds the whole run:
 * nothing waits forever.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUF_SIZE (64 * 1024)
#define MAX_WORKERS 64

static const char *prog = "echo_server";
/* Connections that ended in an error rather than a clean EOF: exit status 1. */
static long n_errors;

static void count_error(void)
{
	__atomic_add_fetch(&n_errors, 1, __ATOMIC_RELAXED);
}

static void die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(errno));
	exit(2);
}

static void on_alarm(int sig)
{
	static const char msg[] = "echo_server: timeout\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing to do */
	}
	_exit(3);
}

static int make_listener(const char *bind_addr, int port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd, one = 1;

	memset(&ss, 0, sizeof(ss));
	if (strchr(bind_addr, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, bind_addr, &in6->sin6_addr) != 1) {
			fprintf(stderr, "%s: bad --bind %s\n", prog, bind_addr);
			exit(2);
		}
		len = sizeof(*in6);
	} else {
		struct sockaddr_in *in = (struct sockaddr_in *)&ss;

		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, bind_addr, &in->sin_addr) != 1) {
			fprintf(stderr, "%s: bad --bind %s\n", prog, bind_addr);
			exit(2);
		}
		len = sizeof(*in);
	}
	/* CLOEXEC: an exec'd child must inherit the connection, not the listener. */
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		die("SO_REUSEADDR");
	if (ss.ss_family == AF_INET6) {
		int v6only = IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&ss)->sin6_addr) ? 0 : 1;

		if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) < 0)
			die("IPV6_V6ONLY");
	}
	if (bind(fd, (struct sockaddr *)&ss, len) < 0)
		die("bind");
	if (listen(fd, 128) < 0)
		die("listen");
	return fd;
}

static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		die("getsockname");
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* Writes all of buf; returns 0, or -1 with errno set and *done what went out. */
static int write_all(int fd, const char *buf, size_t len, unsigned long long *done)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
		*done += (unsigned long long)n;
	}
	return 0;
}

/* Blocking echo of one connection; closes fd. Returns 0 on a clean EOF. */
static int serve_blocking(int fd)
{
	static __thread char buf[BUF_SIZE];
	unsigned long long in = 0, out = 0;
	ssize_t n = 0;
	int rc = 0;

	for (;;) {
		n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "%s: read: %s (fd %d, after %llu bytes in, %llu out)\n", prog,
				strerror(errno), fd, in, out);
			rc = -1;
			break;
		}
		if (n == 0)
			break;
		in += (unsigned long long)n;
		if (write_all(fd, buf, (size_t)n, &out) < 0) {
			fprintf(stderr, "%s: write: %s (fd %d, after %llu bytes in, %llu out; "
				"the last read gave %zd bytes, the first 0x%02x)\n", prog,
				strerror(errno), fd, in, out, n, (unsigned char)buf[0]);
			rc = -1;
			break;
		}
	}
	/* The peer read everything before it closed: shutdown can not fail. */
	if (rc == 0 && shutdown(fd, SHUT_WR) < 0) {
		fprintf(stderr, "%s: shutdown: %s (fd %d, after %llu bytes in, %llu out)\n", prog,
			strerror(errno), fd, in, out);
		rc = -1;
	}
	close(fd);
	return rc;
}

/* "READY <port>": the listener accepts, and every process that will serve runs. */
static void announce(int lfd)
{
	printf("READY %d\n", bound_port(lfd));
	fflush(stdout);
}

static int accept_retry(int lfd)
{
	for (;;) {
		int fd = accept(lfd, NULL, NULL);

		if (fd >= 0)
			return fd;
		if (errno != EINTR && errno != ECONNABORTED)
			die("accept");
	}
}

/* ---- epoll: edge-triggered, nonblocking ---- */

struct econn {
	int fd;
	bool eof;
	size_t off, len; /* pending echo bytes buf[off, len) */
	unsigned long long in, out;
	char buf[BUF_SIZE];
};

/* Marks events of a connection freed earlier in the same epoll batch. */
static struct econn stale_conn;

/* Moves one connection as far as it goes; returns 1 when it is finished. */
static int econn_pump(struct econn *c)
{
	for (;;) {
		while (c->off < c->len) {
			ssize_t n = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				return 0; /* EPOLLOUT edge will call again */
			if (n < 0) {
				fprintf(stderr, "%s: send: %s (fd %d, after %llu bytes in, %llu out)\n", prog,
					strerror(errno), c->fd, c->in, c->out);
				return -1;
			}
			c->off += (size_t)n;
			c->out += (unsigned long long)n;
		}
		c->off = c->len = 0;
		if (c->eof)
			return 1;
		ssize_t n = recv(c->fd, c->buf, sizeof(c->buf), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0; /* EPOLLIN edge will call again */
		if (n < 0) {
			fprintf(stderr, "%s: recv: %s (fd %d, after %llu bytes in, %llu out)\n", prog,
				strerror(errno), c->fd, c->in, c->out);
			return -1;
		}
		if (n == 0)
			c->eof = true;
		c->len = (size_t)n;
		c->in += (unsigned long long)n;
	}
}

static int run_epoll(int lfd, long max_conns)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = NULL };
	struct epoll_event events[64];
	long accepted = 0, done = 0;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		die("epoll_create1");
	if (fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK) < 0)
		die("fcntl");
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		die("epoll_ctl");
	while (max_conns <= 0 || done < max_conns) {
		int n = epoll_wait(ep, events, 64, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			struct econn *c = events[i].data.ptr;

			if (c == &stale_conn)
				continue;
			if (!c) {
				/* Edge-triggered listener: accept until EAGAIN. */
				for (;;) {
					int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);

					if (fd < 0) {
						if (errno == EAGAIN || errno == ECONNABORTED)
							break;
						if (errno == EINTR)
							continue;
						die("accept4");
					}
					c = calloc(1, sizeof(*c));
					if (!c)
						die("calloc");
					c->fd = fd;
					accepted++;
					struct epoll_event cev = {
						.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
						.data.ptr = c,
					};
					if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev) < 0)
						die("epoll_ctl conn");
					/* Data may already be there: the edge came before ADD. */
					int r = econn_pump(c);

					if (r != 0) {
						if (r < 0)
							count_error();
						if (r > 0 && shutdown(fd, SHUT_WR) < 0) {
							fprintf(stderr, "%s: shutdown: %s (fd %d, after %llu bytes in, %llu out)\n",
								prog, strerror(errno), fd, c->in, c->out);
							count_error();
						}
						epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
						close(fd);
						free(c);
						done++;
					}
				}
				continue;
			}
			int r = econn_pump(c);

			if (r != 0) {
				if (r < 0)
					count_error();
				if (r > 0 && shutdown(c->fd, SHUT_WR) < 0) {
					fprintf(stderr, "%s: shutdown: %s (fd %d, after %llu bytes in, %llu out)\n",
						prog, strerror(errno), c->fd, c->in, c->out);
					count_error();
				}
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				close(c->fd);
				/* Later events of this batch may name c: forget them. */
				for (int j = i + 1; j < n; j++)
					if (events[j].data.ptr == c)
						events[j].data.ptr = &stale_conn;
				free(c);
				done++;
			}
		}
	}
	(void)accepted;
	close(ep);
	return 0;
}

/* ---- threads ---- */

static pthread_mutex_t th_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t th_cond = PTHREAD_COND_INITIALIZER;
static long th_running;

static void *conn_thread(void *arg)
{
	int fd = (int)(intptr_t)arg;

	if (serve_blocking(fd) < 0)
		count_error();
	pthread_mutex_lock(&th_lock);
	th_running--;
	pthread_cond_broadcast(&th_cond);
	pthread_mutex_unlock(&th_lock);
	return NULL;
}

static int run_threads(int lfd, long max_conns)
{
	long accepted = 0;

	while (max_conns <= 0 || accepted < max_conns) {
		int fd = accept_retry(lfd);
		pthread_t t;

		pthread_mutex_lock(&th_lock);
		th_running++;
		pthread_mutex_unlock(&th_lock);
		if (pthread_create(&t, NULL, conn_thread, (void *)(intptr_t)fd) != 0)
			die("pthread_create");
		pthread_detach(t);
		accepted++;
	}
	pthread_mutex_lock(&th_lock);
	while (th_running > 0)
		pthread_cond_wait(&th_cond, &th_lock);
	pthread_mutex_unlock(&th_lock);
	return 0;
}

/* ---- prefork ---- */

static pid_t workers[MAX_WORKERS];
static int n_workers;

static void kill_workers(void)
{
	for (int i = 0; i < n_workers; i++)
		if (workers[i] > 0)
			kill(workers[i], SIGTERM);
	for (int i = 0; i < n_workers; i++)
		if (workers[i] > 0)
			waitpid(workers[i], NULL, 0);
	n_workers = 0;
}

static void on_term(int sig)
{
	(void)sig;
	for (int i = 0; i < n_workers; i++)
		if (workers[i] > 0)
			kill(workers[i], SIGTERM);
	_exit(1);
}

static int run_prefork(int lfd, long max_conns, int nworkers)
{
	int done_pipe[2];
	long done = 0;
	pid_t parent = getpid();

	if (pipe2(done_pipe, O_CLOEXEC) < 0)
		die("pipe2");
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	for (int i = 0; i < nworkers; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (pid == 0) {
			signal(SIGTERM, SIG_DFL);
			signal(SIGINT, SIG_DFL);
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			if (getppid() != parent)
				_exit(1);
			close(done_pipe[0]);
			/* Tell the parent this worker runs (see below). */
			if (write(done_pipe[1], "R", 1) < 0)
				_exit(1);
			for (;;) {
				int fd = accept_retry(lfd);
				int rc = serve_blocking(fd);

				if (write(done_pipe[1], rc == 0 ? "+" : "-", 1) < 0)
					_exit(1);
			}
		}
		workers[n_workers++] = pid;
	}
	close(done_pipe[1]);
	/* READY only once every worker has started, so a worker that never gets
	 * a connection still exists (and has been seen to run) before the first
	 * client comes; each sends "R" first, then one byte per connection. */
	for (int ready = 0; ready < nworkers;) {
		char c;
		ssize_t n = read(done_pipe[0], &c, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || c != 'R') {
			fprintf(stderr, "%s: a worker died before it was ready\n", prog);
			kill_workers();
			return 1;
		}
		ready++;
	}
	announce(lfd);
	while (max_conns <= 0 || done < max_conns) {
		char c;
		ssize_t n = read(done_pipe[0], &c, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* every worker died */
		if (c != '+')
			count_error();
		done++;
	}
	kill_workers();
	return done >= max_conns ? 0 : 1;
}

/* ---- forkconn and exec ---- */

static const char *self_exe;

static void reap(bool block, long *live)
{
	while (*live > 0) {
		int status;
		pid_t pid = waitpid(-1, &status, block ? 0 : WNOHANG);

		if (pid <= 0) {
			if (pid < 0 && errno == EINTR)
				continue;
			break;
		}
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			count_error();
		(*live)--;
	}
}

static int run_forkconn(int lfd, long max_conns, bool do_exec)
{
	long accepted = 0, live = 0;

	while (max_conns <= 0 || accepted < max_conns) {
		int fd = accept_retry(lfd);
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (pid == 0) {
			close(lfd);
			if (do_exec) {
				char fdarg[16];

				snprintf(fdarg, sizeof(fdarg), "%d", fd);
				execl(self_exe, "echo_server", "--serve-fd", fdarg, (char *)NULL);
				fprintf(stderr, "%s: exec %s: %s\n", prog, self_exe, strerror(errno));
				_exit(127);
			}
			_exit(serve_blocking(fd) == 0 ? 0 : 1);
		}
		close(fd); /* the child owns the connection now */
		accepted++;
		live++;
		reap(false, &live);
	}
	reap(true, &live);
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: echo_server [--shape epoll|threads|prefork|forkconn|exec] [--port P]\n"
		"                   [--bind ADDR] [--max-conns N] [--workers N] [--timeout SEC]\n"
		"       echo_server --serve-fd FD\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *shape = "epoll", *bind_addr = "127.0.0.1";
	long max_conns = 0;
	int port = 0, nworkers = 4, serve_fd = -1, timeout_s = 120, lfd, rc;
	char exe[4096];
	ssize_t n;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		if (!strcmp(a, "--shape"))
			shape = v;
		else if (!strcmp(a, "--port"))
			port = atoi(v);
		else if (!strcmp(a, "--bind"))
			bind_addr = v;
		else if (!strcmp(a, "--max-conns"))
			max_conns = atol(v);
		else if (!strcmp(a, "--workers"))
			nworkers = atoi(v);
		else if (!strcmp(a, "--serve-fd"))
			serve_fd = atoi(v);
		else if (!strcmp(a, "--timeout"))
			timeout_s = atoi(v);
		else
			usage();
		i++;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	if (timeout_s > 0)
		alarm((unsigned)timeout_s);
	if (serve_fd >= 0)
		return serve_blocking(serve_fd) == 0 ? 0 : 1;
	if (nworkers < 1 || nworkers > MAX_WORKERS)
		usage();
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n < 0)
		die("readlink /proc/self/exe");
	exe[n] = '\0';
	self_exe = exe;

	lfd = make_listener(bind_addr, port);
	/* prefork announces itself once every worker runs (see run_prefork). */
	if (strcmp(shape, "prefork") != 0)
		announce(lfd);

	if (!strcmp(shape, "epoll"))
		rc = run_epoll(lfd, max_conns);
	else if (!strcmp(shape, "threads"))
		rc = run_threads(lfd, max_conns);
	else if (!strcmp(shape, "prefork"))
		rc = run_prefork(lfd, max_conns, nworkers);
	else if (!strcmp(shape, "forkconn"))
		rc = run_forkconn(lfd, max_conns, false);
	else if (!strcmp(shape, "exec"))
		rc = run_forkconn(lfd, max_conns, true);
	else
		usage();
	close(lfd);
	if (n_errors)
		fprintf(stderr, "%s: %ld connection(s) ended in an error\n", prog, n_errors);
	return rc != 0 || n_errors ? 1 : 0;
}
