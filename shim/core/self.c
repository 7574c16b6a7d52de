/* This process's pid, cached; see self.h. */
#include "self.h"

#include <pthread.h>
#include <unistd.h>

/* 0: not known. Relaxed: every thread that stores stores the same value. */
static pid_t cached_pid;
static pthread_once_t forget_in_children = PTHREAD_ONCE_INIT;

static void register_forget(void)
{
	/* interpose/atfork.c's child handler forgets first of all; this one
	 * covers the core used without interpose/ (the unit tests). */
	pthread_atfork(NULL, NULL, shim_self_forget);
}

pid_t shim_self_pid(void)
{
	pid_t pid = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);

	if (!pid) {
		pthread_once(&forget_in_children, register_forget);
		pid = getpid();
		__atomic_store_n(&cached_pid, pid, __ATOMIC_RELAXED);
	}
	return pid;
}

void shim_self_forget(void)
{
	__atomic_store_n(&cached_pid, 0, __ATOMIC_RELAXED);
}
