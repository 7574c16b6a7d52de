/*
 * The end of the peer's switch on our rx side (rxswitch.c): its SWITCH
 * frame, read from TCP at the announced offset, checked against our nonce.
 * Under the sock's lock.
 */
#ifndef RDMASHIM_RXSWITCH_H
#define RDMASHIM_RXSWITCH_H

#include <stdbool.h>
#include <sys/uio.h>

#include "sock.h"

/* rx switching: reads the rest of the peer's SWITCH frame. 1: rx moved on
 * (to the channel, or refused and back to TCP), 0: more must come,
 * -ECONNRESET: not our peer's frame (the connection was reset). */
int shim_rxswitch_finish(struct shim_sock *s, int fd);

/*
 * A read took bytes past the peer's switch offset, which it learned only
 * after that read (the offset is looked for after every read while rx is
 * pending: an honest peer announces it before its frame can arrive, a
 * squatter at any time). past: those bytes, as they lie in the program's
 * buffer. Precondition: s->rx_switch_known, and nothing of the frame read
 * yet. true: they are plain (not the start of a frame with our nonce, and
 * our direction on TCP): the switch is refused, as shim_rxswitch_finish()
 * refuses, and they go to the program. false: they were taken as the
 * frame's start (the caller delivers only what lies before the offset).
 */
bool shim_rxswitch_crossed(struct shim_sock *s, int fd, const struct iovec *past, int n);

#endif
