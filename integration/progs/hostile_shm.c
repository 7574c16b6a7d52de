/*
 * hostile_shm: a peer that speaks the shared-memory upgrade protocol itself
 * (shim/PROTOCOL.md, shim/wire.h, shim/ring.h; no shim header is included on
 * purpose: an attacker has only the documented formats) and lies in one field
 * per run, for t_shm_hostile.
 *
 *   hostile_shm --role client --connect 127.0.0.1:PORT --mode M [options]
 *       a fake C against a shimmed server S: binds its TCP socket first,
 *       listens on the rendezvous named by the 4-tuple, connects, sends a
 *       short prefix on TCP (S starts its upgrade on its first data call),
 *       answers S's OFFER with an ACCEPT carrying a memfd of its own, writes
 *       SWITCH in-band, then talks over the ring.
 *   hostile_shm --role server --listen 127.0.0.1:PORT --mode M [options]
 *       a fake S against a shimmed client C (e.g. echo_client): accepts one
 *       connection, connects to C's rendezvous, OFFERs, maps C's memfd,
 *       echoes C's bytes back (honestly unless the mode lies).
 *   hostile_shm --role flood --seconds S [--procs N]
 *       N processes connect, in a loop, to every "@rdmashim1/" name listed
 *       in /proc/net/unix (world-readable) and hang up.
 *
 * Options: --ring BYTES (client role: the ring size to announce; default the
 * OFFER's), --payload BYTES (honest bytes before the lie, default 64 KiB),
 * --seconds S (how long to go on after the lie, default 2), --wait-ms N
 * (handshake waits, default 4000), --resp 1 (client role: against
 * redis-server, the stream is "SET k <payload letters>", then after the lie
 * "GET k", so the server writes the whole value at once; replies are counted,
 * not classified).
 *
 * Modes (one lie each; "honest" lies in nothing and must echo exactly):
 *   tail_far      producer tail 1 GiB ahead of the bytes written
 *   tail_over     producer tail one ring plus one byte ahead of the consumer
 *   head_ahead    consumer head 1 GiB ahead of the producer's tail
 *   head_behind   consumer head more than one ring behind the tail
 *   flip          a thread flips tail and head between true and 1 GiB off
 *   ring_size     ACCEPT ring_bytes twice what the memfd holds (client role)
 *   ring_hdr      ring header size field half of ring_bytes (client role)
 *   tiny          honest, with a 4 KiB ring (client role)
 *   noseal        memfd without seals; shrunk to 0 once S switched
 *   trunc         ACCEPT 100 bytes long (MSG_TRUNC) with the memfd attached
 *   ctrunc        ACCEPT with 8 fds attached (MSG_CTRUNC at the receiver)
 *   extra_fds     a valid ACCEPT with the memfd and 2 more fds
 *   resume        a RESUME frame on the switched shm connection
 *   garbage       a byte that starts no frame ('X') after the switch
 *   badnonce      the in-band SWITCH frame carries a wrong nonce
 *   offset_huge   switch offset 2^62 (ACCEPT, or SWITCH_AT in server role)
 *
 * The bytes this side sends are letters ('a'..'z', a known stream); every
 * byte of its rings that it did not write holds FILLER (0xEE). Each byte
 * echoed back is classified: "good" (the byte sent at that position),
 * "never_sent" (a letter or FILLER out of place: the victim delivered ring
 * bytes that were never published) or "foreign" (anything else: the
 * victim's own memory, or another connection's). In server role, the ring
 * the victim only reads is compared with a shadow copy at the end: "oob"
 * counts bytes the victim wrote outside its own ring.
 *
 * Last line: "RESULT role=R mode=M reached=yes|no sent=N echoed=N good=N
 * never_sent=N foreign=N oob=N end=open|eof|reset" (reached: the lie went
 * out to a peer that had switched, or, for handshake lies, was sent). Exit
 * status 0 when nothing foreign, never sent or out of bounds came back, 3
 * when something did, 1 when the handshake could not be set up, 2 on usage.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the documented formats (shim/wire.h, shim/ring.h) ---- */
#define WIRE_MAGIC 0x52534831u
#define WIRE_VERSION 1
enum { MSG_OFFER = 1, MSG_ACCEPT = 2, MSG_SWITCH_AT = 3 };

