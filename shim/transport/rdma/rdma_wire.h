/*
 * Wire formats of the RDMA transport.
 *
 *  - OFFER rides in the rdma_cm CONNECT REQUEST private data (S -> C) and
 *    ACCEPT in the REPLY private data (C -> S). The IB CM carries 92 bytes
 *    of REQ private data and 196 of REP; rdma_cm keeps 36 of the REQ's for
 *    its own header in RDMA_PS_TCP, which leaves 56 for us. Integers there
 *    are big-endian: the two hosts need not agree on byte order to talk.
 *  - The QP is a link's (rdma_link.c): every connection between the same
 *    two processes shares it. SWITCH_AT and the link's own messages
 *    (struct shim_rdma_link_msg: OFFER and ACCEPT of a later connection,
 *    RELEASE of a connection's memory) are two-sided SENDs on it; each
 *    names the connection by the id the receiver gave it.
 *  - The control page (struct shim_rdma_ctl) and the ring data are written
 *    by the peer with RDMA WRITEs, in the writer's byte order: both hosts
 *    must share it (x86-64 and aarch64 do), which the hello's magic checks.
 */
#ifndef RDMASHIM_RDMA_WIRE_H
#define RDMASHIM_RDMA_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define SHIM_RDMA_MAGIC 0x52534852u /* "RSHR" */
#define SHIM_RDMA_VERSION 8 /* 2: ring tails by WRITE WITH IMMEDIATE; 3: the proof before any byte; 4: the head exact once the ring is empty; 5: links (one QP per process pair); 6: the head rides with the tail; 7: RESUME says where its replay starts; 8: a small send is one WRITE (DATA immediates) */
#define SHIM_RDMA_REQ_PRIVATE_MAX 56
#define SHIM_RDMA_REP_PRIVATE_MAX 196

enum shim_rdma_msg {
	SHIM_RDMA_OFFER = 1,
	SHIM_RDMA_ACCEPT = 2,
	SHIM_RDMA_SWITCH_AT = 3,
	SHIM_RDMA_LINK_OFFER = 4,   /* C -> S on a link: a later connection's OFFER */
	SHIM_RDMA_LINK_ACCEPT = 5,  /* S -> C: its answer */
	SHIM_RDMA_LINK_RELEASE = 6, /* either way: I write into that connection's memory no more */
	SHIM_RDMA_SHADOW = 7,       /* REJ private data: the sender is in RDMASHIM_MODE=shadow */
};

/* The private data of a REJ that an end in shadow mode sends where it
 * would have gone on (C for S's OFFER, S for C's ACCEPT): the peer then
 * knows why, and its breaker does not count the rejection. */
struct shim_rdma_shadow_rej {
	uint32_t magic;  /* SHIM_RDMA_MAGIC, big-endian */
	uint8_t version;
	uint8_t type;    /* SHIM_RDMA_SHADOW */
	uint16_t reserved; /* 0 */
};
_Static_assert(sizeof(struct shim_rdma_shadow_rej) == 8, "shadow reject is 8 bytes");

/* SWITCH_AT flag: this direction stays on TCP (its write side was shut). */
#define SHIM_RDMA_NO_SWITCH 1u

/* OFFER and ACCEPT: who I am and where my receive ring is. */
struct shim_rdma_hello {
	uint32_t magic;   /* SHIM_RDMA_MAGIC, big-endian */
	uint8_t version;  /* SHIM_RDMA_VERSION */
	uint8_t type;     /* SHIM_RDMA_OFFER or SHIM_RDMA_ACCEPT */
	uint16_t order;   /* 0x0102 in the sender's byte order (see above) */
	uint8_t nonce[SHIM_NONCE_LEN]; /* written back in-band at the peer's switch */
	uint64_t addr;    /* the sender's control page (struct shim_rdma_ctl) */
	uint32_t rkey;    /* covers the control page and the ring after it */
	uint32_t ring_bytes; /* data bytes of each ring; both ends must agree */
	uint32_t conn_id; /* the sender's id of this connection on the link (immediates and messages name it) */
	uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct shim_rdma_hello) == 48, "hello is 48 bytes");
_Static_assert(sizeof(struct shim_rdma_hello) <= SHIM_RDMA_REQ_PRIVATE_MAX, "OFFER fits a REQ");
_Static_assert(sizeof(struct shim_rdma_hello) <= SHIM_RDMA_REP_PRIVATE_MAX, "ACCEPT fits a REP");

struct shim_rdma_switch_at {
	uint32_t magic;  /* SHIM_RDMA_MAGIC, big-endian */
	uint8_t version;
	uint8_t type;    /* SHIM_RDMA_SWITCH_AT */
	uint16_t flags;  /* SHIM_RDMA_NO_SWITCH, big-endian */
	uint64_t offset; /* TCP bytes before the sender's SWITCH frame, big-endian */
	uint32_t to_id;  /* the receiver's id of the connection, big-endian */
	uint32_t reserved; /* 0 */
};
_Static_assert(sizeof(struct shim_rdma_switch_at) == 24, "switch_at is 24 bytes");

