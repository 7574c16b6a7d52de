/* driver_ops.c: the data, option and lifetime steps of the differential
 * driver (the step list is in integration/diff/README.md). */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define CHUNK 65536

static int parse_flags(struct step *st, int from)
{
	int f = 0;
	for (int k = from; k < st->ntok; k++) {
		const char *t = st->tok[k];
		if (!strcmp(t, "dontwait"))
			f |= MSG_DONTWAIT;
		else if (!strcmp(t, "peek"))
			f |= MSG_PEEK;
		else if (!strcmp(t, "waitall"))
			f |= MSG_WAITALL;
		else if (!strcmp(t, "trunc"))
			f |= MSG_TRUNC;
		else if (!strcmp(t, "oob"))
			f |= MSG_OOB;
		else if (!strcmp(t, "nosignal"))
			f |= MSG_NOSIGNAL;
		else if (!strcmp(t, "more"))
			f |= MSG_MORE;
	}
	return f;
}

static int nonblocking(void)
{
	int fl = fcntl(D.fd, F_GETFL);
	return fl >= 0 && (fl & O_NONBLOCK);
}

/* Appends the elapsed-time verdict: a call that ended by its own timeout must
 * have waited about that long; any step slower than 3 s is marked. */
static void timing(char *out, size_t cap, double t0, int timeout_ms, int timed_out)
{
	double el = now_ms() - t0;
	size_t l = strlen(out);
	if (timed_out && timeout_ms > 0)
		snprintf(out + l, cap - l, el >= 0.8 * timeout_ms ? " waited" : " early");
	else if (el > 3000)
		snprintf(out + l, cap - l, " SLOW");
}

static char send_note[32];

/* One sending call of len bytes of this end's pattern. */
static ssize_t send_once(const char *op, struct step *st, size_t len, int flags)
{
	unsigned char *p = D.txbuf + D.tx % PATTERN_PERIOD;
	if (!strcmp(op, "write"))
		return write(D.fd, p, len);
	if (!strcmp(op, "writev") || !strcmp(op, "sendmsg") || !strcmp(op, "sendmsgc")) {
		int k = st->ntok > 2 && strcmp(op, "sendmsgc") ? (int)num(st->tok[2]) : 1;
		if (k < 1 || k > 64)
			k = 1;
		struct iovec iov[64];
		size_t per = len / k;
		for (int j = 0; j < k; j++) {
			iov[j].iov_base = p + j * per;
			iov[j].iov_len = j == k - 1 ? len - j * per : per;
		}
		if (!strcmp(op, "writev"))
			return writev(D.fd, iov, k);
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = k};
		union {
			char b[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} cb;
		if (!strcmp(op, "sendmsgc")) {
			memset(&cb, 0, sizeof(cb));
			mh.msg_control = cb.b;
			mh.msg_controllen = sizeof(cb.b);
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_len = CMSG_LEN(sizeof(int));
			int v = 0;
			if (st->ntok > 2 && !strcmp(st->tok[2], "ip")) {
				c->cmsg_level = IPPROTO_IP;
				c->cmsg_type = IP_TTL;
				v = 64;
			} else {
				c->cmsg_level = SOL_SOCKET;
				c->cmsg_type = SCM_RIGHTS;
			}
			memcpy(CMSG_DATA(c), &v, sizeof(v));
		}
		return sendmsg(D.fd, &mh, flags);
	}
	if (!strcmp(op, "sendfile")) {
		/* The file holds the pattern from this stream offset on. */
		int mfd = memfd_create("diff", 0);
		size_t l = 0;
		while (l < len) {
			ssize_t w = write(mfd, p + l, len - l);
			if (w <= 0)
				break;
			l += w;
		}
		ssize_t r;
		if (st->ntok > 2 && !strcmp(st->tok[2], "null")) {
			lseek(mfd, 0, SEEK_SET);
			r = sendfile(D.fd, mfd, NULL, len);
			/* The file offset must have moved by what was sent, no more. */
			off_t pos = lseek(mfd, 0, SEEK_CUR);
			snprintf(send_note, sizeof(send_note), " pos%s", pos == (r > 0 ? r : 0) ? "=sent" : "!=sent");
		} else {
			off_t off = 0;
			r = sendfile(D.fd, mfd, &off, len);
		}
		int e = errno;
		close(mfd);
		errno = e;
		return r;
	}
	if (!strcmp(op, "splicein")) {
		int pp[2];
		if (pipe(pp))
			return -1;
		ssize_t w = write(pp[1], p, len > CHUNK ? CHUNK : len), r = -1;
		if (w > 0)
			r = splice(pp[0], NULL, D.fd, NULL, w, flags & MSG_DONTWAIT ? SPLICE_F_NONBLOCK : 0);
		int e = errno;
		close(pp[0]);
		close(pp[1]);
		errno = e;
		return r;
	}
	return send(D.fd, p, len, flags);
}

