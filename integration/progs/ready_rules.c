/*
 * ready_rules: many connections at once, free-running request/response
 * traffic, and the readiness rules a server relies on checked at every
 * wait. The seed of the concurrent harness: the scenarios of epoll_dup
 * and the differential harness step both ends in lock-step, which never
 * lets a report race with bytes arriving on other connections; real
 * servers (nginx workers, apache event, forking servers) live in exactly
 * that race.
 *
 *   ready_rules --mode MODE --port P [--conns N] [--seconds S] [--msgs M]
 *               [--min-msgs K] [--depth D] [--seed X] [--max-size B]
 *
 * The process listens on 127.0.0.1:P, forks the server side in the shape
 * MODE names and a client that connects N connections (32) and runs an
 * epoll loop over them (level-triggered; edge-triggered in mode et). The
 * server shapes:
 *   level      two worker processes share the listener, one epoll set each
 *   et         one process, EPOLLET, every read and write until EAGAIN
 *   oneshot    one epoll set shared by two threads, EPOLLONESHOT, re-armed
 *              with EPOLL_CTL_MOD after each handling
 *   modtoggle  EPOLL_CTL_MOD from EPOLLIN to EPOLLOUT and back per request
 *              (read one request exactly, write its reply, read the next)
 *   forkconn   a child process per accepted connection, its own epoll set
 *   poll       poll() with every connection listed twice, and select(),
 *              turn about
 *
 * Traffic: each client connection keeps up to D (4) requests in flight,
 * without waiting for the replies (no lock-step), for S seconds (3) or M
 * requests, but at least K (50) each: on a machine so loaded that the
 * processes barely start within S, every connection still lives long
 * enough for the shim to upgrade it. A request asks for a reply of a
 * random size; both sizes are 1 B to B (256 KiB), log-uniform, from the
 * seed. Every message is a 32-byte header (kind, length, the
 * connection's id, a per-direction sequence number, the payload's
 * checksum) and a payload that is a pure function of (seed, connection,
 * direction, sequence), so the receiver checks every byte, not only the
 * sum. A side that is done sends END with the number of bytes it sent
 * before it, then shuts its writing down.
 *
 * Rules, counted as violations:
 *   R1 one registration appears at most once in one epoll_wait result
 *      (its data is unique); with EPOLLONESHOT, never to a second thread
 *      while the first handles it; of poll's two entries for one fd,
 *      the second reports at least what the first does (the kernel looks
 *      at them in turn, so what arrived in between may show in the second
 *      alone: counted as poll_splits, not a violation)
 *   R2 EPOLLIN / POLLIN / a readable fd_set bit: the next read returns >0,
 *      or 0 at end of stream, never EAGAIN (every reader here is the only
 *      one of its connection at that moment)
 *   R3 EPOLLOUT / POLLOUT / a writable bit: the next write (at least one
 *      byte) does not fail with EAGAIN
 *   R4 end of stream only after every byte the peer sent: END came, it
 *      announced what arrived, and the peer's own count (shared memory)
 *      agrees
 *   R5 every byte exactly once and in order: header fields, sequence,
 *      payload bytes and checksum
 *   R6 no wait returns later than its timeout (1 s) plus 1 s, and no
 *      connection that the wait watches for reading keeps bytes its peer
 *      has written (shared counters) unread for longer than that without
 *      being reported
 * Each violation prints a line "VIOLATION Rn side=... mode=... pid=...
 * conn=...: details" (the first 60 of them); an unexpected failure of a
 * call prints "ERROR ...". The last line is
 *   OK conns=N msgs=M bytes=B violations=0 longest_wait_ms=W ...
 * or "FAIL ..." with the count per rule and of errors; exit 0 or 1.
 * longest_pending_ms is the longest a connection's unread bytes waited for
 * a report (R6's measure).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXC 512
#define HDR 32
#define CHUNK 65536
#define MAXEV 64
#define QN 64
#define WAIT_MS 1000
/* How much later than its timeout a wait may return, and how long bytes
 * may sit unreported: generous, so that a loaded machine (other processes
 * on both cores) never trips it, while a lost wake-up always does. */
#define SLACK_MS 1000
#define MAX_DETAILS 60

enum { M_LEVEL, M_ET, M_ONESHOT, M_MODTOGGLE, M_FORKCONN, M_POLL };
static const char *mode_names[] = { "level", "et", "oneshot", "modtoggle", "forkconn", "poll" };

enum { MAGIC_REQ = 0x51524452, MAGIC_RSP = 0x50535252, MAGIC_END = 0x444e4552 };
enum { CLIENT, SERVER };
/* Direction of a message: 0 client to server, 1 server to client. */

struct hdr {
	uint32_t magic, len;
	uint64_t seq;
	uint32_t conn, arg; /* arg: a request's reply length */
	uint64_t sum;       /* checksum; in END, the bytes sent before it */
};
_Static_assert(sizeof(struct hdr) == HDR, "header size");

/* Everything the processes count together, in memory shared across fork. */
struct shared {
	_Atomic uint64_t viol[7], errors, msgs, bytes, waits, longest_wait_us, longest_pending_us;
	_Atomic uint64_t finished[2], clean[2], lines, poll_splits;
	_Atomic uint64_t sent[MAXC][2]; /* bytes written, per connection and direction */
	_Atomic int claimed[MAXC];
};