struct hdr {
	uint32_t magic;
	uint16_t version, type;
	uint32_t length, reserved;
};
struct offer {
	struct hdr hdr;
	uint8_t nonce[16];
	uint32_t ring_bytes;
	int32_t tcp_fd;
};
struct accept {
	struct hdr hdr;
	uint8_t nonce[16];
	uint64_t switch_offset;
	uint32_t ring_bytes;
	int32_t tcp_fd;
};
struct switch_at {
	struct hdr hdr;
	uint64_t switch_offset;
};
_Static_assert(sizeof(struct offer) == 40, "offer is 40 bytes");
_Static_assert(sizeof(struct accept) == 48, "accept is 48 bytes");
_Static_assert(sizeof(struct switch_at) == 24, "switch_at is 24 bytes");

struct sw_frame {
	uint8_t type, reserved[7], nonce[16];
};
struct resume_frame {
	uint8_t type, reserved[7];
	uint64_t rx_offset_be;
};
_Static_assert(sizeof(struct sw_frame) == 24, "switch frame is 24 bytes");
_Static_assert(sizeof(struct resume_frame) == 16, "resume frame is 16 bytes");

#define RING_MAGIC 0x52494e47u
#define RING_HDR 4096u
struct ring_hdr {
	uint32_t magic, size;
	uint8_t pad0[56];
	uint64_t tail;
	uint32_t producer_closed, producer_wants_space;
	uint8_t pad1[48];
	uint64_t head;
	uint32_t consumer_armed, consumer_closed;
	uint8_t pad2[48];
};
_Static_assert(offsetof(struct ring_hdr, tail) == 64 && offsetof(struct ring_hdr, head) == 128 &&
		       sizeof(struct ring_hdr) == 192,
	       "ring header layout");

#define FILLER 0xEE
#define GIB (1ull << 30)

struct ring {
	struct ring_hdr *h;
	uint8_t *data;
	uint32_t size;
};

static struct {
	const char *role, *mode, *addr;
	uint32_t ring;
	size_t payload;
	int seconds, wait_ms, procs, resp;
} o = { .mode = "honest", .payload = 64 * 1024, .seconds = 2, .wait_ms = 4000, .procs = 4 };

struct buf {
	uint8_t *b;
	size_t len, cap;
};

static struct {
	int tcp, rv;
	uint8_t *map;
	size_t map_len;
	struct ring tx, rx;     /* tx: we produce, rx: we consume */
	uint8_t *shadow;        /* server role: what our tx data must hold */
	struct buf expect;      /* client role: the stream S takes as data from us */
	struct buf tcplog;      /* client role: every byte we wrote to TCP */
	int tcp_is_data;        /* S takes all our TCP bytes as data (no switch) */
	uint64_t sent, echoed, good, never_sent, foreign, oob;
	int reached, eof, reset, lie_done;
	uint64_t tcp_app_left;  /* client role: S's TCP app bytes before its switch */
} st = { .tcp = -1, .rv = -1 };

static int is_mode(const char *m)
{
	return !strcmp(o.mode, m);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

static void resp_build(void)
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
static uint8_t out_byte(uint64_t i)
{
	return resp.b ? (i < resp.len ? resp.b[i] : ' ') : letter(i);
}

/* How far the client's stream goes before (and after) the lie. */
static uint64_t out_target(int after_lie)
{
	if (resp.b)
		return after_lie ? resp.len : resp.set_len;
	return (after_lie ? 2 : 1) * o.payload;
}

static void say(const char *fmt, const char *arg)
{
	printf("hostile_shm: ");
	printf(fmt, arg);
	printf("\n");
}

static void result(void)
{
	printf("RESULT role=%s mode=%s reached=%s sent=%llu echoed=%llu good=%llu never_sent=%llu foreign=%llu "
	       "oob=%llu end=%s\n",
	       o.role, o.mode, st.reached ? "yes" : "no", (unsigned long long)st.sent,
	       (unsigned long long)st.echoed, (unsigned long long)st.good, (unsigned long long)st.never_sent,
	       (unsigned long long)st.foreign, (unsigned long long)st.oob,
	       st.reset ? "reset" : st.eof ? "eof" : "open");
	exit(st.foreign || st.never_sent || st.oob ? 3 : 0);
}

static void fail_setup(const char *what)
{
	printf("hostile_shm: setup: %s (%s)\n", what, errno ? strerror(errno) : "-");
	printf("RESULT role=%s mode=%s reached=no setup_failed\n", o.role, o.mode);
	exit(1);
}

static void random_bytes(void *buf, size_t n)
{
	if (getrandom(buf, n, 0) != (ssize_t)n)
		memset(buf, 0x5a, n);
}

/* ---- endpoints and the rendezvous name (shim/rendezvous.c) ---- */
static socklen_t rv_name(struct sockaddr_un *sun, const struct sockaddr_in *c, const struct sockaddr_in *s)
{
	static const char hex[] = "0123456789abcdef";
	const struct sockaddr_in *eps[2] = { c, s };
	char *p = sun->sun_path + 1;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	p += sprintf(p, "rdmashim1/");
	for (int e = 0; e < 2; e++) {
		uint8_t raw[18] = { [10] = 0xff, [11] = 0xff };

		memcpy(raw + 12, &eps[e]->sin_addr, 4);
		memcpy(raw + 16, &eps[e]->sin_port, 2); /* already big-endian */
		for (size_t i = 0; i < sizeof(raw); i++) {
			*p++ = hex[raw[i] >> 4];
			*p++ = hex[raw[i] & 15];
		}
	}
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - sun->sun_path));
}