/* send N [flags]: a blocking send goes on until all N bytes went or an error
 * (the count before an error depends on timing and is not recorded); a
 * nonblocking one is one call, recorded exactly when it sent everything. */
static void do_send(int i, struct step *st)
{
	const char *op = st->tok[0];
	size_t n = st->ntok > 1 ? (size_t)num(st->tok[1]) : 1;
	int flags = parse_flags(st, 2);
	if (!strcmp(op, "oob")) {
		flags = MSG_OOB;
		n = 1;
	}
	if (n > MAX_XFER)
		n = MAX_XFER;
	int once = (flags & MSG_DONTWAIT) || nonblocking();
	size_t done = 0;
	ssize_t r = 0;
	int e = 0;
	double t0 = now_ms();
	do {
		size_t len = n - done;
		if (!strcmp(op, "splicein") && len > CHUNK)
			len = CHUNK;
		r = send_once(op, st, len, flags);
		e = errno;
		if (r > 0) {
			done += r;
			D.tx += r;
		}
	} while (!once && r > 0 && done < n);
	char out[128];
	if (done == n && n > 0)
		snprintf(out, sizeof(out), "%zu", n);
	else if (r == 0 && n == 0)
		snprintf(out, sizeof(out), "0");
	else if (done > 0)
		snprintf(out, sizeof(out), "partial%s%s", r < 0 ? " then " : "", r < 0 ? ename(e) : "");
	else
		snprintf(out, sizeof(out), "-1 %s", ename(e));
	timing(out, sizeof(out), t0, D.sndtimeo_ms, r < 0 && (e == EAGAIN) && !once);
	rec(i, "%s%s", out, send_note);
	send_note[0] = 0;
}

/* Whether buf holds a byte other than c. */
static int memchr_not(const unsigned char *buf, unsigned char c, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (buf[k] != c)
			return 1;
	return 0;
}

