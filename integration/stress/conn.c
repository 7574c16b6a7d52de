/*
 * conn.c — one connection's state and the two steps every mode is built
 * from: rx_step (one random read, every byte checked against the stream) and
 * tx_step (one random write of the stream, resumed after partial writes).
 * The server reads the 48-byte header first, the client writes it first.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "stress.h"

struct rxbufs *rxbufs_new(void)
{
	struct rxbufs *b = xmalloc(sizeof *b);
	b->buf = xmalloc(RX_MAX + MAX_IOV * IOV_GAP);
	b->peek = xmalloc(RX_MAX);
	b->exp = xmalloc(EXP_CHUNK);
	return b;
}

void rxbufs_free(struct rxbufs *b)
{
	free(b->buf);
	free(b->peek);
	free(b->exp);
	free(b);
}

void touch(struct conn *c)
{
	atomic_store_explicit(&c->last_ms, now_ms(), memory_order_relaxed);
}

bool is_failed(struct conn *c)
{
	return atomic_load_explicit(&c->failed, memory_order_relaxed) != 0;
}

pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

/*
 * Record the first failure of a connection. The client reports it and exits
 * at once; the server prints its verdict and shuts the socket down so that
 * the connection's other thread (or its event loop) wakes up and finishes.
 */
void conn_fail(struct conn *c, uint64_t off, const char *fmt, ...)
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

static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }

/* Keys and random generators, once id, seed and role are known. */
void conn_streams(struct conn *c)
{
	c->key_tx = stream_key(c->seed, c->id, c->server);
	c->key_rx = stream_key(c->seed, c->id, !c->server);
	c->rtx = rng_for(c->seed, c->id, c->server ? 3 : 1);
	c->rrx = rng_for(c->seed, c->id, c->server ? 4 : 2);
	if (!c->server && !c->half_close && c->rx_total == 0)
		c->rx_fin = true;
}

bool want_w(struct conn *c)
{
	return !c->tx_fin && (!c->server || c->hdr_ok);
}

bool conn_complete(struct conn *c)
{
	return (!c->server || c->hdr_ok) && c->rx_fin && c->tx_fin;
}

const char *fmt_total(uint64_t v, char *buf, size_t n)
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

int rx_header(struct conn *c)
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
int rx_step(struct conn *c, struct rxbufs *b, bool blocking)
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
int tx_step(struct conn *c, bool blocking)
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
