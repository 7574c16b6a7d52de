/*
 * calls_probe: both ends of one loopback TCP connection in one process, and
 * a row of socket calls whose results a program may rely on. Run once
 * without the shim and once under it (upgraded): the output must be the
 * same (t_shm_calls.sh). Each line is "name: observation".
 *
 *   calls_probe PORT
 *
 *   sa_restart    a blocking recv interrupted by a SIGALRM handler installed
 *                 with SA_RESTART is restarted and returns the bytes sent
 *                 later (signal(7)), never EINTR
 *   long_timeout  SO_RCVTIMEO of 49.7 days + 1 s (2^32 ms and more): a recv
 *                 whose data comes after 1.2 s gets it, no early EAGAIN
 *   sendmsg_rights  sendmsg with SCM_RIGHTS on TCP: EINVAL, nothing sent
 *   errqueue      recvmsg(MSG_ERRQUEUE) with stream bytes waiting: EAGAIN,
 *                 and the stream bytes are still there
 *   sendfile_pos  sendfile(NULL offset) into a full nonblocking socket:
 *                 EAGAIN and the file position unchanged
 *   poll_one      poll over the one fd with data waiting returns 1
 *   rcvlowat      SO_RCVLOWAT 10: poll says nothing for 5 bytes, POLLIN for
 *                 10, and a blocking recv waits for the 10
 *   splice        splice from a pipe into the (upgraded) connection and from
 *                 the connection into a pipe carries the bytes unchanged
 *   stdio         fdopen on a fresh connection, then fgets/fputs: lines go
 *                 both ways (stdio reads where no preload sees)
 *   oob           a fresh connection that sends urgent data (MSG_OOB) first:
 *                 the stream and the urgent byte arrive as over TCP
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int cli, srv;

static void die(const char *what)
{
	fprintf(stderr, "calls_probe: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* Round trips on both ends so that an upgrade (if any) completes. */
static void warm_up(void)
{
	char buf[16];

	for (int i = 0; i < 20; i++) {
		if (send(cli, "ping", 4, 0) != 4 || recv(srv, buf, 4, MSG_WAITALL) != 4)
			die("warm-up ping");
		if (send(srv, "pong", 4, 0) != 4 || recv(cli, buf, 4, MSG_WAITALL) != 4)
			die("warm-up pong");
		sleep_ms(20);
	}
}

static const char *err_name(int e)
{
	switch (e) {
	case EINTR: return "EINTR";
	case EAGAIN: return "EAGAIN";
	case EINVAL: return "EINVAL";
	case ECONNRESET: return "ECONNRESET";
	case EPIPE: return "EPIPE";
	default: return "other";
	}
}

static void on_alarm(int sig)
{
	(void)sig;
}

struct later {
	int fd;
	long ms;
	const char *bytes;
};

static void *later_main(void *arg)
{
	struct later *l = arg;
	sigset_t all;

	/* The signals are for the reader's thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	sleep_ms(l->ms);
	if (send(l->fd, l->bytes, strlen(l->bytes), 0) != (ssize_t)strlen(l->bytes))
		die("send later");
	return NULL;
}

/* Another thread writes to the server end later; we only read. */
static pthread_t send_later(int fd, long ms, const char *bytes)
{
	static struct later l;
	pthread_t t;

	l = (struct later){ fd, ms, bytes };
	if (pthread_create(&t, NULL, later_main, &l) != 0)
		die("pthread_create");
	return t;
}

static void sa_restart(void)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval it = { .it_value = { 0, 50000 } };
	char buf[8] = { 0 };
	ssize_t n;
	pthread_t writer;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	writer = send_later(srv, 300, "late");
	setitimer(ITIMER_REAL, &it, NULL);
	n = recv(cli, buf, 4, MSG_WAITALL);
	printf("sa_restart: %s\n", n == 4 ? buf : err_name(errno));
	pthread_join(writer, NULL);
	signal(SIGALRM, SIG_DFL);
}

