/*
 * Wire formats of the upgrade protocol (shim/PROTOCOL.md tells the story).
 *
 * Two channels carry shim data:
 *  - the rendezvous: a SOCK_SEQPACKET abstract UNIX socket between the two
 *    processes, one message per record below, host byte order (both ends
 *    are on one host);
 *  - the TCP connection itself, but only after a direction has switched:
 *    from the switch offset on, that direction of TCP carries frames, never
 *    application bytes.
 *
 * Every struct is statically asserted so a change in size is a compile error.
 */
#ifndef RDMASHIM_WIRE_H
#define RDMASHIM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define SHIM_WIRE_MAGIC 0x52534831u /* "RSH1" */
#define SHIM_WIRE_VERSION 5
#define SHIM_NONCE_LEN 16

enum shim_msg_type {
	SHIM_MSG_OFFER = 1,     /* S -> C: I am a shim, here is my nonce */
	SHIM_MSG_ACCEPT = 2,    /* C -> S: ring memfd attached; nothing switched yet */
	SHIM_MSG_SWITCH_AT = 3, /* S -> C, then C -> S: I switch at offset */
	SHIM_MSG_DECLINE = 4,   /* either way: stay on TCP, with a reason code */
	SHIM_MSG_HINT = 5,      /* C -> S on a kept pair channel: a new connection's
				 * rendezvous and ring (PROTOCOL.md, "Pair channel") */
	SHIM_MSG_COMMIT = 6,    /* S -> C on that rendezvous: verified, mapped, switching */
	SHIM_MSG_RELEASE = 7,   /* S -> C on a kept pair channel: a ring slot S no longer uses */
};

struct shim_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length; /* whole message, header included */
	uint32_t flags;  /* SHIM_MSG_F_*, only those its type allows (else malformed) */
};

/*
 * The bell line (PROTOCOL.md, "Bell line", wire version 3). On ACCEPT: the
 * connection's bell line, S's end of a socketpair C made, comes as the
 * last fd; C rings S on it. On HINT: C rings S on the HINT's socketpair
 * once the handshake is over. On S's SWITCH_AT and on COMMIT: S took the
 * line and rings C on it. Allowed on those types only.
 */
#define SHIM_MSG_F_BELL_LINE 1u
_Static_assert(sizeof(struct shim_msg_hdr) == 16, "msg header is 16 bytes");

struct shim_msg_offer {
	struct shim_msg_hdr hdr;
	uint8_t nonce[SHIM_NONCE_LEN]; /* C writes it back in-band at its switch */
	uint32_t ring_bytes;           /* S's preferred ring size per direction */
	int32_t tcp_fd;                /* S's fd of the TCP socket, for C to check */
};
_Static_assert(sizeof(struct shim_msg_offer) == 40, "offer is 40 bytes");

/* Carries the ring memfd as SCM_RIGHTS. */
struct shim_msg_accept {
	struct shim_msg_hdr hdr;
	uint8_t nonce[SHIM_NONCE_LEN]; /* S writes it back in-band at its switch */
	uint64_t unused;               /* 0 (wire version 1 had C's offset here) */
	uint32_t ring_bytes;           /* the size C chose, per direction */
	int32_t tcp_fd;                /* C's fd of the TCP socket, for S to check */
};
_Static_assert(sizeof(struct shim_msg_accept) == 48, "accept is 48 bytes");

struct shim_msg_switch_at {
	struct shim_msg_hdr hdr;
	uint64_t switch_offset; /* the sender's TCP bytes before its SWITCH frame */
};
/* switch_offset: the sender's direction stays on TCP (its write side is
 * shut, or it is closing), the receiver's may still move. */
#define SHIM_SWITCH_NEVER UINT64_MAX
_Static_assert(sizeof(struct shim_msg_switch_at) == 24, "switch_at is 24 bytes");

struct shim_msg_decline {
	struct shim_msg_hdr hdr;
	uint32_t reason; /* enum shim_reason */
	uint32_t reserved;
};
_Static_assert(sizeof(struct shim_msg_decline) == 24, "decline is 24 bytes");

/*
 * HINT carries, as SCM_RIGHTS and in this order, S's end of a fresh
 * socketpair (the connection's own rendezvous from here on), then the ring
 * memfd when slot is SHIM_SLOT_NONE, the pair's arena memfd when
 * arena_slots is not 0, and nothing more otherwise. The endpoints name
 * the connection as C sees it.
 */
struct shim_msg_hint {
	struct shim_msg_hdr hdr;
	uint8_t client_addr[16]; /* network order; IPv4 as v4-mapped */
	uint8_t server_addr[16];
	uint16_t client_port, server_port; /* host order */
	uint32_t ring_bytes;           /* the size C chose, per direction */
	uint8_t nonce[SHIM_NONCE_LEN]; /* S writes it back in-band at its switch */
	int32_t tcp_fd;                /* C's fd of the TCP socket, for S to check */
	uint32_t slot;                 /* the ring's slot in the pair's arena, or SHIM_SLOT_NONE:
					* the ring's own memfd comes with the HINT */
	uint32_t slot_gen;             /* which use of that slot (S's RELEASE names it back) */
	uint16_t arena_slots;          /* not 0: the pair's arena memfd, of that many slots,
					* comes with this HINT (once per pair) */
	uint16_t reserved;             /* 0 */
};
_Static_assert(sizeof(struct shim_msg_hint) == 88, "hint is 88 bytes");