static struct shared *S;
static int mode, nconns = 32, depth = 4, port;
static uint32_t max_size = 256 * 1024;
static uint64_t seed = 1, msgs_per_conn, min_msgs = 50;
static double seconds = 3;
static uint64_t t_start_us, t_stop_us, t_giveup_us;

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void atomic_max(_Atomic uint64_t *p, uint64_t v)
{
	uint64_t cur = atomic_load(p);

	while (v > cur && !atomic_compare_exchange_weak(p, &cur, v))
		;
}

/* One line to stdout in one write(2): the processes share it and none
 * uses stdio before the summary, so lines never interleave. */
static void say(const char *fmt, ...)
{
	char b[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(b, sizeof(b) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(b) - 2)
		n = (int)sizeof(b) - 2;
	b[n++] = '\n';
	if (write(1, b, (size_t)n) < 0)
		return;
}

/* ---- payloads and checksums ---------------------------------------- */

static inline uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t msg_key(uint32_t id, int dir, uint64_t seq)
{
	return mix64(seed ^ mix64(((uint64_t)id << 40) ^ ((uint64_t)dir << 39) ^ seq));
}

/* Bytes [off, off + n) of the payload that key names. */
static void gen_bytes(uint64_t key, uint64_t off, unsigned char *dst, size_t n)
{
	while (n) {
		uint64_t w = mix64(key + (off / 8) * 0x632be59bd9b4e019ull);
		unsigned b = (unsigned)(off % 8);
		size_t take = 8 - b < n ? 8 - b : n;

		if (take == 8)
			memcpy(dst, &w, 8);
		else
			for (size_t i = 0; i < take; i++)
				dst[i] = (unsigned char)(w >> (8 * (b + i)));
		dst += take;
		off += take;
		n -= take;
	}
}

struct csum {
	uint64_t h, cur;
	unsigned nb;
};

static void cs_init(struct csum *s)
{
	*s = (struct csum){ .h = 0xcbf29ce484222325ull };
}

static inline void cs_word(struct csum *s, uint64_t w)
{
	s->h = (s->h ^ w) * 0x100000001b3ull;
	s->h ^= s->h >> 29;
}

static void cs_add(struct csum *s, const unsigned char *p, size_t n)
{
	while (n && s->nb) {
		s->cur |= (uint64_t)*p++ << (8 * s->nb);
		n--;
		if (++s->nb == 8) {
			cs_word(s, s->cur);
			s->cur = 0;
			s->nb = 0;
		}
	}
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		cs_word(s, w);
	}
	while (n--)
		s->cur |= (uint64_t)*p++ << (8 * s->nb++);
}

static uint64_t cs_end(struct csum *s, uint64_t len)
{
	if (s->nb)
		cs_word(s, s->cur);
	cs_word(s, len);
	return s->h;
}

static __thread unsigned char rbuf[CHUNK], vbuf[CHUNK];

static uint64_t payload_sum(uint64_t key, uint32_t len)
{
	struct csum s;

	cs_init(&s);
	for (uint32_t off = 0; off < len;) {
		uint32_t k = len - off < CHUNK ? len - off : CHUNK;

		gen_bytes(key, off, vbuf, k);
		cs_add(&s, vbuf, k);
		off += k;
	}
	return cs_end(&s, len);
}

/* ---- connections ----------------------------------------------------- */

struct txmsg {
	uint32_t magic, len, arg;
	uint64_t seq, sum, key;
};

struct conn {
	int fd, side, idx;
	int id; /* the client's number for it; a server learns it from the first header */
	uint64_t rng;
	/* sending: messages queued, bytes staged from them, bytes written */
	struct txmsg q[QN];
	unsigned qh, qn;
	uint32_t qoff;
	unsigned char *buf;
	size_t bstart, bend;
	uint64_t queued_total, seq_out;
	bool end_queued, wr_shut;
	/* receiving */
	unsigned char hb[HDR];
	size_t hn;
	struct hdr h;
	uint64_t poff, key, expect_seq, consumed;
	struct csum cs;
	bool end_seen, broken;
	_Atomic uint64_t rcvd;
	_Atomic bool eof, closed;
	/* client: requests in flight, requests sent, stopped asking */
	unsigned outstanding;
	uint64_t reqs;
	bool stopping;
	/* what the fd is registered for, and the EPOLLONESHOT hand-off */
	_Atomic uint32_t interest;
	_Atomic int busy, armed;
	_Atomic uint64_t armgen;
};

/* A loop's connections; in mode oneshot two threads share one table. */
struct table {
	pthread_mutex_t mu;
	struct conn *c[MAXC];
	_Atomic int n;
};

struct loop {
	int side, ep, lfd;
	bool et, oneshot, toggle;
	struct table *t;
	const char *who;
	/* the stall detector's view, per thread: since when a connection had
	 * bytes waiting that no report has brought */
	struct { uint64_t since, cpu_wait, rcvd, gen; bool flagged; } st[MAXC];
	uint64_t iter, wait_t0, wait_cpu0;
	int sched_fd; /* this thread's /proc schedstat, opened by the thread */
};

static void violation(int rule, struct loop *L, struct conn *c, const char *fmt, ...)
{
	char d[400];
	va_list ap;

	atomic_fetch_add(&S->viol[rule], 1);
	if (atomic_fetch_add(&S->lines, 1) >= MAX_DETAILS)
		return;
	va_start(ap, fmt);
	vsnprintf(d, sizeof(d), fmt, ap);
	va_end(ap);
	say("VIOLATION R%d side=%s mode=%s pid=%d who=%s conn=%d fd=%d: %s", rule, L->side == CLIENT ? "client" : "server",
	    mode_names[mode], (int)getpid(), L->who, c ? c->id : -1, c ? c->fd : -1, d);
}

