/*
 * What happens to a tracked socket when one of the program's fds for it goes
 * or is handed on: close, dup2/dup3 onto it, dup, and sendmsg with
 * SCM_RIGHTS (shim/LIFETIME.md). Every function runs in the wrapper, around
 * the real call.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "close.h"
#include "fdtable.h"
#include "frames.h"
#include "handback.h"
#include "real.h"
#include "self.h"
#include "sock.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"

/* The program's fd is about to go: a call in progress on the socket goes
 * on with it, as with the kernel, through a copy of our own (io.c). Runs
 * after the table entry was cleared and before the real close, under the
 * lock: a thread that holds the lock and still finds fd in the table knows
 * the number is not reused under it (shim_sock_fd_locked()). */
static bool keep_for_callers(struct shim_sock *sock, int fd)
{
	bool in_epoll, settled = false;

	pthread_mutex_lock(&sock->lock);
	if (sock->active && sock->tcp_keep < 0) {
		sock->tcp_keep = REAL(fcntl)(fd, F_DUPFD_CLOEXEC, 0);
		if (sock->tcp_keep < 0)
			sock->fd_lost = true;
	}
	/* The last fd, no call holding the socket, in the process that runs
	 * the connection's upgrade, and no other process holding it (whose
	 * bytes the settling would read): settle what is on the wire first
	 * (close.c). refs is the cleared entry's alone then. */
	if (!sock->active && __atomic_load_n(&sock->refs, __ATOMIC_RELAXED) == 1 && !sock->shared &&
	    (sock->role == SHIM_ROLE_CLIENT || sock->role == SHIM_ROLE_SERVER) &&
	    (!sock->io_pid || sock->io_pid == shim_self_pid())) {
		shim_close_prepare(sock, fd);
		settled = sock->chan && sock->rx_dir == SHIM_DIR_CHAN && !sock->aborted;
	} else if (sock->chan && __atomic_load_n(&sock->fds, __ATOMIC_RELAXED) == 1)
		SHIM_TRACE(SHIM_TRACE_DEBUG, "close.unsettled", fd, &sock->tuple, SHIM_REASON_NONE,
			   "\"active\":%d,\"refs\":%d,\"shared\":%d", sock->active,
			   __atomic_load_n(&sock->refs, __ATOMIC_RELAXED), sock->shared);
	/* Items of ours may name fd, also of a connection whose upgrade
	 * failed since: a new socket on that number is not this one, and
	 * the file may live on through a dup (io/epoll_close.c). */
	in_epoll = sock->role == SHIM_ROLE_CLIENT || sock->role == SHIM_ROLE_SERVER;
	pthread_mutex_unlock(&sock->lock);
	if (in_epoll && shim_sock_hooks.fd_closed)
		shim_sock_hooks.fd_closed(fd, sock);
	return settled;
}

static void trace_close(int fd, struct shim_sock *sock)
{
	SHIM_TRACE(SHIM_TRACE_DEBUG, "fd.close", fd, &sock->tuple, SHIM_REASON_NONE,
		   "\"role\":\"%s\",\"fds_left\":%d", shim_role_name(sock->role),
		   __atomic_load_n(&sock->fds, __ATOMIC_RELAXED) - 1);
}

void shim_sock_on_close(int fd)
{
	struct shim_sock *sock = shim_fd_clear(fd);

	if (!sock)
		return;
	struct shim_tuple tuple;
	bool settled;
	size_t late;

	trace_close(fd, sock);
	settled = keep_for_callers(sock, fd);
	if (settled)
		tuple = sock->tuple; /* for the trace below: the unref may free sock */
	shim_sock_unref_fd(sock);
	/* The channel ended in that unref when it was the last reference
	 * (RDMA waits there for its last WRITEs: a round trip). A bell the
	 * peer sent meanwhile, for an arm it could not see withdrawn, is in
	 * the socket now; the close would answer it with a reset. */
	if (settled && (late = shim_frames_take_late_bells(fd)))
		SHIM_TRACE(SHIM_TRACE_DEBUG, "close.late_bells", fd, &tuple, SHIM_REASON_NONE, "\"bells\":%zu", late);
}

struct shim_sock *shim_sock_before_replace(int oldfd, int newfd)
{
	struct shim_sock *sock;

