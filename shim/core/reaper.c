/* Releasing files off the program's threads; see reaper.h. */
#include "reaper.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bgthread.h"
#include "clock.h"
#include "config.h"
#include "fdtable.h"
#include "owned.h"
#include "real.h"
#include "self.h"
#include "trace.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83
#endif

/* Files kept open while the queue is full; past this they stay open for
 * the process's life, which the kernel bounds by its fd limit and
 * shim_reap_jammed() by refusing new side channels. */
#define REAP_PARK_MAX 64

/*
 * The process's socketpair: pair_tx sends (nonblocking), pair_rx is the
 * reaper's. pair_pid is the process that made it: a fork's child makes its
 * own, and reaps its copies of the parent's ends through it. Both are kept
 * fds (owned.h): a program that closes numbers it did not open (a daemon's
 * close-all loop) and gets them back for files of its own never has us
 * send our fds into its socket, nor the reaper read its bytes. Under
 * setup_lock.
 */
static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_owned_fd pair_tx = { .fd = -1 }, pair_rx = { .fd = -1 };
static pid_t pair_pid;

static int parked[REAP_PARK_MAX]; /* under setup_lock */
static unsigned n_parked;

static bool jammed; /* atomic: a send found the queue full */
static unsigned long long n_sent, n_released, n_defused, n_parked_all; /* atomic */

static void count(unsigned long long *c)
{
	__atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

/*
 * The sender's close of its own number must come first: were the reaper
 * to close the file it received before that, the sender's close would be
 * the last reference, and the release would run on the program's thread
 * after all. Each message carries a sequence number; the sender marks it
 * closed once its number is gone, and the reaper waits for that mark
 * (microseconds: the sender closes right after its send) before it
 * closes. Marks live in a ring of slots; a slot holds the latest number
 * marked there, so a wait ends at that number or any later one.
 */
#define REAP_SEQ_SLOTS 1024
#define REAP_MARK_WAIT_NS (1000ull * 1000 * 1000)

static unsigned long long next_seq;                      /* atomic */
static unsigned long long closed_mark[REAP_SEQ_SLOTS];   /* atomic */

/* The sender's side: its number for seq is closed. Release pairs with
 * the reaper's acquire load in wait_sender_closed(). */
static void mark_closed(unsigned long long seq)
{
	__atomic_store_n(&closed_mark[seq % REAP_SEQ_SLOTS], seq, __ATOMIC_RELEASE);
}

/* A sender that never marks (a thread that died between its send and its
 * close) is waited for REAP_MARK_WAIT_NS, then given up on. */
static void wait_sender_closed(unsigned long long seq)
{
	unsigned long long start = shim_now_ns();

	while (__atomic_load_n(&closed_mark[seq % REAP_SEQ_SLOTS], __ATOMIC_ACQUIRE) < seq &&
	       shim_now_ns() - start < REAP_MARK_WAIT_NS)
		sched_yield();
}

/*
 * The reaper thread runs only while there is work: it ends once its queue
 * stayed empty REAP_IDLE_MS, and the next release starts it again. A
 * process that forks is then mostly without it, and its child free to
 * start threads of its own (which a fork from a process with threads
 * makes unsafe: TSan refuses it outright).
 */
#define REAP_IDLE_MS 100

static void *reaper_main(void *arg);

static bool thread_running; /* under setup_lock */
/* Between shim_reap_atfork_child() and _child_done(): the fork handlers
 * release the parent's kept fds through us, and no thread is started
 * inside a fork handler; the next release outside starts it. */
static bool in_fork_handlers;

/* Under setup_lock: the thread for this process's pair, started if none
 * runs. A start that fails is tried again at the next release; meanwhile
 * the files wait in the queue, which bounds them. */
static void thread_ensure_locked(void)
{
	struct shim_owned_fd *rx;

	if (thread_running || in_fork_handlers || pair_rx.fd < 0)
		return;
	/* The thread's own copy, checked before each receive, freed at its
	 * end: a new pair may replace pair_rx meanwhile. */
	rx = malloc(sizeof(*rx));
	if (!rx)
		return;
	*rx = pair_rx;
	if (shim_bgthread_start(reaper_main, rx) == 0)
		thread_running = true;
	else
		free(rx);
}

/* Whether the queue is empty, and the thread may end: decided under
 * setup_lock, which every release holds from its send to its check that
 * a thread runs, so that no message is left without a reader. */
static bool idle_end(const struct shim_owned_fd *rx)
{
	uint8_t b;
	bool end;

	pthread_mutex_lock(&setup_lock);
	/* A number that is no longer ours ends the thread, untouched. */
	end = !shim_owned_still(rx) || (REAL(recv)(rx->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && errno == EAGAIN);
	if (end)
		thread_running = false;
	pthread_mutex_unlock(&setup_lock);
	return end;
}

/* Calls fn with each fd a received message's SCM_RIGHTS carried. */
static void each_passed_fd(struct msghdr *mh, void (*fn)(int fd))
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		for (size_t i = 0; i < k; i++) {
			int fd;

			/* CMSG_DATA need not be aligned for int. */
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			fn(fd);
		}
	}
}

