/*
 * The registration cache for zero copy: memory of the program's registered
 * for RDMA once and found again by its address range, so that a large send
 * from a buffer the program reuses pays no registration. The argument that
 * it is never stale, case by case, is docs/ZEROCOPY.md.
 *
 * - Keyed by the page-aligned range and the registrar (one per protection
 *   domain); a range inside a live entry of the same registrar hits it.
 * - LRU, capped in bytes (RDMASHIM_MR_CACHE_MB) over every registrar: the
 *   least recently used entry that no send holds is dropped first.
 * - A range is cached only while a watcher sees every change of its
 *   mapping (mr_watch.c: userfaultfd's UNMAP, REMOVE and REMAP events),
 *   and is registered only after the watch is in place. A range the
 *   watcher refuses (file-backed, another monitor, no userfaultfd) is not
 *   cached: the caller copies.
 * - Invalidation (shim_mr_cache_invalidate*) drops every entry over the
 *   range at once; the hooks on the program's mapping calls call it before
 *   the call, the watcher for what the hooks can not see (glibc's own
 *   unmaps).
 * - Nothing that may unmap memory (free, ibv_dereg_mr) runs under the
 *   cache's lock nor on the watcher's thread: an unmap of watched memory
 *   waits until the watcher read its event, and the watcher reads under
 *   this lock. Dead entries wait in a list until a program's thread (a
 *   get, a put, a hook) deregisters them outside the lock.
 * - Registration goes through a function table (struct shim_mr_registrar)
 *   so that the unit tests run it without an RDMA device.
 */
#ifndef RDMASHIM_MR_CACHE_H
#define RDMASHIM_MR_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct shim_mr_registrar {
	/* Registers [addr, addr + len) for local read access (a send's or an
	 * RDMA WRITE's source needs no IBV_ACCESS_LOCAL_WRITE); returns a
	 * handle and *lkey, or NULL and a negative errno in *err. */
	void *(*reg)(void *ctx, void *addr, size_t len, uint32_t *lkey, int *err);
	void (*dereg)(void *ctx, void *handle);
	void *ctx;
};

struct shim_mr_watcher {
	/* Watches the page-aligned [start, end): 0, or a negative errno when
	 * a change of its mapping could go unseen (the caller copies). Called
	 * with the cache's lock held. */
	int (*watch)(uintptr_t start, uintptr_t end);
	/* Stops watching [start, end) (no entry covers it any more). Under
	 * the lock. */
	void (*unwatch)(uintptr_t start, uintptr_t end);
	/* Takes the events already pending, calling
	 * shim_mr_cache_invalidate_locked() for each. Under the lock. */
	void (*drain)(void);
};

/* Why an invalidation came (counted alike; traced at debug). */
enum shim_mr_inval {
	SHIM_MR_INVAL_UNMAP,  /* the range is gone (munmap, MAP_FIXED over it, brk shrink, shmdt) */
	SHIM_MR_INVAL_REMOVE, /* its pages were dropped, the range stays (madvise) */
	SHIM_MR_INVAL_REMAP,  /* it moved (mremap) */
};

/* A registration held for one send: valid until shim_mr_cache_put(). */
struct shim_mr_ref {
	uint32_t lkey;
	void *handle;
	void *entry; /* the cache's */
};

/* The cache's settings; the first get sets them up from shim_cfg unless a
 * test did. cap_bytes 0: nothing is cached (every get fails). */
void shim_mr_cache_setup(const struct shim_mr_watcher *w, size_t cap_bytes);

/*
 * The registration of [addr, addr + len) for r, held (put it back after
 * the last work request using it completed). 0, or a negative errno: the
 * caller copies, and counts why:
 *   -EXDEV   the range can not be watched (unwatched);
 *   -E2BIG   it is larger than the whole cache (too_big);
 *   -ENOSPC  every entry is held by a send (cache_full);
 *   -EAGAIN  its mapping changed while it was being registered (raced);
 *   other    the registrar's error (reg_failed: RLIMIT_MEMLOCK, EFAULT).
 */
int shim_mr_cache_get(const struct shim_mr_registrar *r, const void *addr, size_t len, struct shim_mr_ref *out);
void shim_mr_cache_put(struct shim_mr_ref *ref);

/* The mapping of [start, start + len) changes: every entry over it goes
 * (the hooks call this before the change). Takes the lock. */
void shim_mr_cache_invalidate(uintptr_t start, size_t len, enum shim_mr_inval why);
/* The same with the lock held (the watcher's drain and thread). Defers
 * the deregistrations to a program's thread. */
void shim_mr_cache_invalidate_locked(uintptr_t start, uintptr_t end, enum shim_mr_inval why);
/* Under the lock: what of [start, end) no entry covers is not watched any
 * more (a range the watcher watches that moved). */
void shim_mr_cache_unwatch_locked(uintptr_t start, uintptr_t end);
/* Every entry goes (shmdt: the segment's size is not known). */
void shim_mr_cache_purge(void);
/* The watcher's thread around its drain. */
void shim_mr_cache_lock(void);
void shim_mr_cache_unlock(void);

/* Whether anything is cached (the hooks' fast path: one load). */
static inline bool shim_mr_cache_active(void)
{
	extern unsigned long shim_mr_cache_entries;

	return __atomic_load_n(&shim_mr_cache_entries, __ATOMIC_RELAXED) != 0;
}

/* Fork handler halves. prepare takes the lock; parent drops every entry
 * (pages the fork made copy-on-write are not trusted) and the lock; child
 * forgets every entry without deregistering it (the registrations are the
 * parent's) and has no watcher until it sets one up again. */
void shim_mr_cache_atfork_prepare(void);
void shim_mr_cache_atfork_parent(void);
void shim_mr_cache_atfork_child(void);

struct shim_mr_cache_stats {
	unsigned long entries, held;
	size_t bytes, cap;
	unsigned long dead; /* invalidated, not yet deregistered */
};
void shim_mr_cache_stats(struct shim_mr_cache_stats *out);
/* Tests: everything dropped and deregistered, settings forgotten. */
void shim_mr_cache_reset_for_test(void);

#endif
