/*
 * stress.c — end-to-end integrity stress for TCP byte streams.
 *
 *   stress server --port P [--bind ADDR] [--exit-after N] [--mode M]
 *                 [--timeout SECS] [--threads T] [-v]
 *                                         prints "READY <port>" once listening
 *                                         (--port 0: any free port)
 *   stress client --host ADDR --port P [--conns N] [--bytes TOTAL] [--seed S]
 *                 [--max-msg BYTES] [--mode blocking|nonblock|epoll-et|mixed]
 *                 [--half-close] [--duration SECS] [--timeout SECS]
 *                 [--threads T] [-v]
 *   stress selftest [client options]      server thread + client, one process,
 *                                         on a free 127.0.0.1 port
 *
 * Each connection carries a 48-byte header from the client (magic, connection
 * id, seed, bytes client->server, bytes server->client, max message size,
 * flags) and then nothing but payload: a pseudo-random stream in which byte o
 * of direction d of connection i is a pure function of (seed, i, d, o), so
 * every byte is checked on arrival, on its own. Both directions run at the
 * same time. A CRC32C runs over each direction on both sides; `selftest`
 * compares the client's with the server's, a standalone server prints its
 * per-connection verdict and checksums on stdout.
 *
 * Reads: random sizes (log-uniform, 1 B .. 2 MiB) with recv, read, readv and
 * recvmsg into scattered iovecs (guard bytes between them are checked),
 * MSG_PEEK followed by the real read (same bytes, at least as many),
 * MSG_WAITALL, and MSG_DONTWAIT on blocking sockets. Writes: messages of
 * log-uniform size (1 B .. --max-msg), written with send, write, writev,
 * sendmsg and send(MSG_MORE), resumed after partial writes.
 *
 * Modes, per connection: blocking (a reader and a writer thread), nonblock (one
 * thread, poll), epoll-et (a fixed pool of --threads event loops, edge
 * triggered, each fd drained until EAGAIN; fair across connections). Threaded
 * modes are limited to 64 connections; mixed puts the rest on epoll-et.
 * Nonblocking client connections connect with EINPROGRESS.
 *
 * --half-close: each side shutdown(SHUT_WR)s after its last byte and the
 * other must read exactly EOF there; without it the client closes once both
 * directions are complete and the server closes on EOF. --duration: streams
 * are unbounded, the client stops after SECS (then half-closes), the server
 * stops sending when it sees EOF.
 *
 * Client: "stress: OK conns=N sent=X recv=Y MiB/s=Z" and exit 0, or one line
 * "stress: FAIL conn=I offset=O expected=0x.. got=0x.." (or reason=...) and
 * exit 1. --timeout (default 120 s) bounds the whole client run (plus
 * --duration); on the server it is a per-connection no-progress limit.
 * Server: "stress-server: conn=I OK ..." / "stress-server: FAIL conn=I ..."
 * per connection; with --exit-after N it exits after N connections, 1 if any
 * failed. Hidden --corrupt-at OFFSET: the server flips the byte at that offset
 * of every stream it sends (proves the client can fail).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HDR_LEN      48
#define HDR_MAGIC    0x3153525453485352ULL	/* "RSHSTRS1" little-endian */
#define HDR_VERSION  1
#define HF_HALFCLOSE 1u
#define UNBOUNDED    UINT64_MAX
#define RX_MAX       (2u << 20)
#define EXP_CHUNK    (64u << 10)
#define MAX_IOV      8
#define IOV_GAP      64
#define CANARY       0xa5
#define MAX_THREADED 64

enum { M_BLOCKING, M_NONBLOCK, M_EPOLL, M_MIXED };
static const char *const mode_name[] = { "blocking", "nonblock", "epoll-et", "mixed" };

/* Step results of rx_step / tx_step. */
enum { ST_FAIL = -2, ST_AGAIN = -1, ST_DONE = 0, ST_PROGRESS = 1 };

static struct opts {
	const char *host, *bind;
	int port, conns, mode, threads, exit_after, verbose;
	uint64_t bytes, seed, corrupt_at;
	uint32_t max_msg;
	bool half_close;
	double duration, timeout;
} O = {
	.bind = "0.0.0.0", .conns = 8, .mode = M_MIXED, .bytes = 64ull << 20,
	.seed = 1, .corrupt_at = UNBOUNDED, .max_msg = 1u << 20, .timeout = 120,
};

/* ---------------------------------------------------------------- helpers */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long now_ms(void)
{
	return (long long)(now_s() * 1000);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("stress: FAIL reason=", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	fflush(stdout);
	_exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}

static uint64_t fmix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

struct rng { uint64_t s; };

static inline uint64_t rnext(struct rng *r)
{
	return fmix64(r->s += 0x9e3779b97f4a7c15ULL);
}

static struct rng rng_for(uint64_t seed, uint32_t id, unsigned what)
{
	struct rng r = { fmix64(seed ^ fmix64(((uint64_t)id << 8 | what) + 0x51ed27)) };
	return r;
}

/* Log-uniform in [1, max]: pick an octave, then a value inside it. */
static uint64_t rand_logu(struct rng *r, uint64_t max)
{
	if (max <= 1)
		return 1;
	int bits = 64 - __builtin_clzll(max);
	uint64_t lo = 1ull << (rnext(r) % bits);
	uint64_t hi = lo * 2 - 1 > max ? max : lo * 2 - 1;
	return lo + rnext(r) % (hi - lo + 1);
}

/* ------------------------------------------------------ the payload stream */

/* Key of one direction (0: client->server, 1: server->client). */
static uint64_t stream_key(uint64_t seed, uint32_t id, int dir)
{
	return fmix64(seed ^ fmix64(((uint64_t)id << 1 | (uint64_t)dir) + 0x5bd1e995));
}

/* Byte o of a stream is byte (o & 7) (little-endian) of word o >> 3. */
static inline uint64_t gen_word(uint64_t key, uint64_t k)
{
	return fmix64(key ^ (k * 0xd6e8feb86659fd93ULL + 0x9e3779b97f4a7c15ULL));
}

static inline uint8_t gen_byte(uint64_t key, uint64_t off)
{
	return (uint8_t)(gen_word(key, off >> 3) >> (8 * (off & 7)));
}

static void gen_fill(uint64_t key, uint64_t off, uint8_t *p, size_t n)
{
	for (; n && (off & 7); n--)
		*p++ = gen_byte(key, off++);
	uint64_t k = off >> 3;
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w = htole64(gen_word(key, k++));
		memcpy(p, &w, 8);
	}
	for (off = k << 3; n; n--)
		*p++ = gen_byte(key, off++);
}