/*
 * A link's own messages, SENT on its QP. OFFER: C asks the process at the
 * link's other end to take the connection named by the four addresses
 * (C's TCP end, S's TCP end), with C's hello (nonce, control page, rkey,
 * ring size, C's id). ACCEPT: S's hello for it, to_id naming C's id.
 * RELEASE: the sender writes nothing more into the memory of the
 * connection to_id names (the receiver's id); the receiver may give that
 * memory back once it is done with the connection too.
 */
struct shim_rdma_link_msg {
	uint32_t magic;  /* SHIM_RDMA_MAGIC, big-endian */
	uint8_t version;
	uint8_t type;    /* SHIM_RDMA_LINK_* */
	uint16_t reserved; /* 0 */
	uint32_t to_id;  /* the receiver's id (ACCEPT, RELEASE); 0 in OFFER */
	uint16_t client_port, server_port; /* big-endian (OFFER) */
	uint8_t client_addr[16], server_addr[16]; /* v4-mapped (OFFER) */
	struct shim_rdma_hello hello; /* OFFER, ACCEPT */
};
_Static_assert(sizeof(struct shim_rdma_link_msg) == 96, "link message is 96 bytes");


/*
 * The immediate of a ring WRITE WITH IMMEDIATE (big-endian on the wire, as
 * verbs carries it): the consumer's id of the connection (the link is
 * shared), and the CLOSED bit for the producer's last word. That WRITE is
 * the 8-byte tail word itself (rx_announced in the consumer's control page:
 * the bytes the producer has put into the ring in all), after the data
 * WRITEs on the same QP; the consumer reads it when the completion comes,
 * which the HCA writes only after the data and the word are placed.
 * Each one takes a posted receive at the consumer; the consumer counts a
 * connection's share of them (tx_peer_recvs) as credit, and the producer
 * never has more of one connection's in flight than SHIM_RDMA_RQ_DEPTH
 * plus what was reported taken.
 */
#define SHIM_RDMA_IMM_CLOSED 0x80000000u
#define SHIM_RDMA_IMM_ID 0x00ffffffu

/*
 * Since version 8, a connection whose receiver's id fits
 * SHIM_RDMA_IMM_DATA_ID announces every send with a DATA immediate
 * (SHIM_RDMA_IMM_DATA) on the last data WRITE itself, and no tail word:
 * the consumer's tail moves by the completion's byte count (the bytes that
 * WRITE placed), plus, with SHIM_RDMA_IMM_WRAP, the ring's rest from the
 * old tail to its end (the send's first WRITE, without an immediate). Its
 * CLOSED alone is the tail word form above, last. Only one form per
 * connection: a tail word the consumer reads may be newer than its own
 * immediate, which a DATA immediate after it would count again; a
 * connection with a larger id uses the tail word form only.
 * The low 18 bits are the low bits of the sender's head of the other
 * direction (what the tail word's second word carries otherwise): the
 * receiver takes the smallest head at or after the one the connection's
 * previous DATA immediate gave (0 at first) with those bits, never one
 * counted from the head word, which may hold a later head already. Exact
 * when the head moved at most SHIM_RDMA_IMM_DATA_HEAD since; further, the
 * send's chain writes the exact head word first and the immediate carries
 * the previous one plus SHIM_RDMA_IMM_DATA_HEAD (a head may lag). The
 * peer's head is the larger of the two. Never with CLOSED.
 * The sender still writes its tail word (what its DATA immediates
 * announced), lazily and with no immediate, for the receiver's stall
 * watch only: when it arms a wait or waits for room, and from the links'
 * sweeper once the word lagged a quarter of the watch's bound. The
 * receiver never counts bytes from it (only CLOSED's word is read as a
 * tail), so the count has one form.
 */
#define SHIM_RDMA_IMM_DATA 0x40000000u
#define SHIM_RDMA_IMM_WRAP 0x20000000u
#define SHIM_RDMA_IMM_DATA_ID_SHIFT 18
#define SHIM_RDMA_IMM_DATA_ID 0x7ffu
#define SHIM_RDMA_IMM_DATA_HEAD 0x3ffffu
_Static_assert(((SHIM_RDMA_IMM_DATA_ID << SHIM_RDMA_IMM_DATA_ID_SHIFT) &
		(SHIM_RDMA_IMM_DATA | SHIM_RDMA_IMM_WRAP | SHIM_RDMA_IMM_CLOSED | SHIM_RDMA_IMM_DATA_HEAD)) == 0,
	       "a DATA immediate's id, head bits and flags do not overlap");
