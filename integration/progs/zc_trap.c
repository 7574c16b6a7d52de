/*
 * zc_trap: the stale-memory trap for zero copy (docs/ZEROCOPY.md). The
 * client sends a large message from a buffer, changes the memory under the
 * buffer in one of the ways a stale registration would miss, and sends
 * again; the server checks every byte of every message against what the
 * client meant at its send.
 *
 *   zc_trap server --port P [--bind ADDR] [--conns N]
 *   zc_trap client --host ADDR --port P [--size BYTES] [--rounds R] [--warm S]
 *
 * Each message is a header (magic, case, length, seed, a range of zeros)
 * and a payload whose byte i is 0 inside the range of zeros and
 * pattern(seed, i) elsewhere; the server answers each with one byte, so
 * the stream is request/response (the shim upgrades it). The client first
 * makes a warm-up connection of S seconds (so that both processes' RDMA
 * is ready), then runs every case R times on a second one. The server
 * serves N connections, one after the other, and prints
 * "zc_trap-server: OK msgs=M bytes=B" or the first wrong byte; the client
 * prints "zc_trap: OK msgs=M" or why not. Exit status 0 on OK.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x7a637472u /* "zctr" */

struct hdr {
	uint32_t magic, kind;
	uint64_t len, seed, zero_off, zero_len;
};

static uint8_t pattern(uint64_t seed, uint64_t i)
{
	uint64_t x = (seed ^ (i / 8)) * 0x9e3779b97f4a7c15ull;

	x ^= x >> 29;
	return (uint8_t)(x >> (8 * (i % 8)));
}

static void fill(uint8_t *p, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(seed, i);
}

static int full_io(int fd, void *buf, size_t len, bool out)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* ---- server ---- */

static int serve_one(int fd, unsigned long *msgs, unsigned long long *bytes)
{
	static uint8_t *buf;
	static size_t cap;
	struct hdr h;
	uint8_t ack = 1;

	for (;;) {
		ssize_t n = recv(fd, &h, sizeof(h), MSG_WAITALL);

		if (n == 0)
			return 0;
		if (n != (ssize_t)sizeof(h) || h.magic != MAGIC || h.len > (256u << 20)) {
			printf("zc_trap-server: FAIL bad header after %lu msgs (%zd)\n", *msgs, n);
			return -1;
		}
		if (h.len > cap) {
			free(buf);
			buf = malloc(h.len);
			cap = h.len;
			if (!buf)
				return -1;
		}
		if (full_io(fd, buf, h.len, false)) {
			printf("zc_trap-server: FAIL short payload, case %u\n", h.kind);
			return -1;
		}
		for (uint64_t i = 0; i < h.len; i++) {
			uint8_t want = i >= h.zero_off && i < h.zero_off + h.zero_len ? 0 : pattern(h.seed, i);

			if (buf[i] != want) {
				printf("zc_trap-server: FAIL case %u msg %lu byte %llu of %llu: got %02x want %02x\n",
				       h.kind, *msgs, (unsigned long long)i, (unsigned long long)h.len, buf[i], want);
				return -1;
			}
		}
		(*msgs)++;
		*bytes += h.len;
		if (full_io(fd, &ack, 1, true))
			return -1;
	}
}

static int server(const char *bind_addr, int port, int conns)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	unsigned long msgs = 0;
	unsigned long long bytes = 0;
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);

	inet_pton(AF_INET, bind_addr, &a.sin_addr);
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 8)) {
		perror("zc_trap-server: bind/listen");
		return 1;
	}
	for (int i = 0; i < conns; i++) {
		int fd = accept(ls, NULL, NULL);

		if (fd < 0 || serve_one(fd, &msgs, &bytes))
			return 1;
		close(fd);
	}
	printf("zc_trap-server: OK msgs=%lu bytes=%llu\n", msgs, bytes);
	return 0;
}

/* ---- client ---- */

static int sock_fd;
static unsigned long sent_msgs;
static uint64_t next_seed = 1;

/* Sends len bytes at p as case kind, meaning pattern(seed) with the given
 * range zero; waits for the server's byte. */
