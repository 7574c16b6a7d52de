/*
 * The shim's long-lived fds (pair channels, bell lines, the sock_diag
 * socket, its own epoll sets) come from the program's table. A program may
 * close fds it did not open (a daemon's close-all loop) and get the number
 * back for a file of its own: such a number is never read, written or
 * closed by the shim again. Each use first checks that the number still
 * names the file kept: by device and inode, and, for an epoll set (every
 * epoll file has the kernel's one anonymous inode), by a marker only our
 * sets hold.
 */
#ifndef RDMASHIM_OWNED_H
#define RDMASHIM_OWNED_H

#include <stdbool.h>
#include <sys/types.h>

/* One kept fd and what it was when kept. Not locked: the owner's lock
 * covers it. */
struct shim_owned_fd {
	int fd; /* -1: none */
	dev_t dev;
	ino_t ino;
	bool epoll; /* an epoll set of ours: it holds the marker */
};

/* Whether o->fd still names the file kept. */
bool shim_owned_still(const struct shim_owned_fd *o);
/* Keeps fd as o. 0, or -errno (fd is not kept then, nor closed). */
int shim_owned_take(struct shim_owned_fd *o, int fd);
/* Keeps a fresh epoll set of ours as o, the marker added to it. 0, or
 * -errno (fd is not kept then, nor closed). */
int shim_owned_take_epoll(struct shim_owned_fd *o, int epfd);
/* Closes o->fd if it still is ours; o is empty after. A socket a peer can
 * write to, or a file a peer passed, goes to shim_reap_owned() instead
 * (reaper.h). */
void shim_owned_close(struct shim_owned_fd *o);
/* o is empty after, its number left alone (it is no longer ours). Every
 * kept fd ends in this or shim_owned_close: the marker goes with the last
 * epoll set of ours. */
void shim_owned_forget(struct shim_owned_fd *o);

/* Fork handlers (atfork.c): the marker's lock, the last in the order. */
void shim_owned_atfork_prepare(void);
void shim_owned_atfork_release(void);

#endif
