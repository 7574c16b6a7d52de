/*
 * The state of an intercepted connection outside its data calls (io.h):
 * FIONREAD, shutdown, and the readiness the hooked waits (wait.c, epoll.c)
 * ask for, with the arms and disarms around their sleeps. The data calls
 * themselves are io_rx.c and io_tx.c; the pieces both use are in
 * io_internal.h.
 */
#include <errno.h>
#include <sys/epoll.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "failover.h"
#include "frames.h"
#include "io.h"
#include "io_internal.h"
#include "real.h"
#include "transport.h"
#include "upgrade.h"
#include "waitloop.h"
#include "wire.h"

static const uint8_t data_bell = SHIM_FRAME_DATA_BELL;

int shim_io_ioctl(int fd, unsigned long request, void *arg)
{
	struct shim_sock *s;
	int rc;

	if ((request != FIONREAD && request != SIOCATMARK) || !arg)
		return shim_sock_ioctl(fd, request, arg);
	s = shim_sock_get_intercepted(fd);
	if (!s)
		return shim_sock_ioctl(fd, request, arg);
	rc = request == FIONREAD ? shim_io_bytes_readable(s, fd, arg) : shim_io_atmark(s, fd, arg);
	shim_sock_put(s);
	return rc;
}

/*
 * rx on the channel with its ring empty: TCP may hold the peer's RESUME
 * (a spill, or urgent data it sent: failover.c), behind which the stream
 * goes on plainly. Reading it now lets the answer be the kernel's, as a
 * program that only looks (FIONREAD, SIOCATMARK) expects.
 */
static void notice_resume(struct shim_sock *s, int fd)
{
	shim_failover_look_elsewhere(s, fd);
	if (s->rx_dir == SHIM_DIR_CHAN && s->chan->ops->fail && !s->fo_peer_known &&
	    !s->chan->ops->readable(s->chan))
		shim_frames_drain(s, fd);
	shim_failover_progress(s, fd);
}