static void long_timeout(void)
{
	struct timeval tv = { .tv_sec = 4294968, .tv_usec = 0 };
	struct timeval none = { 0, 0 };
	char buf[8] = { 0 };
	ssize_t n;
	pthread_t writer;

	setsockopt(cli, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	writer = send_later(srv, 1200, "slow");
	n = recv(cli, buf, 4, MSG_WAITALL);
	printf("long_timeout: %s\n", n == 4 ? buf : err_name(errno));
	pthread_join(writer, NULL);
	setsockopt(cli, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
}

static void sendmsg_rights(void)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} control;
	struct iovec iov = { "RAW!", 4 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };
	struct cmsghdr *c;
	int one = 0;
	char buf[16] = { 0 };
	ssize_t n;

	memset(&control, 0, sizeof(control));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &one, sizeof(int));
	n = sendmsg(cli, &mh, 0);
	printf("sendmsg_rights: %s\n", n < 0 ? err_name(errno) : "sent");
	/* Whatever happened, the stream must carry exactly the next bytes. */
	if (send(cli, "next", 4, 0) != 4)
		die("send next");
	n = recv(srv, buf, n == 4 ? 8 : 4, MSG_WAITALL);
	printf("sendmsg_rights stream: %.*s\n", (int)(n > 0 ? n : 0), buf);
}

static void errqueue(void)
{
	char buf[16] = { 0 }, control[256];
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
			     .msg_controllen = sizeof(control) };
	ssize_t n;

	if (send(srv, "data", 4, 0) != 4)
		die("send data");
	sleep_ms(50);
	n = recvmsg(cli, &mh, MSG_ERRQUEUE | MSG_DONTWAIT);
	printf("errqueue: %s\n", n < 0 ? err_name(errno) : "read");
	memset(buf, 0, sizeof(buf));
	n = recv(cli, buf, 4, MSG_WAITALL);
	printf("errqueue stream: %.*s\n", (int)(n > 0 ? n : 0), buf);
}

static void sendfile_pos(void)
{
	char path[] = "/tmp/calls_probe.XXXXXX", chunk[65536];
	int file = mkstemp(path);
	ssize_t n;
	long total = 0;

	if (file < 0)
		die("mkstemp");
	unlink(path);
	memset(chunk, 'f', sizeof(chunk));
	if (write(file, chunk, 4096) != 4096)
		die("write file");
	lseek(file, 0, SEEK_SET);
	set_nonblock(cli, 1);
	while ((n = send(cli, chunk, sizeof(chunk), 0)) > 0)
		total += n;
	n = sendfile(cli, file, NULL, 1000);
	printf("sendfile_pos: %s pos=%ld\n", n < 0 ? err_name(errno) : "sent", (long)lseek(file, 0, SEEK_CUR));
	set_nonblock(cli, 0);
	/* Drain what the fill sent (and what sendfile sent, if anything). */
	total += n > 0 ? n : 0;
	set_nonblock(srv, 1);
	while (total > 0) {
		n = recv(srv, chunk, sizeof(chunk), 0);
		if (n > 0)
			total -= n;
		else if (n < 0 && errno == EAGAIN)
			sleep_ms(1);
		else
			die("drain");
	}
	set_nonblock(srv, 0);
	close(file);
}

static void poll_one(void)
{
	struct pollfd p = { .fd = cli, .events = POLLIN };
	char buf[4];
	int n;

	if (send(srv, "poll", 4, 0) != 4)
		die("send poll");
	n = poll(&p, 1, 2000);
	printf("poll_one: %d revents_in=%d\n", n, !!(p.revents & POLLIN));
	if (recv(cli, buf, 4, MSG_WAITALL) != 4)
		die("recv poll");
}