static void error_line(struct loop *L, struct conn *c, const char *fmt, ...)
{
	char d[400];
	va_list ap;

	atomic_fetch_add(&S->errors, 1);
	if (atomic_fetch_add(&S->lines, 1) >= MAX_DETAILS)
		return;
	va_start(ap, fmt);
	vsnprintf(d, sizeof(d), fmt, ap);
	va_end(ap);
	say("ERROR side=%s mode=%s pid=%d who=%s conn=%d: %s", L && L->side == CLIENT ? "client" : "server",
	    mode_names[mode], (int)getpid(), L ? L->who : "main", c ? c->id : -1, d);
}

static uint64_t peer_sent(struct conn *c)
{
	if (c->id < 0)
		return 0;
	return atomic_load(&S->sent[c->id][c->side == CLIENT ? 1 : 0]);
}

static uint32_t rand_size(struct conn *c)
{
	unsigned bits = 0;

	while ((1u << bits) < max_size)
		bits++;
	c->rng = mix64(c->rng);
	uint32_t k = (uint32_t)(c->rng % (bits + 1));
	c->rng = mix64(c->rng);
	uint32_t v = 1 + (uint32_t)(c->rng % (1ull << k));
	return v > max_size ? max_size : v;
}

static bool tx_pending(struct conn *c)
{
	return c->qn || c->bstart < c->bend;
}

static void enqueue(struct loop *L, struct conn *c, uint32_t magic, uint32_t len, uint32_t arg, uint64_t seq)
{
	struct txmsg *m;

	if (c->qn == QN) {
		error_line(L, c, "send queue full");
		c->broken = true;
		return;
	}
	m = &c->q[(c->qh + c->qn++) % QN];
	*m = (struct txmsg){ .magic = magic, .len = len, .arg = arg, .seq = seq };
	m->key = msg_key((uint32_t)c->id, c->side == CLIENT ? 0 : 1, seq);
	/* END carries the bytes sent before it instead of a checksum. */
	m->sum = magic == MAGIC_END ? c->queued_total : payload_sum(m->key, len);
	c->queued_total += HDR + len;
	c->seq_out = seq + 1; /* a reply takes its request's number */
	if (magic == MAGIC_END)
		c->end_queued = true;
}

static void client_ask(struct loop *L, struct conn *c)
{
	if (!c->stopping && ((now_us() >= t_stop_us && c->reqs >= min_msgs) || (msgs_per_conn && c->reqs >= msgs_per_conn)))
		c->stopping = true;
	while (!c->stopping && c->outstanding < (unsigned)depth) {
		uint32_t len = rand_size(c), reply = rand_size(c);

		enqueue(L, c, MAGIC_REQ, len, reply, c->seq_out);
		c->outstanding++;
		c->reqs++;
	}
	if (c->stopping && !c->end_queued)
		enqueue(L, c, MAGIC_END, 0, 0, c->seq_out);
}

/* Stage the next bytes of the queued messages (only once the last staged
 * ones are all written). */
static void tx_fill(struct conn *c)
{
	if (c->bstart < c->bend)
		return;
	c->bstart = c->bend = 0;
	while (c->qn && c->bend < CHUNK) {
		struct txmsg *m = &c->q[c->qh];
		size_t room = CHUNK - c->bend, k;

		if (c->qoff < HDR) {
			struct hdr h = { .magic = m->magic, .len = m->len, .seq = m->seq,
					 .conn = (uint32_t)c->id, .arg = m->arg, .sum = m->sum };

			k = HDR - c->qoff < room ? HDR - c->qoff : room;
			memcpy(c->buf + c->bend, (unsigned char *)&h + c->qoff, k);
		} else {
			uint32_t poff = c->qoff - HDR;

			k = m->len - poff < room ? m->len - poff : room;
			gen_bytes(m->key, poff, c->buf + c->bend, k);
		}
		c->bend += k;
		c->qoff += (uint32_t)k;
		if (c->qoff == HDR + m->len) {
			c->qh = (c->qh + 1) % QN;
			c->qn--;
			c->qoff = 0;
		}
	}
}

/* Writes staged bytes: at most max_calls writes (0: until EAGAIN or all
 * gone). checked: an EPOLLOUT-like report came for this fd, so the first
 * write must not meet EAGAIN (R3). */
static void conn_write(struct loop *L, struct conn *c, bool checked, unsigned max_calls, uint32_t revents)
{
	bool first = true;

	for (unsigned calls = 0; !c->broken && (!max_calls || calls < max_calls);) {
		ssize_t n;

		tx_fill(c);
		if (c->bstart == c->bend)
			break;
		n = send(c->fd, c->buf + c->bstart, c->bend - c->bstart, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		calls++;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (first && checked)
				violation(3, L, c, "write of %zu bytes: EAGAIN right after a report of %#x (written %llu)",
					  c->bend - c->bstart, revents,
					  (unsigned long long)atomic_load(&S->sent[c->id][c->side]));
			break;
		}
		if (n <= 0) {
			error_line(L, c, "send: %s", n < 0 ? strerror(errno) : "0");
			c->broken = true;
			break;
		}
		first = false;
		c->bstart += (size_t)n;
		atomic_fetch_add(&S->sent[c->id][c->side], (uint64_t)n);
	}
	if (!c->broken && c->end_queued && !tx_pending(c) && !c->wr_shut) {
		if (shutdown(c->fd, SHUT_WR) < 0) {
			error_line(L, c, "shutdown: %s", strerror(errno));
			c->broken = true;
		}
		c->wr_shut = true;
	}
}

