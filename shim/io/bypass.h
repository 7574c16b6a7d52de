/*
 * Calls through which a program reads or writes a connection where the
 * shim can not follow (glibc's stdio reads with its internal read, splice
 * moves bytes inside the kernel, urgent data is out of the stream), and the
 * process sandbox (seccomp), after which the shim may make no new kind of
 * system call. The rule (docs/LIMITS.md): a connection used so stays on
 * TCP if it can; one that already moved goes through the shim's data path.
 */
#ifndef RDMASHIM_BYPASS_H
#define RDMASHIM_BYPASS_H

#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "reason.h"

/* fd will be used where the shim can not see: keep it on TCP. Returns 0
 * (kept on TCP, or not a connection of ours) or -EBUSY (it moved). */
int shim_bypass_pin(int fd, enum shim_reason why);
/* The same, and a connection already switched goes back to TCP first when
 * it can (handback.c): for callers nothing of the shim can serve (stdio). */
int shim_bypass_leave(int fd, enum shim_reason why);

/* setsockopt succeeded on a tracked fd: the sock learns it (shim_sock_on_
 * setsockopt()); SO_OOBINLINE pins the connection to TCP. */
void shim_bypass_on_setsockopt(int fd, int level, int name, const void *val, socklen_t len);

/* splice with a tracked connection at one end. Returns as splice(2) does,
 * with a negative errno. */
ssize_t shim_bypass_splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			   unsigned flags);

/* The process is about to install a seccomp filter (filter_ahead; or asks
 * for no new privileges, as sandboxes do first), or started under one: no
 * handshake runs in it from now on, and its connections go to the kernel's
 * own path (bypass.c). */
void shim_bypass_sandboxed(const char *how, bool filter_ahead);

#endif