static int parse_addr(const char *text, struct sockaddr_in *sin)
{
	char host[64];
	const char *colon = strrchr(text, ':');

	if (!colon || (size_t)(colon - text) >= sizeof(host))
		return -1;
	memcpy(host, text, (size_t)(colon - text));
	host[colon - text] = '\0';
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)atoi(colon + 1));
	return inet_pton(AF_INET, host, &sin->sin_addr) == 1 ? 0 : -1;
}

/* ---- blocking-with-deadline helpers ---- */
static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };

	return poll(&p, 1, ms) > 0;
}

static int send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	while (len) {
		ssize_t n = send(fd, b, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EAGAIN && wait_fd(fd, POLLOUT, 1000))
				continue;
			return -1;
		}
		b += n;
		len -= (size_t)n;
	}
	return 0;
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
static void expect_add(const void *data, size_t len)
{
	if (!st.tcp_is_data)
		buf_add(&st.expect, data, len);
}

/* TCP bytes of ours: S takes them as data when it never switched (or was
 * told a switch offset it never reaches). */
static int tcp_send(const void *data, size_t len)
{
	buf_add(st.tcp_is_data ? &st.expect : &st.tcplog, data, len);
	return send_all(st.tcp, data, len);
}

/* From now on S takes all our TCP bytes, from the first, as data. */
static void tcp_becomes_data(void)
{
	free(st.expect.b);
	st.expect = st.tcplog;
	memset(&st.tcplog, 0, sizeof(st.tcplog));
	st.tcp_is_data = 1;
}

static void classify(const uint8_t *b, size_t n)
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

/* Reads exactly len TCP bytes (deadline wait_ms); -1 on EOF/error/timeout. */
static int recv_exact(void *buf, size_t len)
{
	uint8_t *b = buf;
	long long end = now_ms() + o.wait_ms;

	while (len) {
		if (!wait_fd(st.tcp, POLLIN, (int)(end - now_ms() > 0 ? end - now_ms() : 0)))
			return -1;
		ssize_t n = recv(st.tcp, b, len, MSG_DONTWAIT);

		if (n <= 0) {
			if (n < 0 && errno == EAGAIN)
				continue;
			return -1;
		}
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---- the rings ---- */
static void map_rings(int memfd, size_t len, uint32_t size, int we_are_client)
{
	st.map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (st.map == MAP_FAILED)
		fail_setup("mmap");
	st.map_len = len;
	struct ring c2s = { (struct ring_hdr *)st.map, st.map + RING_HDR, size };
	struct ring s2c = { (struct ring_hdr *)(st.map + RING_HDR + size), st.map + 2 * RING_HDR + size, size };

	st.tx = we_are_client ? c2s : s2c;
	st.rx = we_are_client ? s2c : c2s;
}

static void bell(char b)
{
	tcp_send(&b, 1);
}

/* Produces honest letters (position-true) into tx; returns bytes written. */
static size_t produce(size_t max)
{
	uint64_t tail = st.tx.h->tail;
	uint64_t head = __atomic_load_n(&st.tx.h->head, __ATOMIC_ACQUIRE);
	uint64_t used = tail - head;
	size_t room = used > st.tx.size ? 0 : st.tx.size - (size_t)used, n = max < room ? max : room;

	for (size_t i = 0; i < n; i++) {
		uint8_t b = out_byte(st.sent + i);

		st.tx.data[(tail + i) & (st.tx.size - 1)] = b;
		if (st.shadow)
			st.shadow[(tail + i) & (st.tx.size - 1)] = b;
	}
	if (!n)
		return 0;
	if (!st.shadow)
		for (size_t i = 0; i < n; i++) {
			uint8_t b = out_byte(st.sent + i);

			expect_add(&b, 1);
		}
	st.sent += n;
	/* Release pairs with the victim's acquire load of tail. */
	__atomic_store_n(&st.tx.h->tail, tail + n, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&st.tx.h->consumer_armed, 0, __ATOMIC_RELAXED))
		bell('D');
	return n;
}

/* Takes what rx holds (never more than one ring, whatever tail says). */
static size_t consume(uint8_t *out, size_t max)
{
	uint64_t head = st.rx.h->head;
	uint64_t tail = __atomic_load_n(&st.rx.h->tail, __ATOMIC_ACQUIRE);
	uint64_t avail = tail - head;
	size_t n;

	if (avail > st.rx.size)
		avail = st.rx.size;
	n = avail < max ? (size_t)avail : max;
	for (size_t i = 0; i < n; i++)
		out[i] = st.rx.data[(head + i) & (st.rx.size - 1)];
	if (!n)
		return 0;
	__atomic_store_n(&st.rx.h->head, head + n, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&st.rx.h->producer_wants_space, 0, __ATOMIC_RELAXED))
		bell('S');
	return n;
}

