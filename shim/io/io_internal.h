/*
 * What io.c (the data calls) and io_ready.c (readiness and state outside
 * them) share. Every function here is called with the sock's lock held.
 */
#ifndef RDMASHIM_IO_INTERNAL_H
#define RDMASHIM_IO_INTERNAL_H

#include <stdbool.h>

#include "sock.h"

/* rx switching: reads the rest of the peer's SWITCH frame. 1: switched,
 * 0: more must come, -ECONNRESET: not our peer's frame (reset). */
int shim_io_finish_rx_switch(struct shim_sock *s, int fd);
/* The channel has room worth reporting (or the peer is gone). Lock-free. */
bool shim_io_tx_ready(const struct shim_sock *s);
/* After a channel op moved nothing: true when the peer broke the rules
 * and the connection was ended (frames.h, shim_frames_abort). */
bool shim_io_aborted_by_peer(struct shim_sock *s, int fd);
/* An rx arm whose sleep must be short (transport.h, arm_grace). */
bool shim_io_grace_needed(struct shim_sock *s);
/* A disarm found the peer took the arm: its bell is on the way. */
void shim_io_note_disarm(struct shim_sock *s, bool bell_coming);

#endif
