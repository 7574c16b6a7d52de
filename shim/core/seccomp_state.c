/* The inherited seccomp mode; see seccomp_state.h. */
#include "seccomp_state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "real.h"

/*
 * Read with openat, read and close only: the dynamic loader made those
 * same calls to map this library a moment before, so a filter that lets
 * the program start lets them through. prctl(PR_GET_SECCOMP) would be one
 * call, but one a filter may refuse by killing the process.
 */
int shim_seccomp_mode(void)
{
	char buf[4096];
	ssize_t n, got = 0;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC | O_NOCTTY);
	const char *at;

	if (fd < 0)
		return -errno;
	while (got < (ssize_t)sizeof(buf) - 1 &&
	       (n = REAL(read)(fd, buf + got, sizeof(buf) - 1 - (size_t)got)) > 0)
		got += n;
	REAL(close)(fd);
	buf[got] = '\0';
	at = strstr(buf, "\nSeccomp:");
	if (!at)
		return -ENOENT;
	return (int)strtol(at + strlen("\nSeccomp:"), NULL, 10);
}
