/*
 * Who owns a TCP socket, asked of the kernel through sock_diag (the
 * interface `ss` uses; no privilege needed). The upgrade uses it to check
 * that the process on the other end of the rendezvous runs as the user that
 * owns the other end of the TCP connection.
 */
#ifndef RDMASHIM_DIAG_H
#define RDMASHIM_DIAG_H

#include <sys/types.h>

#include "tuple.h"

/* Finds the TCP connection bound to src and connected to dst in this
 * network namespace, held by a process (diag.c says which states count).
 * Returns 0 with its owner's uid and inode, -ENOENT if none (a listener on
 * src's port, a TIME_WAIT or half-open socket is none), or another -errno. */
int shim_diag_tcp_owner(const struct shim_endpoint *src, const struct shim_endpoint *dst, uid_t *uid,
			ino_t *inode);

/* Fork handlers (atfork.c): the kept netlink socket is this process's. */
void shim_diag_atfork_prepare(void);
void shim_diag_atfork_parent(void);
void shim_diag_atfork_child(void);

#endif