/* When the reaper's current close began (0: it is in none). A close that
 * lasts is a release that blocks; a full queue with none is only a burst. */
static unsigned long long close_since_ns; /* atomic */

#define REAP_STUCK_NS (50ull * 1000 * 1000)

static void release_here(int fd)
{
	/* Relaxed: read only to judge, never to order. */
	__atomic_store_n(&close_since_ns, shim_now_ns(), __ATOMIC_RELAXED);
	REAL(close)(fd);
	__atomic_store_n(&close_since_ns, 0, __ATOMIC_RELAXED);
	count(&n_released);
}

static bool release_is_stuck(void)
{
	unsigned long long since = __atomic_load_n(&close_since_ns, __ATOMIC_RELAXED);

	return since && shim_now_ns() - since > REAP_STUCK_NS;
}

/* The reaper: one file per message; a close that blocks blocks here. */
static void *reaper_main(void *arg)
{
	struct shim_owned_fd *own = arg;
	int rx = own->fd;
	union {
		struct cmsghdr align;
		char buf[SHIM_SCM_SPACE];
	} control;

	for (;;) {
		unsigned long long seq = 0;
		struct iovec iov = { &seq, sizeof(seq) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
				     .msg_controllen = sizeof(control.buf) };
		struct pollfd p = { .fd = rx, .events = POLLIN };
		ssize_t n;

		if ((REAL(poll)(&p, 1, REAP_IDLE_MS) == 0 || !shim_owned_still(own)) && idle_end(own))
			break;
		n = REAL(recvmsg)(rx, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			idle_end(own);
			break; /* our end is gone: nothing more can come */
		}
		if (n == sizeof(seq))
			wait_sender_closed(seq);
		each_passed_fd(&mh, release_here);
		/* A close came back: whatever jammed the queue moves again. */
		__atomic_store_n(&jammed, false, __ATOMIC_RELAXED);
	}
	free(own);
	return NULL;
}

/*
 * Moves fd into the reaper's queue and closes our number (then not the
 * last reference: the message in flight holds one, and the reaper waits
 * for our mark). 0, or -errno with fd still ours (-EAGAIN: the queue is
 * full; -ETOOMANYREFS: this user has too many fds in flight).
 */
static int hand_over(int tx, int fd)
{
	unsigned long long seq = __atomic_add_fetch(&next_seq, 1, __ATOMIC_RELAXED);
	struct iovec iov = { &seq, sizeof(seq) };
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} control;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };
	struct cmsghdr *c;

	memset(&control, 0, sizeof(control));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (REAL(sendmsg)(tx, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof(seq))
		return -errno;
	REAL(close)(fd);
	mark_closed(seq);
	count(&n_sent);
	return 0;
}

/* Under setup_lock: this process's send end, made when there is none (its
 * thread starts with the first release); -errno when it can not be had. */
