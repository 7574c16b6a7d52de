/*
 * The upgrade handshake (shim/PROTOCOL.md): moves an eligible connection's
 * directions onto a side channel, one at a time, each at a byte offset.
 * Every function here is called with the sock's lock held and never blocks.
 */
#ifndef RDMASHIM_UPGRADE_H
#define RDMASHIM_UPGRADE_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "sock.h"

/* Advances the handshake as far as it goes without waiting. */
void shim_upgrade_progress(struct shim_sock *s, int fd);

/* True while the peer may switch its direction at an offset we have not
 * learnt yet: every TCP read must then be followed by a progress step. */
static inline bool shim_upgrade_rx_pending(const struct shim_sock *s)
{
	return s->rx_dir == SHIM_DIR_TCP && !s->rx_switch_known && s->phase == SHIM_PHASE_COMMITTING;
}

/*
 * The short-connection rule (both ends use it, so they start close
 * together): a connection may start its handshake once it is
 * RDMASHIM_UPGRADE_AFTER_MS old and has shown it goes on: it carried
 * RDMASHIM_UPGRADE_AFTER_ROUNDS round trips on TCP and began the next one
 * (two turns of direction each: a request, its answer, the next request;
 * counted at the end of the call that moved the bytes, so the start comes
 * at a later call), or 256 KiB either way (a stream), or it lived 25 times
 * that age (an idle one). Age alone took for long-lived every
 * connect-request-answer-close connection whose answer took a loaded
 * machine 2 ms (one turn each end: the client reads its answer, then EOF;
 * the server reads, answers, reads EOF), and each such start cost both
 * ends a handshake's calls for nothing. A client and its server reach the
 * second turn half a round trip apart (the client's second request, the
 * server's read of it).
 */
#define SHIM_UPGRADE_STREAM_BYTES (256u * 1024)
#define SHIM_UPGRADE_IDLE_FACTOR 25ull

static inline bool shim_upgrade_due(const struct shim_sock *s, unsigned long long now)
{
	unsigned long long age = now - s->born_ns, after = shim_cfg.upgrade_after_ms * 1000000ull;

	if (age < after)
		return false;
	return s->tcp_turns >= 2 * shim_cfg.upgrade_after_rounds || age >= after * SHIM_UPGRADE_IDLE_FACTOR ||
	       s->rx_tcp_bytes + s->tx_tcp_bytes >= SHIM_UPGRADE_STREAM_BYTES;
}

/* Bytes moved on TCP, sent or received (at the end of a data call). */
static inline void shim_upgrade_note_moved(struct shim_sock *s, bool sent)
{
	uint8_t way = sent ? 1 : 2;

	if (s->tcp_last_way && s->tcp_last_way != way && s->tcp_turns < UINT16_MAX)
		s->tcp_turns++;
	s->tcp_last_way = way;
}

static inline bool shim_upgrade_settled(const struct shim_sock *s)
{
	return s->phase == SHIM_PHASE_DONE || s->phase == SHIM_PHASE_FAILED;
}

/* A negotiation runs that close or a hand-off can stop (the peer's commit
 * can still be refused): not one whose transport has no stop_peer once the
 * peer may commit. */
bool shim_upgrade_stoppable(const struct shim_sock *s);

/* The negotiation's state is (or will be) the channel: the stream is not
 * plain TCP while it exists. */
bool shim_upgrade_holds_chan(const struct shim_sock *s);

/* A fd a sleeping data call also waits on (the negotiation's), or -1. */
int shim_upgrade_wait_fd(const struct shim_sock *s);

/* The wait fd of a negotiation still under way (not settled, the sock not
 * closed), or -1: what an event loop's wait watches. Under s->lock. */
int shim_upgrade_pending_fd(const struct shim_sock *s);

/* When the pending negotiation's next timed step falls due (transport.h,
 * due_ns), or 0: what a wait's sleep ends by. Under s->lock. */
unsigned long long shim_upgrade_due_ns(const struct shim_sock *s);

/* For an event loop's wait (upgrade_wake.c): an epoll fd of the
 * connection's own that is readable whenever the negotiation's wait fd is,
 * and stays the same while that fd changes; -1 when there is nothing to
 * wait for (a settled or stopped negotiation: its fd is closed then).
 * Under s->lock; costs a system call or two per call while negotiating.
 * s->neg_wake_gen names the fd returned (it counts the ones made). */
