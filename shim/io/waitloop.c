/* The wait engine; see waitloop.h. */
#include "waitloop.h"

#include <sched.h>

#include "clock.h"
#include "config.h"
#include "msgstamps.h"
#include "spin.h"

static int run(const struct shim_waitloop_ops *ops, void *ctx, long long timeout_ns)
{
	long long deadline = shim_deadline_ns(timeout_ns);
	unsigned long long spin_end = shim_now_ns() + (unsigned long long)shim_cfg.spin_us * 1000ull;

	for (;;) {
		int cap_ms = 0;
		int rc = ops->look(ctx), sleep, slice;

		if (rc != 0 || timeout_ns == 0)
			return rc;
		if (ops->spin_more ? ops->spin_more(ctx) : shim_now_ns() < spin_end) {
			/* The peer may share our core: it runs now and makes
			 * the data we wait for. On a full machine the yield may
			 * hand the core to some other thread for a whole slice
			 * instead; the spin notices and stops (spin.h,
			 * contention). */
			sched_yield();
			SHIM_MSGSTAMP_MARK(SHIM_MSG_YIELD);
			continue;
		}
		/* Arm, then sleep only if no arm found the fd ready meanwhile:
		 * a wake-up between the look and the arm is never lost. */
		sleep = ops->arm(ctx, &cap_ms);
		if (sleep < 0)
			return sleep;
		slice = shim_slice_ms(deadline);
		if (cap_ms > 0 && slice > cap_ms)
			slice = cap_ms;
		if (sleep)
			shim_spin_sleeping();
		rc = sleep ? ops->sleep(ctx, slice) : 0;
		ops->disarm(ctx);
		rc = ops->after(ctx, rc);
		if (rc != 0)
			return rc;
		if (shim_deadline_passed(deadline))
			return 0;
	}
}

void shim_waitloop_cap_until(int *cap_ms, unsigned long long due_ns)
{
	unsigned long long now;

	if (!due_ns)
		return;
	now = shim_now_ns();
	if (due_ns <= now)
		shim_waitloop_cap(cap_ms, 1);
	else if (due_ns - now < 3600ull * 1000000000ull)
		shim_waitloop_cap(cap_ms, (int)((due_ns - now + 999999ull) / 1000000ull));
}

int shim_waitloop_run(const struct shim_waitloop_ops *ops, void *ctx, long long timeout_ns)
{
	int rc = run(ops, ctx, timeout_ns);

	if (ops->spin_end)
		ops->spin_end(ctx, rc);
	return rc;
}