/* TCP after the victim's switch: bells only, or its end. */
static void read_tcp(void)
{
	uint8_t buf[4096];

	while (!st.eof && !st.reset) {
		ssize_t n = recv(st.tcp, buf, sizeof(buf), MSG_DONTWAIT);

		if (n == 0)
			st.eof = 1;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			st.reset = 1;
		if (n <= 0)
			return;
		if (st.tcp_app_left) {
			size_t app = (uint64_t)n < st.tcp_app_left ? (size_t)n : (size_t)st.tcp_app_left;

			classify(buf, app);
			st.tcp_app_left -= app;
		}
	}
}

/* ---- the lies made after the switch ---- */
static volatile int flipping;

static void *flipper(void *arg)
{
	uint64_t tail = st.tx.h->tail, head = st.rx.h->head;

	(void)arg;
	for (unsigned long i = 0; flipping; i++) {
		uint64_t d = (i & 1) ? GIB : 0;

		__atomic_store_n(&st.tx.h->tail, tail + d, __ATOMIC_RELEASE);
		__atomic_store_n(&st.rx.h->head, head + d, __ATOMIC_RELEASE);
		if ((i & 1023) == 0)
			usleep(100);
	}
	st.tx.h->tail = tail;
	st.rx.h->head = head;
	return NULL;
}

static pthread_t flip_thread;

static void lie_after_switch(int memfd)
{
	if (is_mode("tail_far")) {
		st.tx.h->tail += GIB;
		bell('D');
	} else if (is_mode("tail_over")) {
		st.tx.h->tail = st.tx.h->head + st.tx.size + 1;
		bell('D');
	} else if (is_mode("head_ahead")) {
		st.rx.h->head = st.rx.h->tail + GIB;
		bell('S');
	} else if (is_mode("head_behind")) {
		st.rx.h->head = st.rx.h->tail - st.rx.size - 4096;
		bell('S');
	} else if (is_mode("flip")) {
		flipping = 1;
		if (pthread_create(&flip_thread, NULL, flipper, NULL))
			fail_setup("pthread_create");
	} else if (is_mode("resume")) {
		struct resume_frame f = { .type = 'R', .rx_offset_be = htobe64(st.echoed) };

		tcp_send(&f, sizeof(f));
	} else if (is_mode("garbage")) {
		tcp_send("X", 1);
	} else if (is_mode("noseal")) {
		if (ftruncate(memfd, 0) == 0)
			say("%s", "memfd shrunk to 0 bytes under the victim's mapping");
		else
			say("memfd could not be shrunk: %s", strerror(errno));
		bell('D');
		bell('S');
	} else {
		return;
	}
	st.lie_done = 1;
	say("lie %s sent", o.mode);
}

static int lie_in_ring(void)
{
	static const char *const modes[] = { "tail_far", "tail_over", "head_ahead", "head_behind",
					     "flip", "resume", "garbage", "noseal" };

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (is_mode(modes[i]))
			return 1;
	return 0;
}

/*
 * The data phase: honest payload first (and, in server role, an honest echo),
 * then the mode's lie, then o.seconds of watching what comes back. The bytes
 * sent after a head lie make the victim write (into a ring it thinks has
 * room); the ring's letters after a tail lie are what it must not take.
 */
