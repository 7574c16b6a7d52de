/* One copy on shared memory; see shm_zc.h and shim/PROTOCOL.md. */
#include "shm_zc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "compiler.h"
#include "config.h"
#include "fdtable.h"
#include "real.h"
#include "reaper.h"
#include "self.h"
#include "stats.h"
#include "trace.h"

/* RDMASHIM_ZEROCOPY=auto turns one copy on where it measured a win
 * (docs/BENCHMARKS.md, "One copy on shared memory"): it did not here,
 * process_vm_writev costing more than the two copies it saves. */
#define SHM_ZC_AUTO_ON false

/* The most iovec pieces one write takes from the program's send. */
#define SHM_ZC_IOV_MAX 64

void shm_zc_init(struct shm_zc *z)
{
	memset(z, 0, sizeof(*z));
	z->pidfd.fd = -1;
	z->pid = -1;
}

static bool zc_wanted(void)
{
	return shim_cfg.zerocopy == SHIM_ZC_ON || (shim_cfg.zerocopy == SHIM_ZC_AUTO && SHM_ZC_AUTO_ON);
}

static size_t zc_min_bytes(void)
{
	return (size_t)shim_cfg.zerocopy_shm_min_kb * 1024u;
}

/* The pid a pidfd names, from its fdinfo ("Pid:"); -1 when it is gone
 * (the kernel says -1 then) or can not be read. */
static pid_t pidfd_pid(int pidfd)
{
	char path[64], buf[512];
	ssize_t n;
	char *p;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = REAL(read)(fd, buf, sizeof(buf) - 1);
	REAL(close)(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strstr(buf, "\nPid:");
	if (!p)
		return -1;
	long v = strtol(p + 5, NULL, 10);

	return v > 0 ? (pid_t)v : -1;
}

/* /proc is mounted for our pid namespace: /proc/self names our pid. */
static bool proc_is_ours(void)
{
	char link[32];
	ssize_t n = readlink("/proc/self", link, sizeof(link) - 1);

	if (n <= 0)
		return false;
	link[n] = '\0';
	return strtol(link, NULL, 10) == (long)getpid();
}

/* Polls our pidfd of the writer's process without waiting (a pidfd is
 * readable once its process exited): poll's result and *revents, or
 * PIDFD_NONE when we hold no pidfd (none, or the program took its number). */
#define PIDFD_NONE (-2)
static int pidfd_poll(const struct shm_zc *z, short *revents)
{
	struct pollfd p = { .fd = z->pidfd.fd, .events = POLLIN };
	int n;

	if (z->pidfd.fd < 0 || !shim_owned_still(&z->pidfd))
		return PIDFD_NONE;
	n = REAL(poll)(&p, 1, 0);
	*revents = p.revents;
	return n;
}

/* The process the pidfd names has not exited: the number we write to is
 * still its own (a pid is not reused before its process is reaped). */
static bool peer_alive(const struct shm_zc *z)
{
	short revents;

	return pidfd_poll(z, &revents) == 0;
}

void shm_zc_bind(struct shm_zc *z, int pidfd)
{
	pid_t pid;

	if (z->pidfd.fd >= 0) {
		if (pidfd >= 0)
			REAL(close)(pidfd);
		return;
	}
	if (pidfd < 0 || !zc_wanted()) {
		if (pidfd >= 0)
			REAL(close)(pidfd);
		if (zc_wanted())
			shim_stats_zc_add(SHIM_ZC_FB_NO_PEER, 1);
		return;
	}
	pid = pidfd_pid(pidfd);
	/* A socketpair names its maker at both ends: a pidfd of ourselves
	 * names no peer (the pair way's client end). And fdinfo gives the
	 * pid in the namespace of the /proc mount: unless that is ours, the
	 * number may name another process here. */
	if (pid <= 0 || pid == shim_self_pid() || !proc_is_ours() || !shim_fd_keepable(pidfd) || shim_owned_take(&z->pidfd, pidfd) < 0) {
		REAL(close)(pidfd);
		shim_stats_zc_add(SHIM_ZC_FB_NO_PEER, 1);
		return;
	}
	z->pid = pid;
	z->tx_on = true;
	z->rx_on = true;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "zc.bind", -1, NULL, SHIM_REASON_NONE, "\"pid\":%d", (int)pid);
}

