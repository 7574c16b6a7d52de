/* ready_rules: the two sides in the shapes real servers take (two workers
 * on one listener, one process, two threads on one EPOLLONESHOT set, a
 * process per connection, poll and select) and the client. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ready_rules.h"

static void *oneshot_thread(void *arg)
{
	epoll_loop(arg);
	return NULL;
}

static void server_epoll(int lfd, const char *who)
{
	struct loop *L = loop_new(SERVER, lfd, who);

	L->ep = epoll_create1(EPOLL_CLOEXEC);
	ep_add_listener(L);
	epoll_loop(L);
}

static void server_oneshot(int lfd)
{
	struct loop *A = loop_new(SERVER, lfd, "thread-a"), *B = loop_new(SERVER, lfd, "thread-b");
	pthread_t t;

	/* One set and one table, two threads: each loop keeps its own stall
	 * view only. */
	A->oneshot = B->oneshot = true;
	A->ep = B->ep = epoll_create1(EPOLL_CLOEXEC);
	free(B->t);
	B->t = A->t;
	ep_add_listener(A);
	if (pthread_create(&t, NULL, oneshot_thread, B)) {
		error_line(A, NULL, "pthread_create failed");
		exit(1);
	}
	epoll_loop(A);
	pthread_join(t, NULL);
}

static void server_forkconn(int lfd)
{
	int kids = 0;

	for (int i = 0; i < nconns;) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int fd;
		pid_t pid;

		/* A ForkingTCPServer waits in select() for its listener; the
		 * timeout lets it give up if the client never comes. */
		if (poll(&p, 1, WAIT_MS) <= 0) {
			if (now_us() > t_giveup_us) {
				error_line(NULL, NULL, "gave up: %d of %d connections accepted", i, nconns);
				break;
			}
			continue;
		}
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EINTR && errno != EAGAIN)
				error_line(NULL, NULL, "accept: %s", strerror(errno));
			continue;
		}
		i++;
		pid = fork();
		if (pid == 0) {
			struct loop *L = loop_new(SERVER, -1, "conn-child");

			close(lfd);
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			L->ep = epoll_create1(EPOLL_CLOEXEC);
			ep_set(L, conn_new(L, fd, -1), EPOLL_CTL_ADD);
			epoll_loop(L);
			_exit(0);
		}
		if (pid < 0)
			error_line(NULL, NULL, "fork: %s", strerror(errno));
		else
			kids++;
		close(fd);
	}
	for (int st; kids > 0; kids--)
		if (wait(&st) > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			error_line(NULL, NULL, "a connection's child ended with status %#x", st);
}

static void client(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct loop *L = loop_new(CLIENT, -1, "client");

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	L->ep = epoll_create1(EPOLL_CLOEXEC);
	for (int i = 0; i < nconns; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct conn *c;

		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
			error_line(L, NULL, "connect %d: %s", i, strerror(errno));
			exit(1);
		}
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		c = conn_new(L, fd, i);
		client_ask(L, c);
		ep_set(L, c, EPOLL_CTL_ADD);
	}
	epoll_loop(L);
}

void run_server(int lfd)
{
	switch (mode) {
	case M_LEVEL: {
		/* Two workers on one listener, as nginx runs them. */
		pid_t w[2];

		for (int i = 0; i < 2; i++) {
			w[i] = fork();
			if (w[i] == 0) {
				server_epoll(lfd, i ? "worker-1" : "worker-0");
				_exit(0);
			}
		}
		for (int i = 0, st; i < 2; i++)
			if (w[i] > 0 && waitpid(w[i], &st, 0) > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
				error_line(NULL, NULL, "worker %d ended with status %#x", i, st);
		break;
	}
	case M_ET:
	case M_MODTOGGLE:
		server_epoll(lfd, "server");
		break;
	case M_ONESHOT:
		server_oneshot(lfd);
		break;
	case M_FORKCONN:
		server_forkconn(lfd);
		break;
	case M_POLL: {
		struct loop *L = loop_new(SERVER, lfd, "server");

		poll_loop(L);
		break;
	}
	}
}

void run_client(int lfd)
{
	close(lfd);
	client();
}