/* A complete header came: is it the one due? */
static void rx_header(struct loop *L, struct conn *c)
{
	struct hdr *h = &c->h;
	uint32_t want = c->side == SERVER ? MAGIC_REQ : MAGIC_RSP;
	uint64_t before = c->consumed - HDR;

	memcpy(h, c->hb, HDR);
	if (c->end_seen) {
		violation(5, L, c, "bytes after END (a header of kind %#x at byte %llu)", h->magic,
			  (unsigned long long)before);
		c->broken = true;
		return;
	}
	if (c->side == SERVER && c->id < 0 && h->conn < (uint32_t)nconns) {
		int z = 0;

		if (!atomic_compare_exchange_strong(&S->claimed[h->conn], &z, 1)) {
			violation(5, L, c, "a second connection says it is connection %u", h->conn);
			c->broken = true;
			return;
		}
		c->id = (int)h->conn;
	}
	if ((h->magic != want && h->magic != MAGIC_END) || h->conn != (uint32_t)c->id || h->len > max_size ||
	    (h->magic == MAGIC_END && h->len) || (h->magic == MAGIC_REQ && (h->arg < 1 || h->arg > max_size)) ||
	    h->seq != c->expect_seq) {
		violation(5, L, c,
			  "bad header at byte %llu: kind %#x len %u conn %u seq %llu (want seq %llu) arg %u",
			  (unsigned long long)before, h->magic, h->len, h->conn, (unsigned long long)h->seq,
			  (unsigned long long)c->expect_seq, h->arg);
		c->broken = true;
		return;
	}
	if (h->magic == MAGIC_END) {
		c->end_seen = true;
		c->expect_seq++;
		if (h->sum != before)
			violation(4, L, c, "END announces %llu bytes sent before it, %llu arrived",
				  (unsigned long long)h->sum, (unsigned long long)before);
		if (c->side == SERVER)
			enqueue(L, c, MAGIC_END, 0, 0, c->seq_out);
		else if (c->outstanding)
			violation(5, L, c, "END from the server with %u requests unanswered", c->outstanding);
		return;
	}
	c->key = msg_key((uint32_t)c->id, c->side == SERVER ? 0 : 1, h->seq);
	c->poff = 0;
	cs_init(&c->cs);
}

/* A complete payload came. */
static void rx_done(struct loop *L, struct conn *c)
{
	uint64_t sum = cs_end(&c->cs, c->h.len);

	if (sum != c->h.sum) {
		violation(5, L, c, "checksum of message %llu (%u bytes) is %#llx, header says %#llx",
			  (unsigned long long)c->h.seq, c->h.len, (unsigned long long)sum, (unsigned long long)c->h.sum);
		c->broken = true;
		return;
	}
	atomic_fetch_add(&S->msgs, 1);
	atomic_fetch_add(&S->bytes, HDR + c->h.len);
	c->expect_seq++;
	if (c->side == SERVER) {
		enqueue(L, c, MAGIC_RSP, c->h.arg, 0, c->h.seq);
	} else {
		c->outstanding--;
		client_ask(L, c);
	}
}

/* Feeds received bytes through the checks. Returns true when a request
 * completed (mode modtoggle then stops reading). */
static bool rx_feed(struct loop *L, struct conn *c, const unsigned char *p, size_t n)
{
	bool completed = false;

	while (n && !c->broken) {
		if (c->hn < HDR) {
			size_t k = HDR - c->hn < n ? HDR - c->hn : n;

			memcpy(c->hb + c->hn, p, k);
			c->hn += k;
			c->consumed += k;
			p += k;
			n -= k;
			if (c->hn < HDR)
				break;
			rx_header(L, c);
			if (c->broken)
				break;
			if (c->h.magic == MAGIC_END) {
				c->hn = 0;
				completed = true;
				continue;
			}
			if (c->h.len)
				continue;
		} else {
			size_t k = c->h.len - c->poff < n ? c->h.len - c->poff : n;

			gen_bytes(c->key, c->poff, vbuf, k);
			if (memcmp(vbuf, p, k)) {
				size_t i = 0;

				while (vbuf[i] == p[i])
					i++;
				violation(5, L, c, "message %llu byte %llu of %u is %#x, want %#x",
					  (unsigned long long)c->h.seq, (unsigned long long)(c->poff + i), c->h.len,
					  p[i], vbuf[i]);
				c->broken = true;
				break;
			}
			cs_add(&c->cs, p, k);
			c->poff += k;
			c->consumed += k;
			p += k;
			n -= k;
			if (c->poff < c->h.len)
				continue;
		}
		rx_done(L, c);
		c->hn = 0;
		completed = true;
	}
	return completed;
}

static void at_eof(struct loop *L, struct conn *c)
{
	uint64_t ps = peer_sent(c), got = atomic_load(&c->rcvd);

	atomic_store(&c->eof, true);
	if (!c->end_seen || c->hn) {
		violation(4, L, c, "end of stream before the peer's END: %llu bytes arrived, the peer wrote %llu",
			  (unsigned long long)got, (unsigned long long)ps);
		c->broken = true; /* nothing more can come: close it */
	} else if (ps != got)
		violation(4, L, c, "end of stream after %llu bytes, the peer wrote %llu", (unsigned long long)got,
			  (unsigned long long)ps);
}

/* Reads: at most max_calls (0: until EAGAIN). checked: an EPOLLIN-like
 * report came, so the first read must not meet EAGAIN (R2). */