/* ---------------------------------------------------------------- CRC32C */

static uint32_t crc_tab[8][256];
static bool crc_hw;

static void crc_init(void)
{
	for (unsigned i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_tab[0][i] = c;
	}
	for (unsigned i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
#if defined(__x86_64__)
	__builtin_cpu_init();
	crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_hw_run(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;
	for (; n && ((uintptr_t)p & 7); n--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c64 = __builtin_ia32_crc32di(c64, w);
	}
	for (; n; n--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	return (uint32_t)c64;
}
#endif

static uint32_t crc32c(uint32_t crc, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint32_t c = ~crc;
#if defined(__x86_64__)
	if (crc_hw)
		return ~crc_hw_run(c, p, n);
#endif
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		w = le64toh(w) ^ c;
		c = crc_tab[7][w & 0xff] ^ crc_tab[6][(w >> 8) & 0xff] ^
		    crc_tab[5][(w >> 16) & 0xff] ^ crc_tab[4][(w >> 24) & 0xff] ^
		    crc_tab[3][(w >> 32) & 0xff] ^ crc_tab[2][(w >> 40) & 0xff] ^
		    crc_tab[1][(w >> 48) & 0xff] ^ crc_tab[0][w >> 56];
	}
	for (; n; n--)
		c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xff];
	return ~c;
}

/* ------------------------------------------------------------ connections */

struct worker;

struct conn {
	int fd, mode;
	uint32_t id;
	bool server, half_close, hdr_ok;
	uint64_t seed, key_tx, key_rx;
	uint64_t tx_total, tx_off, rx_total, rx_off;	/* payload bytes */
	uint32_t max_msg;
	struct rng rtx, rrx;
	uint32_t crc_tx, crc_rx;
	uint8_t *txbuf;			/* the message being written */
	size_t txcap, msg_len, msg_done;
	uint8_t hdr[HDR_LEN];
	size_t hdr_done;
	bool tx_fin, rx_fin;
	double stop_at;			/* client --duration: end of the stream */
	uint64_t corrupt_at;		/* server: hidden --corrupt-at */
	atomic_bool peer_eof, done;
	atomic_int failed;
	atomic_llong last_ms;
	/* epoll-et */
	struct worker *w;
	struct conn *qnext;
	bool queued, rd, wr;
	/* server registry (watchdog) */
	struct conn *prev, *next;
};

struct rxbufs {
	uint8_t *buf, *peek, *exp;
};

static struct rxbufs *rxbufs_new(void)
{
	struct rxbufs *b = xmalloc(sizeof *b);
	b->buf = xmalloc(RX_MAX + MAX_IOV * IOV_GAP);
	b->peek = xmalloc(RX_MAX);
	b->exp = xmalloc(EXP_CHUNK);
	return b;
}

static void rxbufs_free(struct rxbufs *b)
{
	free(b->buf);
	free(b->peek);
	free(b->exp);
	free(b);
}

static void touch(struct conn *c)
{
	atomic_store_explicit(&c->last_ms, now_ms(), memory_order_relaxed);
}

static bool is_failed(struct conn *c)
{
	return atomic_load_explicit(&c->failed, memory_order_relaxed) != 0;
}

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

/*
 * Record the first failure of a connection. The client reports it and exits
 * at once; the server prints its verdict and shuts the socket down so that
 * the connection's other thread (or its event loop) wakes up and finishes.
 */
static void conn_fail(struct conn *c, uint64_t off, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void conn_fail(struct conn *c, uint64_t off, const char *fmt, ...)
{
	char why[320];
	va_list ap;
	int expect = 0;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (!atomic_compare_exchange_strong(&c->failed, &expect, 1))
		return;
	pthread_mutex_lock(&out_mu);
	printf("%s: FAIL conn=%" PRIu32 " offset=%" PRIu64 " %s\n",
	       c->server ? "stress-server" : "stress", c->id, off, why);
	fflush(stdout);
	if (!c->server)
		_exit(1);	/* out_mu stays held: nobody else prints */
	pthread_mutex_unlock(&out_mu);
	shutdown(c->fd, SHUT_RDWR);
}

static int io_err(struct conn *c, const char *op, uint64_t off)
{
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		return ST_AGAIN;
	if (errno == EINTR)
		return ST_PROGRESS;
	conn_fail(c, off, "reason=%s: %s", op, strerror(errno));
	return ST_FAIL;
}

static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }

/* Keys and random generators, once id, seed and role are known. */
static void conn_streams(struct conn *c)
{
	c->key_tx = stream_key(c->seed, c->id, c->server);
	c->key_rx = stream_key(c->seed, c->id, !c->server);
	c->rtx = rng_for(c->seed, c->id, c->server ? 3 : 1);
	c->rrx = rng_for(c->seed, c->id, c->server ? 4 : 2);
	if (!c->server && !c->half_close && c->rx_total == 0)
		c->rx_fin = true;
}

static bool want_w(struct conn *c)
{
	return !c->tx_fin && (!c->server || c->hdr_ok);
}

static bool conn_complete(struct conn *c)
{
	return (!c->server || c->hdr_ok) && c->rx_fin && c->tx_fin;
}

static const char *fmt_total(uint64_t v, char *buf, size_t n)
{
	if (v == UNBOUNDED)
		snprintf(buf, n, "unbounded");
	else
		snprintf(buf, n, "%" PRIu64, v);
	return buf;
}

/* ------------------------------------------------------------- receiving */

/* Check n received bytes against the stream; advance. 0 ok, -1 failed. */
static int rx_verify(struct conn *c, struct rxbufs *b, const uint8_t *p, size_t n)
{
	if (c->rx_total != UNBOUNDED && n > c->rx_total - c->rx_off) {
		size_t ok = c->rx_total - c->rx_off;
		if (rx_verify(c, b, p, ok))
			return -1;
		conn_fail(c, c->rx_off, "reason=%zu bytes beyond the end of the stream (%" PRIu64
			  " bytes), first got=0x%02x", n - ok, c->rx_total, p[ok]);
		return -1;
	}
	for (size_t done = 0; done < n;) {
		size_t k = n - done < EXP_CHUNK ? n - done : EXP_CHUNK;
		gen_fill(c->key_rx, c->rx_off + done, b->exp, k);
		if (memcmp(b->exp, p + done, k)) {
			size_t i = 0;
			while (b->exp[i] == p[done + i])
				i++;
			conn_fail(c, c->rx_off + done + i, "expected=0x%02x got=0x%02x",
				  b->exp[i], p[done + i]);
			return -1;
		}
		done += k;
	}
	c->crc_rx = crc32c(c->crc_rx, p, n);
	c->rx_off += n;
	touch(c);
	if (!c->server && !c->half_close && c->rx_off == c->rx_total)
		c->rx_fin = true;
	return 0;
}

static int rx_eof(struct conn *c)
{
	if (c->rx_total != UNBOUNDED && c->rx_off < c->rx_total) {
		conn_fail(c, c->rx_off, "reason=EOF after %" PRIu64 " of %" PRIu64 " bytes",
			  c->rx_off, c->rx_total);
		return ST_FAIL;
	}
	c->rx_fin = true;
	atomic_store(&c->peer_eof, true);
	touch(c);
	return ST_DONE;
}

static int srv_parse_header(struct conn *c)
{
	const uint8_t *h = c->hdr;
	uint64_t magic = get64(h);
	uint32_t ver = get32(h + 8) & 0xffff, flags = get32(h + 8) >> 16;

	if (magic != HDR_MAGIC || ver != HDR_VERSION) {
		conn_fail(c, 0, "reason=bad header (magic 0x%016" PRIx64 ", version %" PRIu32
			  "): not a stress client", magic, ver);
		return ST_FAIL;
	}
	c->id = get32(h + 12);
	c->seed = get64(h + 16);
	c->rx_total = get64(h + 24);
	c->tx_total = get64(h + 32);
	c->max_msg = get32(h + 40);
	c->half_close = flags & HF_HALFCLOSE;
	if (c->max_msg == 0) {
		conn_fail(c, 0, "reason=bad header: max message size 0");
		return ST_FAIL;
	}
	conn_streams(c);
	c->hdr_ok = true;
	return ST_PROGRESS;
}

static int rx_header(struct conn *c)
{
	ssize_t n = recv(c->fd, c->hdr + c->hdr_done, HDR_LEN - c->hdr_done, 0);
	if (n < 0)
		return io_err(c, "recv(header)", 0);
	if (n == 0) {
		conn_fail(c, 0, "reason=EOF inside the header (%zu of %d bytes)", c->hdr_done, HDR_LEN);
		return ST_FAIL;
	}
	c->hdr_done += (size_t)n;
	touch(c);
	return c->hdr_done == HDR_LEN ? srv_parse_header(c) : ST_PROGRESS;
}

/* MSG_PEEK, then the real read: it must return the peeked bytes, or more. */
static int rx_peek(struct conn *c, struct rxbufs *b, size_t sz, int fl)
{
	ssize_t p = recv(c->fd, b->peek, sz, MSG_PEEK | fl);
	if (p < 0)
		return io_err(c, "recv(MSG_PEEK)", c->rx_off);
	if (p == 0)
		return rx_eof(c);
	ssize_t n = rnext(&c->rrx) & 1 ? read(c->fd, b->buf, sz) : recv(c->fd, b->buf, sz, MSG_DONTWAIT);
	if (n < 0) {
		conn_fail(c, c->rx_off, "reason=read after MSG_PEEK saw %zd bytes: %s", p, strerror(errno));
		return ST_FAIL;
	}
	if (n < p) {
		conn_fail(c, c->rx_off, "reason=MSG_PEEK saw %zd bytes, the read after it returned %zd", p, n);
		return ST_FAIL;
	}
	if (memcmp(b->peek, b->buf, (size_t)p)) {
		size_t i = 0;
		while (b->peek[i] == b->buf[i])
			i++;
		conn_fail(c, c->rx_off + i, "reason=MSG_PEEK saw 0x%02x, the read got 0x%02x",
			  b->peek[i], b->buf[i]);
		return ST_FAIL;
	}
	return rx_verify(c, b, b->buf, (size_t)n) ? ST_FAIL : ST_PROGRESS;
}

/* readv / recvmsg into 2..8 iovecs with guard bytes between them. */
static int rx_vec(struct conn *c, struct rxbufs *b, size_t sz, int fl, bool use_readv)
{
	struct iovec iov[MAX_IOV];
	int k = 2 + (int)(rnext(&c->rrx) % (MAX_IOV - 1));
	uint8_t *p = b->buf;
	size_t rest = sz;

	for (int i = 0; i < k; i++) {
		size_t part = i == k - 1 ? rest : rnext(&c->rrx) % (rest / 2 + 1);
		iov[i].iov_base = p;
		iov[i].iov_len = part;
		rest -= part;
		p += part;
		memset(p, CANARY, IOV_GAP);
		p += IOV_GAP;
	}
	ssize_t n;
	if (use_readv) {
		n = readv(c->fd, iov, k);
	} else {
		struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)k };
		n = recvmsg(c->fd, &m, fl);
	}
	if (n < 0)
		return io_err(c, use_readv ? "readv" : "recvmsg", c->rx_off);
	if (n == 0)
		return rx_eof(c);
	size_t left = (size_t)n;
	for (int i = 0; i < k; i++) {
		size_t take = left < iov[i].iov_len ? left : iov[i].iov_len;
		const uint8_t *g = (const uint8_t *)iov[i].iov_base + iov[i].iov_len;
		if (take && rx_verify(c, b, iov[i].iov_base, take))
			return ST_FAIL;
		left -= take;
		for (int j = 0; j < IOV_GAP; j++)
			if (g[j] != CANARY) {
				conn_fail(c, c->rx_off, "reason=%s wrote past iovec %d of %d (len %zu)",
					  use_readv ? "readv" : "recvmsg", i, k, iov[i].iov_len);
				return ST_FAIL;
			}
	}
	return ST_PROGRESS;
}

