/* The shim's kept fds; see owned.h. */
#include "owned.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "fdtable.h"
#include "real.h"

/*
 * The marker: a unix datagram socket of ours (an inode of its own), in
 * every epoll set we keep with no events asked. Unbound and unconnected,
 * it has nothing to report, so it never shows in a wait. EPOLL_CTL_MOD of
 * it succeeds in a set that holds it and fails (ENOENT) in any other, so a
 * number the program reused for an epoll set of its own is told from ours
 * without a look at that set's events. Made with the first set and
 * closed with the last (a server whose clients all left holds no fd for
 * them; a fork's child shares it with its parent, as it shares the sets).
 * One the program closed is made anew, and the sets that held the old one
 * are no longer ours (left alone, never closed).
 */
#define MARKER_DATA 0x7273686d61726b72ull /* "rshmarkr" */

static struct shim_owned_fd marker = { .fd = -1 };
static unsigned marker_users; /* epoll sets kept (taken, not yet let go) */
static pthread_mutex_t marker_lock = PTHREAD_MUTEX_INITIALIZER;

static bool same_file(const struct shim_owned_fd *o)
{
	struct stat st;

	return o->fd >= 0 && fstat(o->fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino;
}

static int record(struct shim_owned_fd *o, int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	o->fd = fd;
	o->dev = st.st_dev;
	o->ino = st.st_ino;
	o->epoll = false;
	return 0;
}

/* Under marker_lock: the marker's fd, checked, or made; -errno. */
static int marker_get(bool make)
{
	int fd;

	if (same_file(&marker))
		return marker.fd;
	marker.fd = -1;
	if (!make)
		return -ENOENT;
	fd = shim_fd_own_checked(REAL(socket)(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	if (fd < 0)
		return fd == -EMFILE ? fd : -errno;
	if (record(&marker, fd) < 0) {
		REAL(close)(fd);
		marker.fd = -1;
		return -EBADF;
	}
	return fd;
}

/* EPOLL_CTL_MOD: whether the epoll set epfd holds the marker (0);
 * EPOLL_CTL_ADD: the marker (made if need be) added to it. 0 or -errno. */
static int marker_in(int epfd, int op)
{
	struct epoll_event ev = { .events = 0, .data.u64 = MARKER_DATA };
	int fd, rc;

	pthread_mutex_lock(&marker_lock);
	fd = marker_get(op == EPOLL_CTL_ADD);
	rc = fd < 0 ? fd : REAL(epoll_ctl)(epfd, op, fd, &ev) == 0 ? 0 : -errno;
	if (rc == 0 && op == EPOLL_CTL_ADD)
		marker_users++;
	pthread_mutex_unlock(&marker_lock);
	return rc;
}

/* An epoll set of ours let go: with the last, the marker goes too. */
static void marker_put(void)
{
	pthread_mutex_lock(&marker_lock);
	if (marker_users && --marker_users == 0) {
		if (same_file(&marker))
			REAL(close)(marker.fd);
		marker.fd = -1;
	}
	pthread_mutex_unlock(&marker_lock);
}

bool shim_owned_still(const struct shim_owned_fd *o)
{
	/* The marker's check is the set's: EPOLL_CTL_MOD fails on a number
	 * that names no epoll set (EBADF, EINVAL) as on another set. */
	if (o->epoll)
		return o->fd >= 0 && marker_in(o->fd, EPOLL_CTL_MOD) == 0;
	return same_file(o);
}

int shim_owned_take(struct shim_owned_fd *o, int fd)
{
	return record(o, fd);
}

int shim_owned_take_epoll(struct shim_owned_fd *o, int epfd)
{
	int rc = marker_in(epfd, EPOLL_CTL_ADD);

	if (rc < 0)
		return rc;
	rc = record(o, epfd);
	if (rc < 0)
		marker_put();
	o->epoll = rc == 0;
	return rc;
}

void shim_owned_forget(struct shim_owned_fd *o)
{
	if (o->fd >= 0 && o->epoll)
		marker_put();
	o->fd = -1;
	o->epoll = false;
}

void shim_owned_close(struct shim_owned_fd *o)
{
	if (shim_owned_still(o))
		REAL(close)(o->fd);
	shim_owned_forget(o);
}

void shim_owned_atfork_prepare(void)
{
	pthread_mutex_lock(&marker_lock);
}

void shim_owned_atfork_release(void)
{
	pthread_mutex_unlock(&marker_lock);
}