	if (oldfd == newfd)
		return NULL;
	sock = shim_fd_clear(newfd);
	if (sock)
		keep_for_callers(sock, newfd);
	return sock;
}

void shim_sock_after_replace(int newfd, struct shim_sock *old, int rc)
{
	int err;

	if (!old)
		return;
	if (rc >= 0) {
		trace_close(newfd, old);
		shim_sock_unref_fd(old);
		return;
	}
	/* The call failed: newfd still names old's socket. */
	old = shim_fd_publish(newfd, old, &err);
	shim_sock_unref_fd(old);
}

void shim_sock_on_dup(int oldfd, int newfd)
{
	struct shim_sock *sock = shim_sock_get(oldfd);

	if (oldfd == newfd) {
		shim_sock_put(sock);
		return;
	}
	if (!sock) {
		/* The new fd number may have held a tracked socket (dup2 onto it). */
		shim_sock_unref_fd(shim_fd_clear(newfd));
		return;
	}
	/* Our reference becomes the new entry's. */
	shim_sock_ref_becomes_fd(sock);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "fd.dup", newfd, &sock->tuple, SHIM_REASON_NONE, "\"from\":%d", oldfd);
	shim_sock_install(newfd, sock);
}

/* The stream is plain TCP from here on, both ways: nothing switched, and
 * the peer announced no switch of its own. */
static bool stream_plain(const struct shim_sock *s)
{
	return !s->chan && !shim_upgrade_holds_chan(s) && s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP &&
	       !s->rx_switch_known && !s->fo_started;
}

/*
 * sock is about to be passed to another process, which will adopt it as a
 * TCP connection (shim/LIFETIME.md): a handshake under way is stopped, as
 * close does, so that the stream stays plain TCP and the receiver gets it
 * at a clean offset. A connection already switched goes back to TCP first
 * (handback.c: its bytes travel in our channel, which the receiver can not
 * reach). Where that can not be done it is ended as by a reset, so that
 * the receiver and the peer see an error, never the shim's frames as data
 * nor a silent hole. Under sock->lock (handback.c drops it while it waits).
 */
static void hand_off(struct shim_sock *sock, int fd, const char *how)
{
	int rc;

	if (sock->role != SHIM_ROLE_CLIENT && sock->role != SHIM_ROLE_SERVER)
		return;
	/* A handshake under way: where the peer may be committing (shm's C),
	 * it backs out, or, having committed, is followed, for the hand-back
	 * below to end (the transport's stop_commit); one that committed
	 * itself (S) goes on to the hand-back; earlier than that, the
	 * handshake is given up. */
	if (sock->phase == SHIM_PHASE_COMMITTING) {
		shim_upgrade_stop_commit(sock, fd);
	} else if (sock->phase == SHIM_PHASE_NEGOTIATING) {
		shim_upgrade_stop_for_close(sock, fd);
		if (!shim_upgrade_settled(sock) && stream_plain(sock))
			shim_upgrade_fail(sock, fd, SHIM_REASON_PEER_CLOSED);
	}
	/* Idle: a later upgrade is the receiver's (or ours, if we go on doing
	 * I/O too: not supported, see LIFETIME.md). */
	if (sock->phase == SHIM_PHASE_IDLE || (sock->phase == SHIM_PHASE_FAILED && stream_plain(sock))) {
		SHIM_TRACE(SHIM_TRACE_DEBUG, "conn.handoff", fd, &sock->tuple, SHIM_REASON_NONE,
			   "\"role\":\"%s\",\"phase\":\"%s\"", shim_role_name(sock->role),
			   shim_phase_name(sock->phase));
		return;
	}
	rc = shim_handback(sock, fd);
	if (rc == 0 || sock->aborted)
		return;
	SHIM_TRACE(SHIM_TRACE_WARN, "conn.handback_failed", fd, &sock->tuple, SHIM_REASON_HANDED_OFF,
		   "\"how\":\"%s\",\"error\":%d,\"tx\":%d,\"rx\":%d,\"failover\":%s,\"tcp_eof\":%s", how, -rc,
		   sock->tx_dir, sock->rx_dir, sock->fo_started ? "true" : "false", sock->rx_tcp_eof ? "true" : "false");
	shim_frames_abort(sock, fd, SHIM_REASON_HANDED_OFF, how);
}

