/*
 * Failovers that no program call moves on (fo_worker.c).
 *
 * A failover is driven by the program's calls on its connection
 * (failover.c). When a channel dies under a connection the program is not
 * looking at, say the one it just wrote an answer to while it now waits
 * for the next request on another, the bytes that connection accepted and
 * the channel lost would wait for that program's next call on it, and the
 * peer that waits for them would wait forever: the kernel retransmits on
 * its own, so must we. A channel that breaks therefore kicks its
 * connection here; a thread of the shim's own sends its RESUME and replay,
 * as a call on it would, until its direction is back on TCP.
 */
#ifndef RDMASHIM_FO_WORKER_H
#define RDMASHIM_FO_WORKER_H

#include "sock.h"

/*
 * s's channel broke; fd is the program's number for it. Any thread, any
 * of the shim's locks held: the worker's own lock is the last in the lock
 * order (interpose/atfork.c), and nothing else is taken here. The worker
 * holds no reference between its steps; each step looks fd up again and
 * leaves the connection once fd names anything but s.
 */
void shim_failover_kick(struct shim_sock *s, int fd);

/* Fork handlers (interpose/atfork.c): prepare takes the worker's lock,
 * the parent lets it go, the child forgets its parent's queue (the worker
 * thread is not in the child, which does not run those connections). */
void shim_fo_worker_atfork_prepare(void);
void shim_fo_worker_atfork_parent(void);
void shim_fo_worker_atfork_child(void);

#endif
