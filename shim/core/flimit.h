/*
 * The process's limit on the size of files it writes (RLIMIT_FSIZE), as
 * the shim must respect it: a write or ftruncate past it is refused with
 * EFBIG and kills the process with SIGXFSZ, which a program that set the
 * limit itself (sshd's pre-auth child sets it to 0) has not asked for on
 * the shim's behalf. The trace's file and a shared-memory ring's memfd
 * both count.
 */
#ifndef RDMASHIM_FLIMIT_H
#define RDMASHIM_FLIMIT_H

#include <stdbool.h>
#include <sys/resource.h>

/* The soft limit now (RLIM_INFINITY: none). Asked of the kernel once;
 * kept in step by shim_flimit_note() since. */
rlim_t shim_flimit(void);
/* The program is about to set the limit to cur (from the setrlimit and
 * prlimit wrappers, before the real call). */
void shim_flimit_note(rlim_t cur);
/* Whether a file may grow to size bytes without meeting the limit. */
bool shim_flimit_allows(unsigned long long size);

#endif
