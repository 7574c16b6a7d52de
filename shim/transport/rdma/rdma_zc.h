/*
 * Zero-copy sends over an RDMA channel (docs/ZEROCOPY.md): a blocking send
 * of at least RDMASHIM_ZEROCOPY_MIN_KB WRITEs the program's own memory,
 * registered through the cache (mr_cache.h), into the peer's ring, at the
 * ring's offsets and with the same tail and immediate as the copying path
 * (the wire does not change: the peer can not tell), and returns once the
 * WRITE carrying the tail completed: the bytes are in the peer's ring, the
 * NIC reads the program's buffer no more, and the program may reuse it.
 *
 * The staging copy then lacks those bytes. A failover resumes where the
 * peer's RESUME says: the bytes of a completed immediate are counted there
 * (rdma_fail.c), so a RESUME never names them, except a hand-off's, which
 * names the bytes the peer's program read: such a resume inside bytes
 * sent without a copy resets the connection (tx_unreceived: -ERANGE)
 * rather than send bytes the staging copy does not hold. Bytes posted whose
 * completion did not come (the QP failed in the middle) are copied into
 * the staging ring before the send returns, count as sent, and the
 * failover sends again whatever of them the peer's RESUME says it lacks.
 */
#ifndef RDMASHIM_RDMA_ZC_H
#define RDMASHIM_RDMA_ZC_H

#include <stddef.h>
#include <sys/uio.h>

#include "rdma.h"

/* Under the sock's lock, credits taken: moves up to room bytes from the
 * iovec (skip bytes in) without a copy, or returns 0 and the caller's
 * copying path goes on (counted by why when the send was large enough). */
size_t shim_rdma_zc_send(struct rdma_conn *c, const struct iovec *iov, int iovcnt, size_t skip, size_t room);

#endif
