/* Upgrade stamps for the benchmarks; see stamps.h. */
#include "stamps.h"

#include <stdbool.h>

#include "trace.h"

struct stamp {
	struct shim_tuple tuple;
	const char *role; /* a static string */
	unsigned long long start_ns, tx_ns, rx_ns;
	bool ready; /* the fields above are written; see shim_stamps_keep */
};

/* In .bss: no page of it is touched unless the knob is on. */
static struct stamp stamps[SHIM_STAMPS_MAX];
static unsigned next_stamp;

void shim_stamps_keep(const struct shim_tuple *t, const char *role, unsigned long long start_ns,
		      unsigned long long tx_ns, unsigned long long rx_ns)
{
	unsigned i = __atomic_fetch_add(&next_stamp, 1, __ATOMIC_RELAXED);

	if (i >= SHIM_STAMPS_MAX)
		return;
	stamps[i] = (struct stamp){ .tuple = *t, .role = role, .start_ns = start_ns, .tx_ns = tx_ns, .rx_ns = rx_ns };
	/* Release: the fields are in place before ready reads true; pairs
	 * with the acquire load in shim_stamps_trace(). */
	__atomic_store_n(&stamps[i].ready, true, __ATOMIC_RELEASE);
}

void shim_stamps_trace(void)
{
	unsigned n = __atomic_load_n(&next_stamp, __ATOMIC_RELAXED);

	for (unsigned i = 0; i < n && i < SHIM_STAMPS_MAX; i++) {
		const struct stamp *st = &stamps[i];

		if (!__atomic_load_n(&st->ready, __ATOMIC_ACQUIRE))
			continue;
		SHIM_TRACE(SHIM_TRACE_WARN, "upgrade.stamps", -1, &st->tuple, SHIM_REASON_NONE,
			   "\"role\":\"%s\",\"start_ns\":%llu,\"tx_ns\":%llu,\"rx_ns\":%llu", st->role, st->start_ns,
			   st->tx_ns, st->rx_ns);
	}
	if (n > SHIM_STAMPS_MAX)
		SHIM_TRACE(SHIM_TRACE_WARN, "upgrade.stamps_dropped", -1, NULL, SHIM_REASON_NONE, "\"dropped\":%u",
			   n - SHIM_STAMPS_MAX);
}
