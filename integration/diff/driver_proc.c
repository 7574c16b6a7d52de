/* driver_proc.c: the differential driver's steps about threads, processes
 * and signals: threads2, fork/forkpass ... exit, alarm, awaitup. */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHUNK 65536

/* threads2 N: two threads recv on the one fd until N bytes came in all. */
static struct {
	pthread_mutex_t mu;
	size_t n, total;
	uint64_t sum;
	int stop;
	char end[32];
} T2 = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void on_usr1(int sig)
{
	(void)sig;
}

static void *t2_reader(void *arg)
{
	unsigned char *buf = malloc(CHUNK);
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&T2.mu);
		int stop = T2.stop || T2.total >= T2.n;
		pthread_mutex_unlock(&T2.mu);
		if (stop)
			break;
		ssize_t r = recv(D.fd, buf, CHUNK, 0);
		int e = errno;
		pthread_mutex_lock(&T2.mu);
		if (r > 0) {
			T2.total += r;
			for (ssize_t k = 0; k < r; k++)
				T2.sum += buf[k];
		} else if (!(r < 0 && e == EINTR)) {
			if (!T2.stop)
				snprintf(T2.end, sizeof(T2.end), "%s", r == 0 ? "eof" : ename(e));
			T2.stop = 1;
		}
		pthread_mutex_unlock(&T2.mu);
	}
	free(buf);
	return NULL;
}

void do_threads2(int i, struct step *st)
{
	struct sigaction sa = {.sa_handler = on_usr1};
	sigaction(SIGUSR1, &sa, NULL); /* no SA_RESTART: the signal ends a recv */
	T2.n = st->ntok > 1 ? (size_t)num(st->tok[1]) : 1;
	T2.total = T2.sum = 0;
	T2.stop = 0;
	strcpy(T2.end, "full");
	pthread_t th[2];
	for (int k = 0; k < 2; k++)
		pthread_create(&th[k], NULL, t2_reader, NULL);
	/* The thread that did not get the last bytes sleeps in recv: poke both
	 * until they are gone. */
	for (int left = 2; left;) {
		usleep(2000);
		pthread_mutex_lock(&T2.mu);
		int done = T2.stop || T2.total >= T2.n;
		pthread_mutex_unlock(&T2.mu);
		if (!done)
			continue;
		left = 0;
		for (int k = 0; k < 2; k++)
			if (th[k] && pthread_tryjoin_np(th[k], NULL) == EBUSY) {
				pthread_kill(th[k], SIGUSR1);
				left++;
			} else {
				th[k] = 0;
			}
	}
	D.rx += T2.total;
	rec(i, "%zu sum=%llu end=%s", T2.total, (unsigned long long)T2.sum, T2.end);
}

static int find_exit(int i)
{
	for (int k = i + 1; k < D.nsteps; k++)
		if (!strcmp(D.steps[k].tok[0], "exit"))
			return k;
	return D.nsteps;
}

static void wait_child(int i, pid_t pid)
{
	int stt = 0;
	while (waitpid(pid, &stt, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(stt))
		rec(i, "child signal %d", WTERMSIG(stt));
	else
		rec(i, "child exit %d", WEXITSTATUS(stt));
}

/* fork ... exit: the child runs the steps up to "exit" while the parent waits;
 * forkpass: the same, but the child gets the connection with SCM_RIGHTS and
 * the parent closes its copy first. */
int do_fork(int i, int pass)
{
	int sp[2] = {-1, -1};
	if (pass && socketpair(AF_UNIX, SOCK_STREAM, 0, sp))
		return rec(i, "socketpair failed"), i + 1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (pass) {
			close(sp[0]);
			close(D.fd);
			char c;
			union {
				char b[CMSG_SPACE(sizeof(int))];
				struct cmsghdr align;
			} cb;
			struct iovec iov = {&c, 1};
			struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
					    .msg_controllen = sizeof(cb.b)};
			if (recvmsg(sp[1], &mh, 0) != 1 || !CMSG_FIRSTHDR(&mh))
				_exit(4);
			memcpy(&D.fd, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(int));
		}
		int end = find_exit(i);
		for (int k = i + 1; k < end;)
			k = run_step(k);
		fflush(stdout);
		_exit(0);
	}
	if (pass) {
		close(sp[1]);
		char c = 'F';
		union {
			char b[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} cb;
		memset(&cb, 0, sizeof(cb));
		struct iovec iov = {&c, 1};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
				    .msg_controllen = sizeof(cb.b)};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &D.fd, sizeof(int));
		sendmsg(sp[0], &mh, 0);
		close(D.fd);
		D.fd = -1;
		close(sp[0]);
	}
	wait_child(i, pid);
	return find_exit(i) + 1;
}

static void on_alarm(int sig)
{
	(void)sig;
}

/* alarm MS [norestart]: SIGALRM after MS, with SA_RESTART unless norestart. */
void do_alarm(struct step *st)
{
	struct sigaction sa = {.sa_handler = on_alarm};
	sa.sa_flags = st->ntok > 2 && !strcmp(st->tok[2], "norestart") ? 0 : SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	long ms = st->ntok > 1 ? num(st->tok[1]) : 100;
	struct itimerval it = {.it_value = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
}

/* Whether this process traced upgrade.done or upgrade.fail (always true
 * when upgrades are off: plain TCP, or RDMASHIM_TRANSPORTS=tcp). Only the
 * trace file is read. */
static int upgrade_settled(void)
{
	const char *tf = getenv("RDMASHIM_TRACE_FILE"), *tr = getenv("RDMASHIM_TRANSPORTS");
	char path[512], buf[65536];
	if (!tf || !tr || !strcmp(tr, "tcp") || !getenv("LD_PRELOAD") || !strstr(tf, "%p"))
		return 1;
	const char *pp = strstr(tf, "%p");
	snprintf(path, sizeof(path), "%.*s%d%s", (int)(pp - tf), tf, (int)getpid(), pp + 2);
	int f = open(path, O_RDONLY);
	ssize_t n = f >= 0 ? read(f, buf, sizeof(buf) - 1) : -1;
	if (f >= 0)
		close(f);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return strstr(buf, "\"upgrade.done\"") || strstr(buf, "\"upgrade.fail\"");
}

/* awaitup (both ends): one-byte round trips, 5 ms apart, until both ends
 * traced the end of their upgrade (at most 2 s, or DIFF_AWAITUP_MS: an RDMA
 * warm-up under a VM without KVM takes longer): the handshake moves only
 * in data calls, so waiting alone would not finish it. These bytes do not
 * advance the pattern offsets and nothing about them is recorded, so plain
 * TCP (no round trip at all) and the shim's runs give the same records. */
void await_upgrade(void)
{
	const char *ms = getenv("DIFF_AWAITUP_MS");
	long rounds = (ms && atol(ms) > 0 ? atol(ms) : 2000) / 5;
	for (long t = 0; t < rounds; t++) {
		char me = (char)('0' + upgrade_settled()), peer = 0, b = 'u';
		if (write(D.sync_fd, &me, 1) != 1 || read(D.sync_fd, &peer, 1) != 1)
			return;
		if (me == '1' && peer == '1')
			return;
		if (D.is_server) {
			if (recv(D.fd, &b, 1, 0) != 1 || send(D.fd, &b, 1, 0) != 1)
				t = rounds;
		} else {
			if (send(D.fd, &b, 1, 0) != 1 || recv(D.fd, &b, 1, 0) != 1)
				t = rounds;
		}
		usleep(5000);
	}
}

