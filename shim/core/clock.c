/* The clock and deadlines; see clock.h. */
#include "clock.h"

#include <limits.h>
#include <time.h>

unsigned long long shim_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

long long shim_deadline_ns(long long timeout_ns)
{
	long long now;

	if (timeout_ns < 0)
		return -1;
	now = (long long)shim_now_ns();
	return timeout_ns > LLONG_MAX - now ? LLONG_MAX : now + timeout_ns;
}

long long shim_deadline_ms(long long timeout_ms)
{
	if (timeout_ms < 0)
		return -1;
	return shim_deadline_ns(timeout_ms > LLONG_MAX / 1000000 ? LLONG_MAX : timeout_ms * 1000000);
}

int shim_slice_ms(long long deadline_ns)
{
	long long left;

	if (deadline_ns < 0)
		return SHIM_SLEEP_SLICE_MS;
	left = deadline_ns - (long long)shim_now_ns();
	if (left <= 0)
		return 0;
	left = (left + 999999) / 1000000;
	return left < SHIM_SLEEP_SLICE_MS ? (int)left : SHIM_SLEEP_SLICE_MS;
}

long long shim_left_ns(long long deadline_ns)
{
	long long left;

	if (deadline_ns < 0)
		return -1;
	left = deadline_ns - (long long)shim_now_ns();
	return left > 0 ? left : 0;
}

int shim_left_ms(long long deadline_ns)
{
	long long left = shim_left_ns(deadline_ns);

	if (left < 0)
		return -1;
	left = (left + 999999) / 1000000;
	return left < INT_MAX ? (int)left : INT_MAX;
}
