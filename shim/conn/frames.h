/*
 * In-band frames on a switched TCP direction (wire.h): the outgoing queue
 * and the incoming drain. Called with the sock's lock held; never block.
 */
#ifndef RDMASHIM_FRAMES_H
#define RDMASHIM_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "sock.h"

/* Queues a frame behind any not yet sent and tries to send the queue.
 * A bell already waiting in the queue is not queued twice. */
int shim_frames_queue(struct shim_sock *s, int fd, const void *frame, size_t len);
/* Sends what the queue holds, as far as TCP takes it without blocking.
 * Returns 0 when empty, -EAGAIN when bytes remain, or -errno. */
int shim_frames_flush(struct shim_sock *s, int fd);

/* rx switched: reads and discards the bells waiting on TCP. Notices EOF. */
void shim_frames_drain(struct shim_sock *s, int fd);

/* Takes the bells at the head of fd's stream off it, and nothing else (the
 * first other byte stops it): those that reached a switched connection
 * while its channel ended at close, from a peer that could not know we
 * were no longer armed; left there, they would make the close a reset.
 * For a connection whose rx ran on the channel (every byte on TCP since
 * is a frame). Returns how many. */
size_t shim_frames_take_late_bells(int fd);

/* rx switching: reads the rest of the peer's SWITCH frame. Returns 1 when
 * it is complete and carries our nonce, 0 when more must arrive, -EPROTO
 * when it does not match, -ECONNRESET on EOF before it completed. Only a
 * matching prefix is consumed: after -EPROTO with rx_frame_len 0 the
 * mismatching bytes are still in the stream. */
int shim_frames_read_switch(struct shim_sock *s, int fd);

/* The peer broke the protocol (a frame, a ring cursor, an offset out of
 * bounds): ends the connection as a reset would. TCP is shut both ways,
 * the channel carries nothing more, and every later call on the fd fails
 * with ECONNRESET. Traced at error level with reason and what. */
void shim_frames_abort(struct shim_sock *s, int fd, enum shim_reason reason, const char *what);

/* Frees what a failover held for TCP and will not send now: its replay,
 * our RETURN frame and the peer's returned bytes. */
void shim_frames_drop_failover(struct shim_sock *s);

/* Takes bytes read from TCP past the peer's switch offset (the start of its
 * SWITCH frame, then bells) into the frame buffer. */
void shim_frames_absorb(struct shim_sock *s, const uint8_t *bytes, size_t len);

/* Whether bytes, the next len of the stream after the rx_frame_len frame
 * bytes already absorbed, can still be our peer's SWITCH frame (type,
 * reserved zeros, our nonce; what lies past the frame is not looked at). */
bool shim_frames_may_be_switch(const struct shim_sock *s, const uint8_t *bytes, size_t len);

#endif
