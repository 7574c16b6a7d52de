/*
 * hostile.h: the hostile shared-memory peer (see main.c for what it does).
 * The wire formats are written here from shim/PROTOCOL.md, shim/wire.h and
 * shim/ring.h, never included from the shim: an attacker has only the
 * documented formats.
 */
#ifndef HOSTILE_H
#define HOSTILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>

#define WIRE_MAGIC 0x52534831u
#define WIRE_VERSION 5
enum { MSG_OFFER = 1, MSG_ACCEPT = 2, MSG_SWITCH_AT = 3, MSG_HINT = 5 };

struct hdr {
	uint32_t magic;
	uint16_t version, type;
	uint32_t length, flags; /* flags: 1 = the bell line (ACCEPT: its fd comes last) */
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
	uint64_t unused; /* 0 (version 1 had C's switch offset here) */
	uint32_t ring_bytes;
	int32_t tcp_fd;
};
struct switch_at {
	struct hdr hdr;
	uint64_t switch_offset; /* UINT64_MAX: the sender's direction stays on TCP */
};
_Static_assert(sizeof(struct offer) == 40, "offer is 40 bytes");
_Static_assert(sizeof(struct accept) == 48, "accept is 48 bytes");
_Static_assert(sizeof(struct switch_at) == 24, "switch_at is 24 bytes");
/* On a pair channel, with [socketpair end, ring memfd] (PROTOCOL.md). */
struct hint {
	struct hdr hdr;
	uint8_t client_addr[16], server_addr[16]; /* IPv4 as ::ffff:a.b.c.d */
	uint16_t client_port, server_port;
	uint32_t ring_bytes;
	uint8_t nonce[16];
	int32_t tcp_fd;
	uint32_t slot, slot_gen; /* 0xffffffff, 0: the ring's memfd comes along */
	uint16_t arena_slots, reserved;
};
_Static_assert(sizeof(struct hint) == 88, "hint is 88 bytes");

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

struct opts {
	const char *role, *mode, *addr;
	uint32_t ring;
	size_t payload;
	int seconds, wait_ms, procs, resp;
	int decoy; /* pair_decoy: the client port of the connection to claim */
	int blocking; /* > 0: every fd passed is a lingering socket (util.c) whose
		       * receiver stays silent this many seconds */
};
extern struct opts o;

struct buf {
	uint8_t *b;
	size_t len, cap;
};

struct state {
	int tcp, rv;
	uint8_t *map;
	size_t map_len;
	struct ring tx, rx;     /* tx: we produce, rx: we consume */
	uint8_t *shadow;        /* server role: what our tx data must hold */
	struct buf expect;      /* client role: the stream S takes as data from us */
	struct buf tcplog;      /* client role: every byte we wrote to TCP */
	struct buf pending;     /* server role: C's TCP bytes, to echo first */
	size_t pending_off;
	int tcp_is_data;        /* S takes all our TCP bytes as data (no switch) */
	uint64_t sent, echoed, good, never_sent, foreign, oob;
	uint64_t parked;        /* echo bytes the victim holds for us in its ring */
	int reached, eof, reset, lie_done;
	int refused;            /* the victim stayed on TCP: no ring lie to make */
	uint64_t tcp_app_left;  /* client role: S's TCP app bytes before its switch */
};
extern struct state st;

/* util.c */
int is_mode(const char *m);
long long now_ms(void);
void say(const char *fmt, const char *arg);
void result(void) __attribute__((noreturn));
void fail_setup(const char *what) __attribute__((noreturn));
void random_bytes(void *buf, size_t n);
socklen_t rv_name(struct sockaddr_un *sun, const struct sockaddr_in *c, const struct sockaddr_in *s);
/* Binds the port's beacon name, as a shimmed server holds it, so that a
 * shimmed client offers to us; the fd, or -1. */
int hold_beacon(uint16_t port);
int parse_addr(const char *text, struct sockaddr_in *sin);
int wait_fd(int fd, short ev, int ms);
int send_all(int fd, const void *buf, size_t len);
int send_with_fds(int sock, const void *msg, size_t len, int fd, int lie);
/* --blocking: in send_with_fds's fd, a TCP socket whose last close blocks
 * while the attacker's receiver lives: SO_LINGER {1, 3600}, a full send
 * queue, a peer that never reads (util.c). */
#define LINGERING (-2)
/* One byte with such a socket attached: 0 or -1. */
int send_lingering(int sock);
/* Connects to sa and sends such a message at once, from a child that
 * exits right after: 0, -1 (the connect failed) or -2 (the send did). */
int connect_passing_lingering(const struct sockaddr *sa, socklen_t len);
/* One message with two fds, in order (the bell line's ACCEPT). */
int send_fd_pair(int sock, const void *msg, size_t len, int fd0, int fd1);

/* stream.c: what this side sends, and the verdict on what comes back */
void resp_build(void);
uint8_t out_byte(uint64_t i);
uint64_t out_target(int after_lie);
void expect_add(const void *data, size_t len);
int tcp_send(const void *data, size_t len);
void tcp_becomes_data(void);
void classify(const uint8_t *b, size_t n);
int recv_exact(void *buf, size_t len);

/* decoy.c: a HINT over the kept rendezvous for a connection not ours */
void pair_decoy(const struct sockaddr_in *srv) __attribute__((noreturn));

/* ring.c: the rings, the lies made after the switch, the data phase */
void map_rings(int memfd, size_t len, uint32_t size, int we_are_client);
void pump(int memfd, int echo);
int lie_in_ring(void);

/* client.c, server.c, flood.c: the roles */
void run_client(void) __attribute__((noreturn));
void run_server(void) __attribute__((noreturn));
void run_flood(void) __attribute__((noreturn));

#endif
