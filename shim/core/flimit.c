/* RLIMIT_FSIZE as the shim must respect it; see flimit.h. */
#include "flimit.h"

#include <sys/resource.h>

bool shim_flimit_allows(unsigned long long size)
{
	struct rlimit rl;

	/* A limit the kernel will not tell is taken as none: so it was
	 * before this check existed. */
	if (getrlimit(RLIMIT_FSIZE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return true;
	return size <= (unsigned long long)rl.rlim_cur;
}