static int sender_locked(void)
{
	struct shim_owned_fd old[2] = { pair_tx, pair_rx };
	bool forked = pair_pid != shim_self_pid();
	int sv[2];

	if (!forked && shim_owned_still(&pair_tx) && shim_owned_still(&pair_rx))
		return pair_tx.fd;
	/* Numbers the program took over are its own now: never touched. */
	shim_owned_forget(&pair_tx);
	shim_owned_forget(&pair_rx);
	pair_pid = shim_self_pid();
	/* Tried again at the next release: a process near its fd limit may
	 * have room later. Meanwhile release_stuck() does what it can. */
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	sv[0] = shim_fd_own_checked(sv[0]);
	sv[1] = shim_fd_own_checked(sv[1]);
	if (sv[0] < 0 || sv[1] < 0 || REAL(fcntl)(sv[0], F_SETFL, O_NONBLOCK) < 0 ||
	    shim_owned_take(&pair_tx, sv[0]) < 0 || shim_owned_take(&pair_rx, sv[1]) < 0) {
		/* Fresh sockets with nothing queued: their close is harmless. */
		if (sv[0] >= 0)
			REAL(close)(sv[0]);
		if (sv[1] >= 0)
			REAL(close)(sv[1]);
		shim_owned_forget(&pair_tx);
		shim_owned_forget(&pair_rx);
		return -EMFILE;
	}
	thread_running = false;
	/* A fork's child holds its parent's ends too; the parent's reaper
	 * may have died with it, leaving ours the last references, with
	 * whatever was in flight: they go the same way as any other file. */
	for (int i = 0; i < 2 && forked; i++)
		if (old[i].fd >= 0 && shim_owned_still(&old[i]))
			hand_over(pair_tx.fd, old[i].fd);
	return pair_tx.fd;
}

/*
 * The queue is full (a release is stuck) or there is no reaper. An INET
 * socket is reset in place: with SO_LINGER {1,0} its close sends a reset
 * and never waits, whatever its queue and its peer. Anything else is kept
 * open, up to REAP_PARK_MAX, then left open for good.
 */
static void release_stuck(int fd)
{
	struct linger abortive = { .l_onoff = 1, .l_linger = 0 };
	int domain = 0;
	socklen_t len = sizeof(domain);

	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 &&
	    (domain == AF_INET || domain == AF_INET6) &&
	    REAL(setsockopt)(fd, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive)) == 0) {
		REAL(close)(fd);
		count(&n_defused);
		return;
	}
	unsigned held;
	bool kept;

	count(&n_parked_all);
	pthread_mutex_lock(&setup_lock);
	kept = n_parked < REAP_PARK_MAX;
	if (kept)
		parked[n_parked++] = fd;
	held = n_parked;
	pthread_mutex_unlock(&setup_lock);
	/* Not kept: left open for good, never closed here. */
	SHIM_TRACE(SHIM_TRACE_WARN, "reap.parked", fd, NULL, SHIM_REASON_NONE, "\"parked\":%u,\"kept\":%d", held,
		   kept);
}

/* Under setup_lock: parked files go to the reaper once it has room. */
static void unpark_locked(int tx)
{
	while (n_parked && hand_over(tx, parked[n_parked - 1]) == 0)
		n_parked--;
}

/*
 * Under setup_lock, with the thread started: the queue is full. While no
 * release is stuck (a burst: a thousand upgrades at once release three
 * fds each), the reaper makes room within microseconds: wait for it,
 * REAP_BURST_WAITS slices at most, never past the moment a release turns
 * out stuck (then the queue is jammed, and the caller does what it can).
 * The wait is on our own thread's progress, not on anything a peer holds.
 */
#define REAP_BURST_WAITS 40
#define REAP_BURST_SLICE_MS 5