void shim_sock_each_right(const struct msghdr *msg, void (*fn)(int fd))
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)msg); c;
	     c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const int *fds = (const int *)CMSG_DATA(c);

		for (size_t i = 0; i < n; i++) {
			int fd;

			/* CMSG_DATA need not be aligned for int. */
			memcpy(&fd, fds + i, sizeof(fd));
			fn(fd);
		}
	}
}

static void note_right_sent(int fd)
{
	struct shim_sock *sock = shim_sock_get(fd);

	if (!sock)
		return;
	pthread_mutex_lock(&sock->lock);
	sock->shared = true;
	if (!sock->closed && !sock->aborted && shim_sock_fd_locked(sock, fd) >= 0)
		hand_off(sock, shim_sock_fd_locked(sock, fd), "scm_rights");
	pthread_mutex_unlock(&sock->lock);
	shim_sock_put(sock);
}

void shim_sock_note_rights_sent(const struct msghdr *msg)
{
	shim_sock_each_right(msg, note_right_sent);
}

/* exec: the new image adopts every fd that stays open as a TCP connection,
 * and can not reach our channels. */
static void hand_off_before_exec(int fd, void *ctx)
{
	struct shim_sock *sock = shim_sock_get(fd);
	int fd_flags;

	(void)ctx;
	if (!sock)
		return;
	fd_flags = REAL(fcntl)(fd, F_GETFD);
	pthread_mutex_lock(&sock->lock);
	if (fd_flags >= 0 && !(fd_flags & FD_CLOEXEC) && sock->chan && !sock->closed && !sock->aborted &&
	    shim_sock_fd_locked(sock, fd) == fd && (!sock->io_pid || sock->io_pid == shim_self_pid()))
		hand_off(sock, fd, "exec");
	pthread_mutex_unlock(&sock->lock);
	shim_sock_put(sock);
}

void shim_sock_hand_off_before_exec(void)
{
	shim_fd_each_open(hand_off_before_exec, NULL);
}

/* Whether this process may stop sock's channel: it made it, or the channel
 * is shared since a fork and lets any process of ours stop it, the others
 * noticing (transport.h, moved_elsewhere; shim/LIFETIME.md). */
static bool may_stop_channel(const struct shim_sock *sock)
{
	if (!sock->io_pid || sock->io_pid == shim_self_pid())
		return true;
	return sock->shared && sock->chan && sock->chan->ops->moved_elsewhere;
}

/* A connection the shim still intercepts goes back to the kernel: one that
 * moved is handed back to TCP, then the upgrade is given up for good, which
 * lets the data path go straight to the kernel again. */
static void leave_for_sandbox(int fd, void *ctx)
{
	struct shim_sock *sock = shim_sock_get(fd);
	unsigned *kept = ctx;

	if (!sock)
		return;
	pthread_mutex_lock(&sock->lock);
	if ((sock->role == SHIM_ROLE_CLIENT || sock->role == SHIM_ROLE_SERVER) && !sock->closed &&
	    !sock->aborted && shim_sock_fd_locked(sock, fd) == fd &&
	    __atomic_load_n(&sock->intercept, __ATOMIC_RELAXED)) {
		if ((sock->chan || sock->phase == SHIM_PHASE_NEGOTIATING || sock->phase == SHIM_PHASE_COMMITTING) &&
		    may_stop_channel(sock))
			hand_off(sock, fd, "sandbox");
		if (!sock->closed && !sock->aborted && shim_sock_fd_locked(sock, fd) == fd)
			shim_upgrade_pin_tcp(sock, fd, SHIM_REASON_SANDBOXED);
		if (!sock->aborted && __atomic_load_n(&sock->intercept, __ATOMIC_RELAXED)) {
			(*kept)++;
			SHIM_TRACE(SHIM_TRACE_WARN, "conn.sandbox_kept", fd, &sock->tuple, SHIM_REASON_SANDBOXED,
				   "\"phase\":\"%s\",\"tx\":%d,\"rx\":%d", shim_phase_name(sock->phase),
				   sock->tx_dir, sock->rx_dir);
		}
	}
	pthread_mutex_unlock(&sock->lock);
	shim_sock_put(sock);
}

unsigned shim_sock_leave_for_sandbox(void)
{
	unsigned kept = 0;

	/* The table, not /proc/self/fd: a sandbox often chroots first. */
	shim_fd_each_tracked(leave_for_sandbox, &kept);
	return kept;
}
