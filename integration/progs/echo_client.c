/*
 * echo_client: drives an echo server and checks every byte that comes back.
 *
 *   echo_client --port P [--host 127.0.0.1|::1|::ffff:127.0.0.1] [--bytes N]
 *               [--conns K] [--seed S] [--nonblock] [--half-close]
 *               [--max-write W] [--expect-banner TEXT] [--timeout SEC]
 *
 * Each of the K connections (one thread each, all at once) sends N bytes of a
 * deterministic pseudo-random stream (seeded by S and the connection index)
 * in pseudo-random write sizes of 1..W bytes, using write, send, writev and
 * sendmsg in turn, while it reads the echo back concurrently with read, recv,
 * readv and recvmsg, and compares every byte.
 *
 *   default      blocking connect; a writer thread plus blocking reads
 *   --nonblock   nonblocking connect, epoll wait for EPOLLOUT, SO_ERROR, a
 *                second connect() that must say EISCONN; then one poll()
 *                loop per connection with nonblocking reads and writes
 *   --half-close shutdown(SHUT_WR) after the last byte, then read to EOF and
 *                require exactly N bytes before it
 *   --expect-banner TEXT  the server speaks first: read and check TEXT
 *   --fd FD      use FD, an already connected socket (e.g. one received with
 *                SCM_RIGHTS, see passfd), as the one connection
 *
 * N and W take K/M/G suffixes (powers of 1024). On success prints one line
 * "OK bytes=N conns=K crc=XXXXXXXX", where the crc is a CRC-32 over the
 * per-connection CRC-32s of the data in connection order, so it depends only
 * on the options, never on timing. Otherwise prints "FAIL ..." and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define IO_BUF (256 * 1024)

static struct {
	const char *host;
	int port;
	unsigned long long bytes;
	int conns;
	uint64_t seed;
	bool nonblock, half_close;
	size_t max_write;
	const char *banner;
	int timeout_s;
	int fd;
} opt = { "127.0.0.1", 0, 1 << 20, 1, 1, false, false, 64 * 1024, NULL, 60, -1 };

/* ---- deterministic streams ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct rng {
	uint64_t s;
};

static void rng_seed(struct rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed * 0x100000001b3ull + stream;

	r->s = splitmix64(&x) | 1;
}

static uint64_t rng_next(struct rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 0x2545f4914f6cdd1dull;
}

/* A byte stream: the bytes of successive rng words. */
struct bytestream {
	struct rng r;
	uint64_t word;
	unsigned left;
};

static void bs_init(struct bytestream *b, uint64_t seed, uint64_t stream)
{
	rng_seed(&b->r, seed, stream);
	b->left = 0;
}

static void bs_fill(struct bytestream *b, unsigned char *dst, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!b->left) {
			b->word = rng_next(&b->r);
			b->left = 8;
		}
		dst[i] = (unsigned char)b->word;
		b->word >>= 8;
		b->left--;
	}
}

