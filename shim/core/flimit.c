/* RLIMIT_FSIZE as the shim must respect it; see flimit.h. */
#include "flimit.h"

/* The limit, valid once known_set is. A stale read only matters while the
 * program changes its limit in another thread. */
static rlim_t known;
static bool known_set;

rlim_t shim_flimit(void)
{
	struct rlimit rl;

	if (__atomic_load_n(&known_set, __ATOMIC_ACQUIRE))
		return __atomic_load_n(&known, __ATOMIC_RELAXED);
	if (getrlimit(RLIMIT_FSIZE, &rl) < 0)
		rl.rlim_cur = RLIM_INFINITY;
	shim_flimit_note(rl.rlim_cur);
	return rl.rlim_cur;
}

void shim_flimit_note(rlim_t cur)
{
	__atomic_store_n(&known, cur, __ATOMIC_RELAXED);
	/* Pairs with the acquire load above. */
	__atomic_store_n(&known_set, true, __ATOMIC_RELEASE);
}

bool shim_flimit_allows(unsigned long long size)
{
	rlim_t lim = shim_flimit();

	return lim == RLIM_INFINITY || size <= (unsigned long long)lim;
}