/* One random read operation. */
static int rx_step(struct conn *c, struct rxbufs *b, bool blocking)
{
	if (c->server && !c->hdr_ok)
		return rx_header(c);
	if (c->rx_fin)
		return ST_DONE;

	uint64_t left = c->rx_total == UNBOUNDED ? UNBOUNDED : c->rx_total - c->rx_off;
	size_t sz = rand_logu(&c->rrx, RX_MAX);
	int fl = blocking && rnext(&c->rrx) % 16 == 0 ? MSG_DONTWAIT : 0;
	unsigned op = rnext(&c->rrx) % 100;
	ssize_t n;

	if (op < 12)
		return rx_peek(c, b, sz, fl);
	if (op < 30)
		return rx_vec(c, b, sz, fl, op < 21);
	if (op < 38) {
		/* never wait for bytes that will not come */
		if (left && sz > left)
			sz = (size_t)left;
		n = recv(c->fd, b->buf, sz, MSG_WAITALL | fl);
	} else if (op < 70) {
		n = recv(c->fd, b->buf, sz, fl);
	} else {
		n = read(c->fd, b->buf, sz);
	}
	if (n < 0)
		return io_err(c, "recv", c->rx_off);
	if (n == 0)
		return rx_eof(c);
	return rx_verify(c, b, b->buf, (size_t)n) ? ST_FAIL : ST_PROGRESS;
}

