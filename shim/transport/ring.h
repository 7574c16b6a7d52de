/*
 * A single-producer single-consumer byte ring in memory shared by two
 * processes (shm) or written remotely (rdma).
 *
 * Conventions (after liburing): head and tail are free-running 64-bit byte
 * counts, never reduced modulo the size; size is a power of two and
 * (cursor & mask) is the offset. The producer owns tail, the consumer owns
 * head; each reads the other's cursor with acquire and publishes its own
 * with release. Every barrier below says what it pairs with.
 *
 * The peer is not trusted (shim/PROTOCOL.md, "Values the peer writes"): the
 * header lives in memory the other process can write at any moment. So each
 * side keeps its own cursor in private memory (`own`) and only publishes it
 * to the header, never reads it back; the size and mask are this side's,
 * fixed at attach; and the peer's cursor is read once per call into a local
 * and checked: 0 <= (tail - head) <= size. A value outside that is a
 * protocol violation: the ring reports nothing to move from then on
 * (`violated`, sticky) and the connection is reset by the caller. No copy is
 * ever sized from a value the peer wrote without that check, and every
 * offset is masked with our own mask, so no access leaves the data area.
 *
 * Wake-ups (see shim/PROTOCOL.md): a side about to sleep sets its "armed"
 * word, issues a full fence, then re-checks the ring; the other side, after
 * publishing its cursor, issues a full fence and then reads the armed word.
 * With the two fences (Dekker), at least one side sees the other's store,
 * so a wake-up can not be lost.
 */
#ifndef RDMASHIM_RING_H
#define RDMASHIM_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define SHIM_RING_MAGIC 0x52494e47u /* "RING" */
#define SHIM_CACHELINE 64

/* The shared header of one direction. Placed at the start of a page; the
 * data area follows at SHIM_RING_HDR_BYTES. */
struct shim_ring_hdr {
	uint32_t magic;
	uint32_t size; /* data bytes, power of two */
	uint8_t pad0[SHIM_CACHELINE - 8];
	/* Written by the producer. */
	uint64_t tail;
	uint32_t producer_closed;      /* no bytes after tail will come (FIN) */
	uint32_t producer_wants_space; /* armed: waiting for the consumer */
	uint32_t producer_shared;      /* more than one process writes (fork, SCM_RIGHTS) */
	uint32_t producer_resuming;    /* a RESUME of the writer's is coming on TCP (failover.c) */
	uint8_t pad1[SHIM_CACHELINE - 24];
	/* Written by the consumer. */
	uint64_t head;
	uint32_t consumer_armed;  /* armed: waiting for the producer */
	uint32_t consumer_closed; /* the reader is gone: writes fail EPIPE */
	uint32_t consumer_shared; /* more than one process reads (fork, SCM_RIGHTS) */
	uint8_t pad2[SHIM_CACHELINE - 20];
	/*
	 * One-copy offer (shm only; transport/shm/shm_zc.c, shim/PROTOCOL.md
	 * "One copy on shared memory"). zc_state is (generation << 2) | state
	 * and both sides compare-and-swap it; the consumer writes zc_off,
	 * zc_addr and zc_len before it opens an offer, the producer writes
	 * zc_done before it says DONE and zc_refused when its kernel refused
	 * the write. Any value: the peer's.
	 */
	uint64_t zc_state;
	uint64_t zc_off;  /* the stream offset the offer starts at (ring cursor + bytes moved by offers) */
	uint64_t zc_addr; /* the consumer's buffer, in its own address space */
	uint64_t zc_len;
	uint64_t zc_done;    /* bytes the producer wrote into the buffer */
	uint32_t zc_refused; /* the producer can not write into us: offer no more */
	uint8_t pad3[SHIM_CACHELINE - 44];
};
_Static_assert(sizeof(struct shim_ring_hdr) == 4 * SHIM_CACHELINE, "ring header layout");
_Static_assert(offsetof(struct shim_ring_hdr, zc_state) == 3 * SHIM_CACHELINE, "the offer on its own line");
_Static_assert(offsetof(struct shim_ring_hdr, zc_done) == 3 * SHIM_CACHELINE + 32, "offer layout");
_Static_assert(offsetof(struct shim_ring_hdr, zc_refused) == 3 * SHIM_CACHELINE + 40, "offer layout");
_Static_assert(offsetof(struct shim_ring_hdr, tail) == SHIM_CACHELINE, "tail on its own line");
_Static_assert(offsetof(struct shim_ring_hdr, head) == 2 * SHIM_CACHELINE, "head on its own line");