static int hand_over_burst(int tx, int fd)
{
	int rc = -EAGAIN;

	for (int i = 0; i < REAP_BURST_WAITS && rc == -EAGAIN && thread_running && !release_is_stuck(); i++) {
		struct pollfd p = { .fd = tx, .events = POLLOUT };

		REAL(poll)(&p, 1, REAP_BURST_SLICE_MS);
		rc = hand_over(tx, fd);
	}
	return rc;
}

void shim_reap_prepare(void)
{
	pthread_mutex_lock(&setup_lock);
	sender_locked();
	pthread_mutex_unlock(&setup_lock);
}

void shim_reap(int fd)
{
	int tx, rc;

	if (fd < 0)
		return;
	/* Held from the send to the thread's start: idle_end() must not
	 * find the queue empty between them. Nothing here waits on a peer:
	 * the send never blocks, our close is not the last reference, and a
	 * full queue is waited for only while the reaper moves. */
	pthread_mutex_lock(&setup_lock);
	tx = sender_locked();
	rc = tx < 0 ? tx : hand_over(tx, fd);
	if (tx >= 0)
		thread_ensure_locked();
	if (rc == -EAGAIN)
		rc = hand_over_burst(tx, fd);
	if (rc == 0)
		unpark_locked(tx);
	pthread_mutex_unlock(&setup_lock);
	if (rc == 0)
		return;
	/* A queue still full means a release is stuck; no reaper at all (a
	 * process at its fd limit) bars nothing: it is tried again next time. */
	if (tx >= 0 && !__atomic_exchange_n(&jammed, true, __ATOMIC_RELAXED))
		SHIM_TRACE(SHIM_TRACE_WARN, "reap.jammed", fd, NULL, SHIM_REASON_NONE, "\"error\":%d", -rc);
	release_stuck(fd);
}

void shim_reap_owned(struct shim_owned_fd *o)
{
	if (shim_owned_still(o))
		shim_reap(o->fd);
	shim_owned_forget(o);
}

void shim_reap_hung_up(int fd)
{
	if (fd < 0)
		return;
	/* Not ENOTSOCK-checked: a file that is no socket keeps no queue. */
	REAL(shutdown)(fd, SHUT_RDWR);
	shim_reap(fd);
}

void shim_reap_cmsg_fds(struct msghdr *mh)
{
	each_passed_fd(mh, shim_reap);
}

bool shim_reap_jammed(void)
{
	return __atomic_load_n(&jammed, __ATOMIC_RELAXED);
}

int shim_reap_refuse_rights(int fd)
{
	int off = 0;

	if (shim_cfg.test_no_passrights)
		return -ENOPROTOOPT;
	return REAL(setsockopt)(fd, SOL_SOCKET, SO_PASSRIGHTS, &off, sizeof(off)) == 0 ? 0 : -errno;
}

void shim_reap_counts(struct shim_reap_counts *out)
{
	out->sent = __atomic_load_n(&n_sent, __ATOMIC_RELAXED);
	out->released = __atomic_load_n(&n_released, __ATOMIC_RELAXED);
	out->defused = __atomic_load_n(&n_defused, __ATOMIC_RELAXED);
	out->parked = __atomic_load_n(&n_parked_all, __ATOMIC_RELAXED);
}

bool shim_reap_settled(int timeout_ms)
{
	for (int waited = 0;; waited++) {
		if (__atomic_load_n(&n_released, __ATOMIC_RELAXED) >= __atomic_load_n(&n_sent, __ATOMIC_RELAXED))
			return true;
		if (waited >= timeout_ms)
			return false;
		usleep(1000);
	}
}

void shim_reap_atfork_prepare(void)
{
	pthread_mutex_lock(&setup_lock);
}

void shim_reap_atfork_release(void)
{
	pthread_mutex_unlock(&setup_lock);
}

void shim_reap_atfork_child(void)
{
	/* The parent's thread is not in this process. */
	thread_running = false;
	in_fork_handlers = true;
	__atomic_store_n(&jammed, false, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&setup_lock);
}

void shim_reap_atfork_child_done(void)
{
	in_fork_handlers = false;
}