static void conn_read(struct loop *L, struct conn *c, bool checked, unsigned max_calls, uint32_t revents)
{
	bool first = true;

	for (unsigned calls = 0; !c->broken && !atomic_load(&c->eof) && (!max_calls || calls < max_calls);) {
		size_t want = CHUNK;
		ssize_t n;

		/* modtoggle reads a request exactly, so the next stays in the
		 * socket for the next EPOLLIN. */
		if (L->toggle && !c->end_seen)
			want = c->hn < HDR ? HDR - c->hn : c->h.len - c->poff < CHUNK ? c->h.len - c->poff : CHUNK;
		n = recv(c->fd, rbuf, want, 0);
		if (n < 0 && errno == EINTR)
			continue;
		calls++;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (first && checked)
				violation(2, L, c,
					  "read: EAGAIN right after a report of %#x (%llu bytes read, the peer wrote %llu)",
					  revents, (unsigned long long)atomic_load(&c->rcvd),
					  (unsigned long long)peer_sent(c));
			break;
		}
		first = false;
		if (n < 0) {
			error_line(L, c, "recv: %s (events %#x)", strerror(errno), revents);
			c->broken = true;
			break;
		}
		if (n == 0) {
			at_eof(L, c);
			break;
		}
		atomic_fetch_add(&c->rcvd, (uint64_t)n);
		if (rx_feed(L, c, rbuf, (size_t)n) && L->toggle)
			break;
	}
}

static bool conn_finished(struct conn *c)
{
	return c->broken || (atomic_load(&c->eof) && c->wr_shut);
}

static void conn_close(struct loop *L, struct conn *c)
{
	(void)L;
	atomic_store(&c->closed, true);
	close(c->fd);
	atomic_fetch_add(&S->finished[c->side], 1);
	if (!c->broken)
		atomic_fetch_add(&S->clean[c->side], 1);
}

static struct conn *conn_new(struct loop *L, int fd, int id)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c || !(c->buf = malloc(CHUNK))) {
		error_line(L, NULL, "out of memory");
		exit(1);
	}
	c->fd = fd;
	c->side = L->side;
	c->id = id;
	c->rng = mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)id);
	pthread_mutex_lock(&L->t->mu);
	c->idx = atomic_load(&L->t->n);
	if (c->idx >= MAXC) {
		pthread_mutex_unlock(&L->t->mu);
		error_line(L, c, "too many connections");
		exit(1);
	}
	L->t->c[c->idx] = c;
	atomic_store(&L->t->n, c->idx + 1);
	pthread_mutex_unlock(&L->t->mu);
	return c;
}

/* The events the connection needs now. */
static uint32_t wanted(struct loop *L, struct conn *c)
{
	uint32_t ev = 0;
	bool txp = tx_pending(c);

	if (!atomic_load(&c->eof) && !(L->toggle && txp))
		ev |= EPOLLIN;
	if (txp)
		ev |= EPOLLOUT;
	return ev;
}

static void ep_set(struct loop *L, struct conn *c, int op)
{
	uint32_t want = wanted(L, c);
	struct epoll_event ev = { .data.u64 = (uint64_t)c->idx };

	if (L->et)
		want = EPOLLIN | EPOLLOUT | EPOLLET; /* once, for good */
	if (op == EPOLL_CTL_MOD && !L->oneshot && want == atomic_load(&c->interest))
		return;
	ev.events = want | (L->oneshot ? EPOLLONESHOT : 0);
	atomic_store(&c->interest, want);
	if (L->oneshot) {
		/* The hand-off: another thread may get it the moment it is armed. */
		atomic_fetch_add(&c->armgen, 1);
		atomic_store(&c->armed, 1);
		atomic_store(&c->busy, 0);
	}
	if (epoll_ctl(L->ep, op, c->fd, &ev) < 0) {
		error_line(L, c, "epoll_ctl %d: %s", op, strerror(errno));
		c->broken = true;
	}
}

/* ---- the stall detector (R6) ------------------------------------------- */

/* How long this thread has waited for a CPU while runnable (schedstat's
 * run delay), in microseconds; 0 when the kernel does not say. R6 takes it
 * off the time it judges: on a loaded machine a thread woken in time may
 * still wait for a core, which is the scheduler's doing, not a late report.
 * A thread that sleeps through a wake-up is not runnable, so that time
 * counts in full. */
static uint64_t cpu_wait_us(struct loop *L)
{
	unsigned long long ran, delay;
	char b[128];
	ssize_t n;

	if (L->sched_fd == -2)
		L->sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (L->sched_fd < 0)
		return 0;
	n = pread(L->sched_fd, b, sizeof(b) - 1, 0);
	if (n <= 0)
		return 0;
	b[n] = 0;
	if (sscanf(b, "%llu %llu", &ran, &delay) != 2)
		return 0;
	return delay / 1000;
}

/* Before a wait: a connection the wait watches for reading, whose peer
 * wrote bytes it has not read, must not stay so past the slack. */
