/*
 * Back to TCP when a side channel fails after the switch (the RESUME frame
 * in wire.h; shim/PROTOCOL.md, "Failover"). Both directions resume on the
 * same TCP connection at the first byte the receiver did not get, so the
 * program sees one unbroken stream.
 *
 * Every entry point is called with the sock's lock held and never blocks.
 */
#ifndef RDMASHIM_FAILOVER_H
#define RDMASHIM_FAILOVER_H

#include <stdbool.h>

#include "sock.h"
#include "transport.h"

/* Notices a failed channel (ours, or the peer's RESUME) and moves the
 * failover on: our RESUME out, the peer's in, our replay out, each
 * direction back to TCP when its side is done. Cheap when nothing failed. */
void shim_failover_progress(struct shim_sock *s, int fd);

/*
 * The failover worker's step (fo_worker.h) on a connection no call may be
 * looking at; takes and lets go the sock's lock itself, and uses fd only
 * while the table still maps it to s. True when the worker is done with
 * it: its direction is back on TCP with its RESUME and replay out (the
 * rest, reading, is the program's), or there is nothing for it to do (no
 * failed channel, not switched: the upgrade's own; closed; reset).
 */
bool shim_failover_alone(struct shim_sock *s, int fd);

/*
 * Our channel is full and the peer has not read for a while (it may be in
 * no call at all, where TCP would have gone on buffering for it): the
 * connection returns to TCP, our direction at once (a lossless channel
 * only, transport.h tx_offset), so the kernel buffers what follows. 0, or
 * -EOPNOTSUPP when the channel can not.
 */
int shim_failover_spill(struct shim_sock *s, int fd);

/*
 * The program sends urgent data (MSG_OOB): only TCP carries the urgent
 * mark the receiver's kernel reports (POLLPRI, SIOCATMARK, recv(MSG_OOB)),
 * so the connection returns to TCP as by a spill, before the real send.
 * 0, or -EOPNOTSUPP when the channel can not (the byte then goes inline).
 */
int shim_failover_oob(struct shim_sock *s, int fd);

/*
 * The channel did not pay: most exchanges had to wake their sleeping
 * receivers with bells (io_tx.c, RDMASHIM_UNPAID_PERCENT), which costs more
 * than TCP. Back to TCP as by a spill; the connection stays there. 0, or
 * -EOPNOTSUPP when the channel can not.
 */
int shim_failover_unpaid(struct shim_sock *s, int fd);

/*
 * A connection shared since a fork whose channel another process of ours
 * stopped (transport.h, moved_elsewhere: its hand-back as it sandboxed
 * itself, or a failover it answered): its RESUME and the peer's went, each
 * side's replay behind them, so the stream is plain TCP both ways from
 * where the kernel stands. Our view of the channel is stale: it is dropped
 * without a frame or a ring access, and the connection goes to the
 * kernel. Called before anything else looks at the channel or at TCP's
 * frames (io/), under the lock.
 */
void shim_failover_elsewhere(struct shim_sock *s, int fd);
static inline void shim_failover_look_elsewhere(struct shim_sock *s, int fd)
{
	if (__builtin_expect(s->shared, 0) && s->chan && !s->fo_started && s->chan->ops->moved_elsewhere)
		shim_failover_elsewhere(s, fd);
}

/* Sends what it can of a pending replay: 0 when none is left, -EAGAIN. */
int shim_failover_flush(struct shim_sock *s, int fd);

/* The channel failed and this direction waits for the peer's RESUME:
 * nothing can move until it arrives (or TCP ends). */
static inline bool shim_failover_waiting(const struct shim_sock *s)
{
	return s->fo_started && !s->fo_peer_known && !s->fo_peer_rx_nothing && !s->rx_tcp_eof;
}

/* Bytes of ours the peer never got are still going out on TCP: the
 * program's next bytes wait behind them. */
static inline bool shim_failover_replaying(const struct shim_sock *s)
{
	return s->fo_replay != NULL;
}

#endif