int shim_upgrade_wake_fd(struct shim_sock *s);
/* Closes that fd (the sock's release, a fork's child). Under s->lock. */
void shim_upgrade_wake_close(struct shim_sock *s);

/* A fork is coming: leaves no handshake that both processes would inherit
 * half-way (upgrade.c). */
void shim_upgrade_settle_for_fork(struct shim_sock *s, int fd);

/* Gives up on the upgrade (if not past the point of no return). */
void shim_upgrade_fail(struct shim_sock *s, int fd, enum shim_reason reason);
/* The same, with no second attempt once bytes move: the reason is a
 * definite answer, not a peer that may come later. */
void shim_upgrade_fail_for_good(struct shim_sock *s, int fd, enum shim_reason reason);

/*
 * RDMASHIM_MODE=shadow: the negotiation reached its cut, after both ends
 * proved each other and the transport was chosen, before either sent its
 * SWITCH (PROTOCOL.md, "Shadow mode"). The negotiation ends as a failure
 * would (the transport's abandon: the peer sees its rendezvous close and
 * stays on TCP too), the connection stays on TCP byte for byte, traced
 * upgrade.shadow with the transport, counted under reason shadow, state
 * shadow in the stats area.
 */
void shim_upgrade_shadow(struct shim_sock *s, int fd, enum shim_transport kind);

/*
 * The services a transport's negotiation reports through (transport.h).
 * negotiating: it started, with neg its state (phase NEGOTIATING);
 * committing: the peer may switch from now on (COMMITTING); done: both
 * offsets are known (DONE). A failure goes through shim_upgrade_fail().
 */
void shim_upgrade_negotiating(struct shim_sock *s, void *neg);
void shim_upgrade_committing(struct shim_sock *s);
void shim_upgrade_done(struct shim_sock *s);
/* The nonce one SWITCH frame must carry (PROTOCOL.md, "Proof"); 0 or -EIO. */
int shim_upgrade_new_nonce(uint8_t nonce[16]);
/* The peer was not there yet: s->next_try_ns is set after a back-off
 * (doubling, capped). false when the upgrade's deadline passed. */
bool shim_upgrade_retry_later(struct shim_sock *s, unsigned long long now);
/* s->deadline_ns: the upgrade's timeout from now. */
void shim_upgrade_arm_deadline(struct shim_sock *s, unsigned long long now);

/* Our direction moves to s->chan with a SWITCH frame at tx_tcp_bytes; the
 * peer's moves at offset (-EPROTO if we already read past it). */
void shim_upgrade_switch_tx(struct shim_sock *s, int fd);
int shim_upgrade_learn_rx_switch(struct shim_sock *s, int fd, uint64_t offset);

/*
 * The program is closing its last fd: stop the handshake so that the peer
 * starts no new direction towards us (a frame reaching a closed socket
 * makes the kernel reset the connection). A peer that may be committing is
 * stopped by the transport's stop_peer (shm: its message to our shut
 * rendezvous fails, it stays on TCP); one that already committed has its
 * message queued, which is read here, so that the caller knows the offset
 * its frame follows.
 */
void shim_upgrade_stop_for_close(struct shim_sock *s, int fd);

/*
 * The socket is about to change hands (handback.c): as above, a peer that
 * may be committing backs out, but one that already committed is followed,
 * our own direction switching too, so that the hand-back can end both
 * directions cleanly (the transport's stop_commit: shm's C only, waiting
 * for S's SWITCH_AT; S, once it sent its own, has committed).
 */
void shim_upgrade_stop_commit(struct shim_sock *s, int fd);

/*
 * The connection is about to be read or written where the shim can not see
 * (stdio's internal reads, splice) or carries urgent data: it must stay on
 * TCP. Stops the handshake as close does (the peer commits nothing more).
 * Returns 0, or -EBUSY when a direction moved already (or the peer's is
 * committed): the caller must then go through the shim's data path.
 */
int shim_upgrade_pin_tcp(struct shim_sock *s, int fd, enum shim_reason reason);

/*
 * The process can no longer make the calls a side channel needs (a seccomp
 * filter): no handshake starts or goes on in it from now on, each one in
 * progress ends with reason (channels already set up go on working).
 */
void shim_upgrade_bar(enum shim_reason reason);
/* Whether shim_upgrade_bar() was called: no side-channel work may start. */
bool shim_upgrade_barred(void);

/* The connection's destructor (a sock hook): the negotiation's state, the
 * channel and what failover kept; the last fd of the socket is gone. */
void shim_upgrade_release(struct shim_sock *s);

#endif
