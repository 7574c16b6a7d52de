/*
 * What the data calls (io.c, the steps both directions share; io_rx.c and
 * io_tx.c, recv and send), io_sleep.c (their waits) and io_ready.c
 * (readiness and state outside them) share. Every function here is called
 * with the sock's lock held, except shim_io_begin(), which takes it.
 */
#ifndef RDMASHIM_IO_INTERNAL_H
#define RDMASHIM_IO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include "rxswitch.h"
#include "transport.h"
#include "sock.h"

/* ---- a data call's frame, shared by io_rx.c and io_tx.c (io.c) ---- */

/* iovec elements handled per call; beyond this a call moves fewer bytes,
 * which stream sockets allow. */
#define SHIM_IO_MAX_IOV 64

size_t shim_io_iov_total(const struct iovec *iov, int iovcnt);
/* out = the part of iov from byte skip, at most max bytes long, in at
 * most SHIM_IO_MAX_IOV elements: how many. */
int shim_io_iov_window(const struct iovec *iov, int iovcnt, size_t skip, size_t max, struct iovec *out);

/* A data call starts: takes s->lock, looks at the clock once for a young
 * connection (0 past its idle phase) and counts the call in s->active
 * (io.c, io_enter). *fd becomes the fd to use, or -1 with *rc = -EBADF
 * when the program closed it before the call began. Returns that time,
 * for shim_io_young_not_due(). */
unsigned long long shim_io_begin(struct shim_sock *s, int *fd, int *rc);
/* ... and ends: uncounted, s->lock let go. */
void shim_io_end(struct shim_sock *s);

/*
 * A young idle connection: no handshake begun, none due yet
 * (RDMASHIM_UPGRADE_AFTER_MS), nothing off TCP, no switch of the peer's
 * known. Nothing in-band can reach it (the peer writes a shim byte only
 * after our side's handshake began, PROTOCOL.md), and a call has no step
 * of ours to take: a blocking read may be the kernel's own (one system
 * call where the shim's would be a try, a poll and a retry, with the
 * kernel's SO_RCVLOWAT, SO_RCVTIMEO, MSG_WAITALL and restart rules; while
 * it runs, no handshake starts in this process: raw_reads, upgrade.c),
 * and a nonblocking read or any send is one kernel call, counted. Such a
 * call's first round takes none of shim_io_round()'s steps.
 */
bool shim_io_young_not_due(const struct shim_sock *s, unsigned long long now);

/* The start of each round of a data call: the fd to use now, our queued
 * frames out, the upgrade and a failover moved on. -EBADF when the fd is
 * gone, -ECONNRESET once the connection was ended. */
int shim_io_round(struct shim_sock *s, int *fd);

/* What one step of a round decided: another round, or the call is
 * answered (its bytes, or its error, are what it returns). */
enum shim_io_next {
	SHIM_IO_AGAIN,
	SHIM_IO_ANSWERED,
};

/* ---- readiness and waits ---- */

/* The channel has room worth reporting (or the peer is gone). Lock-free. */
bool shim_io_tx_ready(const struct shim_sock *s);
/* After a channel op moved nothing: true when the peer broke the rules
 * and the connection was ended (frames.h, shim_frames_abort). */
bool shim_io_aborted_by_peer(struct shim_sock *s, int fd);
/* An rx arm whose sleep must be short (transport.h, arm_grace). */
bool shim_io_grace_needed(struct shim_sock *s);
/* A disarm found the peer took the arm: its bell is on the way. */
void shim_io_note_disarm(struct shim_sock *s, bool bell_coming);

/* RDMASHIM_SPIN_US, then one sleep: io_sleep.c. Each returns 0 (look
 * again), -EAGAIN at the SO_*TIMEO deadline (-1: none) or for a
 * nonblocking call, -EINTR, or -EBADF. */
int shim_io_sleep_on_tcp(struct shim_sock *s, int fd, short events, long long deadline);
/* Nothing can move until the peer acts: -EAGAIN for a nonblocking call,
 * else a sleep on TCP for events. */
int shim_io_wait_for_peer(struct shim_sock *s, int fd, short events, bool nonblock, long long deadline);
/* rx on the channel found nothing / tx found it full: spin, then arm,
 * sleep for a bell, disarm. */
int shim_io_wait_rx(struct shim_sock *s, int fd, long long deadline);
/* The same for a call whose buffer is offered (transport.h, rx_offer):
 * it ends too when another call settled the offer. */
int shim_io_wait_rx_offering(struct shim_sock *s, int fd, long long deadline);
int shim_io_wait_tx(struct shim_sock *s, int fd, long long deadline);

/* The channel's bell line, to watch for POLLIN beside TCP and arm for
 * (SHIM_BELL_LINE), or -1: arm for a bell on TCP (transport.h, bell_fd). */
static inline int shim_io_bell_line(const struct shim_sock *s)
{
	return s->chan && s->chan->ops->bell_fd ? s->chan->ops->bell_fd(s->chan) : -1;
}

/* A wait armed for the line saw it readable (transport.h, line_rang). */
static inline void shim_io_line_rang(struct shim_sock *s)
{
	if (s->chan && s->chan->ops->line_rang)
		s->chan->ops->line_rang(s->chan);
}

static inline unsigned shim_io_bell_how(int line)
{
	return line >= 0 ? SHIM_BELL_LINE : SHIM_BELL_TCP;
}

/* The fd to use for TCP: the program's, or ours after it closed its own
 * while a call was in progress (see shim_sock_on_close); -1 when that close
 * could not make ours (the number may name another file by now). */
static inline int shim_io_fd(const struct shim_sock *s, int fd)
{
	if (s->tcp_keep >= 0)
		return s->tcp_keep;
	return s->fd_lost ? -1 : fd;
}


#endif
