/*
 * Releasing files a peer may have made blocking (reaper.c).
 *
 * Whoever drops the last reference to a file runs its release inside that
 * very system call. A peer can hand us files whose release blocks: a TCP
 * socket with SO_LINGER {1, N}, a full send queue and a receiver that never
 * reads waits N seconds in tcp_close (N can be years); a file on FUSE waits
 * for its daemon's flush. It can also queue such a file, with SCM_RIGHTS,
 * in any unix socket of ours it can write to, where it is released with
 * the socket. So no such file, and no such socket, is ever closed on the
 * program's threads:
 *
 *  - every fd a peer passed us, kept or not, and every unix socket of ours
 *    a peer can write to (rendezvous, pair channels, bell lines) is given
 *    to shim_reap(), never to close();
 *  - shim_reap() moves the file out of the program's fd table at once: it
 *    sends it, SCM_RIGHTS, into a socketpair of the process's reaper and
 *    closes our number, which then is not the last reference (the message
 *    in flight holds one) and returns at once. The number is free when the
 *    call returns, so a program that reuses it, or closes every number it
 *    did not open, can never meet the file again;
 *  - the reaper, a thread of the shim's, takes the files out of the
 *    socketpair one at a time and closes them: a release that blocks
 *    blocks it alone.
 *
 * The bound on what it holds is the socketpair's queue (the kernel's
 * datagram queue limit). When the queue is full, a release is stuck: an
 * INET socket is then made harmless in place (SO_LINGER {1,0}: its close
 * resets at once and never waits) and closed; any other file is parked,
 * kept open and counted, up to REAP_PARK_MAX, then left open for the
 * process's life (traced). While a release is stuck, shim_reap_jammed()
 * is true and no new side channel is negotiated (reason reaper_jammed), so
 * no peer can pass us more.
 *
 * Kernels from 6.16 refuse SCM_RIGHTS to a socket that set SO_PASSRIGHTS
 * to 0: shim_reap_refuse_rights() does that on sockets that never carry
 * fds (bell lines). Older kernels let them through, and the rules above
 * hold alone: nothing here depends on it.
 */
#ifndef RDMASHIM_REAPER_H
#define RDMASHIM_REAPER_H

#include <stdbool.h>
#include <sys/socket.h>

#include "owned.h"

/* The most fds one message can carry (the kernel's SCM_MAX_FD): every
 * receive of ours has room for this many, so the kernel never discards
 * (and releases in our thread) one that did not fit. */
#define SHIM_SCM_MAX_FD 253
#define SHIM_SCM_SPACE CMSG_SPACE(SHIM_SCM_MAX_FD * sizeof(int))

/* Releases fd off the program's threads; a negative fd is ignored. Never
 * blocks; fd's number is closed when it returns. Any thread, any lock of
 * the shim's held (it takes none but its own, once per process, to set
 * the reaper up). */
void shim_reap(int fd);

/*
 * The same for a socket of ours whose peer must see our end go at once:
 * the release itself comes a moment later, on the reaper, but a peer that
 * tells a closed connection from a lie by our hang-up (rendezvous.h,
 * shim_rv_peer_gone) must see it before the program's next call can
 * reuse the TCP socket's number. shutdown() tells the peer and releases
 * nothing. Never for a socket the peer passed us: it would end the
 * peer's own connection.
 */
void shim_reap_hung_up(int fd);

/* Makes this process's reaper now, while its fd table has room (a
 * connection that may upgrade is tracked): one made at the first release
 * could come too late, in a process near its fd limit. */
void shim_reap_prepare(void);

/* shim_owned_close() for a kept socket a peer can write to (a pair
 * channel, a bell line) or a kept file a peer passed: reaped if still
 * ours; o is empty after. */
void shim_reap_owned(struct shim_owned_fd *o);

/* Hands every fd of a received message's SCM_RIGHTS to shim_reap(). */
void shim_reap_cmsg_fds(struct msghdr *mh);

/* True while a release is stuck (the reaper's queue filled): no new side
 * channel starts. Falls back to false once the queue drains. */
bool shim_reap_jammed(void);

/* SO_PASSRIGHTS 0 on fd where the kernel has it (6.16): the kernel refuses
 * any fd sent to it. 0, or -errno (older kernels: -ENOPROTOOPT). */
int shim_reap_refuse_rights(int fd);

/* What the reaper did, for tests and stats. */
struct shim_reap_counts {
	unsigned long long sent;     /* given to the reaper */
	unsigned long long released; /* closed by it */
	unsigned long long defused;  /* INET sockets reset in place (queue full) */
	unsigned long long parked;   /* kept open (queue full) */
};
void shim_reap_counts(struct shim_reap_counts *out);
/* Waits up to timeout_ms until every file given was released: true if so.
 * For tests, which look at what a release shows (a peer's hang-up, the
 * process's fd count) right after the call that made it. */
bool shim_reap_settled(int timeout_ms);

/* Fork handlers (interpose/atfork.c): the set-up lock, the last in the
 * order. The child makes its own reaper at its first release; it starts
 * unjammed (the parent's stuck release is not its own). */
void shim_reap_atfork_prepare(void);
void shim_reap_atfork_release(void);
void shim_reap_atfork_child(void);
/* The child's fork handlers are done: the next release may start the
 * child's reaper thread (none is started inside a fork handler). */
void shim_reap_atfork_child_done(void);

#endif
