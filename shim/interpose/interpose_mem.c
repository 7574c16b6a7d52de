/*
 * Exported wrappers for the calls that change the program's mappings; the
 * policy (what each drops from the zero-copy registration cache) is in
 * mr_events.c. With nothing cached a call costs one load more.
 *
 * These see the program's calls only: glibc's own (free() unmapping a
 * large block, malloc trimming the heap) go to the kernel inside libc,
 * and the cache's userfaultfd watcher sees those (mr_watch.h).
 */
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "compiler.h"
#include "mr_events.h"
#include "real.h"

/* Not in a ThreadSanitizer build: its runtime maps its shadow with mmap
 * before this library is ready, and a wrapper there resolving the next
 * mmap (dlsym, which allocates) crashes it. Such a build watches the
 * cache's ranges by userfaultfd alone (mr_watch.h). */
#ifndef __SANITIZE_THREAD__

SHIM_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	void *ret;

	shim_mr_before_mmap(addr, len, flags);
	ret = REAL(mmap)(addr, len, prot, flags, fd, off);
	shim_mr_after_mmap(ret, len);
	return ret;
}

SHIM_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	void *ret;

	shim_mr_before_mmap(addr, len, flags);
	ret = REAL(mmap64)(addr, len, prot, flags, fd, off);
	shim_mr_after_mmap(ret, len);
	return ret;
}

SHIM_EXPORT int munmap(void *addr, size_t len)
{
	shim_mr_before_munmap(addr, len);
	return REAL(munmap)(addr, len);
}

SHIM_EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	void *new_addr = NULL;

	if (flags & MREMAP_FIXED) {
		va_list ap;

		va_start(ap, flags);
		new_addr = va_arg(ap, void *);
		va_end(ap);
	}
	shim_mr_before_mremap(old, old_len, new_len, flags, new_addr);
	return REAL(mremap)(old, old_len, new_len, flags, new_addr);
}

SHIM_EXPORT int madvise(void *addr, size_t len, int advice)
{
	shim_mr_before_madvise(addr, len, advice);
	return REAL(madvise)(addr, len, advice);
}

SHIM_EXPORT int brk(void *addr)
{
	shim_mr_before_brk(addr);
	return REAL(brk)(addr);
}

SHIM_EXPORT void *sbrk(intptr_t increment)
{
	shim_mr_before_sbrk(increment);
	return REAL(sbrk)(increment);
}

SHIM_EXPORT void *shmat(int shmid, const void *addr, int flags)
{
	void *ret = REAL(shmat)(shmid, addr, flags);

	shim_mr_after_shmat(shmid, ret);
	return ret;
}

SHIM_EXPORT int shmdt(const void *addr)
{
	shim_mr_before_shmdt(addr);
	return REAL(shmdt)(addr);
}

#endif /* !__SANITIZE_THREAD__ */
