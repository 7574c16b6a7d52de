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
 * that owes us frames (microseconds when it is alive), drawn from a budget
 * all closes of the process share (close_budget.h).
 */
#define SHIM_CLOSE_WAIT_MS 2000
void shim_close_prepare(struct shim_sock *s, int fd);

/* Whether fd still names s's connection (the program may have dup'ed and
 * closed it since the fd was noted). */
bool shim_close_fd_is_ours(const struct shim_sock *s, int fd);
/*
 * Before the socket goes: frames still queued for TCP, then a failover's
 * replay, leave (bounded, CLOSE_FLUSH_NS), as the kernel would still send
 * the program's bytes after close. Any transport's release calls it.
 */
void shim_close_flush(struct shim_sock *s, int fd);

/* The process exits (exit(3), not _exit): its kernel closes every fd, so
 * each connection of ours is settled as its close would be. */
void shim_close_at_exit(void);

#endif