static void stall_scan(struct loop *L)
{
	int n = atomic_load(&L->t->n);
	uint64_t now = now_us(), cpu = cpu_wait_us(L);

	for (int i = 0; i < n; i++) {
		struct conn *c = L->t->c[i];
		uint64_t got, gen, age;

		if (!c || atomic_load(&c->closed) || atomic_load(&c->eof) ||
		    !(atomic_load(&c->interest) & EPOLLIN) || (L->oneshot && !atomic_load(&c->armed))) {
			L->st[i].since = 0;
			continue;
		}
		got = atomic_load(&c->rcvd);
		gen = atomic_load(&c->armgen);
		if (c->id < 0 || peer_sent(c) <= got) {
			L->st[i].since = 0;
			continue;
		}
		if (!L->st[i].since || L->st[i].rcvd != got || L->st[i].gen != gen) {
			L->st[i] = (typeof(L->st[i])){ .since = now, .cpu_wait = cpu, .rcvd = got, .gen = gen };
			continue;
		}
		age = now - L->st[i].since - (cpu - L->st[i].cpu_wait);
		atomic_max(&S->longest_pending_us, age);
		if (age > (WAIT_MS + SLACK_MS) * 1000ull && !L->st[i].flagged) {
			L->st[i].flagged = true;
			violation(6, L, c,
				  "%llu bytes the peer wrote unread for %llu ms (%llu ms more waiting for a CPU), "
				  "watched for %#x, never reported",
				  (unsigned long long)(peer_sent(c) - got), (unsigned long long)age / 1000,
				  (unsigned long long)(cpu - L->st[i].cpu_wait) / 1000, atomic_load(&c->interest));
		}
	}
}

static void wait_begin(struct loop *L)
{
	L->wait_cpu0 = cpu_wait_us(L);
	L->wait_t0 = now_us();
}

static void wait_done(struct loop *L, int n)
{
	uint64_t took = now_us() - L->wait_t0, cpu = cpu_wait_us(L) - L->wait_cpu0;

	atomic_fetch_add(&S->waits, 1);
	atomic_max(&S->longest_wait_us, took);
	if (took - (cpu < took ? cpu : took) > (WAIT_MS + SLACK_MS) * 1000ull)
		violation(6, L, NULL, "a wait with a %d ms timeout returned %d after %llu ms (%llu ms of it waiting for a CPU)",
			  WAIT_MS, n, (unsigned long long)took / 1000, (unsigned long long)cpu / 1000);
}

/* ---- handling ------------------------------------------------------------ */

static void accept_some(struct loop *L, unsigned max)
{
	for (unsigned i = 0; !max || i < max; i++) {
		int fd = accept4(L->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct conn *c;

		if (fd < 0) {
			/* The listener is shared (level: two processes; oneshot:
			 * two threads): the other one may have taken it. */
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				error_line(L, NULL, "accept: %s", strerror(errno));
			return;
		}
		c = conn_new(L, fd, -1);
		if (L->ep >= 0) {
			if (L->oneshot)
				atomic_store(&c->busy, 1);
			ep_set(L, c, EPOLL_CTL_ADD);
		}
	}
}

/* One report for one connection; the order (write, then read, then the
 * writes a read made due) keeps each check on the call the report is
 * about. */
static void handle(struct loop *L, struct conn *c, uint32_t rev)
{
	bool lt = !L->et;

	if (rev & EPOLLERR) {
		int e = 0;
		socklen_t len = sizeof(e);

		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &len);
		error_line(L, c, "error reported: %s (events %#x)", strerror(e), rev);
		c->broken = true;
	}
	if ((rev & EPOLLOUT) && tx_pending(c))
		conn_write(L, c, true, lt ? 4 : 0, rev);
	if (rev & (EPOLLIN | EPOLLHUP))
		conn_read(L, c, (rev & EPOLLIN) != 0, lt ? 1 : 0, rev);
	if (c->side == CLIENT && !c->broken)
		client_ask(L, c);
	/* modtoggle writes only on EPOLLOUT; the others write at once. */
	if (!L->toggle && tx_pending(c))
		conn_write(L, c, false, lt ? 4 : 0, 0);
}

/* After a handling: re-register, or close when done. */
static void settle(struct loop *L, struct conn *c)
{
	if (conn_finished(c)) {
		conn_close(L, c);
		return;
	}
	if (L->ep >= 0)
		ep_set(L, c, EPOLL_CTL_MOD);
}

static bool side_done(struct loop *L)
{
	return atomic_load(&S->finished[L->side]) >= (uint64_t)nconns;
}

static bool give_up(struct loop *L)
{
	if (now_us() < t_giveup_us)
		return false;
	error_line(L, NULL, "gave up: %llu of %d connections finished on this side",
		   (unsigned long long)atomic_load(&S->finished[L->side]), nconns);
	return true;
}

/* Done here: every connection of this loop is finished. For a server the
 * connections are spread over processes (or threads), hence the shared
 * count; a loop with a listener stays until all are finished. */
static bool loop_over(struct loop *L)
{
	if (L->lfd >= 0)
		return side_done(L);
	int n = atomic_load(&L->t->n);

	for (int i = 0; i < n; i++)
		if (!atomic_load(&L->t->c[i]->closed))
			return false;
	return true;
}

static void epoll_loop(struct loop *L)
{
	struct epoll_event ev[MAXEV];

	while (!loop_over(L) && !give_up(L)) {
		int n;

		stall_scan(L);
		wait_begin(L);
		n = epoll_wait(L->ep, ev, MAXEV, WAIT_MS);
		wait_done(L, n);
		if (n < 0) {
			if (errno != EINTR)
				error_line(L, NULL, "epoll_wait: %s", strerror(errno));
			continue;
		}
		for (int i = 0; i < n; i++)
			for (int k = 0; k < i; k++)
				if (ev[k].data.u64 == ev[i].data.u64)
					violation(1, L, ev[i].data.u64 < MAXC ? L->t->c[ev[i].data.u64] : NULL,
						  "data %#llx twice in one result of %d (events %#x and %#x)",
						  (unsigned long long)ev[i].data.u64, n, ev[k].events, ev[i].events);
		for (int i = 0; i < n; i++) {
			uint64_t d = ev[i].data.u64;
			struct conn *c;

			if (d == UINT64_MAX) {
				accept_some(L, L->et ? 0 : 8);
				continue;
			}
			if (d >= (uint64_t)atomic_load(&L->t->n)) {
				error_line(L, NULL, "event with unknown data %#llx", (unsigned long long)d);
				continue;
			}
			c = L->t->c[d];
			if (atomic_load(&c->closed))
				continue; /* a duplicate of one handled above (R1 counted it) */
			if (L->oneshot) {
				atomic_store(&c->armed, 0);
				if (atomic_exchange(&c->busy, 1)) {
					violation(1, L, c, "EPOLLONESHOT registration reported while another thread handles it (events %#x)",
						  ev[i].events);
					continue;
				}
			}
			handle(L, c, ev[i].events);
			settle(L, c);
		}
	}
}