/* --------------------------------------------------------------- sending */

static int tx_finish(struct conn *c)
{
	if (c->half_close && shutdown(c->fd, SHUT_WR) < 0) {
		conn_fail(c, c->tx_off, "reason=shutdown(SHUT_WR): %s", strerror(errno));
		return ST_FAIL;
	}
	c->tx_fin = true;
	touch(c);
	return ST_DONE;
}

static bool tx_should_stop(struct conn *c)
{
	if (c->tx_total != UNBOUNDED)
		return false;
	if (c->server)
		return atomic_load(&c->peer_eof);
	return c->stop_at > 0 && now_s() >= c->stop_at;
}

static void tx_new_msg(struct conn *c)
{
	uint64_t room = c->tx_total - c->tx_off;
	size_t len = rand_logu(&c->rtx, c->max_msg);

	if (len > room)
		len = (size_t)room;
	if (len > c->txcap) {
		free(c->txbuf);
		c->txbuf = xmalloc(len);
		c->txcap = len;
	}
	gen_fill(c->key_tx, c->tx_off, c->txbuf, len);
	if (c->corrupt_at >= c->tx_off && c->corrupt_at - c->tx_off < len)
		c->txbuf[c->corrupt_at - c->tx_off] ^= 0xff;
	c->msg_len = len;
	c->msg_done = 0;
}

/* One random write operation (the header first, on the client). */
static int tx_step(struct conn *c, bool blocking)
{
	ssize_t n;

	if (c->tx_fin)
		return ST_DONE;
	if (!c->server && c->hdr_done < HDR_LEN) {
		n = send(c->fd, c->hdr + c->hdr_done, HDR_LEN - c->hdr_done, MSG_NOSIGNAL);
		if (n < 0)
			return io_err(c, "send(header)", 0);
		c->hdr_done += (size_t)n;
		touch(c);
		return ST_PROGRESS;
	}
	if (c->msg_done == c->msg_len) {
		if (tx_should_stop(c))
			c->tx_total = c->tx_off;
		if (c->tx_off == c->tx_total)
			return tx_finish(c);
		tx_new_msg(c);
	}

	const uint8_t *p = c->txbuf + c->msg_done;
	size_t len = c->msg_len - c->msg_done;
	int fl = MSG_NOSIGNAL | (blocking && rnext(&c->rtx) % 16 == 0 ? MSG_DONTWAIT : 0);
	unsigned op = rnext(&c->rtx) % 100;

	if (op < 30) {
		n = send(c->fd, p, len, fl);
	} else if (op < 50) {
		n = write(c->fd, p, len);
	} else if (op < 90) {
		struct iovec iov[MAX_IOV];
		int k = 2 + (int)(rnext(&c->rtx) % (MAX_IOV - 1));
		size_t rest = len, at = 0;
		for (int i = 0; i < k; i++) {
			size_t part = i == k - 1 ? rest : rnext(&c->rtx) % (rest / 2 + 1);
			iov[i].iov_base = (void *)(p + at);
			iov[i].iov_len = part;
			at += part;
			rest -= part;
		}
		if (op < 70) {
			n = writev(c->fd, iov, k);
		} else {
			struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)k };
			n = sendmsg(c->fd, &m, fl);
		}
	} else {
		/* MSG_MORE only while more bytes are sure to follow */
		bool more = c->tx_total != UNBOUNDED && c->tx_off + len < c->tx_total;
		n = send(c->fd, p, len, fl | (more ? MSG_MORE : 0));
	}
	if (n < 0)
		return io_err(c, "send", c->tx_off);
	if (n == 0) {
		conn_fail(c, c->tx_off, "reason=send of %zu bytes returned 0", len);
		return ST_FAIL;
	}
	c->crc_tx = crc32c(c->crc_tx, p, (size_t)n);
	c->tx_off += (uint64_t)n;
	c->msg_done += (size_t)n;
	touch(c);
	return ST_PROGRESS;
}

/* ------------------------------------------------------- threaded drivers */

static void wait_fd(struct conn *c, short ev)
{
	struct pollfd p = { .fd = c->fd, .events = ev };
	poll(&p, 1, 1000);
}

static void *blk_writer(void *arg)
{
	struct conn *c = arg;
	for (;;) {
		int s = tx_step(c, true);
		if (s == ST_FAIL || s == ST_DONE || is_failed(c))
			return NULL;
		if (s == ST_AGAIN)
			wait_fd(c, POLLOUT);
	}
}

/* Blocking: the writer in its own thread, the reader in this one. */
static void run_blocking(struct conn *c)
{
	struct rxbufs *b = rxbufs_new();
	pthread_t wt;

	while (c->server && !c->hdr_ok && !is_failed(c)) {
		int s = rx_header(c);
		if (s == ST_AGAIN)
			wait_fd(c, POLLIN);
	}
	if (!is_failed(c)) {
		int e = pthread_create(&wt, NULL, blk_writer, c);
		if (e)
			die("pthread_create: %s", strerror(e));
		for (;;) {
			int s = rx_step(c, b, true);
			if (s == ST_FAIL || s == ST_DONE || is_failed(c))
				break;
			if (s == ST_AGAIN)
				wait_fd(c, POLLIN);
		}
		pthread_join(wt, NULL);
	}
	rxbufs_free(b);
}

/* Nonblocking, one thread, poll(): each direction runs until EAGAIN. */
static void run_nonblock(struct conn *c)
{
	struct rxbufs *b = rxbufs_new();
	bool rblk = false, wblk = false;

	while (!is_failed(c)) {
		bool wr = !c->rx_fin, ww = want_w(c);
		if (wr && !rblk) {
			int s = rx_step(c, b, false);
			if (s == ST_FAIL)
				break;
			rblk = s == ST_AGAIN;
		}
		if (ww && !wblk) {
			int s = tx_step(c, false);
			if (s == ST_FAIL)
				break;
			wblk = s == ST_AGAIN;
		}
		wr = !c->rx_fin;
		ww = want_w(c);
		if (!wr && !ww)
			break;
		if ((wr && !rblk) || (ww && !wblk))
			continue;
		struct pollfd p = { .fd = c->fd, .events = (short)((wr ? POLLIN : 0) | (ww ? POLLOUT : 0)) };
		int r = poll(&p, 1, 1000);
		if (r < 0 && errno != EINTR) {
			conn_fail(c, c->rx_off, "reason=poll: %s", strerror(errno));
			break;
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR))
			rblk = false;
		if (p.revents & (POLLOUT | POLLHUP | POLLERR))
			wblk = false;
	}
	rxbufs_free(b);
}

