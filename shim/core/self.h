/*
 * This process's pid, without a system call each time (glibc's getpid()
 * is one): the shim asks on every close, trace line and ownership check.
 * The cache is dropped in every fork child (interpose/atfork.c, before
 * anything else runs there); a child made by a raw clone() without fork's
 * handlers would see its parent's pid, as it already shares its parent's
 * view of every connection.
 */
#ifndef RDMASHIM_SELF_H
#define RDMASHIM_SELF_H

#include <sys/types.h>

pid_t shim_self_pid(void);
/* In a fork child: the next shim_self_pid() asks the kernel. */
void shim_self_forget(void);

#endif
