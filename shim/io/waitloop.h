/*
 * The one wait engine behind poll, ppoll, select, pselect, the epoll
 * family (wait.c, epoll_wait.c) and the blocking data calls (io_sleep.c):
 * look at the channels and the kernel without sleeping; spin
 * RDMASHIM_SPIN_US (yielding: the peer may share our core);
 * then arm every switched fd, sleep in the kernel at most one slice (a
 * millisecond when an arm asks), disarm, and look again; until something is
 * ready, an error, or the deadline. The blocking data calls run it one
 * round at a time (io_sleep.c: their own loop looks again).
 *
 * Counting: what a round reports is the caller's count of ready entries
 * (poll: entries with revents, never a sum of rounds; epoll: events
 * written); the engine returns the first non-zero one as it is.
 */
#ifndef RDMASHIM_WAITLOOP_H
#define RDMASHIM_WAITLOOP_H

#include <stdbool.h>

struct shim_waitloop_ops {
	/* What is ready now, without sleeping: > 0, 0, or -errno. */
	int (*look)(void *ctx);
	/* Arms every switched fd for a sleep: 1 to sleep, 0 when an arm
	 * found one ready (no sleep), -errno (nothing armed: the wait ends
	 * with it). Lowers *cap_ms (0 or less: none) when the sleep must end
	 * sooner than its slice (shim_waitloop_cap). */
	int (*arm)(void *ctx, int *cap_ms);
	/* The kernel's wait for at most ms: what it found (> 0), 0, -errno. */
	int (*sleep)(void *ctx, int ms);
	/* Undoes what arm did (after the sleep, or instead of it). */
	void (*disarm)(void *ctx);
	/* After disarm: theirs is what the sleep returned; looks at the
	 * channels again. > 0 ready, 0 (wait on), or -errno. */
	int (*after)(void *ctx, int theirs);
	/* Optional spin policy: whether to look once more before arming
	 * (NULL: for RDMASHIM_SPIN_US from the first look), and what the
	 * wait came to (rc > 0: something was ready) for a policy that
	 * learns from it. */
	bool (*spin_more)(void *ctx);
	void (*spin_end)(void *ctx, int rc);
};

/* Lowers *cap_ms (0 or less: none yet) to ms (at least 1). */
static inline void shim_waitloop_cap(int *cap_ms, int ms)
{
	if (ms < 1)
		ms = 1;
	if (*cap_ms <= 0 || ms < *cap_ms)
		*cap_ms = ms;
}

/* Lowers *cap_ms to the milliseconds left until due_ns (shim_now_ns's
 * clock; 0: nothing due), rounded up: a sleep that ends then finds it due. */
void shim_waitloop_cap_until(int *cap_ms, unsigned long long due_ns);

/* timeout_ns: -1 for none, 0 for one look. Returns the first non-zero
 * result of look or after, or 0 at the deadline. */
int shim_waitloop_run(const struct shim_waitloop_ops *ops, void *ctx, long long timeout_ns);

#endif