static uint32_t crc_table[256];

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		crc_table[i] = c;
	}
}

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n)
{
	crc = ~crc;
	while (n--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* ---- one connection ---- */

struct conn {
	int idx;
	int fd;
	pthread_t thread;
	/* writer side */
	struct bytestream wdata;
	struct rng wsize, wcall;
	unsigned long long sent;
	/* reader side */
	struct bytestream rdata;
	struct rng rsize, rcall;
	unsigned long long received;
	uint32_t crc;
	/* outcome */
	bool failed;
	char why[256];
};

static void conn_fail(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The reader and the writer thread of a connection both look at this. */
static bool has_failed(struct conn *c)
{
	return __atomic_load_n(&c->failed, __ATOMIC_ACQUIRE);
}

static void conn_fail(struct conn *c, const char *fmt, ...)
{
	va_list ap;

	if (__atomic_exchange_n(&c->failed, true, __ATOMIC_ACQ_REL))
		return;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
}

static int parse_addr(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	if (strchr(host, ':')) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
		return inet_pton(AF_INET6, host, &in6->sin6_addr) == 1 ? 0 : -1;
	}
	struct sockaddr_in *in = (struct sockaddr_in *)ss;

	in->sin_family = AF_INET;
	in->sin_port = htons((uint16_t)port);
	*len = sizeof(*in);
	return inet_pton(AF_INET, host, &in->sin_addr) == 1 ? 0 : -1;
}

static int conn_connect(struct conn *c)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd;

	if (opt.fd >= 0) {
		/* An already connected socket, e.g. received with SCM_RIGHTS. */
		c->fd = opt.fd;
		if (opt.nonblock && fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) < 0) {
			conn_fail(c, "fcntl O_NONBLOCK: %s", strerror(errno));
			return -1;
		}
		return 0;
	}
	if (parse_addr(opt.host, opt.port, &ss, &len) < 0) {
		conn_fail(c, "bad host %s", opt.host);
		return -1;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | (opt.nonblock ? SOCK_NONBLOCK : 0), 0);
	if (fd < 0) {
		conn_fail(c, "socket: %s", strerror(errno));
		return -1;
	}
	c->fd = fd;
	if (connect(fd, (struct sockaddr *)&ss, len) == 0)
		return 0;
	if (!opt.nonblock || errno != EINPROGRESS) {
		conn_fail(c, "connect: %s", strerror(errno));
		return -1;
	}
	/* Nonblocking connect: wait for writability with epoll. */
	int ep = epoll_create1(EPOLL_CLOEXEC), n, err = 0;
	struct epoll_event ev = { .events = EPOLLOUT, .data.fd = fd };
	socklen_t elen = sizeof(err);

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		conn_fail(c, "epoll: %s", strerror(errno));
		if (ep >= 0)
			close(ep);
		return -1;
	}
	do
		n = epoll_wait(ep, &ev, 1, opt.timeout_s * 1000);
	while (n < 0 && errno == EINTR);
	close(ep);
	if (n != 1) {
		conn_fail(c, "connect: epoll_wait returned %d", n);
		return -1;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err) {
		conn_fail(c, "connect: SO_ERROR %s", strerror(err ? err : errno));
		return -1;
	}
	/* What many event loops do: a second connect() confirms the outcome. */
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 && errno != EISCONN) {
		conn_fail(c, "second connect: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Reads exactly n bytes (poll-guarded, so nonblocking fds work too). */
static int read_exact(struct conn *c, char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int pr = poll(&p, 1, opt.timeout_s * 1000);

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0) {
			conn_fail(c, "poll for banner: %s", pr == 0 ? "timeout" : strerror(errno));
			return -1;
		}
		ssize_t r = recv(c->fd, buf + got, n - got, 0);

		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0) {
			conn_fail(c, "banner: %s after %zu bytes", r == 0 ? "EOF" : strerror(errno), got);
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

/* One write-side call of a rotating kind; returns what the call returned. */
static ssize_t do_write(struct conn *c, const unsigned char *p, size_t n)
{
	struct iovec iov[2];
	struct msghdr mh = { 0 };
	size_t half = n / 2;

	switch (rng_next(&c->wcall) % 4) {
	case 0:
		return write(c->fd, p, n);
	case 1:
		return send(c->fd, p, n, MSG_NOSIGNAL);
	case 2:
		iov[0] = (struct iovec){ (void *)p, half };
		iov[1] = (struct iovec){ (void *)(p + half), n - half };
		return writev(c->fd, iov, 2);
	default:
		iov[0] = (struct iovec){ (void *)p, half };
		iov[1] = (struct iovec){ (void *)(p + half), n - half };
		mh.msg_iov = iov;
		mh.msg_iovlen = 2;
		return sendmsg(c->fd, &mh, MSG_NOSIGNAL);
	}
}

static ssize_t do_read(struct conn *c, unsigned char *p, size_t n)
{
	struct iovec iov[2];
	struct msghdr mh = { 0 };
	size_t half = n / 2;

	switch (rng_next(&c->rcall) % 4) {
	case 0:
		return read(c->fd, p, n);
	case 1:
		return recv(c->fd, p, n, 0);
	case 2:
		if (!half)
			return read(c->fd, p, n);
		iov[0] = (struct iovec){ p, half };
		iov[1] = (struct iovec){ p + half, n - half };
		return readv(c->fd, iov, 2);
	default:
		iov[0] = (struct iovec){ p, n };
		mh.msg_iov = iov;
		mh.msg_iovlen = 1;
		return recvmsg(c->fd, &mh, 0);
	}
}

static size_t next_write_size(struct conn *c)
{
	unsigned long long left = opt.bytes - c->sent;
	size_t n = 1 + (size_t)(rng_next(&c->wsize) % opt.max_write);

	return n > left ? (size_t)left : n;
}

/* Checks what arrived against the expected stream. Returns 0 or -1. */
static int check_received(struct conn *c, const unsigned char *got, size_t n)
{
	unsigned char want[4096];

	if (c->received + n > opt.bytes) {
		conn_fail(c, "received %llu bytes, more than the %llu sent", c->received + n, opt.bytes);
		return -1;
	}
	for (size_t off = 0; off < n;) {
		size_t k = n - off < sizeof(want) ? n - off : sizeof(want);

		bs_fill(&c->rdata, want, k);
		if (memcmp(want, got + off, k) != 0) {
			size_t i = 0;

			while (want[i] == got[off + i])
				i++;
			conn_fail(c, "mismatch at offset %llu: got 0x%02x want 0x%02x",
				  c->received + off + i, got[off + i], want[i]);
			return -1;
		}
		c->crc = crc_update(c->crc, want, k);
		off += k;
	}
	c->received += n;
	return 0;
}

static size_t next_read_size(struct conn *c)
{
	return 1 + (size_t)(rng_next(&c->rsize) % IO_BUF);
}

/* After the last byte: half-close, and decide whether to wait for EOF. */
static int finish_sending(struct conn *c)
{
	if (opt.half_close && shutdown(c->fd, SHUT_WR) < 0) {
		conn_fail(c, "shutdown(SHUT_WR): %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Blocking mode: the writer runs in its own thread. */
static void *writer_thread(void *arg)
{
	struct conn *c = arg;
	unsigned char *buf = malloc(opt.max_write);

	if (!buf) {
		conn_fail(c, "malloc");
		return NULL;
	}
	while (c->sent < opt.bytes && !has_failed(c)) {
		size_t n = next_write_size(c), off = 0;

		bs_fill(&c->wdata, buf, n);
		while (off < n) {
			ssize_t w = do_write(c, buf + off, n - off);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				conn_fail(c, "write at offset %llu: %s", c->sent + off, strerror(errno));
				free(buf);
				return NULL;
			}
			off += (size_t)w;
		}
		c->sent += n;
	}
	if (!has_failed(c))
		finish_sending(c);
	free(buf);
	return NULL;
}

static void run_blocking(struct conn *c, unsigned char *rbuf)
{
	pthread_t w;

	if (pthread_create(&w, NULL, writer_thread, c) != 0) {
		conn_fail(c, "pthread_create");
		return;
	}
	while (!has_failed(c)) {
		if (c->received == opt.bytes && !opt.half_close)
			break;
		ssize_t r = do_read(c, rbuf, next_read_size(c));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			conn_fail(c, "read at offset %llu: %s", c->received, strerror(errno));
			break;
		}
		if (r == 0) {
			if (c->received != opt.bytes)
				conn_fail(c, "EOF at offset %llu of %llu", c->received, opt.bytes);
			break;
		}
		if (check_received(c, rbuf, (size_t)r) < 0)
			break;
	}
	if (has_failed(c))
		shutdown(c->fd, SHUT_RDWR); /* unblocks the writer */
	pthread_join(w, NULL);
}

static void run_nonblock(struct conn *c, unsigned char *rbuf)
{
	unsigned char *wbuf = malloc(opt.max_write);
	size_t woff = 0, wlen = 0;
	bool wdone = opt.bytes == 0, eof = false;

	if (!wbuf) {
		conn_fail(c, "malloc");
		return;
	}
	if (wdone && finish_sending(c) < 0)
		goto out;
	while (!c->failed) {
		if (c->received == opt.bytes && (!opt.half_close || eof))
			break;
		struct pollfd p = { .fd = c->fd, .events = POLLIN | (wdone ? 0 : POLLOUT) };
		int pr = poll(&p, 1, opt.timeout_s * 1000);

		if (pr < 0 && errno == EINTR)
			continue;
		if (pr <= 0) {
			conn_fail(c, "poll: %s (sent %llu, received %llu)", pr ? strerror(errno) : "timeout",
				  c->sent, c->received);
			break;
		}
		if (!wdone && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
			for (;;) {
				if (woff == wlen) {
					if (c->sent == opt.bytes) {
						wdone = true;
						finish_sending(c);
						break;
					}
					wlen = next_write_size(c);
					woff = 0;
					bs_fill(&c->wdata, wbuf, wlen);
				}
				ssize_t w = do_write(c, wbuf + woff, wlen - woff);

				if (w < 0 && errno == EINTR)
					continue;
				if (w < 0 && errno == EAGAIN)
					break;
				if (w <= 0) {
					conn_fail(c, "write at offset %llu: %s", c->sent, strerror(errno));
					break;
				}
				woff += (size_t)w;
				if (woff == wlen)
					c->sent += wlen;
			}
		}
		if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
			for (int k = 0; k < 16 && !c->failed; k++) {
				ssize_t r = do_read(c, rbuf, next_read_size(c));

				if (r < 0 && errno == EINTR)
					continue;
				if (r < 0 && errno == EAGAIN)
					break;
				if (r < 0) {
					conn_fail(c, "read at offset %llu: %s", c->received, strerror(errno));
					break;
				}
				if (r == 0) {
					if (c->received != opt.bytes)
						conn_fail(c, "EOF at offset %llu of %llu", c->received,
							  opt.bytes);
					eof = true;
					break;
				}
				check_received(c, rbuf, (size_t)r);
			}
		}
	}
out:
	free(wbuf);
}

static void *conn_thread(void *arg)
{
	struct conn *c = arg;
	unsigned char *rbuf = malloc(IO_BUF);

	bs_init(&c->wdata, opt.seed, 4ull * (uint64_t)c->idx);
	bs_init(&c->rdata, opt.seed, 4ull * (uint64_t)c->idx);
	rng_seed(&c->wsize, opt.seed, 4ull * (uint64_t)c->idx + 1);
	rng_seed(&c->rsize, opt.seed, 4ull * (uint64_t)c->idx + 2);
	rng_seed(&c->wcall, opt.seed, 4ull * (uint64_t)c->idx + 3);
	c->rcall = c->wcall;
	c->fd = -1;
	if (!rbuf) {
		conn_fail(c, "malloc");
		return NULL;
	}
	if (conn_connect(c) == 0) {
		if (opt.banner) {
			size_t n = strlen(opt.banner);

			if (read_exact(c, (char *)rbuf, n) == 0 && memcmp(rbuf, opt.banner, n) != 0)
				conn_fail(c, "banner mismatch: got \"%.*s\"", (int)n, (char *)rbuf);
		}
		if (!c->failed) {
			if (opt.nonblock)
				run_nonblock(c, rbuf);
			else
				run_blocking(c, rbuf);
		}
	}
	if (c->fd >= 0 && close(c->fd) < 0)
		conn_fail(c, "close: %s", strerror(errno));
	free(rbuf);
	return NULL;
}

static void on_alarm(int sig)
{
	static const char msg[] = "FAIL timeout\n";

	(void)sig;
	if (write(1, msg, sizeof(msg) - 1) < 0) {
		/* nothing to do */
	}
	_exit(3);
}

static unsigned long long parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end || end == s) {
		fprintf(stderr, "echo_client: bad size %s\n", s);
		exit(2);
	}
	return v;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: echo_client --port P [--host H] [--bytes N] [--conns K] [--seed S]\n"
		"                   [--nonblock] [--half-close] [--max-write W]\n"
		"                   [--expect-banner TEXT] [--timeout SEC] [--fd FD]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--nonblock")) {
			opt.nonblock = true;
			continue;
		}
		if (!strcmp(a, "--half-close")) {
			opt.half_close = true;
			continue;
		}
		if (i + 1 >= argc)
			usage();
		const char *v = argv[++i];

		if (!strcmp(a, "--host"))
			opt.host = v;
		else if (!strcmp(a, "--port"))
			opt.port = atoi(v);
		else if (!strcmp(a, "--bytes"))
			opt.bytes = parse_size(v);
		else if (!strcmp(a, "--conns"))
			opt.conns = atoi(v);
		else if (!strcmp(a, "--seed"))
			opt.seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--max-write"))
			opt.max_write = (size_t)parse_size(v);
		else if (!strcmp(a, "--expect-banner"))
			opt.banner = v;
		else if (!strcmp(a, "--timeout"))
			opt.timeout_s = atoi(v);
		else if (!strcmp(a, "--fd"))
			opt.fd = atoi(v);
		else
			usage();
	}
	if (opt.fd >= 0) {
		opt.conns = 1;
		opt.port = opt.port ? opt.port : 1;
	}
	if (opt.port <= 0 || opt.port > 65535 || opt.conns < 1 || opt.conns > 4096 || opt.max_write < 1)
		usage();
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	if (opt.timeout_s > 0)
		alarm((unsigned)opt.timeout_s);
	crc_init();

	struct conn *conns = calloc((size_t)opt.conns, sizeof(*conns));
	int failed = 0;
	uint32_t total = 0;

	if (!conns)
		return 2;
	for (int i = 0; i < opt.conns; i++) {
		conns[i].idx = i;
		if (pthread_create(&conns[i].thread, NULL, conn_thread, &conns[i]) != 0) {
			fprintf(stderr, "echo_client: pthread_create failed\n");
			return 2;
		}
	}
	for (int i = 0; i < opt.conns; i++)
		pthread_join(conns[i].thread, NULL);
	for (int i = 0; i < opt.conns; i++) {
		unsigned char le[4] = { (unsigned char)conns[i].crc, (unsigned char)(conns[i].crc >> 8),
					(unsigned char)(conns[i].crc >> 16), (unsigned char)(conns[i].crc >> 24) };

		if (conns[i].failed) {
			if (!failed)
				printf("FAIL conn=%d %s\n", i, conns[i].why);
			else
				fprintf(stderr, "echo_client: also conn=%d %s\n", i, conns[i].why);
			failed++;
		}
		total = crc_update(total, le, 4);
	}
	if (!failed)
		printf("OK bytes=%llu conns=%d crc=%08x\n", opt.bytes, opt.conns, total);
	fflush(stdout);
	return failed ? 1 : 0;
}
