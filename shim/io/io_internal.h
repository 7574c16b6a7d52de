/*
 * What io.c (the data calls), io_sleep.c (their waits) and io_ready.c
 * (readiness and state outside them) share. Every function here is called with the sock's lock held.
 */
#ifndef RDMASHIM_IO_INTERNAL_H
#define RDMASHIM_IO_INTERNAL_H

#include <stdbool.h>

#include "rxswitch.h"
#include "transport.h"
#include "sock.h"

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
