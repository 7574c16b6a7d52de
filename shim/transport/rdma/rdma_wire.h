/*
 * Wire formats of the RDMA transport.
 *
 *  - OFFER rides in the rdma_cm CONNECT REQUEST private data (S -> C) and
 *    ACCEPT in the REPLY private data (C -> S). The IB CM carries 92 bytes
 *    of REQ private data and 196 of REP; rdma_cm keeps 36 of the REQ's for
 *    its own header in RDMA_PS_TCP, which leaves 56 for us. Integers there
 *    are big-endian: the two hosts need not agree on byte order to talk.
 *  - SWITCH_AT is a two-sided SEND on the connected QP, one each way.
 *  - The control page (struct shim_rdma_ctl) and the ring data are written
 *    by the peer with RDMA WRITEs, in the writer's byte order: both hosts
 *    must share it (x86-64 and aarch64 do), which the hello's magic checks.
 */
#ifndef RDMASHIM_RDMA_WIRE_H
#define RDMASHIM_RDMA_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define SHIM_RDMA_MAGIC 0x52534852u /* "RSHR" */
#define SHIM_RDMA_VERSION 4 /* 2: ring tails by WRITE WITH IMMEDIATE; 3: the proof before any byte; 4: the head exact once the ring is empty */
#define SHIM_RDMA_REQ_PRIVATE_MAX 56
#define SHIM_RDMA_REP_PRIVATE_MAX 196

enum shim_rdma_msg {
	SHIM_RDMA_OFFER = 1,
	SHIM_RDMA_ACCEPT = 2,
	SHIM_RDMA_SWITCH_AT = 3,
};

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
};
_Static_assert(sizeof(struct shim_rdma_hello) == 40, "hello is 40 bytes");
_Static_assert(sizeof(struct shim_rdma_hello) <= SHIM_RDMA_REQ_PRIVATE_MAX, "OFFER fits a REQ");
_Static_assert(sizeof(struct shim_rdma_hello) <= SHIM_RDMA_REP_PRIVATE_MAX, "ACCEPT fits a REP");

struct shim_rdma_switch_at {
	uint32_t magic;  /* SHIM_RDMA_MAGIC, big-endian */
	uint8_t version;
	uint8_t type;    /* SHIM_RDMA_SWITCH_AT */
	uint16_t flags;  /* SHIM_RDMA_NO_SWITCH, big-endian */
	uint64_t offset; /* TCP bytes before the sender's SWITCH frame, big-endian */
};
_Static_assert(sizeof(struct shim_rdma_switch_at) == 16, "switch_at is 16 bytes");

#define SHIM_RDMA_SCRATCH_WORDS 64

/*
 * The immediate of a ring WRITE WITH IMMEDIATE (big-endian on the wire, as
 * verbs carries it): how many bytes this send added to the ring, and the
 * CLOSED bit for the producer's last word (a zero-length write). The
 * consumer learns both from its completion queue, which the HCA fills only
 * after the data is placed: one packet per small send carries data and tail.
 * Each one takes a posted receive at the consumer; the consumer reposts and
 * reports its count in tx_peer_recvs, and the producer never has more in
 * flight than the consumer posted (SHIM_RDMA_RQ_DEPTH at first).
 */
#define SHIM_RDMA_IMM_CLOSED 0x80000000u
#define SHIM_RDMA_IMM_BYTES 0x7fffffffu
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
 */
struct shim_rdma_ctl {
	/* Our receive ring, written by the peer as producer. Its data comes
	 * with RDMA WRITE WITH IMMEDIATE: the tail and "closed" arrive as
	 * completions on our CQ (SHIM_RDMA_IMM_*), not as words here. */
	uint64_t rx_wants_space;
	uint8_t pad0[64 - 8];
	/* Our send ring, written by the peer as consumer. */
	uint64_t tx_head;
	uint64_t tx_consumer_armed;
	uint64_t tx_consumer_closed;
	uint64_t tx_peer_recvs; /* receives the peer has posted in all (0: not told yet) */
	uint8_t pad1[64 - 32];
	/* Local: the peer's SWITCH_AT lands here; ours is sent from here. */
	uint8_t recv_buf[64];
	uint8_t send_buf[64];
	/* Local: sources of control-word writes when inline is not available,
	 * one per send-queue slot so none is reused before its write is done. */
	uint64_t scratch[SHIM_RDMA_SCRATCH_WORDS];
};
_Static_assert(offsetof(struct shim_rdma_ctl, tx_head) == 64, "tx words on their own line");
_Static_assert(offsetof(struct shim_rdma_ctl, recv_buf) == 128, "local words after the remote ones");
_Static_assert(65536u * 1024u <= SHIM_RDMA_IMM_BYTES, "a whole ring's bytes fit the immediate");

#define SHIM_RDMA_CTL_BYTES 4096u
_Static_assert(sizeof(struct shim_rdma_ctl) <= SHIM_RDMA_CTL_BYTES, "control page fits");

#endif
