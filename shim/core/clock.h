/*
 * The one clock (CLOCK_MONOTONIC) and the deadline arithmetic every wait
 * shares: a deadline is an absolute time in nanoseconds, -1 for none; a
 * real sleep lasts at most one slice, so a wait re-checks its state at
 * least that often.
 */
#ifndef RDMASHIM_CLOCK_H
#define RDMASHIM_CLOCK_H

/* Longest single sleep of any wait. */
#define SHIM_SLEEP_SLICE_MS 200

unsigned long long shim_now_ns(void);

/* The deadline timeout_ns from now; -1 (none) for a negative timeout. A
 * timeout too long for the clock's range is one never reached. */
long long shim_deadline_ns(long long timeout_ns);
/* The same for a timeout in milliseconds (SO_RCVTIMEO, poll's). */
long long shim_deadline_ms(long long timeout_ms);

/* Milliseconds a real wait may sleep: the time left until deadline_ns
 * rounded up, at most SHIM_SLEEP_SLICE_MS; 0 once it passed. */
int shim_slice_ms(long long deadline_ns);

/* The time left until deadline_ns: -1 for none, else at least 0; in
 * milliseconds rounded up (a wait that long finds it due). */
long long shim_left_ns(long long deadline_ns);
int shim_left_ms(long long deadline_ns);

/* Whether deadline_ns (-1: none) has passed. */
static inline int shim_deadline_passed(long long deadline_ns)
{
	return deadline_ns >= 0 && (long long)shim_now_ns() >= deadline_ns;
}

#endif