static void pump(int memfd, int echo)
{
	uint8_t buf[65536];
	long long start = now_ms(), lie_at = 0, end = 0;
	int head_lie = is_mode("head_ahead") || is_mode("head_behind");

	for (;;) {
		long long t = now_ms();

		read_tcp();
		if (!is_mode("flip") || !flipping) {
			if (echo && !(st.lie_done && head_lie)) {
				/* Server role: echo rx into tx (the shadow keeps
				 * what the victim must find there); after a tail
				 * lie, only drain. */
				int stop_tx = st.lie_done && lie_in_ring();
				uint64_t used = st.tx.h->tail - st.tx.h->head;
				size_t room = stop_tx ? sizeof(buf) : used > st.tx.size ? 0 : st.tx.size - (size_t)used;
				size_t n = consume(buf, room < sizeof(buf) ? room : sizeof(buf));

				for (size_t i = 0; i < n && !stop_tx; i++) {
					uint64_t tail = st.tx.h->tail + i;

					st.tx.data[tail & (st.tx.size - 1)] = buf[i];
					st.shadow[tail & (st.tx.size - 1)] = buf[i];
				}
				if (n && !stop_tx) {
					st.sent += n;
					__atomic_store_n(&st.tx.h->tail, st.tx.h->tail + n, __ATOMIC_RELEASE);
					__atomic_thread_fence(__ATOMIC_SEQ_CST);
					if (__atomic_exchange_n(&st.tx.h->consumer_armed, 0, __ATOMIC_RELAXED))
						bell('D');
				}
			} else if (!echo) {
				if (!st.lie_done || head_lie || !lie_in_ring())
					if (st.sent < out_target(st.lie_done))
						produce(out_target(st.lie_done) - st.sent);
				if (!st.lie_done || !head_lie)
					classify(buf, consume(buf, sizeof(buf)));
			}
		}
		if (lie_in_ring() && !lie_at &&
		    ((!echo && st.echoed >= (resp.b ? 5 : o.payload)) || (echo && st.sent >= o.payload) || t - start > 1500)) {
			lie_after_switch(memfd);
			lie_at = t;
			end = t + o.seconds * 1000LL;
			if (is_mode("flip"))
				end = t + 1000;
		}
		/* An honest fake server echoes until its client is done. */
		if (!lie_in_ring() && !lie_at && !end)
			end = t + (echo && is_mode("honest") ? 15000 : o.seconds * 1000LL);
		if (is_mode("flip") && flipping && t >= end) {
			flipping = 0;
			pthread_join(flip_thread, NULL);
			end = t + o.seconds * 1000LL;
		}
		if (is_mode("flip") && flipping && (t & 7) == 0) {
			bell('D');
			bell('S');
		}
		if ((end && t >= end) || st.eof || st.reset)
			break;
		wait_fd(st.tcp, POLLIN, 1);
	}
	if (!echo && !(st.lie_done && head_lie)) {
		/* Last look at what the victim left in the ring. */
		classify(buf, consume(buf, sizeof(buf)));
	}
}

/* ---- fake client against a shimmed server ---- */
static int make_memfd(uint32_t size, size_t *len_out)
{
	int fd = memfd_create("hostile-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t len = 2 * ((size_t)RING_HDR + size);

	if (is_mode("ring_size"))
		len = 2 * ((size_t)RING_HDR + size / 2);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
		fail_setup("memfd");
	if (!is_mode("noseal") && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		fail_setup("seals");
	*len_out = len;
	return fd;
}

static int send_accept(int memfd, const struct accept *acc)
{
	uint8_t msg[100];
	size_t len = sizeof(*acc);
	int fds[8] = { memfd, -1, -1, -1, -1, -1, -1, -1 }, nfds = 1;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(fds))];
	} control;

	memset(msg, 0, sizeof(msg));
	memcpy(msg, acc, sizeof(*acc));
	if (is_mode("trunc"))
		len = sizeof(msg); /* longer than the receiver's buffer: MSG_TRUNC */
	if (is_mode("ctrunc"))
		nfds = 8; /* more than the receiver's control buffer: MSG_CTRUNC */
	if (is_mode("extra_fds"))
		nfds = 3;
	for (int i = 1; i < nfds; i++)
		fds[i] = memfd_create("hostile-extra", MFD_CLOEXEC);
	struct iovec iov = { msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	memset(control.buf, 0, sizeof(control.buf));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	ssize_t n = sendmsg(st.rv, &mh, MSG_NOSIGNAL);

	for (int i = 1; i < nfds; i++)
		close(fds[i]);
	return n == (ssize_t)len ? 0 : -1;
}

