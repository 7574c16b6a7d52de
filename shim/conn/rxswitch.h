/*
 * The end of the peer's switch on our rx side (rxswitch.c): its SWITCH
 * frame, read from TCP at the announced offset, checked against our nonce.
 * Under the sock's lock.
 */
#ifndef RDMASHIM_RXSWITCH_H
#define RDMASHIM_RXSWITCH_H

#include "sock.h"

/* rx switching: reads the rest of the peer's SWITCH frame. 1: rx moved on
 * (to the channel, or refused and back to TCP), 0: more must come,
 * -ECONNRESET: not our peer's frame (the connection was reset). */
int shim_rxswitch_finish(struct shim_sock *s, int fd);

#endif
