/* ready_rules: one connection's message stream: the send queue and its
 * writes (R3), the reads and the checks of every byte received (R2, R4,
 * R5). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ready_rules.h"

static __thread unsigned char rbuf[CHUNK];

uint64_t peer_sent(struct conn *c)
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

bool tx_pending(struct conn *c)
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

void client_ask(struct loop *L, struct conn *c)
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
void conn_write(struct loop *L, struct conn *c, bool checked, unsigned max_calls, uint32_t revents)
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
void conn_read(struct loop *L, struct conn *c, bool checked, unsigned max_calls, uint32_t revents)
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

bool conn_finished(struct conn *c)
{
	return c->broken || (atomic_load(&c->eof) && c->wr_shut);
}

void conn_close(struct loop *L, struct conn *c)
{
	(void)L;
	atomic_store(&c->closed, true);
	close(c->fd);
	atomic_fetch_add(&S->finished[c->side], 1);
	if (!c->broken)
		atomic_fetch_add(&S->clean[c->side], 1);
}

struct conn *conn_new(struct loop *L, int fd, int id)
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
