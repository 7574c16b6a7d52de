/*
 * spoof_offer: an attacker on the upgrade rendezvous, for t_shm_security.
 *
 *   spoof_offer --client ADDR:PORT --server ADDR:PORT
 *               [--mode valid|truncate|garbage|wrongtype|badring]
 *               [--connect-wait-ms N] [--reply-wait-ms N]
 *
 * A shimmed client listens, while its upgrade is pending, on the abstract
 * SOCK_SEQPACKET socket "\0rdmashim1/" + hex(client endpoint) + hex(server
 * endpoint), each endpoint being its 16-byte address (IPv4 as v4-mapped
 * ::ffff:a.b.c.d) and its 2-byte port, big-endian (shim/rendezvous.c). This
 * program connects there (retrying until the name exists, up to
 * --connect-wait-ms, default 3000) and sends one forged message in place of
 * the real server's OFFER (shim/wire.h, host byte order):
 *
 *   valid      a well-formed OFFER (magic, version, type, length 40, a
 *              random nonce, ring_bytes 64 KiB)
 *   truncate   the first 20 bytes of that OFFER
 *   garbage    40 random bytes (wrong magic)
 *   wrongtype  a well-formed SWITCH_AT where an OFFER is due
 *   badring    an OFFER whose ring_bytes is not a power of two
 *
 * Then it waits up to --reply-wait-ms (default 3000) for an answer and says
 * what came: "reply: eof" (the victim closed the rendezvous: refused),
 * "reply: reset", "reply: none", or "reply: N bytes type T fd=yes|no". An
 * ACCEPT carries the victim's ring memfd: receiving one means the forged offer
 * was believed.
 *
 *   spoof_offer --beacon PORT
 *
 * holds the port's beacon instead (shim/PROTOCOL.md "Port beacon": the
 * abstract datagram name "\0rdmashim1/port/" + 4 hex digits), as anybody
 * may, so that a shimmed client of a server without the shim offers; prints
 * "BEACON" and sleeps 60 s.
 *
 * Output, one line each: "spoof_offer: uid=U name=@rdmashim1/...",
 * "spoof_offer: connected", "spoof_offer: sent N bytes (mode M)",
 * "spoof_offer: reply: ...". Exit status 0 when the message went out and no
 * ring fd came back, 4 when a ring fd came back (the spoof worked), 2 on a
 * usage error or when the name never appeared, 1 on other errors.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The wire format, as shim/wire.h defines it (kept independent of the shim's
 * headers on purpose: an attacker has only the documented format). */
#define WIRE_MAGIC 0x52534831u
#define WIRE_VERSION 5
enum { MSG_OFFER = 1, MSG_ACCEPT = 2, MSG_SWITCH_AT = 3, MSG_DECLINE = 4 };

struct hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length;
	uint32_t reserved;
};

struct offer {
	struct hdr hdr;
	uint8_t nonce[16];
	uint32_t ring_bytes;
	uint32_t reserved;
};
_Static_assert(sizeof(struct offer) == 40, "offer is 40 bytes");

struct switch_at {
	struct hdr hdr;
	uint64_t switch_offset;
};
_Static_assert(sizeof(struct switch_at) == 24, "switch_at is 24 bytes");

struct endpoint {
	uint8_t addr[16];
	uint16_t port;
};

static void usage(void)
{
	fprintf(stderr, "usage: spoof_offer --client ADDR:PORT --server ADDR:PORT\n"
			"                   [--mode valid|truncate|garbage|wrongtype|badring]\n"
			"                   [--connect-wait-ms N] [--reply-wait-ms N]\n"
			"       spoof_offer --beacon PORT\n");
	exit(2);
}

/* "a.b.c.d:port" or "[v6]:port" (or "v6:port" with the last colon). */
static int parse_endpoint(const char *text, struct endpoint *ep)
{
	char host[64];
	const char *colon = strrchr(text, ':');
	size_t n;
	long port;
	char *end;

	if (!colon || colon == text)
		return -1;
	n = (size_t)(colon - text);
	if (text[0] == '[' && n >= 2 && text[n - 1] == ']') {
		text++;
		n -= 2;
	}
	if (n >= sizeof(host))
		return -1;
	memcpy(host, text, n);
	host[n] = '\0';
	port = strtol(colon + 1, &end, 10);
	if (*end || port <= 0 || port > 65535)
		return -1;
	memset(ep, 0, sizeof(*ep));
	if (inet_pton(AF_INET, host, ep->addr + 12) == 1) {
		ep->addr[10] = 0xff;
		ep->addr[11] = 0xff;
	} else if (inet_pton(AF_INET6, host, ep->addr) != 1) {
		return -1;
	}
	ep->port = (uint16_t)port;
	return 0;
}

static socklen_t rv_address(struct sockaddr_un *sun, const struct endpoint *client,
			    const struct endpoint *server)
{
	static const char hex[] = "0123456789abcdef";
	const struct endpoint *eps[2] = { client, server };
	char *p = sun->sun_path + 1;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	p += sprintf(p, "rdmashim1/");
	for (int e = 0; e < 2; e++) {
		uint8_t raw[18];

		memcpy(raw, eps[e]->addr, 16);
		raw[16] = (uint8_t)(eps[e]->port >> 8);
		raw[17] = (uint8_t)eps[e]->port;
		for (size_t i = 0; i < sizeof(raw); i++) {
			*p++ = hex[raw[i] >> 4];
			*p++ = hex[raw[i] & 15];
		}
	}
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - sun->sun_path));
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void random_bytes(void *buf, size_t n)
{
	if (getrandom(buf, n, 0) != (ssize_t)n) {
		/* Not secret: any bytes do. */
		for (size_t i = 0; i < n; i++)
			((uint8_t *)buf)[i] = (uint8_t)(rand() ^ (int)i);
	}
}

