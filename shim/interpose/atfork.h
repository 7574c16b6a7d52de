/*
 * fork in a threaded program: every lock the shim takes is held by the
 * forking thread across fork() and released on both sides, so a child never
 * inherits a lock some other thread held (shim/LIFETIME.md, "fork").
 */
#ifndef RDMASHIM_ATFORK_H
#define RDMASHIM_ATFORK_H

/* Registers the handlers; once, from the constructor. */
void shim_atfork_register(void);

#endif
