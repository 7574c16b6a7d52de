/*
 * The real-symbol table: the next definition of every function the shim
 * hooks, found with dlsym(RTLD_NEXT) once, thread-safely, on first use (so a
 * call that arrives before our constructor still works).
 *
 * Policy code inside the shim calls REAL(name)(...) and never the hooked
 * name, so the shim's own socket calls can not re-enter its hooks.
 */
#ifndef RDMASHIM_REAL_H
#define RDMASHIM_REAL_H

#include <poll.h>
#include <signal.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "compiler.h"

/* X(name, return type, parameter list) for every hooked function. */
#define SHIM_REAL_SYMBOLS(X)                                                                  \
	X(socket, int, (int, int, int))                                                       \
	X(bind, int, (int, const struct sockaddr *, socklen_t))                               \
	X(listen, int, (int, int))                                                            \
	X(accept, int, (int, struct sockaddr *, socklen_t *))                                 \
	X(accept4, int, (int, struct sockaddr *, socklen_t *, int))                           \
	X(connect, int, (int, const struct sockaddr *, socklen_t))                            \
	X(close, int, (int))                                                                  \
	X(shutdown, int, (int, int))                                                          \
	X(dup, int, (int))                                                                    \
	X(dup2, int, (int, int))                                                              \
	X(dup3, int, (int, int, int))                                                         \
	X(fcntl, int, (int, int, ...))                                                        \
	X(fcntl64, int, (int, int, ...))                                                      \
	X(ioctl, int, (int, unsigned long, ...))                                              \
	X(getsockopt, int, (int, int, int, void *, socklen_t *))                              \
	X(setsockopt, int, (int, int, int, const void *, socklen_t))                          \
	X(send, ssize_t, (int, const void *, size_t, int))                                    \
	X(sendto, ssize_t, (int, const void *, size_t, int, const struct sockaddr *, socklen_t)) \
	X(sendmsg, ssize_t, (int, const struct msghdr *, int))                                \
	X(sendmmsg, int, (int, struct mmsghdr *, unsigned int, int))                          \
	X(write, ssize_t, (int, const void *, size_t))                                        \
	X(writev, ssize_t, (int, const struct iovec *, int))                                  \
	X(recv, ssize_t, (int, void *, size_t, int))                                          \
	X(recvfrom, ssize_t, (int, void *, size_t, int, struct sockaddr *, socklen_t *))      \
	X(recvmsg, ssize_t, (int, struct msghdr *, int))                                      \
	X(recvmmsg, int, (int, struct mmsghdr *, unsigned int, int, struct timespec *))       \
	X(read, ssize_t, (int, void *, size_t))                                               \
	X(readv, ssize_t, (int, const struct iovec *, int))                                   \
	X(sendfile, ssize_t, (int, int, off_t *, size_t))                                     \
	X(sendfile64, ssize_t, (int, int, off64_t *, size_t))                                 \
	X(poll, int, (struct pollfd *, nfds_t, int))                                          \
	X(ppoll, int, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *))   \
	X(select, int, (int, fd_set *, fd_set *, fd_set *, struct timeval *))                 \
	X(pselect, int,                                                                       \
	  (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *))     \
	X(epoll_create, int, (int))                                                           \
	X(epoll_create1, int, (int))                                                          \
	X(epoll_ctl, int, (int, int, int, struct epoll_event *))                              \
	X(epoll_wait, int, (int, struct epoll_event *, int, int))                             \
	X(epoll_pwait, int, (int, struct epoll_event *, int, int, const sigset_t *))          \
	X(epoll_pwait2, int,                                                                  \
	  (int, struct epoll_event *, int, const struct timespec *, const sigset_t *))        \
	X(fork, pid_t, (void))                                                                \
	X(execve, int, (const char *, char *const[], char *const[]))                          \
	X(execv, int, (const char *, char *const[]))                                          \
	X(execvp, int, (const char *, char *const[]))                                         \
	X(execvpe, int, (const char *, char *const[], char *const[]))                         \
	X(fexecve, int, (int, char *const[], char *const[]))                                  \
	X(fdopen, FILE *, (int, const char *))                                                \
	X(mmap, void *, (void *, size_t, int, int, int, off_t))                               \
	X(mmap64, void *, (void *, size_t, int, int, int, off64_t))                           \
	X(munmap, int, (void *, size_t))                                                      \
	X(mremap, void *, (void *, size_t, size_t, int, ...))                                 \
	X(madvise, int, (void *, size_t, int))                                                \
	X(brk, int, (void *))                                                                 \
	X(sbrk, void *, (intptr_t))                                                           \
	X(shmat, void *, (int, const void *, int))                                            \
	X(shmdt, int, (const void *))                                                         \
	X(splice, ssize_t, (int, loff_t *, int, loff_t *, size_t, unsigned int))              \
	X(prctl, int, (int, ...))                                                             \
	X(syscall, long, (long, ...))                                                         \
	X(__read_chk, ssize_t, (int, void *, size_t, size_t))                                 \
	X(__recv_chk, ssize_t, (int, void *, size_t, size_t, int))                            \
	X(__recvfrom_chk, ssize_t,                                                            \
	  (int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *))                 \
	X(__poll_chk, int, (struct pollfd *, nfds_t, int, size_t))                            \
	X(__ppoll_chk, int,                                                                   \
	  (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t))

#define SHIM_REAL_FIELD(name, ret, args) ret(*name) args;
struct shim_real_table {
	SHIM_REAL_SYMBOLS(SHIM_REAL_FIELD)
};
#undef SHIM_REAL_FIELD

extern struct shim_real_table shim_real;
extern int shim_real_ready;

/*
 * Resolves every symbol once; safe from any thread, any time. A symbol that
 * can not be found is replaced by a stand-in that fails with ENOSYS (and is
 * named once on stderr), so no hook ever calls through a NULL pointer.
 */
void shim_real_resolve(void);

/*
 * REAL(name) yields the next definition of name. The ready flag is read with
 * acquire ordering; it pairs with the release store at the end of
 * shim_real_resolve(), so a thread that sees it set also sees every pointer.
 */
#define REAL(name)                                                              \
	((likely(__atomic_load_n(&shim_real_ready, __ATOMIC_ACQUIRE)) ? (void)0        \
								      : shim_real_resolve()), \
	 shim_real.name)

#endif