void shm_zc_release(struct shm_zc *z)
{
	shim_owned_close(&z->pidfd);
	z->tx_on = z->rx_on = false;
}

bool shm_zc_peer_refused(const struct shim_ring *rx)
{
	return __atomic_load_n(&rx->hdr->zc_refused, __ATOMIC_RELAXED) != 0;
}

/* The send's bytes from skip on, at most max, as iovec pieces. */
static int iov_from(const struct iovec *iov, int iovcnt, size_t skip, size_t max, struct iovec *out, size_t *total)
{
	int n = 0;

	*total = 0;
	for (int i = 0; i < iovcnt && n < SHM_ZC_IOV_MAX && *total < max; i++) {
		size_t len = iov[i].iov_len;

		if (skip >= len) {
			skip -= len;
			continue;
		}
		len -= skip;
		if (len > max - *total)
			len = max - *total;
		out[n++] = (struct iovec){ (uint8_t *)iov[i].iov_base + skip, len };
		*total += len;
		skip = 0;
	}
	return n;
}

/* The kernel would not let us write into the peer (another user, Yama's
 * ptrace_scope, the process gone): no more takes on this channel, and
 * the peer learns it from zc_refused and offers no more. */
static void tx_refuse(struct shm_zc *z, struct shim_ring *tx, int err)
{
	z->tx_on = false;
	/* Relaxed: a hint only; the peer's offers are still taken by no one
	 * and withdrawn by their maker. */
	__atomic_store_n(&tx->hdr->zc_refused, 1, __ATOMIC_RELAXED);
	shim_stats_zc_add(SHIM_ZC_FB_DENIED, 1);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "zc.refused", -1, NULL, SHIM_REASON_NONE, "\"errno\":%d,\"pid\":%d", err,
		   (int)z->pid);
}

