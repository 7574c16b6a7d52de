/*
 * The close-wait budget; see close_budget.h.
 *
 * One word: the time at which the budget is full again (a virtual
 * schedule, the generic cell rate algorithm's). Waiting w ns pushes it
 * w * CLOSE_REFILL_DIV later; the budget holds what the distance from now
 * to that time leaves of its capacity.
 */
#include "close_budget.h"

#include "close.h"

#define CAPACITY_NS (SHIM_CLOSE_WAIT_MS * 1000000ull * CLOSE_REFILL_DIV)

static unsigned long long full_at_ns; /* atomic */

unsigned long long shim_close_budget_take(unsigned long long want_ns, unsigned long long now_ns)
{
	unsigned long long at = __atomic_load_n(&full_at_ns, __ATOMIC_RELAXED), base, debt, grant;

	do {
		base = at > now_ns ? at : now_ns;
		debt = base - now_ns;
		if (debt >= CAPACITY_NS)
			return 0;
		grant = (CAPACITY_NS - debt) / CLOSE_REFILL_DIV;
		if (grant > want_ns)
			grant = want_ns;
		/* Relaxed: the word orders nothing but itself. */
	} while (!__atomic_compare_exchange_n(&full_at_ns, &at, base + grant * CLOSE_REFILL_DIV, true,
					      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return grant;
}

void shim_close_budget_refund(unsigned long long unused_ns)
{
	__atomic_sub_fetch(&full_at_ns, unused_ns * CLOSE_REFILL_DIV, __ATOMIC_RELAXED);
}