#define SHIM_RING_HDR_BYTES 4096u

/* One side's view of a ring: the shared header and data, and a mask. */
struct shim_ring {
	struct shim_ring_hdr *hdr;
	uint8_t *data;
	uint32_t mask;
	/* Our own cursor (head for the consumer, tail for the producer): the
	 * truth; the header's copy is only published. Written under the
	 * owning socket's lock, read lock-free by the busy-poll loops. */
	uint64_t own;
	/* The peer wrote an impossible cursor: sticky, lock-free. */
	uint32_t violated;
	/* Stopped for a failover (shim_ring_*_stop): the producer writes no
	 * more, the consumer sees the peer's tail as it was at the stop
	 * (stop_at), whatever the peer writes after. Private, like own. */
	uint32_t stopped;
	uint64_t stop_at;
	/* Another process of ours reaches this ring too (fork): own is not
	 * the truth any more, the published cursor is. */
	uint32_t cursors_shared;
	/* Consumer, while an offer of ours is out (shm_zc.c): the header's
	 * zc_state reaching zc_wake (its DONE) is news for a sleeper, as
	 * bytes are: bytes that landed in the offering call's buffer. */
	uint32_t zc_watch;
	uint64_t zc_wake;
};

/* Bytes a ring of data size `size` occupies, header included. */
static inline size_t shim_ring_footprint(uint32_t size)
{
	return SHIM_RING_HDR_BYTES + size;
}

/* Formats a ring at mem (the creator does this once, before sharing). */
void shim_ring_format(void *mem, uint32_t size);
/* Attaches to a formatted ring; -EPROTO if the header does not match size.
 * A consumer attaches with its head, a producer with its tail: both start
 * at the header's values as formatted (0), never at what a peer wrote. */
int shim_ring_attach(struct shim_ring *ring, void *mem, uint32_t size);
/* The peer broke the ring's rules (see above). */
bool shim_ring_violated(const struct shim_ring *ring);

/* Consumer side. */
size_t shim_ring_readable(struct shim_ring *ring);
/* Copies up to the iovec's total bytes out; advances head unless peek. */
size_t shim_ring_read(struct shim_ring *ring, const struct iovec *iov, int iovcnt, bool peek);
bool shim_ring_eof(struct shim_ring *ring); /* closed and drained */
bool shim_ring_producer_closed(const struct shim_ring *ring); /* closed, drained or not */
/* Arms for a data wake-up, adding how (the caller's bell bits, transport.h)
 * to the armed word; returns true when the ring is still empty (sleep).
 * Every arm is followed by one disarm, slept or not. */
bool shim_ring_consumer_arm(struct shim_ring *ring, uint32_t how);
/* Clears the armed word; returns what it held: 0 when the producer took
 * the arm (its bell is on the way). */
uint32_t shim_ring_consumer_disarm(struct shim_ring *ring);
/* After head advanced: the armed word the producer left when it was waiting
 * for space (ring it as those bits ask), else 0. The peer wrote it: any
 * value. */
uint32_t shim_ring_consumer_should_bell(struct shim_ring *ring);

/*
 * Room the producer waits for before it is woken or told "writable": a
 * quarter of the ring, as TCP waits for a third of its send buffer, so a
 * nearly full ring is not fed in slivers.
 */
static inline size_t shim_ring_space_lowat(const struct shim_ring *ring)
{
	return (ring->mask + 1) / 4;
}

/* Producer side. */
size_t shim_ring_writable(struct shim_ring *ring);
/* Copies the iovec, from byte skip on and at most max bytes, into a
 * power-of-two circular buffer at cursor (wrapping once); returns the count.
 * The ring below and the RDMA transport's staging copy both use it. */
size_t shim_ring_copy_iov_in(uint8_t *data, uint32_t mask, uint64_t cursor, const struct iovec *iov,
			     int iovcnt, size_t skip, size_t max);
/* The bytes [from, tail) of a power-of-two circular buffer of mask + 1
 * bytes, as at most two pieces into out (returns how many), or -ERANGE
 * when from is past tail or more than one buffer behind it (a peer's
 * offset that lies). The ring's failover replay and the RDMA transport's
 * staging copy both use it. */
