/* The registration cache's userfaultfd watcher; see mr_watch.h. */
#include "mr_watch.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bgthread.h"
#include "real.h"
#include "trace.h"

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

enum { WATCH_IDLE, WATCH_READY, WATCH_NONE };

static int watch_state; /* atomic: WATCH_* */
static int uffd = -1;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

#define REQUIRED (UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP)

static int uffd_watch(uintptr_t start, uintptr_t end)
{
	struct uffdio_register reg = {
		.range = { .start = start, .len = end - start },
		.mode = UFFDIO_REGISTER_MODE_WP,
	};

	/* Fails for a file-backed vma (EINVAL), one another userfaultfd
	 * watches (EBUSY), a hole in the range (ENOMEM, EINVAL). */
	return REAL(ioctl)(uffd, UFFDIO_REGISTER, &reg) ? -errno : 0;
}

static void uffd_unwatch(uintptr_t start, uintptr_t end)
{
	struct uffdio_range r = { .start = start, .len = end - start };

	/* An error leaves pages watched that no entry needs: their changes
	 * cost an event each, nothing more. */
	(void)REAL(ioctl)(uffd, UFFDIO_UNREGISTER, &r);
}

/* Under the cache's lock: the events pending, each an invalidation. The
 * read is what lets the thread that made the change go on. */
static void uffd_drain(void)
{
	struct uffd_msg msg[16];
	ssize_t n;

	while ((n = REAL(read)(uffd, msg, sizeof(msg))) > 0) {
		for (size_t i = 0; i < (size_t)n / sizeof(msg[0]); i++) {
			const struct uffd_msg *m = &msg[i];

			switch (m->event) {
			case UFFD_EVENT_UNMAP:
				shim_mr_cache_invalidate_locked(m->arg.remove.start, m->arg.remove.end,
								SHIM_MR_INVAL_UNMAP);
				break;
			case UFFD_EVENT_REMOVE:
				shim_mr_cache_invalidate_locked(m->arg.remove.start, m->arg.remove.end,
								SHIM_MR_INVAL_REMOVE);
				break;
			case UFFD_EVENT_REMAP:
				shim_mr_cache_invalidate_locked(m->arg.remap.from, m->arg.remap.from + m->arg.remap.len,
								SHIM_MR_INVAL_REMAP);
				/* The moved vma keeps our registration: what of it no
				 * entry covers is let go (the cache knows which). */
				shim_mr_cache_unwatch_locked(m->arg.remap.to, m->arg.remap.to + m->arg.remap.len);
				break;
			default:
				/* No fault is ever delivered (nothing is write-protected,
				 * no MISSING mode); nothing else was asked for. */
				break;
			}
		}
		if ((size_t)n < sizeof(msg))
			break;
	}
}

static const struct shim_mr_watcher uffd_watcher = { .watch = uffd_watch, .unwatch = uffd_unwatch, .drain = uffd_drain };

/*
 * The watcher's thread: wakes at each event and reads it under the
 * cache's lock. It never allocates, frees or deregisters: a thread that
 * unmaps watched memory waits for this one, perhaps inside malloc's own
 * lock (free trimming the heap), so this one must need nothing that
 * thread may hold.
 */
static void *monitor(void *arg)
{
	struct pollfd p = { .fd = uffd, .events = POLLIN };

	(void)arg;
	for (;;) {
		int rc = REAL(poll)(&p, 1, -1);

		if (rc < 0 && errno != EINTR)
			return NULL;
		shim_mr_cache_lock();
		uffd_drain();
		shim_mr_cache_unlock();
	}
	return NULL;
}

static bool kernel_at_least(unsigned want_major, unsigned want_minor)
{
	struct utsname u;
	unsigned major = 0, minor = 0;

	if (uname(&u) || sscanf(u.release, "%u.%u", &major, &minor) != 2)
		return false;
	return major > want_major || (major == want_major && minor >= want_minor);
}

/* Linux 5.19 made long-term pins of anonymous memory exclusive
 * (PageAnonExclusive: a pin unshares a page copy-on-write still shares,
 * a fork copies a pinned page for the child); before it, a registration
 * could outlive the page under it. */
static bool kernel_pins_reliably(void)
{
	return kernel_at_least(5, 19);
}

bool shim_mr_watch_ro_pins_reliable(void)
{
	static int known; /* 0 unknown, 1 yes, 2 no */
	int k = __atomic_load_n(&known, __ATOMIC_RELAXED);

	if (!k) {
		k = kernel_at_least(6, 2) ? 1 : 2;
		__atomic_store_n(&known, k, __ATOMIC_RELAXED);
	}
	return k == 1;
}

static int open_uffd(unsigned long long *features)
{
	struct uffdio_api api = { .api = UFFD_API };
	int fd;

	/* User-mode only: all an unprivileged process may open
	 * (vm.unprivileged_userfaultfd=0), and all we need: no fault is
	 * ever ours to resolve. */
	fd = (int)REAL(syscall)(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (fd < 0 && errno == EINVAL)
		fd = (int)REAL(syscall)(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	api.features = *features;
	if (REAL(ioctl)(fd, UFFDIO_API, &api)) {
		int err = -errno;

		REAL(close)(fd);
		return err;
	}
	*features = api.features;
	return fd;
}

static int watch_start(const char **why)
{
	unsigned long long features = 0;
	int fd;

	if (!kernel_pins_reliably()) {
		*why = "kernel_before_5_19";
		return -ENOSYS;
	}
	/* The API can be set once per descriptor: one to learn the
	 * features, one to ask for ours. */
	fd = open_uffd(&features);
	if (fd < 0) {
		*why = "no_userfaultfd";
		return fd;
	}
	REAL(close)(fd);
	if ((features & REQUIRED) != REQUIRED) {
		*why = "no_unmap_events";
		return -ENOSYS;
	}
	features &= REQUIRED | UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
	fd = open_uffd(&features);
	if (fd < 0) {
		*why = "no_userfaultfd";
		return fd;
	}
	uffd = fd;
	if (shim_bgthread_start(monitor, NULL)) {
		REAL(close)(fd);
		uffd = -1;
		*why = "no_thread";
		return -EAGAIN;
	}
	return 0;
}

const struct shim_mr_watcher *shim_mr_watch_get(void)
{
	/* acquire: pairs with the release store below; uffd is set. */
	int st = __atomic_load_n(&watch_state, __ATOMIC_ACQUIRE);
	const char *why = NULL;

	if (st == WATCH_IDLE) {
		pthread_mutex_lock(&start_lock);
		st = __atomic_load_n(&watch_state, __ATOMIC_RELAXED);
		if (st == WATCH_IDLE) {
			int rc = watch_start(&why);

			st = rc ? WATCH_NONE : WATCH_READY;
			SHIM_TRACE(SHIM_TRACE_INFO, "zc.watch", -1, NULL, SHIM_REASON_NONE,
				   "\"watching\":%s,\"why\":\"%s\",\"errno\":%d", rc ? "false" : "true",
				   why ? why : "", -rc);
			__atomic_store_n(&watch_state, st, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&start_lock);
	}
	return st == WATCH_READY ? &uffd_watcher : NULL;
}

void shim_mr_watch_atfork_child(void)
{
	if (uffd >= 0)
		REAL(close)(uffd);
	uffd = -1;
	pthread_mutex_init(&start_lock, NULL);
	/* No thread of the parent's runs here: no watcher. */
	__atomic_store_n(&watch_state, WATCH_NONE, __ATOMIC_RELAXED);
}