#define SHIM_SLOT_NONE 0xffffffffu
/* Slots of one pair's ring arena (PROTOCOL.md, "Ring arena"). */
#define SHIM_ARENA_SLOTS_MAX 16

/* S -> C on the pair: S holds nothing of that slot's use any more. */
struct shim_msg_release {
	struct shim_msg_hdr hdr;
	uint32_t slot;
	uint32_t slot_gen;
};
_Static_assert(sizeof(struct shim_msg_release) == 24, "release is 24 bytes");

/*
 * COMMIT carries S's TCP socket itself as SCM_RIGHTS: C compares its inode
 * with what sock_diag says of C's peer, then closes it at once. S has
 * switched (or keeps its direction on TCP: switch_offset NEVER).
 */
struct shim_msg_commit {
	struct shim_msg_hdr hdr;
	uint8_t nonce[SHIM_NONCE_LEN]; /* C writes it back in-band at its switch */
	uint64_t switch_offset;        /* as in SWITCH_AT */
	int32_t tcp_fd;                /* S's fd of that socket (C's check when no fd came) */
	uint32_t reserved;             /* 0 */
};
_Static_assert(sizeof(struct shim_msg_commit) == 48, "commit is 48 bytes");

#define SHIM_MSG_MAX sizeof(struct shim_msg_hint)

/*
 * In-band frames on a switched TCP direction. A frame starts with one type
 * byte; bells are that byte alone. Any other byte where a frame must start
 * is a protocol violation (the connection is reset, never guessed at).
 */
enum shim_frame_type {
	SHIM_FRAME_SWITCH = 'W',     /* + nonce: the direction moves to the ring */
	SHIM_FRAME_DATA_BELL = 'D',  /* the ring I write has data (you were armed) */
	SHIM_FRAME_SPACE_BELL = 'S', /* the ring you write has space (you were armed) */
	SHIM_FRAME_RESUME = 'R',     /* + offset: the channel failed; see below */
	SHIM_FRAME_RETURN = 'T',     /* + length, then that many bytes: see below */
};

struct shim_frame_switch {
	uint8_t type; /* SHIM_FRAME_SWITCH */
	uint8_t reserved[7];
	uint8_t nonce[SHIM_NONCE_LEN];
};
_Static_assert(sizeof(struct shim_frame_switch) == 24, "switch frame is 24 bytes");

/*
 * RESUME: the side channel failed. The sender received exactly rx_offset
 * bytes over the channel (counted from the switch) and will deliver them;
 * the receiver of the frame sends the rest of its stream as plain bytes on
 * TCP right after its own RESUME frame. After a RESUME frame a TCP
 * direction carries application bytes again, never frames.
 *
 * Where the sender's own plain bytes behind this frame start (wire version
 * 5): with SHIM_RESUME_F_TX_FROM, at channel offset tx_from, decided
 * before the frame went (its channel knew the count the peer would name,
 * or it posted nothing); without it, at the offset the receiver's own
 * RESUME names, which the sender checks against what it still holds before
 * it sends a byte. A receiver whose count is not tx_from resets the
 * connection rather than read bytes that are not the next ones
 * (PROTOCOL.md, "Failover"). Any other flag is a violation.
 */
#define SHIM_RESUME_F_TX_FROM 0x01u
struct shim_frame_resume {
	uint8_t type;  /* SHIM_FRAME_RESUME */
	uint8_t flags; /* SHIM_RESUME_F_* */
	uint8_t reserved[6];
	uint64_t rx_offset; /* big-endian: the hosts may differ in byte order */
	uint64_t tx_from;   /* big-endian; 0 without SHIM_RESUME_F_TX_FROM */
};
_Static_assert(sizeof(struct shim_frame_resume) == 24, "resume frame is 24 bytes");

/*
 * RETURN (wire version 4): bytes of the receiver's own stream, which it
 * sent on TCP before its SWITCH frame and which the sender read off TCP
 * without giving them to its program (a hand-back that had to read past
 * them to reach the SWITCH frame behind: PROTOCOL.md, "Hand-back"). The
 * length follows, then that many bytes; the receiver sends them back, on
 * TCP, right behind its own RESUME and before its replay. Only before the
 * sender's RESUME, at most once, and at most SHIM_FRAME_RETURN_MAX bytes:
 * anything else is a protocol violation.
 */
struct shim_frame_return {
	uint8_t type; /* SHIM_FRAME_RETURN */
	uint8_t reserved[7];
	uint64_t length; /* big-endian */
};
_Static_assert(sizeof(struct shim_frame_return) == 16, "return frame header is 16 bytes");
#define SHIM_FRAME_RETURN_MAX (4u << 20)

/* Parses and checks one rendezvous message of n bytes. Returns its type, or
 * -EPROTO for anything malformed, truncated, or of an unknown type. */
int shim_msg_check(const void *buf, size_t n);
void shim_msg_init(struct shim_msg_hdr *hdr, enum shim_msg_type type, uint32_t length);

#endif
