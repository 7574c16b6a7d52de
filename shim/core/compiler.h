/* Small compiler helpers shared by every file of the shim. */
#ifndef RDMASHIM_COMPILER_H
#define RDMASHIM_COMPILER_H

#define SHIM_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* Thread-locals of a preloaded library live in the static TLS block, so the
 * initial-exec model is both legal and the cheapest access. */
#define SHIM_TLS __thread __attribute__((tls_model("initial-exec")))

#endif

#ifndef RDMASHIM_COMPILER_RET
#define RDMASHIM_COMPILER_RET
#include <errno.h>
/* The one place a negative errno becomes -1 plus errno: the exported boundary. */
static inline long shim_ret(long rc)
{
	if (rc < 0) {
		errno = (int)-rc;
		return -1;
	}
	return rc;
}
#endif
