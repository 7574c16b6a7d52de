/* The mapping calls' invalidations; see mr_events.h. */
#include "mr_events.h"

#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "mr_cache.h"
#include "real.h"

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif

void shim_mr_before_mmap(void *addr, size_t len, int flags)
{
	if (flags & MAP_FIXED)
		shim_mr_cache_invalidate((uintptr_t)addr, len, SHIM_MR_INVAL_UNMAP);
}

void shim_mr_after_mmap(void *ret, size_t len)
{
	/* A fresh mapping where an entry was means the old one went where
	 * no hook saw it; the watcher caught that already, this is cheap. */
	if (ret != MAP_FAILED)
		shim_mr_cache_invalidate((uintptr_t)ret, len, SHIM_MR_INVAL_UNMAP);
}

void shim_mr_before_munmap(void *addr, size_t len)
{
	shim_mr_cache_invalidate((uintptr_t)addr, len, SHIM_MR_INVAL_UNMAP);
}

void shim_mr_before_mremap(void *old, size_t old_len, size_t new_len, int flags, void *new_addr)
{
	shim_mr_cache_invalidate((uintptr_t)old, old_len, SHIM_MR_INVAL_REMAP);
	if (flags & MREMAP_FIXED)
		shim_mr_cache_invalidate((uintptr_t)new_addr, new_len, SHIM_MR_INVAL_UNMAP);
}

void shim_mr_before_madvise(void *addr, size_t len, int advice)
{
	if (advice == MADV_DONTNEED || advice == MADV_DONTNEED_LOCKED || advice == MADV_FREE ||
	    advice == MADV_REMOVE)
		shim_mr_cache_invalidate((uintptr_t)addr, len, SHIM_MR_INVAL_REMOVE);
}

void shim_mr_before_brk(void *new_break)
{
	uintptr_t cur;

	if (!shim_mr_cache_active())
		return;
	cur = (uintptr_t)REAL(sbrk)(0);
	if ((uintptr_t)new_break < cur)
		shim_mr_cache_invalidate((uintptr_t)new_break, cur - (uintptr_t)new_break, SHIM_MR_INVAL_UNMAP);
}

void shim_mr_before_sbrk(intptr_t increment)
{
	uintptr_t cur;

	if (increment >= 0 || !shim_mr_cache_active())
		return;
	cur = (uintptr_t)REAL(sbrk)(0);
	shim_mr_cache_invalidate(cur - (uintptr_t)-increment, (size_t)-increment, SHIM_MR_INVAL_UNMAP);
}

void shim_mr_after_shmat(int shmid, void *ret)
{
	struct shmid_ds ds;

	if (ret == (void *)-1 || !shim_mr_cache_active())
		return;
	if (shmctl(shmid, IPC_STAT, &ds) == 0)
		shim_mr_cache_invalidate((uintptr_t)ret, ds.shm_segsz, SHIM_MR_INVAL_UNMAP);
	else
		shim_mr_cache_purge();
}

void shim_mr_before_shmdt(const void *addr)
{
	(void)addr;
	if (shim_mr_cache_active())
		shim_mr_cache_purge();
}
