/* The flat fd table; see fdtable.h. */
#include "fdtable.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif
#include "clock.h"
#include "real.h"

struct shim_sock **shim_fd_slots;
size_t shim_fd_capacity;
/* One past the highest fd ever published: the walk of shim_fd_each_tracked
 * reads no further, so it costs the program's own fd span, not the table's
 * reservation (which may be a million slots). Only grows. */
static size_t slots_high;

int shim_fdtable_init(size_t max_fds)
{
	void *slots;

	if (shim_fd_slots)
		return 0;
	if (max_fds == 0)
		return -EINVAL;
	slots = REAL(mmap)(NULL, max_fds * sizeof(*shim_fd_slots), PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (slots == MAP_FAILED)
		return -errno;
	shim_fd_slots = slots;
#ifdef __SANITIZE_ADDRESS__
	/* LeakSanitizer scans no mmap of ours: without this, every socket
	 * still open at exit would be reported as a leak. */
	__lsan_register_root_region(slots, max_fds * sizeof(*shim_fd_slots));
#endif
	/* Capacity is published last: a reader that sees it sees the array.
	 * Pairs with the acquire-free read in shim_fd_get(), which is safe
	 * because capacity only ever goes from 0 to its final value, and this
	 * runs in the constructor before the program starts its threads. */
	__atomic_store_n(&shim_fd_capacity, max_fds, __ATOMIC_RELEASE);
	return 0;
}

struct shim_sock *shim_fd_publish(int fd, struct shim_sock *sock, int *err)
{
	*err = 0;
	if (fd < 0 || (size_t)fd >= shim_fd_capacity) {
		*err = -EBADF;
		return NULL;
	}
	if (sock) {
		size_t high = __atomic_load_n(&slots_high, __ATOMIC_RELAXED);

		while ((size_t)fd >= high &&
		       !__atomic_compare_exchange_n(&slots_high, &high, (size_t)fd + 1, true, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED))
			;
	}
	/* Release: the sock's fields are written before it becomes visible.
	 * Pairs with the acquire load in shim_fd_get_acquire(). */
	return __atomic_exchange_n(&shim_fd_slots[fd], sock, __ATOMIC_ACQ_REL);
}

void shim_fd_each_tracked(void (*fn)(int fd, void *ctx), void *ctx)
{
	size_t high = __atomic_load_n(&slots_high, __ATOMIC_RELAXED);

	for (size_t fd = 0; fd < high && fd < shim_fd_capacity; fd++)
		if (__atomic_load_n(&shim_fd_slots[fd], __ATOMIC_RELAXED))
			fn((int)fd, ctx);
}

struct shim_sock *shim_fd_clear(int fd)
{
	if (fd < 0 || (size_t)fd >= shim_fd_capacity)
		return NULL;
	return __atomic_exchange_n(&shim_fd_slots[fd], NULL, __ATOMIC_ACQ_REL);
}

void shim_fd_each_open(void (*fn)(int fd, void *ctx), void *ctx)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;

	if (!dir)
		return;
	while ((de = readdir(dir)) != NULL) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (*end || end == de->d_name || fd == dirfd(dir))
			continue;
		fn((int)fd, ctx);
	}
	closedir(dir);
}

/*
 * RLIMIT_NOFILE's soft limit, asked again at most every LIMIT_TTL_NS: an
 * upgrade takes up to three fds, and a getrlimit for each was a tenth of
 * its system calls. A program that lowers its limit is seen within that
 * time; until then a shim fd may sit in the reserve (the program's open
 * then fails one fd sooner), never beyond the limit: the kernel gives none
 * there. Relaxed: the two words may tear, which only makes the next call
 * ask again or use the previous limit.
 */
#define LIMIT_TTL_NS 100000000ull
static rlim_t limit_cur;
static unsigned long long limit_at_ns;

static bool nofile_limit(rlim_t *cur)
{
	unsigned long long now = shim_now_ns(), at = __atomic_load_n(&limit_at_ns, __ATOMIC_RELAXED);
	struct rlimit lim;

	if (at && now - at < LIMIT_TTL_NS) {
		*cur = __atomic_load_n(&limit_cur, __ATOMIC_RELAXED);
		return true;
	}
	if (getrlimit(RLIMIT_NOFILE, &lim) < 0)
		return false;
	__atomic_store_n(&limit_cur, lim.rlim_cur, __ATOMIC_RELAXED);
	__atomic_store_n(&limit_at_ns, now ? now : 1, __ATOMIC_RELAXED);
	*cur = lim.rlim_cur;
	return true;
}

/* Whether fd lies within times the reserve of the limit. */
static bool near_limit(int fd, unsigned times)
{
	rlim_t cur, reserve;

	if (fd < 0 || !nofile_limit(&cur) || cur == RLIM_INFINITY)
		return false;
	reserve = cur / 32 > 16 ? cur / 32 : 16;
	return (rlim_t)fd + times * reserve >= cur;
}

bool shim_fd_keepable(int fd)
{
	return fd >= 0 && !near_limit(fd, 2);
}

bool shim_fd_in_reserve(int fd)
{
	return near_limit(fd, 1);
}

int shim_fd_own_checked(int fd)
{
	if (!near_limit(fd, 1))
		return fd;
	REAL(close)(fd);
	return -EMFILE;
}
