/*
 * One copy on shared memory (docs/ZEROCOPY.md, shim/PROTOCOL.md "One copy
 * on shared memory"). A blocking receive of at least
 * RDMASHIM_ZEROCOPY_SHM_MIN_KB that finds its ring empty offers its
 * buffer in the ring's header (offset, address, length, a generation);
 * the peer's send whose next byte is at that offset takes the offer with
 * a compare-and-swap and writes its bytes straight into the buffer with
 * process_vm_writev and says DONE. The bytes never enter the ring and
 * do not move its cursors: each side counts them (tx_total, rx_total),
 * and a stream offset is a ring cursor plus that count. The
 * receiver withdraws an offer not taken with the opposite swap, so a
 * write can only follow a take, and a take is always settled before
 * the receive returns: DONE seen, or the writer gone, or, past a bound,
 * a writer that can not write into us given up. Never a timeout alone:
 * a stopped writer writes when it goes on.
 *
 * Everything here runs under the owning socket's lock, except the
 * ring's watch of the word (ring.h), which the lock-free readiness
 * checks see.
 */
#ifndef RDMASHIM_SHM_ZC_H
#define RDMASHIM_SHM_ZC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "owned.h"
#include "ring.h"

/* The state word's low bits (the generation is above them). */
#define SHM_ZC_IDLE 0u  /* no offer, or withdrawn */
#define SHM_ZC_OPEN 1u  /* the consumer waits on it */
#define SHM_ZC_TAKEN 2u /* the producer is writing into the buffer */
#define SHM_ZC_DONE 3u  /* written: zc_done bytes */
#define SHM_ZC_STATE_MASK 3u

static inline uint64_t shm_zc_word(uint64_t gen, unsigned state)
{
	return gen << 2 | state;
}

/* How long a taken offer may take to be DONE before the connection is
 * given up: the peer's promise (shim/DESIGN invariant 8), bound to one
 * write of a send, which takes far less. The buffer itself waits on for
 * the write or the writer's exit (shm_zc.c, wait_taken). */
#define SHM_ZC_TAKEN_WAIT_MS 2000

struct shm_zc {
	/* The peer's process (SO_PEERPIDFD of the verified rendezvous), and
	 * its number for process_vm_writev, checked alive through the pidfd
	 * at every take (pid reuse). -1: none. */
	struct shim_owned_fd pidfd;
	pid_t pid;
	bool tx_on; /* our sends may take the peer's offers */
	bool rx_on; /* our receives may offer */
	/* Producer: bytes sent by offers so far, and the stream offset past
	 * the last of them (the ring's memory holds nothing before it that
	 * tx_unreceived could send again). */
	uint64_t tx_total, tx_floor;
	/* Consumer: bytes received by offers so far; the offer out (one at a
	 * time), its generation, stream offset and length; delivered: bytes
	 * a settle took for it, for the call that made it (shm_zc_end);
	 * given_up: a taken offer never came to DONE in time, so nothing
	 * more is offered (its writer died, or the ring is violated). */
	uint64_t rx_total;
	bool out;
	uint64_t gen, off, len;
	size_t delivered;
	bool given_up;
};

/* The channel's state at its start: nothing bound, off. */
void shm_zc_init(struct shm_zc *z);
/* Binds the peer's process: pidfd (taken, closed on failure) of the
 * process at the other end of the verified rendezvous. Turns one copy on
 * as RDMASHIM_ZEROCOPY says. */
void shm_zc_bind(struct shm_zc *z, int pidfd);
/* The release of the channel (its pidfd). */
void shm_zc_release(struct shm_zc *z);

/* Producer: takes the peer's offer when the send's next byte is at its
 * offset; bytes written into the peer's buffer (0: copy them). */
size_t shm_zc_send(struct shm_zc *z, struct shim_ring *tx, const struct iovec *iov, int iovcnt, size_t skip);

/* Consumer: offers buf (0), or -errno: not on, one is out, too small. */
int shm_zc_offer(struct shm_zc *z, struct shim_ring *rx, void *buf, size_t len);
/* Consumer: a DONE offer becomes the ring's (its bytes skipped); with
 * withdraw, an open one is withdrawn and a taken one waited for. */
void shm_zc_settle(struct shm_zc *z, struct shim_ring *rx, bool withdraw);
/* Consumer, the call that offered: withdraws (or settles) and returns
 * the bytes that landed in its buffer. */
size_t shm_zc_end(struct shm_zc *z, struct shim_ring *rx);

/* Lock-free: an offer is out (settled by no call yet). Relaxed: the
 * offering call takes the socket's lock before it reads what a settle
 * left (shm_zc_end); the lock orders the rest. */
static inline bool shm_zc_out(const struct shm_zc *z)
{
	return __atomic_load_n(&z->out, __ATOMIC_RELAXED);
}

/* The peer's word that it can not write into us. */
bool shm_zc_peer_refused(const struct shim_ring *rx);

#endif