/* recv N [flags], read N, readv N K, recvmsg N [flags]: one call, exact. */
static void do_recv(int i, struct step *st)
{
	const char *op = st->tok[0];
	size_t n = st->ntok > 1 ? (size_t)num(st->tok[1]) : 1;
	int flags = parse_flags(st, 2);
	if (n > MAX_XFER)
		n = MAX_XFER;
	ssize_t r;
	int mflags = -1;
	double t0 = now_ms();
	/* TCP's MSG_TRUNC discards what it reads and writes nothing into the
	 * buffer: a program may pass one it still uses (or none at all). */
	if (flags & MSG_TRUNC)
		memset(D.rxbuf, 0xa5, n);
	if (!strcmp(op, "read")) {
		r = read(D.fd, D.rxbuf, n);
	} else if (!strcmp(op, "readv")) {
		int k = st->ntok > 2 ? (int)num(st->tok[2]) : 2;
		if (k < 1 || k > 64)
			k = 2;
		struct iovec iov[64];
		for (int j = 0; j < k; j++) {
			iov[j].iov_base = D.rxbuf + j * (n / k);
			iov[j].iov_len = j == k - 1 ? n - j * (n / k) : n / k;
		}
		r = readv(D.fd, iov, k);
	} else if (!strcmp(op, "recvmsg")) {
		struct iovec iov = {D.rxbuf, n};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		r = recvmsg(D.fd, &mh, flags);
		mflags = mh.msg_flags;
	} else {
		r = recv(D.fd, D.rxbuf, n, flags);
	}
	int e = errno;
	char out[256];
	if (flags & MSG_OOB)
		if (r == 1)
			snprintf(out, sizeof(out), "1 byte=%u", D.rxbuf[0]);
		else
			snprintf(out, sizeof(out), "%zd %s", r, r < 0 ? ename(e) : "-");
	else if ((flags & MSG_TRUNC) && r >= 0)
		snprintf(out, sizeof(out), "%zd buffer %s", r,
			 memchr_not(D.rxbuf, 0xa5, n) ? "written" : "untouched");
	else
		describe_rx(out, sizeof(out), r, D.rxbuf, D.rx, e);
	if (mflags >= 0) {
		size_t l = strlen(out);
		snprintf(out + l, sizeof(out) - l, " flags=%#x", mflags);
	}
	if (r > 0 && !(flags & (MSG_PEEK | MSG_OOB)))
		D.rx += r;
	timing(out, sizeof(out), t0, D.rcvtimeo_ms,
	       r < 0 && e == EAGAIN && !(flags & MSG_DONTWAIT) && !nonblocking());
	rec(i, "%s", out);
}

/* drain [N] and spliceout N: read until N bytes (or EOF, or an error); the
 * split into calls is not recorded, only the total, the hash and the end. */
static void do_drain(int i, struct step *st)
{
	int all = st->ntok < 2;
	size_t n = all ? (size_t)64 << 20 : (size_t)num(st->tok[1]);
	int sp = !strcmp(st->tok[0], "spliceout");
	int pp[2] = {-1, -1};
	if (sp && pipe(pp))
		return rec(i, "pipe failed");
	size_t total = 0, bad = 0;
	uint32_t h = 2166136261u;
	const char *end = "full";
	char ebuf[32];
	double t0 = now_ms();
	while (total < n) {
		size_t want = n - total > CHUNK ? CHUNK : n - total;
		ssize_t r;
		if (sp) {
			r = splice(D.fd, NULL, pp[1], NULL, want, 0);
			if (r > 0 && read(pp[0], D.rxbuf, r) != r)
				r = -1;
		} else {
			r = recv(D.fd, D.rxbuf, want, 0);
		}
		if (r < 0 && errno == EAGAIN && nonblocking() && !D.rcvtimeo_ms) {
			struct pollfd p = {.fd = D.fd, .events = POLLIN};
			if (poll(&p, 1, 5000) > 0)
				continue;
			errno = EAGAIN;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			snprintf(ebuf, sizeof(ebuf), "%s", r == 0 ? "eof" : ename(errno));
			end = ebuf;
			break;
		}
		for (ssize_t k = 0; k < r; k++)
			bad += D.rxbuf[k] != pat(D.rx_salt, D.rx + k);
		h = fnv(h, D.rxbuf, r);
		total += r;
		D.rx += r;
	}
	if (sp) {
		close(pp[0]);
		close(pp[1]);
	}
	char out[160];
	snprintf(out, sizeof(out), "%zu bad=%zu h=%08x end=%s", total, bad, h, end);
	timing(out, sizeof(out), t0, 0, 0);
	rec(i, "%s", out);
}

