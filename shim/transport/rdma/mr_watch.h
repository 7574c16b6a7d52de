/*
 * The registration cache's watcher (mr_cache.h): a userfaultfd whose
 * UNMAP, REMOVE and REMAP events report every change of a watched range's
 * mapping, the ones the program's calls make and the ones glibc makes
 * inside free() where no hook sees them.
 *
 * A range is watched by registering it with the userfaultfd in
 * write-protect mode and never write-protecting a page: no fault of the
 * program's ever waits for us, only the events come. The kernel makes the
 * thread that unmaps, drops or moves watched pages wait until the event
 * has been read, and it is read under the cache's lock, by the watcher's
 * thread or by the next cache lookup (drain): when munmap() returns, the
 * cache no longer holds the range (docs/ZEROCOPY.md).
 *
 * What it refuses to watch (the caller copies): file-backed mappings
 * (userfaultfd takes anonymous, shmem and hugetlbfs memory only), ranges
 * another userfaultfd watches already (EBUSY: another library's monitor),
 * and everything when the kernel has no userfaultfd for us (seccomp,
 * vm.unprivileged_userfaultfd=0 without UFFD_USER_MODE_ONLY, a kernel
 * older than Linux 5.19, whose read-only pins can go stale by
 * copy-on-write).
 */
#ifndef RDMASHIM_MR_WATCH_H
#define RDMASHIM_MR_WATCH_H

#include <stdbool.h>

#include "mr_cache.h"

/* The watcher, its userfaultfd opened and its thread started at the first
 * call; NULL when the kernel gives none (traced once). */
const struct shim_mr_watcher *shim_mr_watch_get(void);
/*
 * Whether a registration without IBV_ACCESS_LOCAL_WRITE (a read-only
 * long-term pin) always pins the page the program will keep: Linux 6.2
 * on, where such a pin unshares anything copy-on-write shares (the shared
 * zero page of memory never written or dropped by MADV_DONTNEED, a
 * page-cache page of a private file mapping). Before it the pin takes the
 * zero page itself, and the program's next write gets a fresh page the
 * registration does not see: the registration asks for LOCAL_WRITE, which
 * makes the kernel break copy-on-write at the pin (a read-only buffer
 * then fails to register, and the send copies).
 */
bool shim_mr_watch_ro_pins_reliable(void);
/* A fork's child: the parent's userfaultfd watches the parent's memory
 * only; the child closes its copy and has no watcher. */
void shim_mr_watch_atfork_child(void);

#endif
