/*
 * The fd table: fd number -> tracked socket, or NULL.
 *
 * One flat array indexed by fd, reserved (not committed) for the process's
 * hard RLIMIT_NOFILE, so the pass-through test on the data path is a single
 * load with no lock, no branch on chunk presence and no syscall. Untouched
 * pages read as zero, so the array costs memory only where fds are tracked.
 *
 * Entries are published and cleared with atomic exchange. Each entry holds a
 * reference on its socket; shim_sock_get() turns a load into a held
 * reference (shim/LIFETIME.md), and a socket's memory is never returned to
 * malloc, so a load that races the clear still reads a shim_sock.
 */
#ifndef RDMASHIM_FDTABLE_H
#define RDMASHIM_FDTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "compiler.h"
#include "owned.h"

struct shim_sock;

extern struct shim_sock **shim_fd_slots;
extern size_t shim_fd_capacity;

/* Reserves the array; returns 0 or -errno (then nothing is ever tracked). */
int shim_fdtable_init(size_t max_fds);

static inline struct shim_sock *shim_fd_get(int fd)
{
	/* Relaxed is enough for the NULL test; a non-NULL result is re-read
	 * with acquire ordering by shim_fd_get_acquire() before it is used. */
	if (likely((size_t)fd >= shim_fd_capacity))
		return NULL;
	return __atomic_load_n(&shim_fd_slots[fd], __ATOMIC_RELAXED);
}

/* Pairs with the release exchange in shim_fd_publish(). */
static inline struct shim_sock *shim_fd_get_acquire(int fd)
{
	if ((size_t)fd >= shim_fd_capacity)
		return NULL;
	return __atomic_load_n(&shim_fd_slots[fd], __ATOMIC_ACQUIRE);
}

/*
 * Makes fd point at sock and returns what it pointed at before (the caller
 * drops that reference). Returns -EBADF as a pointer-free failure through
 * *err when fd is outside the table.
 */
struct shim_sock *shim_fd_publish(int fd, struct shim_sock *sock, int *err);

/* Calls fn(fd, ctx) for every fd open in this process, as /proc/self/fd
 * lists them (the listing's own fd left out). */
void shim_fd_each_open(void (*fn)(int fd, void *ctx), void *ctx);

/* Calls fn(fd, ctx) for every fd the table names now, read from the table
 * alone: no system call, so it works where /proc is out of reach (a
 * chroot) and in a process about to restrict its system calls. */
void shim_fd_each_tracked(void (*fn)(int fd, void *ctx), void *ctx);

/* Clears fd and returns what it pointed at (NULL if nothing). */
struct shim_sock *shim_fd_clear(int fd);

/*
 * The shim's own fds (rendezvous sockets, ring memfds) come from the
 * program's table. One whose number lies in the top of RLIMIT_NOFILE (the
 * last 1/32, at least 16 numbers) would take a slot the program may need
 * next, where without the shim its accept or open would have succeeded: it
 * is closed here and -EMFILE returned (the connection then stays on TCP).
 * The kernel gives the lowest free number, so a high one means the table
 * is nearly full. Returns fd otherwise; a negative fd passes through.
 */
int shim_fd_own_checked(int fd);
/* Whether fd lies in that reserve (the test shim_fd_own_checked makes,
 * for fds whose release is not ours to make here: a peer's, reaper.h). */
bool shim_fd_in_reserve(int fd);
/* Whether the shim may keep fd for the process's life (a socket it would
 * otherwise open anew for each use): below twice that reserve. A process
 * that already holds that many fds when the shim first needs one is
 * short of them; the shim then opens it for each use. */
bool shim_fd_keepable(int fd);

#endif