static void run_client(void)
{
	struct sockaddr_in srv, me;
	socklen_t slen = sizeof(me);
	struct sockaddr_un sun;
	socklen_t nlen;
	int lfd, memfd;
	uint8_t prefix[6];

	if (parse_addr(o.addr, &srv) < 0)
		fail_setup("bad --connect");
	st.tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memset(&me, 0, sizeof(me));
	me.sin_family = AF_INET;
	me.sin_addr = srv.sin_addr;
	if (st.tcp < 0 || bind(st.tcp, (struct sockaddr *)&me, sizeof(me)) < 0 ||
	    getsockname(st.tcp, (struct sockaddr *)&me, &slen) < 0)
		fail_setup("tcp bind");
	/* The name exists before S can look for it. */
	nlen = rv_name(&sun, &me, &srv);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sun, nlen) < 0 || listen(lfd, 4) < 0)
		fail_setup("rendezvous listen");
	if (connect(st.tcp, (struct sockaddr *)&srv, sizeof(srv)) < 0)
		fail_setup("tcp connect");
	for (size_t i = 0; i < sizeof(prefix); i++)
		prefix[i] = out_byte(i);
	expect_add(prefix, sizeof(prefix));
	tcp_send(prefix, sizeof(prefix));
	st.sent = sizeof(prefix);
	if (!wait_fd(lfd, POLLIN, o.wait_ms) || (st.rv = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
		fail_setup("no OFFER: the server never came to the rendezvous");
	close(lfd);

	struct offer off;

	if (!wait_fd(st.rv, POLLIN, o.wait_ms) || recv(st.rv, &off, sizeof(off), 0) != sizeof(off) ||
	    off.hdr.magic != WIRE_MAGIC || off.hdr.type != MSG_OFFER)
		fail_setup("bad OFFER");
	uint32_t size = o.ring ? o.ring : off.ring_bytes;

	if (is_mode("tiny"))
		size = 4096;
	size_t len;

	memfd = make_memfd(size, &len);
	map_rings(memfd, len, is_mode("ring_size") ? size / 2 : size, 1);
	memset(st.map, FILLER, len);
	for (int r = 0; r < 2; r++) {
		struct ring_hdr *h = r ? st.rx.h : st.tx.h;

		memset(h, 0, sizeof(*h));
		h->magic = RING_MAGIC;
		h->size = is_mode("ring_hdr") ? size / 2 : is_mode("ring_size") ? size / 2 : size;
	}
	if (is_mode("ring_size"))
		st.tx.size = st.rx.size = size / 2;

	struct accept acc;

	memset(&acc, 0, sizeof(acc));
	acc.hdr = (struct hdr){ WIRE_MAGIC, WIRE_VERSION, MSG_ACCEPT, sizeof(acc), 0 };
	random_bytes(acc.nonce, sizeof(acc.nonce));
	acc.switch_offset = is_mode("offset_huge") ? 1ull << 62 : st.sent;
	acc.ring_bytes = size;
	acc.tcp_fd = st.tcp;
	if (send_accept(memfd, &acc) < 0)
		fail_setup("send ACCEPT");
	say("ACCEPT sent (%s)", o.mode);
	if (is_mode("trunc") || is_mode("ctrunc") || is_mode("ring_size") || is_mode("ring_hdr") ||
	    is_mode("noseal"))
		st.reached = 1; /* the lie is the handshake message itself */

	struct sw_frame sw = { .type = 'W' };

	memcpy(sw.nonce, off.nonce, sizeof(sw.nonce));
	if (is_mode("badnonce")) {
		sw.nonce[0] ^= 0xff;
		st.reached = 1;
	}
	tcp_send(&sw, sizeof(sw));

	/* S's offset, then its app bytes up to it, then its SWITCH frame. */
	struct switch_at at;

	if (!wait_fd(st.rv, POLLIN, o.wait_ms) || recv(st.rv, &at, sizeof(at), 0) != sizeof(at) ||
	    at.hdr.type != MSG_SWITCH_AT) {
		say("%s", "no SWITCH_AT: the server refused the upgrade");
		st.tcp_app_left = ~0ull; /* it stays on TCP: its bytes are all data */
		tcp_becomes_data();
		if (fcntl(st.tcp, F_SETFL, O_NONBLOCK) < 0)
			fail_setup("nonblock");
		pump(memfd, 0);
		result();
	}
	if (at.switch_offset > (1u << 20))
		fail_setup("SWITCH_AT offset beyond anything sent");
	uint8_t app[1 << 20];

	if (recv_exact(app, (size_t)at.switch_offset) < 0)
		fail_setup("short TCP before the server's switch");
	classify(app, (size_t)at.switch_offset);
	if (recv_exact(&sw, sizeof(sw)) < 0 || sw.type != 'W' || memcmp(sw.nonce, acc.nonce, sizeof(sw.nonce)))
		fail_setup("the server's SWITCH frame is missing or wrong");
	say("%s", "both directions switched");
	if (is_mode("offset_huge"))
		tcp_becomes_data();
	if (lie_in_ring() || is_mode("honest") || is_mode("tiny") || is_mode("extra_fds") ||
	    is_mode("offset_huge"))
		st.reached = 1;
	if (fcntl(st.tcp, F_SETFL, O_NONBLOCK) < 0)
		fail_setup("nonblock");
	pump(memfd, 0);
	result();
}

/* ---- fake server against a shimmed client ---- */
static void run_server(void)
{
	struct sockaddr_in srv, peer;
	socklen_t plen = sizeof(peer);
	struct sockaddr_un sun;
	socklen_t nlen;
	int lfd, one = 1, memfd = -1;
	long long end;

	if (parse_addr(o.addr, &srv) < 0)
		fail_setup("bad --listen");
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&srv, sizeof(srv)) < 0 || listen(lfd, 4) < 0)
		fail_setup("tcp listen");
	printf("READY %u\n", ntohs(srv.sin_port));
	fflush(stdout);
	if (!wait_fd(lfd, POLLIN, 20000) || (st.tcp = accept4(lfd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC)) < 0)
		fail_setup("no client");
	nlen = rv_name(&sun, &peer, &srv);
	/* C listens on its first data call. */
	for (end = now_ms() + o.wait_ms;; usleep(2000)) {
		st.rv = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (connect(st.rv, (struct sockaddr *)&sun, nlen) == 0)
			break;
		close(st.rv);
		if (now_ms() > end)
			fail_setup("the client's rendezvous never appeared");
	}

	struct offer off;

	memset(&off, 0, sizeof(off));
	off.hdr = (struct hdr){ WIRE_MAGIC, WIRE_VERSION, MSG_OFFER, sizeof(off), 0 };
	random_bytes(off.nonce, sizeof(off.nonce));
	off.ring_bytes = 64 * 1024;
	off.tcp_fd = st.tcp;
	if (send(st.rv, &off, sizeof(off), MSG_NOSIGNAL) != sizeof(off))
		fail_setup("send OFFER");

	struct accept acc;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} control;
	struct iovec iov = { &acc, sizeof(acc) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };

	if (!wait_fd(st.rv, POLLIN, o.wait_ms) || recvmsg(st.rv, &mh, MSG_CMSG_CLOEXEC) != sizeof(acc) ||
	    acc.hdr.type != MSG_ACCEPT)
		fail_setup("no ACCEPT: the client refused us");
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(&memfd, CMSG_DATA(c), sizeof(int));
	struct stat sb;

	if (memfd < 0 || fstat(memfd, &sb) < 0 || (uint64_t)sb.st_size < 2 * ((uint64_t)RING_HDR + acc.ring_bytes))
		fail_setup("ACCEPT without a usable memfd");
	map_rings(memfd, (size_t)sb.st_size, acc.ring_bytes, 0);
	/* The ring only the victim reads: whatever we do not write must stay. */
	st.shadow = malloc(st.tx.size);
	if (!st.shadow)
		fail_setup("out of memory");
	memset(st.tx.data, FILLER, st.tx.size);
	memset(st.shadow, FILLER, st.tx.size);

	/* C's TCP bytes up to its offset are data (echoed on TCP), then its frame. */
	uint8_t *app = acc.switch_offset <= (256u << 20) ? malloc((size_t)acc.switch_offset + 1) : NULL;
	struct sw_frame sw;

	if (!app || recv_exact(app, (size_t)acc.switch_offset) < 0 || recv_exact(&sw, sizeof(sw)) < 0)
		fail_setup("short TCP before the client's switch");
	if (sw.type != 'W' || memcmp(sw.nonce, off.nonce, sizeof(sw.nonce)))
		fail_setup("the client's SWITCH frame is wrong");
	send_all(st.tcp, app, (size_t)acc.switch_offset);
	free(app);

	struct switch_at at;

	memset(&at, 0, sizeof(at));
	at.hdr = (struct hdr){ WIRE_MAGIC, WIRE_VERSION, MSG_SWITCH_AT, sizeof(at), 0 };
	at.switch_offset = is_mode("offset_huge") ? 1ull << 62 : acc.switch_offset;
	if (send(st.rv, &at, sizeof(at), MSG_NOSIGNAL) != sizeof(at))
		fail_setup("send SWITCH_AT");
	memset(&sw, 0, sizeof(sw));
	sw.type = 'W';
	memcpy(sw.nonce, acc.nonce, sizeof(sw.nonce));
	if (is_mode("badnonce"))
		sw.nonce[0] ^= 0xff;
	send_all(st.tcp, &sw, sizeof(sw));
	st.reached = 1;
	say("%s", "both directions switched");
	if (fcntl(st.tcp, F_SETFL, O_NONBLOCK) < 0)
		fail_setup("nonblock");
	pump(memfd, 1);
	/* Anything the victim wrote into the ring it may only read. */
	for (uint32_t i = 0; i < st.tx.size; i++)
		if (st.tx.data[i] != st.shadow[i])
			st.oob++;
	if (st.tx.h->magic != RING_MAGIC || st.rx.h->magic != RING_MAGIC)
		st.oob++;
	result();
}