int shim_io_atmark(struct shim_sock *s, int fd, int *out)
{
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	if (s->closed || (fd = shim_sock_fd_locked(s, fd)) < 0) {
		rc = -EBADF;
	} else {
		notice_resume(s, fd);
		/* On the channel the mark is never next: it is only on TCP
		 * (an urgent send leaves the channel first), behind what the
		 * ring still holds. */
		if (s->rx_dir == SHIM_DIR_CHAN)
			*out = 0;
		else
			rc = REAL(ioctl)(fd, SIOCATMARK, out) < 0 ? -errno : 0;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

uint64_t shim_io_rx_arrived(struct shim_sock *s, int fd)
{
	uint64_t arrived = 0;

	pthread_mutex_lock(&s->lock);
	if (!s->closed && (fd = shim_sock_fd_locked(s, fd)) >= 0)
		shim_failover_look_elsewhere(s, fd);
	if (s->closed || fd < 0) {
		/* nothing: the item goes with its fd */
	} else if (s->chan && s->rx_dir == SHIM_DIR_CHAN) {
		arrived = s->chan->ops->rx_offset(s->chan);
	} else {
		/* Receiving on TCP (our direction alone switched, or a
		 * failover): what the program read plus what is queued. */
		if (shim_sock_tcp_arrived(s, fd, &arrived) < 0)
			arrived = s->rx_tcp_bytes;
	}
	pthread_mutex_unlock(&s->lock);
	return arrived;
}

int shim_io_bytes_readable(struct shim_sock *s, int fd, int *out)
{
	int rc = 0;

	pthread_mutex_lock(&s->lock);
	if (s->closed || (fd = shim_sock_fd_locked(s, fd)) < 0) {
		pthread_mutex_unlock(&s->lock);
		return -EBADF;
	}
	notice_resume(s, fd);
	if (s->rx_dir == SHIM_DIR_CHAN) {
		size_t n = s->chan->ops->readable(s->chan);
		int kernel = 0;

		/* Behind the peer's RESUME, TCP holds plain bytes. */
		if (s->fo_peer_known && REAL(ioctl)(fd, FIONREAD, &kernel) == 0 && kernel > 0)
			n += (size_t)kernel;
		*out = n > 0x7fffffff ? 0x7fffffff : (int)n;
	} else {
		int kernel = 0;

		if (s->rx_dir == SHIM_DIR_SWITCHING && shim_rxswitch_finish(s, fd) == 1) {
			pthread_mutex_unlock(&s->lock);
			return shim_io_bytes_readable(s, fd, out);
		}
		rc = REAL(ioctl)(fd, FIONREAD, &kernel) < 0 ? -errno : 0;
		/* Bytes on TCP may be the peer's SWITCH frame: its offset was
		 * announced before the frame could arrive, so look now. */
		if (rc == 0 && kernel > 0 && shim_upgrade_rx_pending(s))
			shim_upgrade_progress(s, fd);
		if (s->rx_switch_known && (uint64_t)kernel > s->rx_switch_at - s->rx_tcp_bytes) {
			/* Past the switch: the frame, then what the ring holds
			 * (once the whole frame is in, as a read would see it). */
			uint64_t before = s->rx_switch_at - s->rx_tcp_bytes;
			size_t ring = 0;

			if ((uint64_t)kernel >= before + sizeof(struct shim_frame_switch) && s->chan)
				ring = s->chan->ops->readable(s->chan);
			kernel = (int)before;
			if (ring <= (size_t)(0x7fffffff - kernel))
				kernel += (int)ring;
		}
		*out = kernel;
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int shim_io_shutdown(struct shim_sock *s, int fd, int how)
{
	bool rd = how == SHUT_RD || how == SHUT_RDWR, wr = how == SHUT_WR || how == SHUT_RDWR;
	int rc = 0;

	if (!rd && !wr)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	if (s->closed || (fd = shim_sock_fd_locked(s, fd)) < 0) {
		pthread_mutex_unlock(&s->lock);
		return -EBADF;
	}
	shim_failover_look_elsewhere(s, fd);
	/* A direction still on TCP is shut in the kernel, as without the shim.
	 * A switched one is shut in the channel: TCP stays open both ways,
	 * since it carries the bells of the other direction. */
	if (rd && s->rx_dir == SHIM_DIR_TCP && REAL(shutdown)(fd, SHUT_RD) < 0)
		rc = -errno;
	if (wr && s->tx_dir == SHIM_DIR_TCP && REAL(shutdown)(fd, SHUT_WR) < 0)
		rc = -errno;
	if (rc == 0 && rd) {
		/* No direction starts towards a reader that is gone: the peer's
		 * SWITCH frame would reach a socket that reads nothing more. */
		shim_upgrade_stop_for_close(s, fd);
		/* The channel stays open: Linux's TCP still takes, and counts,
		 * what the peer sends after SHUT_RD, and reads return it. */
		s->rd_shut = true;
	}
	if (rc == 0 && wr) {
		s->wr_shut = true;
		if (s->tx_dir == SHIM_DIR_CHAN) {
			s->chan->ops->shutdown_tx(s->chan);
			if (s->chan->ops->tx_bell(s->chan) & SHIM_BELL_TCP)
				shim_frames_queue(s, fd, &data_bell, 1);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}

bool shim_io_switched(const struct shim_sock *s)
{
	/* A replay after a failover still needs our hand (failover.c). */
	return s->tx_dir != SHIM_DIR_TCP || s->rx_dir != SHIM_DIR_TCP || shim_failover_replaying(s);
}

bool shim_io_young_locked(const struct shim_sock *s)
{
	return s->phase == SHIM_PHASE_IDLE && !shim_io_switched(s) && !s->chan && !s->rx_switch_known &&
	       !s->fo_started && !s->closed;
}

bool shim_io_young(struct shim_sock *s)
{
	bool young;

	pthread_mutex_lock(&s->lock);
	young = shim_io_young_locked(s);
	pthread_mutex_unlock(&s->lock);
	return young;
}

bool shim_io_is_switched(struct shim_sock *s)
{
	bool sw;

	pthread_mutex_lock(&s->lock);
	sw = shim_io_switched(s);
	pthread_mutex_unlock(&s->lock);
	return sw;
}

bool shim_io_progress(struct shim_sock *s, int fd)
{
	bool sw;

	pthread_mutex_lock(&s->lock);
	if (!s->closed && s->shared && shim_sock_fd_locked(s, fd) >= 0)
		shim_failover_look_elsewhere(s, shim_sock_fd_locked(s, fd));
	if (!s->closed && !shim_io_switched(s) && !shim_upgrade_settled(s) &&
	    (fd = shim_sock_fd_locked(s, fd)) >= 0) {
		shim_upgrade_progress(s, fd);
		shim_failover_progress(s, fd);
	}
	sw = !s->closed && shim_io_switched(s);
	pthread_mutex_unlock(&s->lock);
	return sw;
}

bool shim_io_drain_bells(struct shim_sock *s, int fd)
{
	bool resume;

	pthread_mutex_lock(&s->lock);
	if (!s->closed && (fd = shim_sock_fd_locked(s, fd)) >= 0)
		shim_failover_look_elsewhere(s, fd);
	if (s->rx_dir == SHIM_DIR_CHAN && !s->closed && fd >= 0)
		shim_frames_drain(s, fd);
	resume = s->fo_peer_known && s->rx_dir == SHIM_DIR_CHAN;
	pthread_mutex_unlock(&s->lock);
	return resume;
}

/* Our ring is empty and the peer announced its RESUME (its hand-back, or
 * a failure it saw first): the RESUME, and the bytes behind it, are on TCP,
 * where nothing else would look while we read the ring. Under s->lock. */
static bool peer_resume_unread(const struct shim_sock *s)
{
	const struct shim_chan *ch = s->chan;

	return ch && s->rx_dir == SHIM_DIR_CHAN && !s->fo_peer_known && !s->rx_tcp_eof && ch->ops->peer_resuming &&
	       ch->ops->readable(ch) == 0 && ch->ops->peer_resuming(ch);
}

int shim_io_poll_mask(struct shim_sock *s, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP | POLLPRI };
	int mask = 0;

	if (!__atomic_load_n(&s->intercept, __ATOMIC_RELAXED))
		return -1;
	pthread_mutex_lock(&s->lock);
	if (s->closed || (fd = shim_sock_fd_locked(s, fd)) < 0) {
		/* Closed by another thread since the caller looked it up. */
		pthread_mutex_unlock(&s->lock);
		return POLLNVAL;
	}
	p.fd = fd;
	shim_failover_look_elsewhere(s, fd);
	if (s->tcp_out_len)
		shim_frames_flush(s, fd);
	shim_upgrade_progress(s, fd);
	shim_failover_progress(s, fd);
	if (peer_resume_unread(s)) {
		shim_frames_drain(s, fd);
		shim_failover_progress(s, fd);
	}
	if (!shim_io_switched(s) && !shim_upgrade_rx_pending(s)) {
		pthread_mutex_unlock(&s->lock);
		return -1;
	}
	/* While a direction is still on TCP (a moment, during the switch), the
	 * kernel knows its readiness; once both moved, the rings know all. */
	if (s->rx_dir != SHIM_DIR_CHAN || s->tx_dir != SHIM_DIR_CHAN) {
		if (REAL(poll)(&p, 1, 0) < 0)
			p.revents = 0;
	} else {
		p.revents = 0;
	}
	/* TCP readable while the peer may switch: the bytes may be its SWITCH
	 * frame alone. Its offset was queued before the frame was written, so
	 * looking at the rendezvous now (after the kernel answered) tells. */
	if (s->rx_dir == SHIM_DIR_TCP && (p.revents & POLLIN) && shim_upgrade_rx_pending(s))
		shim_upgrade_progress(s, fd);
	if (s->rx_dir == SHIM_DIR_SWITCHING) {
		short in = p.revents & POLLIN;

		p.revents &= (short)~POLLIN;
		if (shim_rxswitch_finish(s, fd) < 0)
			mask |= POLLERR;
		else if (s->rx_dir == SHIM_DIR_TCP)
			p.revents |= in; /* refused: those bytes are the program's */
	}
	if (s->chan && shim_io_aborted_by_peer(s, fd)) {
		/* As on a reset socket: every event, and the call fails. */
		pthread_mutex_unlock(&s->lock);
		return POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP;
	}
	if (s->rx_dir == SHIM_DIR_TCP) {
		mask |= p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR);
	} else if (s->rx_dir == SHIM_DIR_CHAN) {
		if (s->bells_owed)
			shim_frames_drain(s, fd);
		size_t lowat = s->rcv_lowat > 1 ? (size_t)s->rcv_lowat : 1;

		if (s->chan->ops->readable(s->chan) >= lowat)
			mask |= POLLIN;
		if (s->chan->ops->rx_eof(s->chan) || s->rx_tcp_eof || s->rd_shut)
			mask |= POLLIN | POLLRDHUP;
		/* The peer's FIN, with its last bytes still unread. */
		if (s->chan->ops->rx_fin && s->chan->ops->rx_fin(s->chan))
			mask |= POLLRDHUP;
	} else if (s->rx_tcp_eof) {
		mask |= POLLIN | POLLRDHUP;
	}
	/* Urgent data comes on TCP only (failover.h, shim_failover_oob). */
	mask |= p.revents & POLLPRI;
	if (s->tx_dir == SHIM_DIR_TCP) {
		if (!shim_failover_replaying(s))
			mask |= p.revents & POLLOUT;
	} else if (shim_io_tx_ready(s) || s->wr_shut || s->rx_tcp_eof) {
		mask |= POLLOUT;
	}
	/* POLLHUP as the kernel's: both directions shut (the peer's FIN or
	 * our SHUT_RD, and our SHUT_WR), or a reset; a peer's close alone is
	 * POLLRDHUP. */
	if ((s->rx_tcp_eof || s->rd_shut) && s->wr_shut)
		mask |= POLLHUP;
	/* The peer reset the connection (its TCP said so under the bells). */
	if (s->rx_tcp_reset)
		mask |= POLLERR | POLLHUP;
	/* A reset the kernel shows while rx is on the channel and a direction
	 * on TCP (a failover's, MSG_OOB's): the connection's, as TCP's own
	 * poll gives it beside the bytes still unread, and after SO_ERROR
	 * took the error, its hang-up alone. */
	if (s->rx_dir != SHIM_DIR_TCP && (p.revents & POLLHUP))
		mask |= p.revents & (POLLERR | POLLHUP | POLLRDHUP);
	pthread_mutex_unlock(&s->lock);
	return mask;
}

int shim_io_handshake_fd(struct shim_sock *s, int *cap_ms)
{
	int wait;

	pthread_mutex_lock(&s->lock);
	wait = shim_upgrade_pending_fd(s);
	shim_waitloop_cap_until(cap_ms, shim_upgrade_due_ns(s));
	pthread_mutex_unlock(&s->lock);
	return wait;
}

void shim_io_wake_register(struct shim_sock *s, int efd, uint64_t data, unsigned *gen, int *cap_ms)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = data };
	int wake;

	pthread_mutex_lock(&s->lock);
	wake = shim_upgrade_wake_fd(s);
	shim_waitloop_cap_until(cap_ms, shim_upgrade_due_ns(s));
	/* Added under the lock: the wake fd's number is the sock's to close
	 * and reuse. EEXIST: this set watches it for another item of the
	 * same file already. */
	if (wake >= 0 && *gen != s->neg_wake_gen &&
	    (REAL(epoll_ctl)(efd, EPOLL_CTL_ADD, wake, &ev) == 0 || errno == EEXIST))
		*gen = s->neg_wake_gen;
	pthread_mutex_unlock(&s->lock);
}

int shim_io_line(struct shim_sock *s)
{
	int line;

	pthread_mutex_lock(&s->lock);
	line = s->closed ? -1 : shim_io_bell_line(s);
	pthread_mutex_unlock(&s->lock);
	return line;
}

void shim_io_note_line_rang(struct shim_sock *s)
{
	pthread_mutex_lock(&s->lock);
	if (!s->closed)
		shim_io_line_rang(s);
	pthread_mutex_unlock(&s->lock);
}

int shim_io_arm(struct shim_sock *s, int fd, short events, int line)
{
	int armed = 0;
	unsigned how;

	pthread_mutex_lock(&s->lock);
	if (s->closed) {
		pthread_mutex_unlock(&s->lock);
		return SHIM_ARM_READY;
	}
	armed |= SHIM_ARM_COUNTED;
	if (s->shared && shim_sock_fd_locked(s, fd) >= 0)
		shim_failover_look_elsewhere(s, shim_sock_fd_locked(s, fd));
	/* The line the caller watches must still be the channel's. */
	how = shim_io_bell_how(line >= 0 && line == shim_io_bell_line(s) ? line : -1);
	if (how == SHIM_BELL_LINE && (events & (POLLIN | POLLOUT)))
		armed |= SHIM_ARM_LINE;
	if (++s->sleepers > 1)
		s->shared_sleep = true;
	if (s->shared_sleep)
		armed |= SHIM_ARM_SHORT;
	if ((events & POLLIN) && s->rx_dir == SHIM_DIR_CHAN) {
		armed |= SHIM_ARMED_RX;
		if (!s->chan->ops->rx_arm(s->chan, how))
			armed |= SHIM_ARM_READY;
		else if (shim_io_grace_needed(s))
			armed |= SHIM_ARM_SHORT;
	}
	if ((events & POLLOUT) && s->tx_dir == SHIM_DIR_CHAN) {
		armed |= SHIM_ARMED_TX;
		if (!s->chan->ops->tx_arm(s->chan, how))
			armed |= SHIM_ARM_READY;
	}
	pthread_mutex_unlock(&s->lock);
	return armed;
}

void shim_io_disarm(struct shim_sock *s, int fd, int armed)
{
	pthread_mutex_lock(&s->lock);
	if (s->closed || !(armed & SHIM_ARM_COUNTED)) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	s->sleepers--;
	if (armed & SHIM_ARMED_RX)
		shim_io_note_disarm(s, !s->chan->ops->rx_disarm(s->chan));
	if (armed & SHIM_ARMED_TX)
		shim_io_note_disarm(s, !s->chan->ops->tx_disarm(s->chan));
	if (s->rx_dir == SHIM_DIR_CHAN && s->bells_owed && (fd = shim_sock_fd_locked(s, fd)) >= 0)
		shim_frames_drain(s, fd);
	pthread_mutex_unlock(&s->lock);
}