static void rcvlowat(void)
{
	struct pollfd p = { .fd = cli, .events = POLLIN };
	int ten = 10, one = 1, a, b;
	char buf[32];
	ssize_t n;

	setsockopt(cli, SOL_SOCKET, SO_RCVLOWAT, &ten, sizeof(ten));
	send(srv, "12345", 5, 0);
	sleep_ms(50);
	a = poll(&p, 1, 100);
	send(srv, "67890", 5, 0);
	sleep_ms(50);
	b = poll(&p, 1, 1000);
	n = recv(cli, buf, sizeof(buf), 0);
	printf("rcvlowat: poll %d then %d, recv %zd\n", a, b, n);
	setsockopt(cli, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
}

static void splice_both(void)
{
	int p[2];
	char buf[64] = { 0 };
	ssize_t n, got = 0;

	if (pipe(p) < 0)
		die("pipe");
	if (write(p[1], "through-a-pipe", 14) != 14)
		die("write pipe");
	n = splice(p[0], NULL, cli, NULL, 14, 0);
	while (got < 14 && (n = recv(srv, buf + got, (size_t)(14 - got), 0)) > 0)
		got += n;
	printf("splice in: %.*s\n", (int)got, buf);
	if (send(srv, "out-to-a-pipe", 13, 0) != 13)
		die("send for splice");
	got = 0;
	while (got < 13 && (n = splice(cli, NULL, p[1], NULL, (size_t)(13 - got), 0)) > 0)
		got += n;
	memset(buf, 0, sizeof(buf));
	n = read(p[0], buf, sizeof(buf));
	printf("splice out: %.*s\n", (int)(n > 0 ? n : 0), buf);
	close(p[0]);
	close(p[1]);
}

/* A second connection of the same listener. */
static void connect_pair(int lfd, int *c, int *s)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);

	getsockname(lfd, (struct sockaddr *)&sin, &len);
	*c = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(*c, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		die("connect 2");
	*s = accept(lfd, NULL, NULL);
	if (*s < 0)
		die("accept 2");
}

static void stdio_lines(int lfd)
{
	int c, s;
	char line[64];
	FILE *in, *out;

	connect_pair(lfd, &c, &s);
	in = fdopen(c, "r");
	out = fdopen(dup(c), "w");
	for (int i = 0; i < 20; i++) {
		char want[32];

		fprintf(out, "line %d\n", i);
		fflush(out);
		int n = (int)recv(s, line, sizeof(line), 0);

		if (n <= 0 || send(s, line, (size_t)n, 0) != n)
			die("stdio echo");
		snprintf(want, sizeof(want), "line %d\n", i);
		if (!fgets(line, sizeof(line), in) || strcmp(line, want) != 0) {
			printf("stdio: line %d wrong\n", i);
			break;
		}
		if (i == 19)
			printf("stdio: 20 lines\n");
		sleep_ms(10);
	}
	fclose(in);
	fclose(out);
	close(s);
}

static void oob_first(int lfd)
{
	int c, s, at_mark = 0;
	char buf[64] = { 0 }, urgent = 0;
	ssize_t got = 0, n;

	connect_pair(lfd, &c, &s);
	send(c, "ab", 2, 0);
	send(c, "c", 1, MSG_OOB);
	/* Round trips that would upgrade an ordinary connection. */
	for (int i = 0; i < 10; i++) {
		send(c, "d", 1, 0);
		sleep_ms(10);
		if (i == 0) {
			while (!at_mark) {
				n = recv(s, buf + got, 1, 0);
				if (n <= 0)
					die("oob stream");
				got += n;
				if (ioctl(s, SIOCATMARK, &at_mark) < 0)
					die("SIOCATMARK");
			}
			if (recv(s, &urgent, 1, MSG_OOB) != 1)
				urgent = '?';
		}
		send(s, "e", 1, 0);
		char e;
		if (recv(c, &e, 1, 0) != 1)
			die("oob echo");
	}
	while (got < 12 && (n = recv(s, buf + got, (size_t)(12 - got), MSG_DONTWAIT)) > 0)
		got += n;
	printf("oob: stream=%s urgent=%c\n", buf, urgent);
	close(c);
	close(s);
}

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int lfd, one = 1;

	if (argc != 2)
		return 2;
	sin.sin_port = htons((unsigned short)atoi(argv[1]));
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 4) < 0)
		die("listen");
	cli = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(cli, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		die("connect");
	srv = accept(lfd, NULL, NULL);
	if (srv < 0)
		die("accept");
	setvbuf(stdout, NULL, _IONBF, 0);
	warm_up();
	sa_restart();
	long_timeout();
	sendmsg_rights();
	errqueue();
	sendfile_pos();
	poll_one();
	rcvlowat();
	splice_both();
	warm_up();
	stdio_lines(lfd);
	oob_first(lfd);
	close(cli);
	close(srv);
	close(lfd);
	return 0;
}