static int hold_beacon(const char *port_text)
{
	struct sockaddr_un sun;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int n;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	n = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "rdmashim1/port/%04x", (unsigned)atoi(port_text));
	if (fd < 0 || bind(fd, (struct sockaddr *)&sun, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)) < 0) {
		perror("spoof_offer: beacon");
		return 1;
	}
	printf("BEACON\n");
	fflush(stdout);
	sleep(60);
	return 0;
}

int main(int argc, char **argv)
{
	struct endpoint client, server;
	const char *mode = "valid";
	int have_client = 0, have_server = 0;
	long connect_wait = 3000, reply_wait = 3000;
	struct sockaddr_un sun;
	socklen_t len;
	uint8_t msg[64];
	size_t msg_len;
	int fd = -1;

	if (argc == 3 && !strcmp(argv[1], "--beacon"))
		return hold_beacon(argv[2]);
	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			usage();
		if (!strcmp(argv[i], "--client"))
			have_client = parse_endpoint(argv[++i], &client) == 0;
		else if (!strcmp(argv[i], "--server"))
			have_server = parse_endpoint(argv[++i], &server) == 0;
		else if (!strcmp(argv[i], "--mode"))
			mode = argv[++i];
		else if (!strcmp(argv[i], "--connect-wait-ms"))
			connect_wait = atol(argv[++i]);
		else if (!strcmp(argv[i], "--reply-wait-ms"))
			reply_wait = atol(argv[++i]);
		else
			usage();
	}
	if (!have_client || !have_server)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* The forged message. */
	struct offer off;

	memset(&off, 0, sizeof(off));
	off.hdr.magic = WIRE_MAGIC;
	off.hdr.version = WIRE_VERSION;
	off.hdr.type = MSG_OFFER;
	off.hdr.length = sizeof(off);
	random_bytes(off.nonce, sizeof(off.nonce));
	off.ring_bytes = 64 * 1024;
	if (!strcmp(mode, "valid")) {
		memcpy(msg, &off, sizeof(off));
		msg_len = sizeof(off);
	} else if (!strcmp(mode, "truncate")) {
		memcpy(msg, &off, 20);
		msg_len = 20;
	} else if (!strcmp(mode, "garbage")) {
		random_bytes(msg, sizeof(off));
		if (msg[0] == (WIRE_MAGIC & 0xff))
			msg[0] ^= 0xff;
		msg_len = sizeof(off);
	} else if (!strcmp(mode, "wrongtype")) {
		struct switch_at at;

		memset(&at, 0, sizeof(at));
		at.hdr = off.hdr;
		at.hdr.type = MSG_SWITCH_AT;
		at.hdr.length = sizeof(at);
		memcpy(msg, &at, sizeof(at));
		msg_len = sizeof(at);
	} else if (!strcmp(mode, "badring")) {
		off.ring_bytes = 64 * 1024 + 1;
		memcpy(msg, &off, sizeof(off));
		msg_len = sizeof(off);
	} else {
		usage();
	}

	len = rv_address(&sun, &client, &server);
	printf("spoof_offer: uid=%u name=@%.*s\n", (unsigned)getuid(),
	       (int)(len - offsetof(struct sockaddr_un, sun_path) - 1), sun.sun_path + 1);

	/* Connect as soon as the victim's listener exists. */
	long long deadline = now_ms() + connect_wait;

	for (;;) {
		fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			printf("spoof_offer: socket: %s\n", strerror(errno));
			return 1;
		}
		if (connect(fd, (struct sockaddr *)&sun, len) == 0)
			break;
		int e = errno;

		close(fd);
		fd = -1;
		if ((e != ECONNREFUSED && e != ENOENT && e != EAGAIN) || now_ms() >= deadline) {
			printf("spoof_offer: connect failed: %s\n", strerror(e));
			return 2;
		}
		usleep(2000);
	}
	printf("spoof_offer: connected\n");

	ssize_t n = send(fd, msg, msg_len, MSG_NOSIGNAL);

	if (n < 0) {
		printf("spoof_offer: send: %s\n", strerror(errno));
		return 1;
	}
	printf("spoof_offer: sent %zd bytes (mode %s)\n", n, mode);

	/* What does the victim answer? */
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int pr = poll(&p, 1, (int)reply_wait);

	if (pr == 0) {
		printf("spoof_offer: reply: none\n");
		return 0;
	}
	uint8_t buf[256];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} control;
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };

	n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n == 0) {
		printf("spoof_offer: reply: eof\n");
		return 0;
	}
	if (n < 0) {
		printf("spoof_offer: reply: %s\n", errno == ECONNRESET ? "reset" : strerror(errno));
		return errno == ECONNRESET ? 0 : 1;
	}
	int got_fd = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			got_fd = 1;
	struct hdr h = { 0 };

	if ((size_t)n >= sizeof(h))
		memcpy(&h, buf, sizeof(h));
	printf("spoof_offer: reply: %zd bytes type %u fd=%s\n", n, (unsigned)h.type, got_fd ? "yes" : "no");
	return got_fd ? 4 : 0;
}