_Static_assert((SHIM_RDMA_IMM_WRAP & (SHIM_RDMA_IMM_DATA | SHIM_RDMA_IMM_CLOSED | SHIM_RDMA_IMM_DATA_HEAD)) == 0,
	       "WRAP is a bit of its own");
_Static_assert(((SHIM_RDMA_IMM_DATA_ID << SHIM_RDMA_IMM_DATA_ID_SHIFT) | SHIM_RDMA_IMM_DATA_HEAD |
		SHIM_RDMA_IMM_DATA | SHIM_RDMA_IMM_WRAP | SHIM_RDMA_IMM_CLOSED) == 0xffffffffu,
	       "a DATA immediate uses all 32 bits");
_Static_assert((SHIM_RDMA_IMM_ID & (SHIM_RDMA_IMM_DATA | SHIM_RDMA_IMM_CLOSED)) == 0,
	       "a tail word immediate's id leaves the DATA and CLOSED bits clear");

/* A DATA immediate: the receiver's id (at most SHIM_RDMA_IMM_DATA_ID), the
 * sender's exact head of the other direction, whether the send wrapped. */
static inline uint32_t shim_rdma_imm_data(uint32_t id, uint64_t head, bool wrapped)
{
	return SHIM_RDMA_IMM_DATA | (wrapped ? SHIM_RDMA_IMM_WRAP : 0) | id << SHIM_RDMA_IMM_DATA_ID_SHIFT |
	       ((uint32_t)head & SHIM_RDMA_IMM_DATA_HEAD);
}

/* The head a DATA immediate gives: the smallest at or after the previous
 * DATA immediate's whose low bits are this one's (at most
 * SHIM_RDMA_IMM_DATA_HEAD further: a lie too). */
static inline uint64_t shim_rdma_imm_head(uint64_t known, uint32_t imm)
{
	return known + (((imm & SHIM_RDMA_IMM_DATA_HEAD) - known) & SHIM_RDMA_IMM_DATA_HEAD);
}

/* The tail after a DATA immediate whose WRITE placed len bytes, from the
 * tail before it (ring_bytes a power of two). */
static inline uint64_t shim_rdma_imm_tail(uint64_t had, uint32_t imm, uint32_t len, uint64_t ring_bytes)
{
	if (imm & SHIM_RDMA_IMM_WRAP)
		had += ring_bytes - (had & (ring_bytes - 1));
	return had + len;
}

/* The receiver's id of the connection an immediate names (either form). */
static inline uint32_t shim_rdma_imm_id(uint32_t imm)
{
	if (imm & SHIM_RDMA_IMM_DATA)
		return (imm >> SHIM_RDMA_IMM_DATA_ID_SHIFT) & SHIM_RDMA_IMM_DATA_ID;
	return imm & SHIM_RDMA_IMM_ID;
}
#define SHIM_RDMA_RQ_DEPTH 128

/*
 * The control page at the start of each connection's slot; the receive ring's
 * data follows at SHIM_RDMA_CTL_BYTES, and our send ring's staging copy after
 * that (local only). Words the peer writes are 8 bytes, aligned, each on a
 * line with only words written by the same side.
 *
 * One direction's ring (producer P, consumer Q) is spread over both hosts so
 * that every word is read where it lives and written remotely:
 *   in Q's page:  the data, wants_space (P arms for space); the tail and
 *                 "closed" reach Q as immediates on its CQ
 *   in P's page:  head (Q writes credits back), armed (Q arms for data),
 *                 consumer_closed (Q is gone), peer_recvs (Q's receives)
 *
 * tx_head sits right after rx_announced: both are written by the peer, and
 * the peer's tail WRITE for our receive ring carries its head of our send
 * ring in the same 16 bytes (rdma_chan.c, post_staged), so a reply costs
 * no WRITE of its own to say how far the request was read.
 */
struct shim_rdma_ctl {
	/* Our receive ring, written by the peer as producer. Its data comes
	 * with RDMA WRITE WITH IMMEDIATE: the tail and "closed" arrive as
	 * completions on our CQ (SHIM_RDMA_IMM_*), not as words here. */
	uint64_t rx_wants_space;
	uint64_t rx_announced; /* the producer's tail (see the immediate above; DATA: lazy, the stall watch's) */
	/* Our send ring, written by the peer as consumer. */
	uint64_t tx_head;
	uint8_t pad0[64 - 24];
	uint64_t tx_consumer_armed;
	uint64_t tx_consumer_closed;
	uint64_t tx_peer_recvs; /* receives the peer has posted in all (0: not told yet) */
	uint8_t pad1[64 - 24];
};
_Static_assert(offsetof(struct shim_rdma_ctl, tx_head) == offsetof(struct shim_rdma_ctl, rx_announced) + 8,
	       "one WRITE carries the peer's tail and head");

#define SHIM_RDMA_CTL_BYTES 4096u
_Static_assert(sizeof(struct shim_rdma_ctl) <= SHIM_RDMA_CTL_BYTES, "control page fits");

#endif
