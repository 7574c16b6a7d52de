/* Resolution of the real-symbol table; see real.h. */
#include "real.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct shim_real_table shim_real;
int shim_real_ready;

static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static long symbol_missing(void)
{
	errno = ENOSYS;
	return -1;
}

/* Symbols a supported glibc may lack; their absence is not worth a line. */
static int symbol_is_optional(const char *name)
{
	return strcmp(name, "epoll_pwait2") == 0 || strcmp(name, "fcntl64") == 0 || strcmp(name, "sendfile64") == 0;
}

static void report_missing(const char *name)
{
	static const char prefix[] = "rdmashim: warning: dlsym(RTLD_NEXT) found no ";
	static const char suffix[] = "; calls to it fail with ENOSYS\n";
	/* Raw syscall: stdio may not be usable this early, and write is
	 * hooked (so is syscall: libc's own is looked up, never ours). */
	long (*raw_syscall)(long, ...) = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	struct iovec iov[3] = {
		{ (void *)prefix, sizeof(prefix) - 1 },
		{ (void *)name, strlen(name) },
		{ (void *)suffix, sizeof(suffix) - 1 },
	};
	if (raw_syscall) {
		long rc = raw_syscall(SYS_writev, 2, iov, 3);
		(void)rc;
	}
}

static void *lookup(const char *name)
{
	void *sym = dlsym(RTLD_NEXT, name);

	if (sym)
		return sym;
	if (!symbol_is_optional(name))
		report_missing(name);
	return (void *)symbol_missing;
}

static void resolve_all(void)
{
#define SHIM_REAL_LOOKUP(name, ret, args) shim_real.name = (ret(*) args)lookup(#name);
	SHIM_REAL_SYMBOLS(SHIM_REAL_LOOKUP)
#undef SHIM_REAL_LOOKUP
	/* Pairs with the acquire load in REAL(). */
	__atomic_store_n(&shim_real_ready, 1, __ATOMIC_RELEASE);
}

void shim_real_resolve(void)
{
	pthread_once(&resolve_once, resolve_all);
}