static void do_setopt(int i, struct step *st)
{
	const char *op = st->tok[0];
	long v = st->ntok > 1 ? num(st->tok[1]) : 1;
	int r, iv = (int)v;
	if (!strcmp(op, "nonblock")) {
		int fl = fcntl(D.fd, F_GETFL);
		r = fcntl(D.fd, F_SETFL, v ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
	} else if (!strcmp(op, "nodelay")) {
		r = setsockopt(D.fd, IPPROTO_TCP, TCP_NODELAY, &iv, sizeof(iv));
	} else if (!strcmp(op, "cork")) {
		r = setsockopt(D.fd, IPPROTO_TCP, TCP_CORK, &iv, sizeof(iv));
	} else if (!strcmp(op, "rcvlowat")) {
		r = setsockopt(D.fd, SOL_SOCKET, SO_RCVLOWAT, &iv, sizeof(iv));
	} else if (!strcmp(op, "oobinline")) {
		r = setsockopt(D.fd, SOL_SOCKET, SO_OOBINLINE, &iv, sizeof(iv));
	} else if (!strcmp(op, "rcvtimeo") || !strcmp(op, "sndtimeo")) {
		struct timeval tv = {.tv_sec = v / 1000, .tv_usec = (v % 1000) * 1000};
		int rcv = op[0] == 'r';
		r = setsockopt(D.fd, SOL_SOCKET, rcv ? SO_RCVTIMEO : SO_SNDTIMEO, &tv, sizeof(tv));
		if (!r)
			*(rcv ? &D.rcvtimeo_ms : &D.sndtimeo_ms) = (int)(v > 1000000 ? 1000000 : v);
	} else { /* linger0 */
		struct linger lg = {.l_onoff = 1, .l_linger = 0};
		r = setsockopt(D.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	rec(i, "%d %s", r, r ? ename(errno) : "-");
}

static void do_query(int i, struct step *st)
{
	const char *op = st->tok[0];
	int v = -1, r;
	if (!strcmp(op, "fionread")) {
		r = ioctl(D.fd, FIONREAD, &v);
	} else if (!strcmp(op, "outq")) {
		r = ioctl(D.fd, SIOCOUTQ, &v);
		v = v > 0; /* how much is unacknowledged depends on timing */
	} else if (!strcmp(op, "atmark")) {
		r = ioctl(D.fd, SIOCATMARK, &v);
	} else if (!strcmp(op, "getrcvtimeo")) {
		struct timeval tv;
		socklen_t l = sizeof(tv);
		r = getsockopt(D.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &l);
		v = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
	} else {
		socklen_t l = sizeof(v);
		r = getsockopt(D.fd, SOL_SOCKET, SO_ERROR, &v, &l);
		if (!r)
			return rec(i, "0 %s", v ? ename(v) : "0");
	}
	if (r)
		rec(i, "-1 %s", ename(errno));
	else
		rec(i, "0 %d", v);
}

int do_sync(char *out, size_t cap)
{
	char b = 'S';
	if (write(D.sync_fd, &b, 1) != 1 || read(D.sync_fd, &b, 1) != 1)
		return snprintf(out, cap, "lost"), -1;
	/* A snapshot between two barriers: both ends have arrived and neither has
	 * left, so nothing moves while it is taken. */
	if (D.fd < 0) {
		snprintf(out, cap, "ok");
	} else {
		struct pollfd p = {.fd = D.fd, .events = POLLIN | POLLOUT | POLLRDHUP | POLLPRI};
		int r = poll(&p, 1, 0), nr = -1;
		char ev[64];
		revents_str(ev, sizeof(ev), r > 0 ? p.revents : 0);
		if (ioctl(D.fd, FIONREAD, &nr))
			nr = -1;
		snprintf(out, cap, "ok poll=%d %s nread=%d", r, ev, nr);
	}
	if (write(D.sync_fd, &b, 1) != 1 || read(D.sync_fd, &b, 1) != 1)
		return snprintf(out, cap, "lost"), -1;
	return 0;
}

int run_step(int i)
{
	struct step *st = &D.steps[i];
	const char *op = st->tok[0];
	char out[256];
	if (wait_step(i, st))
		return i + 1;
	if (!strcmp(op, "send") || !strcmp(op, "write") || !strcmp(op, "writev") || !strcmp(op, "sendmsg") ||
	    !strcmp(op, "sendfile") || !strcmp(op, "splicein") || !strcmp(op, "sendmsgc") || !strcmp(op, "oob")) {
		do_send(i, st);
	} else if (!strcmp(op, "recv") || !strcmp(op, "read") || !strcmp(op, "readv") || !strcmp(op, "recvmsg")) {
		do_recv(i, st);
	} else if (!strcmp(op, "drain") || !strcmp(op, "spliceout")) {
		do_drain(i, st);
	} else if (!strcmp(op, "threads2")) {
		do_threads2(i, st);
	} else if (!strcmp(op, "errqueue")) {
		char b[64];
		struct iovec iov = {b, sizeof(b)};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
		ssize_t r = recvmsg(D.fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT);
		rec(i, "%zd %s", r, r < 0 ? ename(errno) : "-");
	} else if (!strcmp(op, "nonblock") || !strcmp(op, "nodelay") || !strcmp(op, "cork") ||
		   !strcmp(op, "rcvlowat") || !strcmp(op, "rcvtimeo") || !strcmp(op, "sndtimeo") ||
		   !strcmp(op, "linger0") || !strcmp(op, "oobinline")) {
		do_setopt(i, st);
	} else if (!strcmp(op, "fionread") || !strcmp(op, "outq") || !strcmp(op, "soerror") ||
		   !strcmp(op, "atmark") || !strcmp(op, "getrcvtimeo")) {
		do_query(i, st);
	} else if (!strcmp(op, "shutdown")) {
		const char *h = st->ntok > 1 ? st->tok[1] : "wr";
		int how = !strcmp(h, "rd") ? SHUT_RD : !strcmp(h, "rdwr") ? SHUT_RDWR : SHUT_WR;
		int r = shutdown(D.fd, how);
		rec(i, "%d %s", r, r ? ename(errno) : "-");
	} else if (!strcmp(op, "close")) {
		int r = close(D.fd);
		rec(i, "%d %s", r, r ? ename(errno) : "-");
		D.fd = -1;
	} else if (!strcmp(op, "dupclose")) {
		int nfd = dup(D.fd);
		int r = close(D.fd);
		D.fd = nfd;
		rec(i, "%d", r);
	} else if (!strcmp(op, "sleep")) {
		usleep(st->ntok > 1 ? num(st->tok[1]) * 1000 : 10000);
		rec(i, "ok");
	} else if (!strcmp(op, "awaitup")) {
		await_upgrade();
		rec(i, "ok");
	} else if (!strcmp(op, "sync")) {
		do_sync(out, sizeof(out));
		rec(i, "%s", out);
	} else if (!strcmp(op, "barrier")) {
		/* The barrier alone: a snapshot here would show how much the
		 * buffers hold, which depends on their sizes. */
		char b = 'S';

		rec(i, (write(D.sync_fd, &b, 1) != 1 || read(D.sync_fd, &b, 1) != 1) ? "lost" : "ok");
	} else if (!strcmp(op, "die")) {
		fflush(stdout);
		raise(SIGKILL);
	} else if (!strcmp(op, "sigpipe")) {
		signal(SIGPIPE, SIG_DFL);
		rec(i, "ok");
	} else if (!strcmp(op, "alarm")) {
		do_alarm(st);
		rec(i, "ok");
	} else if (!strcmp(op, "fork") || !strcmp(op, "forkpass")) {
		return do_fork(i, !strcmp(op, "forkpass"));
	} else if (!strcmp(op, "exit")) {
		rec(i, "ok");
	} else if (!strcmp(op, "exec")) {
		char a[6][32];
		rec(i, "ok");
		snprintf(a[0], 32, "%d", D.sync_fd);
		snprintf(a[1], 32, "%d", D.fd);
		snprintf(a[2], 32, "%d", i + 1);
		snprintf(a[3], 32, "%llu", (unsigned long long)D.tx);
		snprintf(a[4], 32, "%llu", (unsigned long long)D.rx);
		execl(D.self, D.self, "resume", D.is_server ? "server" : "client", "0", a[0], D.script, a[1], a[2],
		      a[3], a[4], (char *)NULL);
		rec(i, "exec failed %s", ename(errno));
	} else {
		rec(i, "unknown step");
	}
	return i + 1;
}