int shim_ring_span(uint8_t *data, uint32_t mask, uint64_t from, uint64_t tail, struct iovec out[2]);
/* Copies in as much of the iovec as fits (from byte skip on); publishes tail. */
size_t shim_ring_write(struct shim_ring *ring, const struct iovec *iov, int iovcnt, size_t skip);
bool shim_ring_producer_arm(struct shim_ring *ring, uint32_t how);
uint32_t shim_ring_producer_disarm(struct shim_ring *ring);
/* After tail advanced: the armed word the consumer left when it was waiting
 * for data (ring it as those bits ask), else 0. Any value: the peer's. */
uint32_t shim_ring_producer_should_bell(struct shim_ring *ring);
void shim_ring_producer_close(struct shim_ring *ring);

/*
 * fork: both processes reach the ring, and either may move our cursor.
 * From here on each takes it from the header, where the last mover
 * published it, instead of its private copy. The peer can write that copy
 * too; a false value is caught by the same distance check as the peer's own
 * cursor, and at worst garbles this connection's stream, which is the
 * peer's own.
 */
void shim_ring_share_cursors(struct shim_ring *ring, bool we_produce);

/*
 * Failover (failover.c): a stopped ring moves nothing new. The consumer's
 * view of the tail is frozen where it was, or, with drop_unread, at what
 * was read (the bytes not read are given up: the peer sends them again on
 * TCP). Stopping again with drop_unread lowers the freeze; idempotent.
 */
void shim_ring_consumer_stop(struct shim_ring *ring, bool drop_unread);
void shim_ring_producer_stop(struct shim_ring *ring);
/* One copy (shm_zc.c): an offer's DONE wakes the consumer's waits. */
void shim_ring_zc_watch(struct shim_ring *ring, uint64_t wake_word);
void shim_ring_zc_unwatch(struct shim_ring *ring);
bool shim_ring_zc_news(const struct shim_ring *ring);
/* The peer broke a rule found outside the ring's own checks (shm_zc.c). */
void shim_ring_violate(struct shim_ring *ring);
/* Our own cursor: the consumer's head, the producer's tail. */
uint64_t shim_ring_own(const struct shim_ring *ring);

/* Producer: bytes written into the ring so far (our tail). */
uint64_t shim_ring_sent(const struct shim_ring *ring);
/* Consumer: bytes received, read or not (the frozen tail once stopped). */
uint64_t shim_ring_received(struct shim_ring *ring);
/* Producer: our bytes from cursor `from` on, still in the ring's memory:
 * at most two pieces. -ERANGE when from is after our tail or more than a
 * ring behind it (overwritten). */
int shim_ring_unreceived(const struct shim_ring *ring, uint64_t from, struct iovec out[2]);
bool shim_ring_consumer_gone(const struct shim_ring *ring);
/* Whether the other end of this ring (its consumer, for a tx ring; its
 * producer, for an rx ring) said it is shared by several processes
 * (shim_ring_share_cursors). A peer's word: it only keeps a connection on
 * its channel (io_tx.c, the unpaid hand-back), it names no memory. */
bool shim_ring_peer_shared(const struct shim_ring *ring, bool we_produce);

/*
 * The RESUME of one end and the close of the other, which must not cross
 * (a RESUME that reaches a closed socket makes its kernel reset the
 * connection under bytes the sender has not read). Dekker over one ring's
 * header, whose producer is the resuming end and whose consumer the
 * closing one: each end stores its word, issues a full fence, then loads
 * the other's, so at least one of them sees the other.
 *
 * shim_ring_resume_announce (the producer, before it sends its RESUME):
 * false when the consumer closed first: no RESUME may be sent.
 * shim_ring_close_before_resume (the consumer, at its close): marks the
 * ring closed and tells whether a RESUME was announced, to be waited for.
 */
bool shim_ring_resume_announce(struct shim_ring *ring);
bool shim_ring_close_before_resume(struct shim_ring *ring);
/* The consumer: the producer announced a RESUME (a hint only: the RESUME
 * itself is read and checked on TCP). Also the producer's side, after a
 * fork: a process of ours sharing the ring announced one (shm.c,
 * moved_elsewhere). */
bool shim_ring_producer_resuming(const struct shim_ring *ring);
void shim_ring_consumer_close(struct shim_ring *ring);

#endif
