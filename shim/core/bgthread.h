/*
 * The shim's own threads (the RDMA warm-up, the failover worker): detached,
 * and started with every signal blocked, so that none of them ever takes a
 * signal meant for the program's threads (a thread inherits its creator's
 * mask, which is restored right after).
 */
#ifndef RDMASHIM_BGTHREAD_H
#define RDMASHIM_BGTHREAD_H

/* 0 or -errno. */
int shim_bgthread_start(void *(*main_fn)(void *), void *arg);

#endif