static void ep_add_listener(struct loop *L)
{
	struct epoll_event ev = { .events = EPOLLIN | (L->et ? EPOLLET : 0), .data.u64 = UINT64_MAX };

	if (epoll_ctl(L->ep, EPOLL_CTL_ADD, L->lfd, &ev) < 0) {
		error_line(L, NULL, "epoll_ctl listener: %s", strerror(errno));
		exit(1);
	}
}

static struct loop *loop_new(int side, int lfd, const char *who)
{
	struct loop *L = calloc(1, sizeof(*L));
	struct table *t = calloc(1, sizeof(*t));

	if (!L || !t)
		exit(1);
	pthread_mutex_init(&t->mu, NULL);
	L->side = side;
	L->lfd = lfd;
	L->t = t;
	L->who = who;
	L->ep = -1;
	L->sched_fd = -2; /* opened by the thread that runs the loop */
	L->et = mode == M_ET;
	L->toggle = side == SERVER && mode == M_MODTOGGLE;
	return L;
}

/* ---- the poll and select server ----------------------------------------- */

static void poll_loop(struct loop *L)
{
	static struct pollfd p[2 * MAXC + 1];
	struct conn *pc[MAXC];

	while (!loop_over(L) && !give_up(L)) {
		int n = atomic_load(&L->t->n), np = 0, nc = 0, r;

		for (int i = 0; i < n; i++) {
			struct conn *c = L->t->c[i];

			if (atomic_load(&c->closed))
				continue;
			atomic_store(&c->interest, wanted(L, c));
			pc[nc++] = c;
		}
		stall_scan(L);
		if (L->iter++ % 2 == 0) {
			/* poll(), each connection twice with the same events: the
			 * kernel gives both entries the same revents. */
			p[np++] = (struct pollfd){ .fd = L->lfd, .events = POLLIN };
			for (int i = 0; i < nc; i++) {
				short e = (short)((wanted(L, pc[i]) & EPOLLIN ? POLLIN : 0) |
						  (wanted(L, pc[i]) & EPOLLOUT ? POLLOUT : 0));

				p[np++] = (struct pollfd){ .fd = pc[i]->fd, .events = e };
				p[np++] = (struct pollfd){ .fd = pc[i]->fd, .events = e };
			}
			wait_begin(L);
			r = poll(p, (nfds_t)np, WAIT_MS);
			wait_done(L, r);
			if (r < 0) {
				if (errno != EINTR)
					error_line(L, NULL, "poll: %s", strerror(errno));
				continue;
			}
			if (p[0].revents & POLLIN)
				accept_some(L, 8);
			for (int i = 0; i < nc; i++) {
				short a = p[1 + 2 * i].revents, b = p[2 + 2 * i].revents;
				uint32_t rev = 0;

				/* poll() looks at its entries one after the other, so
				 * bytes (or room) arriving between the two looks may
				 * show in the second only, with the kernel too. But
				 * nobody reads or writes during the call: what the
				 * first entry saw, the second must see as well. */
				if (a & ~b)
					violation(1, L, pc[i], "poll: two entries for one fd report %#x and then %#x", a, b);
				else if (a != b)
					atomic_fetch_add(&S->poll_splits, 1);
				a |= b;
				if (a & POLLNVAL) {
					error_line(L, pc[i], "poll: POLLNVAL");
					pc[i]->broken = true;
				}
				rev |= a & POLLIN ? EPOLLIN : 0;
				rev |= a & POLLOUT ? EPOLLOUT : 0;
				rev |= a & POLLERR ? EPOLLERR : 0;
				rev |= a & POLLHUP ? EPOLLHUP : 0;
				if (rev || pc[i]->broken) {
					handle(L, pc[i], rev);
					settle(L, pc[i]);
				}
			}
		} else {
			fd_set rd, wr;
			int maxfd = L->lfd;
			struct timeval tv = { .tv_sec = WAIT_MS / 1000, .tv_usec = (WAIT_MS % 1000) * 1000 };

			FD_ZERO(&rd);
			FD_ZERO(&wr);
			FD_SET(L->lfd, &rd);
			for (int i = 0; i < nc; i++) {
				if (pc[i]->fd >= FD_SETSIZE) {
					error_line(L, pc[i], "fd %d too large for select", pc[i]->fd);
					exit(1);
				}
				if (wanted(L, pc[i]) & EPOLLIN)
					FD_SET(pc[i]->fd, &rd);
				if (wanted(L, pc[i]) & EPOLLOUT)
					FD_SET(pc[i]->fd, &wr);
				if (pc[i]->fd > maxfd)
					maxfd = pc[i]->fd;
			}
			wait_begin(L);
			r = select(maxfd + 1, &rd, &wr, NULL, &tv);
			wait_done(L, r);
			if (r < 0) {
				if (errno != EINTR)
					error_line(L, NULL, "select: %s", strerror(errno));
				continue;
			}
			if (FD_ISSET(L->lfd, &rd))
				accept_some(L, 8);
			for (int i = 0; i < nc; i++) {
				uint32_t rev = (FD_ISSET(pc[i]->fd, &rd) ? EPOLLIN : 0) | (FD_ISSET(pc[i]->fd, &wr) ? EPOLLOUT : 0);

				if (rev) {
					handle(L, pc[i], rev);
					settle(L, pc[i]);
				}
			}
		}
	}
}

