/* Calls the shim can not follow, and sandboxes; see bypass.h. */
#include "bypass.h"

#include <errno.h>

#include "fdtable.h"
#include "handback.h"
#include "io.h"
#include "real.h"
#include "sock.h"
#include "statarea.h"
#include "trace.h"
#include "upgrade.h"

/* The connection behind fd, held, or NULL (not a connection of ours). */
static struct shim_sock *connection(int fd)
{
	struct shim_sock *s = fd >= 0 ? shim_sock_get(fd) : NULL;

	if (s && s->role != SHIM_ROLE_CLIENT && s->role != SHIM_ROLE_SERVER) {
		shim_sock_put(s);
		return NULL;
	}
	return s;
}

/*
 * leave: a connection already switched goes back to TCP first (handback.c)
 * when nothing of the shim can serve the caller: glibc's stdio reads with
 * calls no preload sees. It waits for the peer (up to 2 s), so it is kept
 * for that: splice is served through the ring instead, and urgent data
 * goes inline.
 */
static int pin_locked(struct shim_sock *s, int fd, enum shim_reason why, bool leave)
{
	int rc;

	pthread_mutex_lock(&s->lock);
	/* Only while fd still names s (shim/LIFETIME.md). */
	fd = s->closed ? -EBADF : shim_sock_fd_locked(s, fd);
	if (fd >= 0 && leave && s->chan && (s->tx_dir != SHIM_DIR_TCP || s->rx_dir != SHIM_DIR_TCP))
		shim_handback(s, fd);
	if (fd >= 0 && s->closed)
		fd = -EBADF;
	rc = fd < 0 ? 0 : shim_upgrade_pin_tcp(s, fd, why);
	pthread_mutex_unlock(&s->lock);
	return rc;
}

static int pin(int fd, enum shim_reason why, bool leave)
{
	struct shim_sock *s = connection(fd);
	int rc;

	if (!s)
		return 0;
	rc = pin_locked(s, fd, why, leave);
	SHIM_TRACE(SHIM_TRACE_INFO, "conn.pin", fd, &s->tuple, why, "\"moved\":%s", rc ? "true" : "false");
	shim_sock_put(s);
	return rc;
}

int shim_bypass_pin(int fd, enum shim_reason why)
{
	return pin(fd, why, false);
}

int shim_bypass_leave(int fd, enum shim_reason why)
{
	return pin(fd, why, true);
}

void shim_bypass_on_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	shim_sock_on_setsockopt(fd, level, name, val, len);
	/* Urgent bytes join the stream at a place only the kernel knows: the
	 * byte counts that place a switch would be off. (After the sock's
	 * update, outside its lock: the pin takes it.) */
	if (level == SOL_SOCKET && name == SO_OOBINLINE && len >= sizeof(int) && *(const int *)val)
		shim_bypass_pin(fd, SHIM_REASON_BYPASS);
}

ssize_t shim_bypass_splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			   unsigned flags)
{
	struct shim_sock *in = connection(fd_in), *out = in ? NULL : connection(fd_out);
	struct shim_sock *s = in ? in : out;
	ssize_t rc;

	if (!s || pin_locked(s, in ? fd_in : fd_out, SHIM_REASON_BYPASS, false) == 0) {
		/* Ours only in name, or kept on TCP: the kernel's splice is exact. */
		rc = REAL(splice)(fd_in, off_in, fd_out, off_out, len, flags);
		rc = rc < 0 ? -errno : rc;
	} else if ((in && off_out) || (out && off_in)) {
		rc = -ESPIPE; /* the other end must be a pipe, which has no offset */
	} else {
		rc = in ? shim_io_splice_from(in, fd_in, fd_out, len, flags)
			: shim_io_splice_to(out, fd_out, fd_in, len, flags);
	}
	shim_sock_put(s);
	return rc;
}

/*
 * Runs before the filter exists, so every call made here is still allowed.
 * After it the process makes, for its connections, only the calls the
 * program itself makes: nothing the shim would add (its data path's
 * sendmsg for a write, a handshake's sockets, a trace line's fstat) can
 * meet a filter that kills for it. That holds for whatever filter comes,
 * which the shim can not read: the program's own calls on its own
 * connections are the ones its filter was written for.
 */
void shim_bypass_sandboxed(const char *how, bool filter_ahead)
{
	unsigned kept;

	shim_upgrade_bar(SHIM_REASON_SANDBOXED);
	kept = shim_sock_leave_for_sandbox();
	SHIM_TRACE(SHIM_TRACE_INFO, "process.sandboxed", -1, NULL, SHIM_REASON_SANDBOXED,
		   "\"how\":\"%s\",\"kept\":%u", how, kept);
	/* A filter still to come may refuse even a trace line's fstat; one
	 * the process started under let the trace's open, fstat and first
	 * write through already. */
	if (filter_ahead) {
		shim_trace_end("sandboxed");
		/* Its exit would unlink the stats file, and a fork would make
		 * a file of its own: gone now, counted in memory after. */
		shim_statarea_leave();
	}
}

