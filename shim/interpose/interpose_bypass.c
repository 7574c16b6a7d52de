/*
 * Exported wrappers for calls that bypass the shim's view of a connection
 * (stdio, splice, urgent data) and for the sandbox calls; the policy is in
 * bypass.c. A call on an fd the shim does not track costs one load.
 */
#include <errno.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "bypass.h"
#include "compiler.h"
#include "fdtable.h"
#include "real.h"

SHIM_EXPORT FILE *fdopen(int fd, const char *mode)
{
	/* stdio reads and writes with glibc's internal calls, which no
	 * preload sees: the connection must stay on TCP. */
	if (unlikely(shim_fd_get(fd) != NULL))
		shim_bypass_leave(fd, SHIM_REASON_BYPASS);
	return REAL(fdopen)(fd, mode);
}

SHIM_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len, unsigned int flags)
{
	if (likely(shim_fd_get(fd_in) == NULL && shim_fd_get(fd_out) == NULL))
		return REAL(splice)(fd_in, off_in, fd_out, off_out, len, flags);
	return shim_ret(shim_bypass_splice(fd_in, off_in, fd_out, off_out, len, flags));
}

SHIM_EXPORT int prctl(int option, ...)
{
	unsigned long arg[4];
	va_list ap;

	va_start(ap, option);
	for (int i = 0; i < 4; i++)
		arg[i] = va_arg(ap, unsigned long);
	va_end(ap);
	if (option == PR_SET_SECCOMP)
		shim_bypass_sandboxed("prctl_seccomp", true);
	else if (option == PR_SET_NO_NEW_PRIVS && arg[0] == 1)
		shim_bypass_sandboxed("no_new_privs", true);
	return REAL(prctl)(option, arg[0], arg[1], arg[2], arg[3]);
}

/* libseccomp installs its filter with syscall(SYS_seccomp, ...). Every
 * call passes six argument words, as the kernel takes them. */
SHIM_EXPORT long syscall(long number, ...)
{
	long arg[6];
	va_list ap;

	va_start(ap, number);
	for (int i = 0; i < 6; i++)
		arg[i] = va_arg(ap, long);
	va_end(ap);
	if (unlikely(number == SYS_seccomp))
		shim_bypass_sandboxed("seccomp", true);
	return REAL(syscall)(number, arg[0], arg[1], arg[2], arg[3], arg[4], arg[5]);
}