/* ---------------------------------------------------------- epoll-et loops */

struct worker {
	int ep;
	bool server;
	pthread_t thr;
	atomic_int assigned, finished;
	struct conn *qh, *qt;
	int qlen;
};

static void conn_finish(struct conn *c);

static void wq_push(struct worker *w, struct conn *c)
{
	if (c->queued)
		return;
	c->queued = true;
	c->qnext = NULL;
	if (w->qt)
		w->qt->qnext = c;
	else
		w->qh = c;
	w->qt = c;
	w->qlen++;
}

static struct conn *wq_pop(struct worker *w)
{
	struct conn *c = w->qh;
	w->qh = c->qnext;
	if (!w->qh)
		w->qt = NULL;
	w->qlen--;
	c->queued = false;
	return c;
}

/* Service one ready connection for a bounded number of operations, so a
 * stream that never runs dry cannot starve the others; a connection that did
 * not reach EAGAIN stays queued (the edge will not come again). True when the
 * connection is finished. */
static bool ep_service(struct conn *c, struct rxbufs *b)
{
	for (int budget = 32; budget > 0 && !is_failed(c); budget--) {
		bool moved = false;
		if (c->rd && !c->rx_fin) {
			int s = rx_step(c, b, false);
			if (s == ST_FAIL)
				return true;
			if (s == ST_AGAIN)
				c->rd = false;
			else
				moved = true;
		}
		if (c->wr && want_w(c)) {
			int s = tx_step(c, false);
			if (s == ST_FAIL)
				return true;
			if (s == ST_AGAIN)
				c->wr = false;
			else
				moved = true;
		}
		if (conn_complete(c))
			return true;
		if (!moved)
			break;
	}
	return is_failed(c);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct rxbufs *b = rxbufs_new();
	struct epoll_event ev[256];

	while (w->server || atomic_load(&w->finished) < atomic_load(&w->assigned)) {
		int n = epoll_wait(w->ep, ev, 256, w->qh ? 0 : 200);
		if (n < 0 && errno != EINTR)
			die("epoll_wait: %s", strerror(errno));
		for (int i = 0; i < n; i++) {
			struct conn *c = ev[i].data.ptr;
			uint32_t e = ev[i].events;
			if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				c->rd = true;
			if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR))
				c->wr = true;
			wq_push(w, c);
		}
		for (int m = w->qlen; m > 0; m--) {
			struct conn *c = wq_pop(w);
			if (ep_service(c, b)) {
				conn_finish(c);
				atomic_fetch_add(&w->finished, 1);
			} else if ((c->rd && !c->rx_fin) || (c->wr && want_w(c))) {
				wq_push(w, c);
			}
		}
	}
	rxbufs_free(b);
	return NULL;
}

static struct worker *workers_new(int n, bool server)
{
	struct worker *ws = calloc((size_t)n, sizeof *ws);
	if (!ws)
		die("out of memory");
	for (int i = 0; i < n; i++) {
		ws[i].server = server;
		ws[i].ep = epoll_create1(EPOLL_CLOEXEC);
		if (ws[i].ep < 0)
			die("epoll_create1: %s", strerror(errno));
	}
	return ws;
}

static void worker_add(struct worker *w, struct conn *c)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c };
	c->w = w;
	c->rd = c->wr = true;	/* nothing tried yet: try both first */
	atomic_fetch_add(&w->assigned, 1);
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
		die("epoll_ctl(ADD): %s", strerror(errno));
}

static void worker_start(struct worker *w)
{
	int e = pthread_create(&w->thr, NULL, worker_main, w);
	if (e)
		die("pthread_create: %s", strerror(e));
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl(O_NONBLOCK): %s", strerror(errno));
}

static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 2 ? 2 : n > 8 ? 8 : (int)n;
}

/* ------------------------------------------------------------------ server */

struct srv_result {
	bool seen, ok;
	uint64_t rx, tx;
	uint32_t crc_rx, crc_tx;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct conn *list;
	int threaded, finished, failed;
	uint64_t rx, tx;
	struct srv_result *res;		/* selftest: indexed by connection id */
	int nres;
	bool quiet;			/* selftest: OK lines only with -v */
	struct worker *ws;
	int nws, next_w;
} S = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void srv_finish(struct conn *c)
{
	bool failed = is_failed(c);
	char a[24], b[24];

	/* the verdict line first: the summary must come after every one */
	if (!failed && (!S.quiet || O.verbose)) {
		pthread_mutex_lock(&out_mu);
		printf("stress-server: conn=%" PRIu32 " OK mode=%s recv=%" PRIu64 " crc32c=%08" PRIx32
		       " sent=%" PRIu64 " crc32c=%08" PRIx32 " expected-recv=%s expected-sent=%s\n",
		       c->id, mode_name[c->mode], c->rx_off, c->crc_rx, c->tx_off, c->crc_tx,
		       fmt_total(c->rx_total, a, sizeof a), fmt_total(c->tx_total, b, sizeof b));
		fflush(stdout);
		pthread_mutex_unlock(&out_mu);
	}
	pthread_mutex_lock(&S.mu);
	if (c->prev)
		c->prev->next = c->next;
	else
		S.list = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->mode != M_EPOLL)
		S.threaded--;
	S.finished++;
	S.failed += failed;
	S.rx += c->rx_off;
	S.tx += c->tx_off;
	if (c->hdr_ok && c->id < (uint32_t)S.nres) {
		struct srv_result *r = &S.res[c->id];
		r->seen = true;
		r->ok = !failed;
		r->rx = c->rx_off;
		r->tx = c->tx_off;
		r->crc_rx = c->crc_rx;
		r->crc_tx = c->crc_tx;
	}
	pthread_cond_broadcast(&S.cv);
	pthread_mutex_unlock(&S.mu);

	close(c->fd);
	free(c->txbuf);
	free(c);
}

