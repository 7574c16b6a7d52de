/* What this side sends, and the verdict on every byte that comes back. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"

static uint8_t letter(uint64_t i)
{
	return (uint8_t)('a' + (i * 7 + i / 26) % 26);
}

/* --resp: the stream is a redis SET of --payload letters, then (after the
 * lie) a GET of it, whose reply the server writes in one piece. */
static struct {
	uint8_t *b;
	size_t set_len, len;
} resp;

void resp_build(void)
{
	char head[64];
	int h = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%zu\r\n", o.payload);
	static const char get[] = "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";

	resp.set_len = (size_t)h + o.payload + 2;
	resp.len = resp.set_len + sizeof(get) - 1;
	resp.b = malloc(resp.len);
	if (!resp.b)
		exit(1);
	memcpy(resp.b, head, (size_t)h);
	for (size_t i = 0; i < o.payload; i++)
		resp.b[h + i] = letter(i);
	memcpy(resp.b + h + o.payload, "\r\n", 2);
	memcpy(resp.b + resp.set_len, get, sizeof(get) - 1);
}

/* Byte i of what this side sends as the client. */
uint8_t out_byte(uint64_t i)
{
	return resp.b ? (i < resp.len ? resp.b[i] : ' ') : letter(i);
}

/* How far the client's stream goes before (and after) the lie. */
uint64_t out_target(int after_lie)
{
	if (resp.b)
		return after_lie ? resp.len : resp.set_len;
	return (after_lie ? 2 : 1) * o.payload;
}

static void buf_add(struct buf *b, const void *data, size_t len)
{
	if (b->len + len > b->cap) {
		b->cap = (b->len + len) * 2 + 4096;
		b->b = realloc(b->b, b->cap);
		if (!b->b)
			fail_setup("out of memory");
	}
	memcpy(b->b + b->len, data, len);
	b->len += len;
}

/* Ring bytes of ours: what S takes as data, unless it reads only TCP. */
void expect_add(const void *data, size_t len)
{
	if (!st.tcp_is_data)
		buf_add(&st.expect, data, len);
}

/* TCP bytes of ours: S takes them as data when it never switched (or was
 * told a switch offset it never reaches). */
int tcp_send(const void *data, size_t len)
{
	buf_add(st.tcp_is_data ? &st.expect : &st.tcplog, data, len);
	return send_all(st.tcp, data, len);
}

/* From now on S takes all our TCP bytes, from the first, as data. */
void tcp_becomes_data(void)
{
	free(st.expect.b);
	st.expect = st.tcplog;
	memset(&st.tcplog, 0, sizeof(st.tcplog));
	st.tcp_is_data = 1;
}

void classify(const uint8_t *b, size_t n)
{
	if (resp.b) {
		/* Redis answers, it does not echo: count only. */
		st.echoed += n;
		return;
	}
	for (size_t i = 0; i < n; i++, st.echoed++) {
		if (st.echoed < st.expect.len && st.expect.b[st.echoed] == b[i])
			st.good++;
		else if (b[i] == FILLER || (b[i] >= 'a' && b[i] <= 'z'))
			st.never_sent++;
		else
			st.foreign++;
	}
}

/* Reads exactly len TCP bytes (deadline wait_ms): 0, or -1 with errno
 * ETIMEDOUT, EPIPE for an EOF, or recv's own (ECONNRESET: a reset). */
int recv_exact(void *buf, size_t len)
{
	uint8_t *b = buf;
	long long end = now_ms() + o.wait_ms;

	while (len) {
		if (!wait_fd(st.tcp, POLLIN, (int)(end - now_ms() > 0 ? end - now_ms() : 0))) {
			errno = ETIMEDOUT;
			return -1;
		}
		ssize_t n = recv(st.tcp, b, len, MSG_DONTWAIT);

		if (n <= 0) {
			if (n < 0 && errno == EAGAIN)
				continue;
			if (n == 0)
				errno = EPIPE;
			return -1;
		}
		b += n;
		len -= (size_t)n;
	}
	return 0;
}