/* ---- rendezvous flood ---- */
static unsigned long flood_once(void)
{
	FILE *f = fopen("/proc/net/unix", "r");
	char line[512];
	unsigned long n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *at = strstr(line, "@rdmashim1/");
		struct sockaddr_un sun = { .sun_family = AF_UNIX };

		if (!at)
			continue;
		at[strcspn(at, " \n")] = '\0';
		size_t len = strlen(at + 1);

		if (len + 1 >= sizeof(sun.sun_path))
			continue;
		memcpy(sun.sun_path + 1, at + 1, len);
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		if (fd >= 0 && connect(fd, (struct sockaddr *)&sun,
				       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) == 0)
			n++;
		if (fd >= 0)
			close(fd);
	}
	fclose(f);
	return n;
}

static void run_flood(void)
{
	long long end = now_ms() + o.seconds * 1000LL;
	unsigned long total = 0;
	int fds[2];

	if (pipe(fds) < 0)
		fail_setup("pipe");
	for (int p = 1; p < o.procs; p++) {
		if (fork() == 0) {
			unsigned long n = 0;

			while (now_ms() < end)
				n += flood_once();
			if (write(fds[1], &n, sizeof(n)) != sizeof(n))
				_exit(1);
			_exit(0);
		}
	}
	while (now_ms() < end)
		total += flood_once();
	for (int p = 1; p < o.procs; p++) {
		unsigned long n;

		wait(NULL);
		if (read(fds[0], &n, sizeof(n)) == sizeof(n))
			total += n;
	}
	printf("RESULT role=flood mode=flood procs=%d seconds=%d connects=%lu\n", o.procs, o.seconds, total);
	exit(0);
}