static void conn_finish(struct conn *c)
{
	if (c->server) {
		srv_finish(c);
	} else {
		close(c->fd);
		atomic_store(&c->done, true);
	}
}

static void *srv_conn_thread(void *arg)
{
	struct conn *c = arg;
	if (c->mode == M_BLOCKING)
		run_blocking(c);
	else
		run_nonblock(c);
	conn_finish(c);
	return NULL;
}

/* Per-connection no-progress limit. */
static void *srv_watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		sleep(1);
		long long now = now_ms();
		pthread_mutex_lock(&S.mu);
		for (struct conn *c = S.list; c; c = c->next) {
			double idle = (now - atomic_load(&c->last_ms)) / 1000.0;
			if (idle > O.timeout && !is_failed(c))
				conn_fail(c, c->rx_off, "reason=no progress for %.0fs (recv %" PRIu64
					  ", sent %" PRIu64 ")", idle, c->rx_off, c->tx_off);
		}
		pthread_mutex_unlock(&S.mu);
	}
	return NULL;
}

static void srv_dispatch(int fd, uint32_t seq, struct rng *r)
{
	struct conn *c = calloc(1, sizeof *c);
	if (!c)
		die("out of memory");
	c->fd = fd;
	c->id = seq;		/* until the header names it */
	c->server = true;
	c->corrupt_at = O.corrupt_at;
	c->mode = O.mode == M_MIXED ? (int)(rnext(r) % 3) : O.mode;
	touch(c);

	pthread_mutex_lock(&S.mu);
	if (c->mode != M_EPOLL && S.threaded >= MAX_THREADED)
		c->mode = M_EPOLL;
	if (c->mode != M_EPOLL)
		S.threaded++;
	c->next = S.list;
	if (S.list)
		S.list->prev = c;
	S.list = c;
	pthread_mutex_unlock(&S.mu);

	if (c->mode != M_BLOCKING)
		set_nonblock(fd);
	if (c->mode == M_EPOLL) {
		worker_add(&S.ws[S.next_w++ % S.nws], c);
	} else {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		int e = pthread_create(&t, &a, srv_conn_thread, c);
		if (e)
			die("pthread_create: %s", strerror(e));
		pthread_attr_destroy(&a);
	}
}

/* Accept and serve; with --exit-after N return after N connections: 0 if all
 * were right, 1 otherwise. */
static int server_run(int lfd)
{
	struct rng r = rng_for(O.seed, 0, 99);
	pthread_t wd;
	int accepted = 0;
	bool warned = false;

	S.nws = O.threads;
	S.ws = workers_new(S.nws, true);
	for (int i = 0; i < S.nws; i++)
		worker_start(&S.ws[i]);
	if (pthread_create(&wd, NULL, srv_watchdog, NULL))
		die("pthread_create failed");
	pthread_detach(wd);

	while (!O.exit_after || accepted < O.exit_after) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if ((errno == EMFILE || errno == ENFILE) && !warned) {
				fprintf(stderr, "stress-server: accept: %s (waiting)\n", strerror(errno));
				warned = true;
			}
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				usleep(10000);
				continue;
			}
			die("accept: %s", strerror(errno));
		}
		srv_dispatch(fd, (uint32_t)accepted++, &r);
	}
	pthread_mutex_lock(&S.mu);
	while (S.finished < O.exit_after)
		pthread_cond_wait(&S.cv, &S.mu);
	pthread_mutex_unlock(&S.mu);
	pthread_mutex_lock(&out_mu);
	printf("stress-server: %s conns=%d failed=%d recv=%" PRIu64 " sent=%" PRIu64 "\n",
	       S.failed ? "FAIL" : "OK", S.finished, S.failed, S.rx, S.tx);
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
	return S.failed ? 1 : 0;
}

static int listen_on(const char *addr, int port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai;
	char ps[16];
	int one = 1;

	snprintf(ps, sizeof ps, "%d", port);
	int e = getaddrinfo(addr, ps, &hints, &ai);
	if (e)
		die("bind address %s: %s", addr, gai_strerror(e));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		die("bind %s:%d: %s", addr, port, strerror(errno));
	if (listen(fd, 4096) < 0)
		die("listen: %s", strerror(errno));
	freeaddrinfo(ai);
	return fd;
}

static int local_port(int fd)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof sa;
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
		die("getsockname: %s", strerror(errno));
	return sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
					: ntohs(((struct sockaddr_in *)&sa)->sin_port);
}

/* ------------------------------------------------------------------ client */

static struct {
	struct conn *c;
	int n;
	double t0;
	atomic_bool finished;
} C;

static int cli_connect(struct conn *c, struct addrinfo *ai, bool nb)
{
	double give_up = now_s() + (O.timeout < 10 ? O.timeout : 10);
	for (;;) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | (nb ? SOCK_NONBLOCK : 0), 0);
		if (fd < 0)
			die("socket: %s", strerror(errno));
		c->fd = fd;
		int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
		if (r < 0 && nb && errno == EINPROGRESS) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			int err = 0;
			socklen_t el = sizeof err;
			r = poll(&p, 1, (int)(O.timeout * 1000));
			if (r == 0)
				err = ETIMEDOUT;
			else if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
				err = errno;
			r = err ? -1 : 0;
			errno = err;
		}
		if (r == 0)
			return fd;
		int err = errno;
		close(fd);
		if (err == ECONNREFUSED && now_s() < give_up) {
			usleep(50000);
			continue;
		}
		c->fd = -1;
		conn_fail(c, 0, "reason=connect: %s", strerror(err));
		return -1;
	}
}

static void *cli_conn_thread(void *arg)
{
	struct conn *c = arg;
	if (c->mode == M_BLOCKING)
		run_blocking(c);
	else
		run_nonblock(c);
	conn_finish(c);
	return NULL;
}

/* The whole client run is bounded: fail clearly instead of hanging. */
static void *cli_watchdog(void *arg)
{
	double limit = O.timeout + O.duration, end = *(double *)arg + limit;
	char a[24], b[24];

	while (now_s() < end) {
		if (atomic_load(&C.finished))
			return NULL;
		usleep(100000);
	}
	struct conn *worst = NULL;
	for (int i = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		if (!atomic_load(&c->done) && (!worst || atomic_load(&c->last_ms) < atomic_load(&worst->last_ms)))
			worst = c;
	}
	pthread_mutex_lock(&out_mu);
	if (worst)
		printf("stress: FAIL conn=%" PRIu32 " offset=%" PRIu64 " reason=timeout after %.0fs: mode=%s "
		       "sent %" PRIu64 " of %s, received %" PRIu64 " of %s, idle %.1fs\n",
		       worst->id, worst->rx_off, limit, mode_name[worst->mode], worst->tx_off,
		       fmt_total(worst->tx_total, a, sizeof a), worst->rx_off,
		       fmt_total(worst->rx_total, b, sizeof b),
		       (now_ms() - atomic_load(&worst->last_ms)) / 1000.0);
	else
		printf("stress: FAIL reason=timeout after %.0fs\n", limit);
	fflush(stdout);
	_exit(1);
}

