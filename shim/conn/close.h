/*
 * Closing a connection the shim carried: what must leave and what must
 * arrive on TCP before the kernel socket goes. See close.c.
 */
#ifndef RDMASHIM_CLOSE_H
#define RDMASHIM_CLOSE_H

#include "sock.h"

/*
 * The program is closing fd, the last one of s in this process, and no
 * call of its is still running on s. Called with s's lock held, before the
 * real close; waits at most SHIM_CLOSE_WAIT_MS in all, and only for a peer
 * that owes us frames (microseconds when it is alive).
 */
#define SHIM_CLOSE_WAIT_MS 2000
void shim_close_prepare(struct shim_sock *s, int fd);

/* The process exits (exit(3), not _exit): its kernel closes every fd, so
 * each connection of ours is settled as its close would be. */
void shim_close_at_exit(void);

#endif