/* ---- the sides ------------------------------------------------------------ */

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

static pid_t spawn(void (*fn)(int), int arg)
{
	pid_t pid = fork();

	if (pid == 0) {
		fn(arg);
		_exit(0);
	}
	if (pid < 0) {
		error_line(NULL, NULL, "fork: %s", strerror(errno));
		exit(1);
	}
	return pid;
}

static void run_server(int lfd)
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

static void run_client(int lfd)
{
	close(lfd);
	client();
}

static void usage(void)
{
	fprintf(stderr, "usage: ready_rules --mode level|et|oneshot|modtoggle|forkconn|poll --port P [--conns N]\n"
			"       [--seconds S] [--msgs M] [--min-msgs K] [--depth D] [--seed X] [--max-size B]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int one = 1, lfd, fails = 0, st = 0;
	pid_t srv, cli;
	uint64_t v[7];

	mode = -1;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (!val)
			usage();
		i++;
		if (!strcmp(o, "--mode")) {
			for (int m = 0; m < (int)(sizeof(mode_names) / sizeof(*mode_names)); m++)
				if (!strcmp(val, mode_names[m]))
					mode = m;
		} else if (!strcmp(o, "--port")) {
			port = atoi(val);
		} else if (!strcmp(o, "--conns")) {
			nconns = atoi(val);
		} else if (!strcmp(o, "--seconds")) {
			seconds = atof(val);
		} else if (!strcmp(o, "--msgs")) {
			msgs_per_conn = strtoull(val, NULL, 0);
		} else if (!strcmp(o, "--min-msgs")) {
			min_msgs = strtoull(val, NULL, 0);
		} else if (!strcmp(o, "--depth")) {
			depth = atoi(val);
		} else if (!strcmp(o, "--seed")) {
			seed = strtoull(val, NULL, 0);
		} else if (!strcmp(o, "--max-size")) {
			max_size = (uint32_t)strtoul(val, NULL, 0);
		} else {
			usage();
		}
	}
	if (mode < 0 || port <= 0 || nconns < 1 || nconns > MAXC || depth < 1 || depth > QN / 2 || max_size < 1 ||
	    max_size > (1u << 24) || seconds <= 0)
		usage();
	S = mmap(NULL, sizeof(*S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (S == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	t_start_us = now_us();
	t_stop_us = t_start_us + (uint64_t)(seconds * 1e6);
	/* Past this a side stops waiting and says how far it got; the caller's
	 * timeout is the last resort. */
	t_giveup_us = t_stop_us + 20 * 1000000ull;

	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 512) < 0) {
		printf("FAIL listen on %d: %s\n", port, strerror(errno));
		return 1;
	}
	srv = spawn(run_server, lfd);
	cli = spawn(run_client, lfd);
	close(lfd);
	if (waitpid(cli, &st, 0) < 0 || !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		error_line(NULL, NULL, "the client ended with status %#x", st);
	if (waitpid(srv, &st, 0) < 0 || !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		error_line(NULL, NULL, "the server ended with status %#x", st);
	for (int s = 0; s < 2; s++)
		if (atomic_load(&S->clean[s]) != (uint64_t)nconns)
			error_line(NULL, NULL, "%llu of %d connections finished cleanly on the %s side",
				   (unsigned long long)atomic_load(&S->clean[s]), nconns, s ? "server" : "client");
	for (int r = 1; r <= 6; r++)
		fails += (v[r] = atomic_load(&S->viol[r])) != 0;
	printf("%s conns=%llu msgs=%llu bytes=%llu violations=%llu", fails || atomic_load(&S->errors) ? "FAIL" : "OK",
	       (unsigned long long)atomic_load(&S->clean[CLIENT]), (unsigned long long)atomic_load(&S->msgs),
	       (unsigned long long)atomic_load(&S->bytes),
	       (unsigned long long)(v[1] + v[2] + v[3] + v[4] + v[5] + v[6]));
	if (fails || atomic_load(&S->errors))
		printf(" R1=%llu R2=%llu R3=%llu R4=%llu R5=%llu R6=%llu errors=%llu", (unsigned long long)v[1],
		       (unsigned long long)v[2], (unsigned long long)v[3], (unsigned long long)v[4],
		       (unsigned long long)v[5], (unsigned long long)v[6], (unsigned long long)atomic_load(&S->errors));
	printf(" longest_wait_ms=%llu longest_pending_ms=%llu waits=%llu",
	       (unsigned long long)atomic_load(&S->longest_wait_us) / 1000,
	       (unsigned long long)atomic_load(&S->longest_pending_us) / 1000,
	       (unsigned long long)atomic_load(&S->waits));
	if (mode == M_POLL)
		printf(" poll_splits=%llu", (unsigned long long)atomic_load(&S->poll_splits));
	printf(" mode=%s\n", mode_names[mode]);
	return fails || atomic_load(&S->errors) ? 1 : 0;
}