static void usage(void)
{
	fprintf(stderr, "usage: hostile_shm --role client --connect ADDR:PORT --mode M\n"
			"       hostile_shm --role server --listen ADDR:PORT --mode M\n"
			"       hostile_shm --role flood --seconds S [--procs N]\n"
			"       [--ring BYTES] [--payload BYTES] [--seconds S] [--wait-ms N]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i += 2) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		if (!strcmp(a, "--role"))
			o.role = v;
		else if (!strcmp(a, "--connect") || !strcmp(a, "--listen"))
			o.addr = v;
		else if (!strcmp(a, "--mode"))
			o.mode = v;
		else if (!strcmp(a, "--ring"))
			o.ring = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--payload"))
			o.payload = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--seconds"))
			o.seconds = atoi(v);
		else if (!strcmp(a, "--wait-ms"))
			o.wait_ms = atoi(v);
		else if (!strcmp(a, "--procs"))
			o.procs = atoi(v);
		else if (!strcmp(a, "--resp"))
			o.resp = atoi(v);
		else
			usage();
	}
	if (!o.role)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	/* Nothing here may outlive its test. */
	alarm((unsigned)(o.seconds + o.wait_ms / 1000 * 3 + 30));
	if (!strcmp(o.role, "flood"))
		run_flood();
	if (!o.addr)
		usage();
	if (!strcmp(o.role, "client")) {
		if (o.resp)
			resp_build();
		run_client();
	}
	if (!strcmp(o.role, "server"))
		run_server();
	usage();
}