size_t shm_zc_send(struct shm_zc *z, struct shim_ring *tx, const struct iovec *iov, int iovcnt, size_t skip)
{
	struct iovec local[SHM_ZC_IOV_MAX], remote;
	uint64_t st, off, addr, len, tail;
	size_t want, n;
	ssize_t w;
	int cnt;

	if (!z->tx_on)
		return 0;
	/* Small sends pay this sum only, no look at the shared line. */
	want = 0;
	for (int i = 0; i < iovcnt; i++)
		want += iov[i].iov_len;
	if (want < skip || want - skip < zc_min_bytes())
		return 0;
	cnt = iov_from(iov, iovcnt, skip, (size_t)-1, local, &want);
	/* Acquire: pairs with the consumer's release store of OPEN in
	 * shm_zc_offer(), so its offset, address and length are seen. */
	st = __atomic_load_n(&tx->hdr->zc_state, __ATOMIC_ACQUIRE);
	if ((st & SHM_ZC_STATE_MASK) != SHM_ZC_OPEN)
		return 0;
	off = __atomic_load_n(&tx->hdr->zc_off, __ATOMIC_RELAXED);
	addr = __atomic_load_n(&tx->hdr->zc_addr, __ATOMIC_RELAXED);
	len = __atomic_load_n(&tx->hdr->zc_len, __ATOMIC_RELAXED);
	tail = shim_ring_own(tx) + z->tx_total;
	/* Only where our next byte is the one it waits for: then the ring
	 * holds nothing it has not read, and the bytes go in order. */
	if (off != tail || !len || tx->cursors_shared || __atomic_load_n(&tx->stopped, __ATOMIC_RELAXED))
		return 0;
	n = want;
	if ((uint64_t)n > len)
		n = (size_t)len;
	/* The take: only from the very offer read above (the generation in
	 * the word: a withdrawn and remade offer fails it). Acquire-release:
	 * pairs with the consumer's withdrawing swap in shm_zc_settle(); one
	 * of the two swaps wins, and a withdrawn offer is never written. */
	if (!__atomic_compare_exchange_n(&tx->hdr->zc_state, &st, (st & ~(uint64_t)SHM_ZC_STATE_MASK) | SHM_ZC_TAKEN,
					 false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return 0;
	cnt = iov_from(local, cnt, 0, n, local, &n);
	remote = (struct iovec){ (void *)(uintptr_t)addr, n };
	w = -1;
	errno = ESRCH;
	if (peer_alive(z))
		w = process_vm_writev(z->pid, local, (unsigned long)cnt, &remote, 1, 0);
	if (w < 0) {
		int err = errno;

		w = 0;
		/* EFAULT: the peer's address is not its memory (a lie, or a
		 * buffer it unmapped): this offer only. Anything else says we
		 * can not write into it at all. */
		if (err != EFAULT)
			tx_refuse(z, tx, err);
	}
	__atomic_store_n(&tx->hdr->zc_done, (uint64_t)w, __ATOMIC_RELAXED);
	if (w) {
		z->tx_total += (uint64_t)w;
		z->tx_floor = shim_ring_own(tx) + z->tx_total;
		shim_stats_zc_add(SHIM_ZC_SENDS, 1);
		shim_stats_zc_add(SHIM_ZC_BYTES, (unsigned long)w);
	}
	/* Release: zc_done, and the bytes in the buffer, before DONE; and
	 * DONE before any later tail of ours, so a consumer that sees ring
	 * bytes written after these sees DONE too. Pairs with the consumer's
	 * acquire loads of the word (shm_zc_settle(), shim_ring_zc_news()).
	 * The caller's bell follows (tx_bell: its full fence pairs with the
	 * consumer's arm). */
	__atomic_store_n(&tx->hdr->zc_state, (st & ~(uint64_t)SHM_ZC_STATE_MASK) | SHM_ZC_DONE, __ATOMIC_RELEASE);
	return (size_t)w;
}

int shm_zc_offer(struct shm_zc *z, struct shim_ring *rx, void *buf, size_t len)
{
	uint64_t head;

	if (!z->rx_on || z->out || z->delivered || z->given_up)
		return -EBUSY;
	if (len < zc_min_bytes())
		return -EMSGSIZE;
	if (shm_zc_peer_refused(rx) || rx->cursors_shared || __atomic_load_n(&rx->stopped, __ATOMIC_RELAXED)) {
		z->rx_on = false;
		return -EPERM;
	}
	if (shim_ring_readable(rx))
		return -EAGAIN;
	head = shim_ring_own(rx) + z->rx_total;
	z->gen++;
	z->off = head;
	z->len = len;
	__atomic_store_n(&rx->hdr->zc_off, head, __ATOMIC_RELAXED);
	__atomic_store_n(&rx->hdr->zc_addr, (uint64_t)(uintptr_t)buf, __ATOMIC_RELAXED);
	__atomic_store_n(&rx->hdr->zc_len, (uint64_t)len, __ATOMIC_RELAXED);
	shim_ring_zc_watch(rx, shm_zc_word(z->gen, SHM_ZC_DONE));
	/* Release: the offer's fields before it opens; pairs with the
	 * producer's acquire load in shm_zc_send(). */
	__atomic_store_n(&rx->hdr->zc_state, shm_zc_word(z->gen, SHM_ZC_OPEN), __ATOMIC_RELEASE);
	__atomic_store_n(&z->out, true, __ATOMIC_RELAXED);
	return 0;
}

/* A DONE of this offer: its bytes (at most the offer's length) are the
 * offering call's, and the stream's offset moves past them. */
static void settle_done(struct shm_zc *z, struct shim_ring *rx)
{
	uint64_t n = __atomic_load_n(&rx->hdr->zc_done, __ATOMIC_RELAXED);

	shim_ring_zc_unwatch(rx);
	__atomic_store_n(&z->out, false, __ATOMIC_RELAXED);
	if (n > z->len) {
		shim_ring_violate(rx);
		return;
	}
	z->rx_total += n;
	z->delivered += (size_t)n;
	if (n)
		shim_stats_zc_add(SHIM_ZC_RECVS, 1);
}

/* A taken offer whose writer can write no more (it exited, or it broke
 * its promise and can not write into us): what it wrote is not known and
 * is not the stream's. A dead writer's stream ends at TCP's end; a living
 * one that broke its promise violated the ring (violate). */
static void give_up(struct shm_zc *z, struct shim_ring *rx, bool violate)
{
	shim_ring_zc_unwatch(rx);
	__atomic_store_n(&z->out, false, __ATOMIC_RELAXED);
	z->given_up = true;
	z->rx_on = false;
	if (violate)
		shim_ring_violate(rx);
}

/* The writer's process is known to have exited: no write of its is in
 * progress or can start (a process exits after its system calls end). */
static bool peer_exited(const struct shm_zc *z)
{
	short revents = 0;
	int n = pidfd_poll(z, &revents);

	if (n != PIDFD_NONE)
		return n > 0 && (revents & (POLLIN | POLLHUP));
	/* Our pidfd was taken (a close-all of the program's): a number no
	 * process has means ours is gone; one that names a process, maybe
	 * another, says nothing. */
	return z->pid > 0 && kill(z->pid, 0) < 0 && errno == ESRCH;
}

/* The numbers after "Key:" in /proc's status text (at most n); how many. */
static int status_nums(const char *text, const char *key, int base, unsigned long long *v, int n)
{
	const char *p = strstr(text, key);
	int got = 0;

	if (!p)
		return 0;
	p += strlen(key);
	while (got < n) {
		char *end;
		unsigned long long x = strtoull(p, &end, base);

		if (end == p)
			break;
		v[got++] = x;
		p = end;
	}
	return got;
}

/*
 * Whether the writer's process could ever pass the kernel's check for a
 * write into us (ptrace's PTRACE_MODE_ATTACH_REALCREDS) without an exec,
 * which ends any write of its first: CAP_SYS_PTRACE in its permitted set,
 * or a user id of its (any of which it may make its real one) that is one
 * of ours. Groups, Yama and dumpability are left out: a yes where the
 * kernel says no costs a longer wait only. Not known: yes.
 */
static bool peer_may_write_us(const struct shm_zc *z)
{
	unsigned long long uid[3], cap[1];
	uid_t r, e, s;
	char path[64], buf[4096];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)z->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	n = REAL(read)(fd, buf, sizeof(buf) - 1);
	REAL(close)(fd);
	/* Alive after the read: the number was its when we read (a pid is
	 * not reused before its process is reaped). */
	if (n <= 0 || !peer_alive(z) || getresuid(&r, &e, &s) < 0)
		return true;
	buf[n] = '\0';
	if (status_nums(buf, "\nUid:", 10, uid, 3) != 3 || status_nums(buf, "\nCapPrm:", 16, cap, 1) != 1)
		return true;
	if (cap[0] & (1ull << 19)) /* CAP_SYS_PTRACE */
		return true;
	for (int i = 0; i < 3; i++)
		if (uid[i] == r || uid[i] == e || uid[i] == s)
			return true;
	return false;
}

/*
 * Taken: the writer's process_vm_writev may land in the buffer until it
 * says DONE or its process is gone, and nothing we do can stop it (a
 * writer stopped between its take and its write, or in the write on a
 * fault of its own memory, writes when it goes on). So the buffer goes
 * back to the program only then. The bound decides the connection only:
 * past it the ring is violated (the writer broke its promise), and a
 * writer that could not write into us anyway is not waited for; one that
 * could is, however long (a process that may write into us may also stop
 * us with ptrace: the wait gives it no power it did not have).
 */
static void wait_taken(struct shm_zc *z, struct shim_ring *rx, uint64_t taken, uint64_t done)
{
	unsigned long long until = shim_now_ns() + SHM_ZC_TAKEN_WAIT_MS * 1000000ull;
	bool late = false;
	uint64_t st;

	for (;;) {
		/* Acquire: pairs with the producer's release store of DONE;
		 * its write into the buffer came before. */
		st = __atomic_load_n(&rx->hdr->zc_state, __ATOMIC_ACQUIRE);
		if (st == done && !late) {
			settle_done(z, rx);
			return;
		}
		if (st != taken) {
			/* DONE after the bound (its bytes are not the
			 * stream's: the ring was violated then), or a word of
			 * no state of this offer's, which only the peer
			 * writes: a violation. Either way the writer's last
			 * word came after its write. */
			give_up(z, rx, !late);
			return;
		}
		if (peer_exited(z)) {
			give_up(z, rx, false);
			return;
		}
		if (!late && shim_now_ns() > until) {
			if (!peer_may_write_us(z)) {
				give_up(z, rx, true);
				return;
			}
			late = true;
			shim_ring_violate(rx);
			SHIM_TRACE(SHIM_TRACE_WARN, "zc.late_writer", -1, NULL, SHIM_REASON_NONE, "\"pid\":%d",
				   (int)z->pid);
		}
		if (!late) {
			struct timespec ts = { 0, 20000 };

			nanosleep(&ts, NULL);
		} else {
			/* The writer's exit wakes this poll at once. */
			struct pollfd p = { .fd = shim_owned_still(&z->pidfd) ? z->pidfd.fd : -1, .events = POLLIN };

			REAL(poll)(&p, 1, 10);
		}
	}
}

void shm_zc_settle(struct shm_zc *z, struct shim_ring *rx, bool withdraw)
{
	uint64_t open = shm_zc_word(z->gen, SHM_ZC_OPEN), taken = shm_zc_word(z->gen, SHM_ZC_TAKEN),
		 done = shm_zc_word(z->gen, SHM_ZC_DONE);
	uint64_t st;

	if (!z->out)
		return;
	for (unsigned spins = 0;; spins++) {
		/* Acquire: pairs with the producer's release store of DONE. */
		st = __atomic_load_n(&rx->hdr->zc_state, __ATOMIC_ACQUIRE);
		if (st == done) {
			settle_done(z, rx);
			return;
		}
		if (st == open) {
			if (!withdraw)
				return;
			/* Acquire-release: pairs with the producer's taking
			 * swap; after ours wins, no write lands in the buffer. */
			if (__atomic_compare_exchange_n(&rx->hdr->zc_state, &st, shm_zc_word(z->gen, SHM_ZC_IDLE), false,
							__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				shim_ring_zc_unwatch(rx);
				__atomic_store_n(&z->out, false, __ATOMIC_RELAXED);
				return;
			}
			continue; /* taken meanwhile: st is the new word */
		}
		if (st != taken) {
			/* No state of this offer's: the peer wrote the word. */
			__atomic_store_n(&z->out, false, __ATOMIC_RELAXED);
			shim_ring_zc_unwatch(rx);
			shim_ring_violate(rx);
			return;
		}
		if (!withdraw)
			return; /* the writer is at work: it writes no ring byte meanwhile */
		/* Taken: the copy is in the writer's system call, a ring's
		 * worth at most. Spin a little first. */
		if (spins < 256) {
			__builtin_ia32_pause();
			continue;
		}
		wait_taken(z, rx, taken, done);
		return;
	}
}

size_t shm_zc_end(struct shm_zc *z, struct shim_ring *rx)
{
	size_t n;

	shm_zc_settle(z, rx, true);
	n = z->delivered;
	z->delivered = 0;
	return n;
}
