/*
 * What each call that changes the program's mappings drops from the
 * registration cache (mr_cache.h), for the exported wrappers of
 * interpose_mem.c, which only dispatch here. Each runs before the real
 * call where the range is known then, so that no send can find the old
 * registration once the call returned; the userfaultfd watcher
 * (mr_watch.h) sees the same changes and the ones no hook sees. With
 * nothing cached each costs one load.
 */
#ifndef RDMASHIM_MR_EVENTS_H
#define RDMASHIM_MR_EVENTS_H

#include <stddef.h>
#include <stdint.h>

/* mmap: a MAP_FIXED mapping replaces what was at addr (before the call);
 * any new mapping's range holds nothing cached (after it, with its
 * result). */
void shim_mr_before_mmap(void *addr, size_t len, int flags);
void shim_mr_after_mmap(void *ret, size_t len);
void shim_mr_before_munmap(void *addr, size_t len);
/* mremap: the old range goes; with MREMAP_FIXED whatever was at new too. */
void shim_mr_before_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr);
/* madvise: DONTNEED, DONTNEED_LOCKED, FREE and REMOVE drop the pages. */
void shim_mr_before_madvise(void *addr, size_t len, int advice);
/* brk and sbrk: a break that moves down unmaps the heap's top. */
void shim_mr_before_brk(void *new_break);
void shim_mr_before_sbrk(intptr_t increment);
/* shmat: the segment's range (SHM_REMAP replaced what was there);
 * shmdt: its size is not known here, so everything goes. */
void shim_mr_after_shmat(int shmid, void *ret);
void shim_mr_before_shmdt(const void *addr);

#endif