static int send_msg(unsigned kind, const uint8_t *p, size_t len, uint64_t seed, size_t zoff, size_t zlen)
{
	struct hdr h = { .magic = MAGIC, .kind = kind, .len = len, .seed = seed, .zero_off = zoff, .zero_len = zlen };
	uint8_t ack;

	if (full_io(sock_fd, &h, sizeof(h), true) || full_io(sock_fd, (void *)p, len, true) ||
	    full_io(sock_fd, &ack, 1, false)) {
		printf("zc_trap: FAIL case %u: connection lost (%s)\n", kind, strerror(errno));
		return -1;
	}
	sent_msgs++;
	return 0;
}

/* Fills with a fresh seed and sends. */
static int fresh(unsigned kind, uint8_t *p, size_t len)
{
	uint64_t seed = next_seed++;

	fill(p, len, seed);
	return send_msg(kind, p, len, seed, 0, 0);
}

static uint8_t *map_at(void *at, size_t len, int extra)
{
	uint8_t *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static int stack_case(size_t len, int depth)
{
	/* A buffer on the stack, reused by the next call at the same place. */
	uint8_t buf[1u << 19];

	(void)depth;
	if (len > sizeof(buf))
		len = sizeof(buf);
	return fresh(9, buf, len);
}

#define CHECK(x)                                                                \
	do {                                                                    \
		if (!(x)) {                                                     \
			printf("zc_trap: FAIL %s (line %d): %s\n", #x, __LINE__, strerror(errno)); \
			return -1;                                              \
		}                                                               \
	} while (0)

static int run_cases(size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *p, *q;
	uint64_t seed;

	/* 0: munmap, then mmap at the same address with MAP_FIXED. */
	CHECK((p = map_at(NULL, len, 0)));
	if (fresh(0, p, len))
		return -1;
	CHECK(munmap(p, len) == 0);
	CHECK(map_at(p, len, MAP_FIXED) == p);
	if (fresh(0, p, len))
		return -1;
	/* 1: MAP_FIXED straight over it, no munmap. */
	CHECK(map_at(p, len, MAP_FIXED) == p);
	if (fresh(1, p, len))
		return -1;
	/* 2: munmap, then mmap with the address as a hint only. */
	CHECK(munmap(p, len) == 0);
	CHECK((q = map_at(p, len, 0)));
	if (fresh(2, q, len))
		return -1;
	/* 3: madvise DONTNEED on all of it: the pages read zero. */
	seed = next_seed++;
	fill(q, len, seed);
	if (send_msg(3, q, len, seed, 0, 0))
		return -1;
	CHECK(madvise(q, len, MADV_DONTNEED) == 0);
	if (send_msg(3, q, len, seed, 0, len))
		return -1;
	/* 4: ... and on a part of it. */
	fill(q, len, seed);
	if (send_msg(4, q, len, seed, 0, 0))
		return -1;
	CHECK(madvise(q + 2 * pg, 3 * (size_t)pg, MADV_DONTNEED) == 0);
	if (send_msg(4, q, len, seed, 2 * (size_t)pg, 3 * (size_t)pg))
		return -1;
	/* 5: a region partly unmapped and remapped (fresh zero pages). */
	fill(q, len, seed);
	if (send_msg(5, q, len, seed, 0, 0))
		return -1;
	CHECK(munmap(q + 4 * pg, 2 * (size_t)pg) == 0);
	CHECK(map_at(q + 4 * pg, 2 * (size_t)pg, MAP_FIXED) == q + 4 * pg);
	if (send_msg(5, q, len, seed, 4 * (size_t)pg, 2 * (size_t)pg))
		return -1;
	/* 6: mremap moves it; new pages where it was. */
	CHECK((p = map_at(NULL, len, 0)));
	CHECK(mremap(q, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p) == p);
	CHECK(map_at(q, len, MAP_FIXED_NOREPLACE) == q);
	if (fresh(6, q, len) || fresh(6, p, len))
		return -1;
	CHECK(munmap(p, len) == 0);
	CHECK(munmap(q, len) == 0);
	/* 7: free and malloc above glibc's mmap threshold (libc's own
	 * munmap, which no hook sees). */
	CHECK((p = malloc(len)));
	if (fresh(7, p, len))
		return -1;
	free(p);
	CHECK((p = malloc(len)));
	if (fresh(7, p, len))
		return -1;
	free(p);
	/* 8: brk shrink and regrow (malloc keeps off the break: main()'s
	 * M_TOP_PAD leaves its heap room, and it never trims a heap whose
	 * break another moved). */
	CHECK((p = sbrk((intptr_t)len)) != (void *)-1);
	if (fresh(8, p, len))
		return -1;
	CHECK(sbrk(0) == p + len);
	CHECK(sbrk(-(intptr_t)len) != (void *)-1);
	CHECK(sbrk((intptr_t)len) == p);
	if (fresh(8, p, len))
		return -1;
	CHECK(sbrk(-(intptr_t)len) != (void *)-1);
	/* 9: a stack buffer reused. */
	if (stack_case(len, 0) || stack_case(len, 1))
		return -1;
	/* 10: a memfd mapping replaced at the same address. */
	int a = memfd_create("zc_trap_a", MFD_CLOEXEC), b = memfd_create("zc_trap_b", MFD_CLOEXEC);

	CHECK(a >= 0 && b >= 0 && ftruncate(a, (off_t)len) == 0 && ftruncate(b, (off_t)len) == 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
	CHECK(p != MAP_FAILED);
	if (fresh(10, p, len))
		return -1;
	CHECK(mmap(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, b, 0) == p);
	if (fresh(10, p, len))
		return -1;
	munmap(p, len);
	close(a);
	close(b);
	/* 11: fork, then a copy-on-write in the parent. */
	CHECK((p = map_at(NULL, len, 0)));
	if (fresh(11, p, len))
		return -1;
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		p[0] ^= 1; /* the child's own copy */
		_exit(0);
	}
	if (fresh(11, p, len))
		return -1;
	waitpid(pid, NULL, 0);
	if (fresh(11, p, len))
		return -1;
	/* 12: the buffer overwritten the moment send returns. */
	seed = next_seed++;
	fill(p, len, seed);
	if (send_msg(12, p, len, seed, 0, 0))
		return -1;
	memset(p, 0xee, len);
	if (fresh(12, p, len))
		return -1;
	munmap(p, len);
	return 0;
}

static int connect_to(const char *host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	inet_pton(AF_INET, host, &a.sin_addr);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		perror("zc_trap: connect");
		exit(1);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* Small request/response rounds for s seconds. */
static int warm(double s)
{
	struct timespec t0, t;
	uint8_t small[4096];

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (fresh(100, small, sizeof(small)))
			return -1;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < s);
	return 0;
}

static int client(const char *host, int port, size_t len, int rounds, double warm_s)
{
	sock_fd = connect_to(host, port);
	if (warm(warm_s))
		return 1;
	close(sock_fd);
	sock_fd = connect_to(host, port);
	if (warm(1.0))
		return 1;
	for (int r = 0; r < rounds; r++)
		if (run_cases(len))
			return 1;
	close(sock_fd);
	printf("zc_trap: OK msgs=%lu\n", sent_msgs);
	return 0;
}

int main(int argc, char **argv)
{
	const char *host = "127.0.0.1";
	int port = 0, conns = 2, rounds = 2;
	size_t size = 1u << 20;
	double warm_s = 3;

	if (argc < 2)
		goto usage;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--host") || !strcmp(argv[i], "--bind"))
			host = argv[i + 1];
		else if (!strcmp(argv[i], "--conns"))
			conns = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--size"))
			size = strtoul(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--warm"))
			warm_s = atof(argv[i + 1]);
		else
			goto usage;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	mallopt(M_TOP_PAD, 64 << 20);
	free(malloc(64));
	if (!port)
		goto usage;
	if (!strcmp(argv[1], "server"))
		return server(host, port, conns);
	if (!strcmp(argv[1], "client"))
		return client(host, port, size, rounds, warm_s);
usage:
	fprintf(stderr, "usage: zc_trap server --port P [--bind ADDR] [--conns N]\n"
			"       zc_trap client --port P [--host ADDR] [--size B] [--rounds R] [--warm S]\n");
	return 2;
}