struct cli_stats {
	uint64_t sent, recv;
	double secs;
};

static void client_run(const char *host, int port, struct cli_stats *st)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *ai;
	struct rng plan = rng_for(O.seed, 0, 77);
	char ps[16];
	int threaded = 0;
	double t_start = now_s();
	pthread_t wd;

	snprintf(ps, sizeof ps, "%d", port);
	int e = getaddrinfo(host, ps, &hints, &ai);
	if (e)
		die("host %s: %s", host, gai_strerror(e));

	C.n = O.conns;
	C.c = calloc((size_t)C.n, sizeof *C.c);
	pthread_t *thr = calloc((size_t)C.n, sizeof *thr);
	if (!C.c || !thr)
		die("out of memory");
	if (pthread_create(&wd, NULL, cli_watchdog, &t_start))
		die("pthread_create failed");

	uint64_t per = O.bytes / (uint64_t)C.n, extra = O.bytes % (uint64_t)C.n;
	for (int i = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		c->id = (uint32_t)i;
		c->seed = O.seed;
		c->half_close = O.half_close;
		c->max_msg = O.max_msg;
		c->corrupt_at = UNBOUNDED;
		if (O.duration > 0) {
			c->tx_total = c->rx_total = UNBOUNDED;
		} else {
			/* this connection's share, split between the directions:
			 * mostly both ways, now and then one way only */
			uint64_t mine = per + ((uint64_t)i < extra), up;
			unsigned pick = rnext(&plan) % 32;
			up = pick == 0 ? 0 : pick == 1 ? mine
				: (uint64_t)((double)mine * (0.1 + 0.8 * (rnext(&plan) % 1001) / 1000.0));
			c->tx_total = up;
			c->rx_total = mine - up;
		}
		c->mode = O.mode == M_MIXED ? (int)(rnext(&plan) % 3) : O.mode;
		if (c->mode != M_EPOLL && ++threaded > MAX_THREADED)
			c->mode = M_EPOLL;
		conn_streams(c);
		put64(c->hdr, HDR_MAGIC);
		put32(c->hdr + 8, HDR_VERSION | (c->half_close ? HF_HALFCLOSE : 0) << 16);
		put32(c->hdr + 12, c->id);
		put64(c->hdr + 16, c->seed);
		put64(c->hdr + 24, c->tx_total);
		put64(c->hdr + 32, c->rx_total);
		put32(c->hdr + 40, c->max_msg);
		touch(c);
	}
	for (int i = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		int one = 1;
		if (cli_connect(c, ai, c->mode != M_BLOCKING) < 0)
			die("connect failed");	/* not reached: conn_fail exits */
		if (rnext(&plan) & 1)
			setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		touch(c);
	}
	freeaddrinfo(ai);

	int nws = O.threads;
	struct worker *ws = workers_new(nws, false);
	C.t0 = now_s();
	for (int i = 0, k = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		if (O.duration > 0)
			c->stop_at = C.t0 + O.duration;
		touch(c);
		if (c->mode == M_EPOLL) {
			worker_add(&ws[k++ % nws], c);
		} else if ((e = pthread_create(&thr[i], NULL, cli_conn_thread, c))) {
			die("pthread_create: %s", strerror(e));
		}
	}
	for (int i = 0; i < nws; i++)
		worker_start(&ws[i]);
	for (int i = 0; i < C.n; i++)
		if (C.c[i].mode != M_EPOLL)
			pthread_join(thr[i], NULL);
	for (int i = 0; i < nws; i++) {
		pthread_join(ws[i].thr, NULL);
		close(ws[i].ep);
	}
	st->secs = now_s() - C.t0;
	atomic_store(&C.finished, true);
	pthread_join(wd, NULL);

	st->sent = st->recv = 0;
	for (int i = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		st->sent += c->tx_off;
		st->recv += c->rx_off;
		if (O.verbose)
			printf("stress: conn=%" PRIu32 " OK mode=%s sent=%" PRIu64 " crc32c=%08" PRIx32
			       " recv=%" PRIu64 " crc32c=%08" PRIx32 "\n", c->id, mode_name[c->mode],
			       c->tx_off, c->crc_tx, c->rx_off, c->crc_rx);
		free(c->txbuf);
		c->txbuf = NULL;
	}
	free(ws);
	free(thr);
}

static void print_ok(const struct cli_stats *st)
{
	double mibs = st->secs > 0 ? (double)(st->sent + st->recv) / 1048576.0 / st->secs : 0;
	printf("stress: OK conns=%d sent=%" PRIu64 " recv=%" PRIu64 " MiB/s=%.1f\n",
	       O.conns, st->sent, st->recv, mibs);
	fflush(stdout);
}

/* ---------------------------------------------------------------- selftest */

static int server_status;

static void *selftest_server(void *arg)
{
	server_status = server_run(*(int *)arg);
	return NULL;
}

static int selftest(void)
{
	static const char digits[] = "123456789";
	struct cli_stats st;
	pthread_t t;
	int lfd;

	if (crc32c(0, digits, 9) != 0xe3069283u)
		die("CRC32C self-check failed");
	if (!O.host)
		O.host = "127.0.0.1";
	lfd = listen_on(O.host, 0);
	O.port = local_port(lfd);
	O.exit_after = O.conns;
	S.quiet = true;
	S.nres = O.conns;
	S.res = calloc((size_t)O.conns, sizeof *S.res);
	if (!S.res)
		die("out of memory");
	if (pthread_create(&t, NULL, selftest_server, &lfd))
		die("pthread_create failed");

	client_run(O.host, O.port, &st);
	pthread_join(t, NULL);
	close(lfd);

	/* the server's view of each connection must match the client's */
	for (int i = 0; i < O.conns; i++) {
		struct conn *c = &C.c[i];
		struct srv_result *r = &S.res[i];
		if (!r->seen || !r->ok)
			die("server did not finish conn=%d cleanly", i);
		if (r->rx != c->tx_off || r->crc_rx != c->crc_tx)
			die("conn=%d client sent %" PRIu64 " bytes crc32c=%08" PRIx32 ", server received %"
			    PRIu64 " crc32c=%08" PRIx32, i, c->tx_off, c->crc_tx, r->rx, r->crc_rx);
		if (r->tx != c->rx_off || r->crc_tx != c->crc_rx)
			die("conn=%d server sent %" PRIu64 " bytes crc32c=%08" PRIx32 ", client received %"
			    PRIu64 " crc32c=%08" PRIx32, i, r->tx, r->crc_tx, c->rx_off, c->crc_rx);
	}
	if (server_status)
		die("server reported failures");
	print_ok(&st);
	return 0;
}

