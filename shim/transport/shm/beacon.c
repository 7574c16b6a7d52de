/* Port beacons; see beacon.h. */
#include "beacon.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <uthash.h>

#include "clock.h"
#include "fdtable.h"
#include "real.h"
#include "trace.h"

/* How often a served port's beacon is looked at again: ours still ours
 * (a close-all loop may have closed it), another's still there. */
#define BEACON_RECHECK_NS 1000000000ull

struct served_port {
	uint16_t port;
	/* The beacon this process holds (fd -1: none; another process holds
	 * it, or none could be made). Kept for the process's life. */
	struct shim_owned_fd held;
	unsigned long long checked_ns; /* 0: never */
	UT_hash_handle hh;
};

static pthread_mutex_t beacon_lock = PTHREAD_MUTEX_INITIALIZER;
static struct served_port *served;

static socklen_t beacon_address(struct sockaddr_un *sun, uint16_t port)
{
	int n;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "rdmashim1/port/%04x", port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/*
 * Binds the port's name to a datagram socket that can receive nothing
 * (SHUT_RD: a sender gets EPIPE, so nobody can queue bytes on our
 * memory); a client's connect() to it queues nothing either. 0 with the
 * socket kept in *held, -EADDRINUSE when another socket has the name, or
 * another -errno.
 */
static int beacon_bind(uint16_t port, struct shim_owned_fd *held)
{
	struct sockaddr_un sun;
	socklen_t len = beacon_address(&sun, port);
	int fd = REAL(socket)(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), rc;

	if (fd < 0)
		return -errno;
	/* Kept for the process's life: never a number the program may need. */
	if (!shim_fd_keepable(fd)) {
		REAL(close)(fd);
		return -EMFILE;
	}
	if (REAL(bind)(fd, (struct sockaddr *)&sun, len) < 0 || REAL(shutdown)(fd, SHUT_RD) < 0) {
		rc = -errno;
		REAL(close)(fd);
		return rc;
	}
	rc = shim_owned_take(held, fd);
	if (rc < 0)
		REAL(close)(fd);
	return rc;
}

/* Under beacon_lock. */
static struct served_port *served_entry(uint16_t port)
{
	struct served_port *e;

	HASH_FIND(hh, served, &port, sizeof(port), e);
	if (e)
		return e;
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->port = port;
	e->held.fd = -1;
	HASH_ADD(hh, served, port, sizeof(e->port), e);
	return e;
}

void shim_beacon_serve(uint16_t port)
{
	unsigned long long now = shim_now_ns();
	struct served_port *e;
	int rc;

	pthread_mutex_lock(&beacon_lock);
	e = served_entry(port);
	if (!e || (e->checked_ns && now - e->checked_ns < BEACON_RECHECK_NS)) {
		pthread_mutex_unlock(&beacon_lock);
		return;
	}
	e->checked_ns = now;
	if (shim_owned_still(&e->held)) {
		pthread_mutex_unlock(&beacon_lock);
		return;
	}
	/* Ours was closed under us (its number is the program's now, never
	 * touched again), or another process held it: bind it anew. */
	e->held.fd = -1;
	rc = beacon_bind(port, &e->held);
	pthread_mutex_unlock(&beacon_lock);
	SHIM_TRACE(rc == 0 || rc == -EADDRINUSE ? SHIM_TRACE_DEBUG : SHIM_TRACE_WARN, "beacon.serve", -1, NULL,
		   SHIM_REASON_NONE, "\"port\":%u,\"held\":%s,\"errno\":%d", port, rc == 0 ? "true" : "false",
		   rc < 0 ? -rc : 0);
}

bool shim_beacon_seen(uint16_t port)
{
	struct sockaddr_un sun;
	socklen_t len = beacon_address(&sun, port);
	int fd = shim_fd_own_checked(REAL(socket)(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)), err;

	if (fd < 0)
		return true;
	err = REAL(connect)(fd, (struct sockaddr *)&sun, len) < 0 ? errno : 0;
	REAL(close)(fd);
	/* An abstract name nobody holds refuses the connect. */
	return err != ECONNREFUSED;
}

void shim_beacon_atfork_prepare(void)
{
	pthread_mutex_lock(&beacon_lock);
}

void shim_beacon_atfork_release(void)
{
	pthread_mutex_unlock(&beacon_lock);
}
