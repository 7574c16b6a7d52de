/*
 * The process's limit on the size of files it writes (RLIMIT_FSIZE), as
 * the shim must respect it: a write or ftruncate past it is refused with
 * EFBIG and kills the process with SIGXFSZ, which a program that set the
 * limit itself (sshd's pre-auth child sets it to 0) has not asked for on
 * the shim's behalf. The trace's file and a shared-memory ring's memfd
 * both count.
 *
 * Asked of the kernel at each use, not followed through hooks: a limit set
 * by a raw system call or by another process (prlimit) counts as well, and
 * a sanitizer runtime that sets limits before our constructor meets no
 * code of ours. Both uses already pay system calls of their own.
 */
#ifndef RDMASHIM_FLIMIT_H
#define RDMASHIM_FLIMIT_H

#include <stdbool.h>

/* Whether a file may grow to size bytes without passing the limit. */
bool shim_flimit_allows(unsigned long long size);

#endif