/* ------------------------------------------------------------------- main */

static void usage(FILE *f)
{
	fputs("usage: stress server --port P [--bind ADDR] [--exit-after N] [--mode M]\n"
	      "                     [--timeout SECS] [--threads T] [-v]\n"
	      "         prints \"READY <port>\" when listening (--port 0: any free port)\n"
	      "       stress client --host ADDR --port P [--conns N] [--bytes TOTAL] [--seed S]\n"
	      "                     [--max-msg BYTES] [--mode M] [--half-close]\n"
	      "                     [--duration SECS] [--timeout SECS] [--threads T] [-v]\n"
	      "       stress selftest [client options]\n"
	      "  M: blocking | nonblock | epoll-et | mixed (default mixed, per connection)\n"
	      "  TOTAL, BYTES: with suffix K, M, G (powers of 1024); TOTAL is the payload\n"
	      "  of all connections, both directions (default 64M); --max-msg default 1M\n"
	      "  --timeout: client: whole run (default 120 s); server: per-connection idle\n"
	      "  --threads: epoll-et event loops (default: CPUs, 2..8)\n", f);
}

static uint64_t parse_size(const char *s, const char *what)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	case 't': case 'T': mul = 1ull << 40; end++; break;
	}
	if (mul > 1 && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (errno || end == s || *end || (v && mul > UINT64_MAX / v)) {
		fprintf(stderr, "stress: bad %s: %s\n", what, s);
		exit(2);
	}
	return v * mul;
}

static double parse_num(const char *s, const char *what)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || v < 0) {
		fprintf(stderr, "stress: bad %s: %s\n", what, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	enum { O_HOST = 256, O_PORT, O_BIND, O_CONNS, O_BYTES, O_SEED, O_MAXMSG, O_MODE,
	       O_HALF, O_DUR, O_TIMEOUT, O_EXIT, O_CORRUPT, O_THREADS };
	static const struct option lo[] = {
		{ "host", 1, 0, O_HOST }, { "port", 1, 0, O_PORT }, { "bind", 1, 0, O_BIND },
		{ "conns", 1, 0, O_CONNS }, { "bytes", 1, 0, O_BYTES }, { "seed", 1, 0, O_SEED },
		{ "max-msg", 1, 0, O_MAXMSG }, { "mode", 1, 0, O_MODE },
		{ "half-close", 0, 0, O_HALF }, { "duration", 1, 0, O_DUR },
		{ "timeout", 1, 0, O_TIMEOUT }, { "exit-after", 1, 0, O_EXIT },
		{ "corrupt-at", 1, 0, O_CORRUPT }, { "threads", 1, 0, O_THREADS },
		{ "verbose", 0, 0, 'v' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int opt;
	bool port_given = false;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	const char *cmd = argv[1];
	O.threads = default_threads();
	optind = 2;
	while ((opt = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
		switch (opt) {
		case O_HOST: O.host = optarg; break;
		case O_BIND: O.bind = optarg; break;
		case O_PORT: O.port = (int)parse_num(optarg, "--port"); port_given = true; break;
		case O_CONNS: O.conns = (int)parse_num(optarg, "--conns"); break;
		case O_BYTES: O.bytes = parse_size(optarg, "--bytes"); break;
		case O_SEED: O.seed = parse_size(optarg, "--seed"); break;
		case O_MAXMSG: O.max_msg = (uint32_t)parse_size(optarg, "--max-msg"); break;
		case O_HALF: O.half_close = true; break;
		case O_DUR: O.duration = parse_num(optarg, "--duration"); break;
		case O_TIMEOUT: O.timeout = parse_num(optarg, "--timeout"); break;
		case O_EXIT: O.exit_after = (int)parse_num(optarg, "--exit-after"); break;
		case O_CORRUPT: O.corrupt_at = parse_size(optarg, "--corrupt-at"); break;
		case O_THREADS: O.threads = (int)parse_num(optarg, "--threads"); break;
		case 'v': O.verbose = 1; break;
		case O_MODE:
			for (O.mode = 0; O.mode < 4 && strcmp(optarg, mode_name[O.mode]); O.mode++)
				;
			if (O.mode == 4) {
				fprintf(stderr, "stress: bad --mode %s\n", optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stress: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	if (O.conns < 1 || O.conns > 100000 || O.threads < 1 || O.threads > 256 ||
	    O.max_msg < 1 || O.max_msg > (1u << 30) || O.port < 0 || O.port > 65535) {
		fprintf(stderr, "stress: option out of range (conns 1..100000, threads 1..256, "
			"max-msg 1..1G, port 0..65535)\n");
		return 2;
	}
	if (O.conns > MAX_THREADED && (O.mode == M_BLOCKING || O.mode == M_NONBLOCK) &&
	    strcmp(cmd, "server")) {
		fprintf(stderr, "stress: --mode %s runs one thread per connection, so at most %d "
			"connections; use --mode epoll-et or mixed\n", mode_name[O.mode], MAX_THREADED);
		return 2;
	}
	if (O.duration > 0)
		O.half_close = true;	/* unbounded streams end with shutdown */

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	crc_init();
	raise_nofile();

	if (!strcmp(cmd, "selftest"))
		return selftest();
	if (!strcmp(cmd, "server")) {
		if (!port_given) {
			fprintf(stderr, "stress: server needs --port (0: any free port)\n");
			return 2;
		}
		int lfd = listen_on(O.bind, O.port);
		printf("READY %d\n", local_port(lfd));
		fflush(stdout);
		return server_run(lfd);
	}
	if (!strcmp(cmd, "client")) {
		struct cli_stats st;
		if (!O.host || !O.port) {
			fprintf(stderr, "stress: client needs --host and --port\n");
			return 2;
		}
		client_run(O.host, O.port, &st);
		print_ok(&st);
		return 0;
	}
	usage(stderr);
	return 2;
}
