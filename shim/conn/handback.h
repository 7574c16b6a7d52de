/*
 * A switched connection about to change hands (an SCM_RIGHTS send, an
 * exec) goes back to TCP first, at a clean offset, so that the process that
 * gets the socket reads one unbroken plain stream: the bytes it lacks are
 * in a channel it can not reach (shim/LIFETIME.md, "A connection shared by
 * processes").
 */
#ifndef RDMASHIM_HANDBACK_H
#define RDMASHIM_HANDBACK_H

#include "sock.h"

/* How long the peer has to answer our RESUME: it answers from whatever
 * call of its program next looks at the connection. */
#define SHIM_HANDBACK_WAIT_MS 2000

/*
 * Runs a failover on purpose and waits for it to end: our RESUME says the
 * bytes we read (the unread rest of our ring is given up, and the peer
 * sends it again on TCP), the peer's RESUME ends its frames, and both
 * directions are plain TCP when it returns 0. -EOPNOTSUPP: the channel can
 * not do this (nothing was changed); -ETIMEDOUT or -ECONNRESET: it failed
 * part way and the caller must end the connection.
 *
 * Called with s->lock held; drops it while it sleeps on TCP (never longer
 * than SHIM_HANDBACK_WAIT_MS, and that drawn from the budget every wait
 * on a peer's promise shares: close_budget.h) and holds it again on return.
 */
int shim_handback(struct shim_sock *s, int fd);

#endif
