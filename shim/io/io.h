/*
 * The data path of intercepted connections (tracked and eligible): TCP with
 * byte counting until a direction switches, then the side channel.
 * Returns a byte count or a negative errno; never touches errno's value
 * seen by the caller except through the return.
 */
#ifndef RDMASHIM_IO_H
#define RDMASHIM_IO_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "sock.h"

/* write(2) and writev(2) come here with flags 0: SIGPIPE as the kernel raises it. */
ssize_t shim_io_send(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags);
ssize_t shim_io_recv(struct shim_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags);
/* recv with MSG_TRUNC (the wrappers send such reads here, never to
 * shim_io_recv): TCP discards the bytes and never writes the
 * program's buffer; here they are read into a buffer of ours, so that a
 * SWITCH frame among them is the stream's (io_calls.c). Returns as
 * shim_io_recv. */
ssize_t shim_io_recv_discard(struct shim_sock *s, int fd, size_t len, int flags);
/* sendmsg: ancillary data is checked by the kernel as it would be for this
 * send (a zero-byte sendmsg with the same control), never sent raw; then
 * the bytes go as shim_io_send's. (io_calls.c) */
ssize_t shim_io_sendmsg(struct shim_sock *s, int fd, const struct msghdr *msg, int flags);
/* sendfile into the connection: the file's bytes are read and sent, and
 * the file offset (*offset, or the file position when offset is NULL)
 * advances by what was sent, not by what was read. (io_calls.c) */
ssize_t shim_io_sendfile(struct shim_sock *s, int out_fd, int in_fd, off64_t *offset, size_t count);
/* splice on a connection that moved to a side channel (or whose peer's
 * direction will): from it into a pipe, or from a pipe into it, through a
 * buffer and the data path; bytes are taken from the source only as far as
 * the destination took them. (io_calls.c) */
ssize_t shim_io_splice_from(struct shim_sock *s, int sock_fd, int pipe_fd, size_t len, unsigned flags);
ssize_t shim_io_splice_to(struct shim_sock *s, int sock_fd, int pipe_fd, size_t len, unsigned flags);
/* FIONREAD on an intercepted fd. */
int shim_io_bytes_readable(struct shim_sock *s, int fd, int *out);
/* Bytes received so far, read or not (on the channel: its count; on TCP:
 * those read plus those queued): a count that moves when bytes come, for
 * EPOLLET's edges. */
uint64_t shim_io_rx_arrived(struct shim_sock *s, int fd);
/* ioctl on a tracked fd: FIONREAD answered from the data path when it is
 * intercepted, the rest as shim_sock_ioctl(). (io_ready.c) */
int shim_io_ioctl(int fd, unsigned long request, void *arg);
/* SIOCATMARK on an intercepted fd: the mark is on TCP only. */
int shim_io_atmark(struct shim_sock *s, int fd, int *out);
int shim_io_shutdown(struct shim_sock *s, int fd, int how);

/* Readiness of an intercepted fd, for the hooked waits: a mask of
 * POLLIN/POLLOUT/POLLRDHUP/POLLHUP/POLLERR as recv/send would see it, or -1
 * when the kernel's own answer for the fd is right (nothing switched). */
int shim_io_poll_mask(struct shim_sock *s, int fd);
/* Moves a pending upgrade on from a wait (a program that only waits in
 * epoll between its calls must not let the handshake time out); returns
 * shim_io_switched() as it is then, read under the lock. */
bool shim_io_progress(struct shim_sock *s, int fd);
/* The kernel saw the switched fd readable: those are bells (or EOF) only;
 * take them off TCP so a level-triggered wait does not spin on them.
 * true: the drain found the peer's RESUME, and the connection is on its way
 * back to TCP (the next look at it finishes that). */
bool shim_io_drain_bells(struct shim_sock *s, int fd);
/* Prepares to sleep on fd's TCP readability for the given POLLIN/POLLOUT:
 * returns what was armed, with SHIM_ARM_READY when sleeping is no longer
 * needed. Every arm is followed by one disarm with its result. */
#define SHIM_ARMED_RX 1
#define SHIM_ARMED_TX 2
#define SHIM_ARM_READY 4
#define SHIM_ARM_SHORT 8    /* sleep at most a millisecond (io_ready.c, shim_io_arm) */
#define SHIM_ARM_COUNTED 16 /* counted as a sleeper: disarm must follow */
#define SHIM_ARM_LINE 32    /* armed for bells on the line: watch it (POLLIN) */
/* line: the bell line the caller will watch (shim_io_line()), or -1. */
int shim_io_arm(struct shim_sock *s, int fd, short events, int line);
/* The connection's bell line (transport.h, bell_fd), or -1: what a wait may
 * watch beside TCP; shim_io_arm() checks it again. */
int shim_io_line(struct shim_sock *s);
/* The fd a negotiating connection's handshake waits on (upgrade.h), or -1:
 * for a wait that holds no reference to it (poll: the number may be closed
 * and reused before it sleeps, a wake-up for nothing at worst). Lowers
 * *cap_ms (waitloop.h) to its next step that no fd announces (a retry
 * after a back-off, shim_upgrade_due_ns). */
int shim_io_handshake_fd(struct shim_sock *s, int *cap_ms);
/* Adds the connection's handshake wake fd (upgrade.h, shim_upgrade_wake_fd)
 * to the epoll set efd, edge-triggered, under data, unless *gen says the set
 * has this very one (*gen: which it has; 0 none). The set keeps no
 * reference to it: the registration goes when the wake fd closes, as the
 * negotiation ends. Lowers *cap_ms as shim_io_handshake_fd does. */
void shim_io_wake_register(struct shim_sock *s, int efd, uint64_t data, unsigned *gen, int *cap_ms);
/* A wait armed for the line saw it readable: the disarm drains it. */
void shim_io_note_line_rang(struct shim_sock *s);
void shim_io_disarm(struct shim_sock *s, int fd, int armed);
/* The fd's switched directions make TCP readable only for frames: true
 * when the kernel must be asked for POLLIN instead of the app's events.
 * The caller holds s->lock; shim_io_is_switched() takes it. */
bool shim_io_switched(const struct shim_sock *s);
bool shim_io_is_switched(struct shim_sock *s);
/* Young: all on TCP, no handshake begun, nothing of the peer's switch
 * known; the kernel's readiness is exact and a wait has nothing of ours to
 * move on (the upgrade starts at a data call). _locked: under s->lock. */
bool shim_io_young_locked(const struct shim_sock *s);
bool shim_io_young(struct shim_sock *s);

/* A young connection's epoll registration is still the kernel's
 * (epoll_young.c): taken over once the upgrade is due, so that it can
 * start (io.c, at a data call's start). With no lock held: the set's lock
 * comes first. */
void shim_io_young_take_over(struct shim_sock *s);

#endif
