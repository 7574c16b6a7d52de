/*
 * Epoll registrations made before the shim tracked the fd. A program may
 * put a socket in its epoll set before it connects it (nginx does so for
 * its upstream connections): the registration then went straight to the
 * kernel, the shim's epoll state never heard of it, and once the
 * connection switched nothing told the program that its ring had data.
 *
 * The wrapper's fast path notes, per fd, that an untracked fd went into
 * a set (one byte store) and which sets did (a short list). When connect()
 * makes the fd tracked and the note is there, the sets' registrations are
 * read back from the kernel (/proc/self/fdinfo/EPFD: "tfd: FD events: HEX
 * data: HEX") and taken over (epoll.c: shim_epoll_adopt_early, which
 * asks this file only). Only such fds pay.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fdtable.h"
#include "real.h"
#include "trace.h"
#include "epoll_internal.h"

#define EARLY_SETS SHIM_EPOLL_EARLY_SETS

static uint8_t *early_fd;   /* one byte per fd number: went into a set untracked */
static size_t early_cap;
static int early_sets[EARLY_SETS];
static unsigned early_nsets, early_next;
static int early_last = -1; /* the set noted last, while it is in early_sets */
static pthread_mutex_t early_lock = PTHREAD_MUTEX_INITIALIZER;

/* The byte table, made at the first note: the pages are touched only for
 * the fd numbers that are noted. */
static bool early_table(void)
{
	uint8_t *t = __atomic_load_n(&early_fd, __ATOMIC_ACQUIRE);

	if (t)
		return true;
	pthread_mutex_lock(&early_lock);
	if (!early_fd && shim_fd_capacity) {
		t = REAL(mmap)(NULL, shim_fd_capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			 -1, 0);
		if (t != MAP_FAILED) {
			early_cap = shim_fd_capacity;
			/* Release: early_cap is set before the table is seen;
			 * pairs with the acquire load above. */
			__atomic_store_n(&early_fd, t, __ATOMIC_RELEASE);
		}
	}
	pthread_mutex_unlock(&early_lock);
	return __atomic_load_n(&early_fd, __ATOMIC_ACQUIRE) != NULL;
}

void shim_epoll_note_early(int epfd, int fd)
{
	bool known = false;

	if (fd < 0 || epfd < 0 || !early_table() || (size_t)fd >= early_cap)
		return;
	__atomic_store_n(&early_fd[fd], 1, __ATOMIC_RELAXED);
	/* The set noted last (a program mostly has one): known already.
	 * Relaxed: a stale look only takes the lock below. */
	if (__atomic_load_n(&early_last, __ATOMIC_RELAXED) == epfd)
		return;
	pthread_mutex_lock(&early_lock);
	for (unsigned i = 0; i < early_nsets && !known; i++)
		known = early_sets[i] == epfd;
	if (!known) {
		/* Full: the oldest set is forgotten (a process rarely has more). */
		early_sets[early_nsets < EARLY_SETS ? early_nsets++ : early_next++ % EARLY_SETS] = epfd;
	}
	__atomic_store_n(&early_last, epfd, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&early_lock);
}

/* Finds fd's registration in the set epfd, as the kernel lists it. */
bool shim_epoll_early_registration(int epfd, int fd, uint32_t *events, uint64_t *data)
{
	char path[64], buf[8192];
	ssize_t n, got = 0;
	int f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
	f = open(path, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return false;
	while (got < (ssize_t)sizeof(buf) - 1 && (n = REAL(read)(f, buf + got, sizeof(buf) - 1 - (size_t)got)) > 0)
		got += n;
	REAL(close)(f);
	buf[got > 0 ? got : 0] = '\0';
	for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		int tfd;
		unsigned ev;
		uint64_t d;

		if (sscanf(line, "tfd: %d events: %x data: %" SCNx64, &tfd, &ev, &d) == 3 && tfd == fd) {
			*events = ev;
			*data = d;
			return true;
		}
	}
	return false;
}

unsigned shim_epoll_early_take(int fd, int sets[SHIM_EPOLL_EARLY_SETS])
{
	unsigned n;

	if (fd < 0 || !__atomic_load_n(&early_fd, __ATOMIC_ACQUIRE) || (size_t)fd >= early_cap ||
	    !__atomic_exchange_n(&early_fd[fd], 0, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&early_lock);
	n = early_nsets;
	memcpy(sets, early_sets, sizeof(early_sets));
	pthread_mutex_unlock(&early_lock);
	return n;
}
