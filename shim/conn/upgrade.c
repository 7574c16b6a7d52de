/*
 * The upgrade's state machine, the same for every transport; see upgrade.h
 * and shim/PROTOCOL.md. It picks a registered transport (transport.h) and
 * drives its negotiation through the table; the transport reports back
 * through the services below. It knows no transport by name.
 */
#include "upgrade.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faults.h"
#include "frames.h"
#include "nonce.h"
#include "real.h"
#include "reaper.h"
#include "self.h"
#include "stamps.h"
#include "sockstat.h"
#include "stats.h"
#include "streampos.h"
#include "trace.h"
#include "transport.h"
#include "wire.h"

/* A peer not there yet is tried again after these delays, doubling, capped. */
#define RETRY_FIRST_NS (1ull * 1000 * 1000)
#define RETRY_MAX_NS (200ull * 1000 * 1000)

void shim_upgrade_release(struct shim_sock *s)
{
	if (unlikely(shim_cfg.test_stamps) && s->stamp_start_ns)
		shim_stamps_keep(&s->tuple, shim_role_name(s->role), s->stamp_start_ns, s->stamp_tx_ns,
				 s->stamp_rx_ns);
	/* The transport's release may still flush a queued frame through our
	 * copy of the socket: it goes before that copy is closed. */
	if (s->xport && s->xport->release)
		s->xport->release(s);
	if (s->chan) {
		/* Not the process that owns the upgrade, or one whose socket
		 * another process may still hold (fork, SCM_RIGHTS): this close
		 * is not the connection's end, which the kernel tells the peer
		 * with TCP's FIN when the last descriptor anywhere goes. */
		if (s->chan->ops->forget && (s->shared || s->io_pid != shim_self_pid()))
			s->chan->ops->forget(s->chan);
		else
			s->chan->ops->destroy(s->chan);
		s->chan = NULL;
	}
	if (s->fo_replay) {
		/* Closed before TCP took all of a failover's replay: the kernel
		 * would have kept sending; we can not without blocking close. */
		SHIM_TRACE(SHIM_TRACE_ERROR, "failover.replay_dropped", -1, &s->tuple, SHIM_REASON_CHAN_FAILED,
			   "\"bytes\":%zu", s->fo_replay_len - s->fo_replay_off);
	}
	shim_frames_drop_failover(s);
	if (s->tcp_keep >= 0) {
		REAL(close)(s->tcp_keep);
		s->tcp_keep = -1;
	}
	shim_upgrade_wake_close(s);
}

/*
 * An attempt that timed out while the connection had not carried a byte
 * either way most likely met a peer that was idle, not one without the shim
 * (a client that connects and waits, a pool): a process runs the handshake
 * only from its own calls. Such a connection tries once more, when its first
 * byte moves and both ends are busy with it.
 */
static bool retry_when_bytes_move(struct shim_sock *s, int fd, enum shim_reason reason)
{
	bool quiet = !s->rx_tcp_bytes && !s->tx_tcp_bytes && s->tx_dir == SHIM_DIR_TCP &&
		     s->rx_dir == SHIM_DIR_TCP && !s->chan;

	if (!quiet || s->await_bytes_used ||
	    (reason != SHIM_REASON_PEER_NO_SHIM && reason != SHIM_REASON_TIMEOUT && reason != SHIM_REASON_CM_TIMEOUT))
		return false;
	s->await_bytes_used = true;
	s->phase = SHIM_PHASE_IDLE;
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.deferred", fd, &s->tuple, reason, "\"role\":\"%s\"",
		   shim_role_name(s->role));
	return true;
}

void shim_upgrade_fail(struct shim_sock *s, int fd, enum shim_reason reason)
{
	if (s->xport && s->xport->abandon)
		s->xport->abandon(s);
	shim_upgrade_wake_close(s);
	if (retry_when_bytes_move(s, fd, reason))
		return;
	s->phase = SHIM_PHASE_FAILED;
	s->reason = reason;
	if (s->closing) {
		/* The program closed the connection mid-handshake: no failure,
		 * the connection simply ended before it could move. */
		SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.closed", fd, &s->tuple, reason, "\"role\":\"%s\"",
			   shim_role_name(s->role));
		return;
	}
	shim_stats_count(reason);
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.fail", fd, &s->tuple, reason, "\"role\":\"%s\"",
		   shim_role_name(s->role));
	if (shim_cfg.shadow) {
		/* What shadow mode is for: why this one would not have moved. */
		s->shadowed = true;
		shim_stats_count(SHIM_REASON_SHADOW);
		SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.shadow", fd, &s->tuple, reason,
			   "\"role\":\"%s\",\"transport\":null,\"proved\":false", shim_role_name(s->role));
	}
	/* Nothing moved yet: the data path can go straight to the kernel again
	 * (not in an A/B test: the arm's round trips are counted by it). */
	if (s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP && !s->chan && !s->ab_arm)
		__atomic_store_n(&s->intercept, false, __ATOMIC_RELAXED);
	shim_sockstat_sync(s);
}

void shim_upgrade_fail_for_good(struct shim_sock *s, int fd, enum shim_reason reason)
{
	s->await_bytes_used = true;
	shim_upgrade_fail(s, fd, reason);
}

void shim_upgrade_shadow(struct shim_sock *s, int fd, enum shim_transport kind)
{
	if (s->xport && s->xport->abandon)
		s->xport->abandon(s);
	shim_upgrade_wake_close(s);
	s->await_bytes_used = true; /* no second attempt: it would end here again */
	s->phase = SHIM_PHASE_FAILED;
	s->reason = SHIM_REASON_SHADOW;
	s->shadowed = true;
	shim_stats_count(SHIM_REASON_SHADOW);
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.shadow", fd, &s->tuple, SHIM_REASON_SHADOW,
		   "\"role\":\"%s\",\"transport\":\"%s\",\"proved\":true", shim_role_name(s->role),
		   shim_transport_name(kind));
	if (s->tx_dir == SHIM_DIR_TCP && s->rx_dir == SHIM_DIR_TCP && !s->chan && !s->ab_arm)
		__atomic_store_n(&s->intercept, false, __ATOMIC_RELAXED);
	shim_sockstat_sync(s);
}

/* ---- services for the transports' negotiations ---- */

void shim_upgrade_negotiating(struct shim_sock *s, void *neg)
{
	s->neg = neg;
	s->phase = SHIM_PHASE_NEGOTIATING;
	shim_sockstat_sync(s);
}

void shim_upgrade_committing(struct shim_sock *s)
{
	s->phase = SHIM_PHASE_COMMITTING;
}

void shim_upgrade_done(struct shim_sock *s)
{
	s->phase = SHIM_PHASE_DONE;
	shim_upgrade_wake_close(s);
	shim_sockstat_sync(s);
}

int shim_upgrade_new_nonce(uint8_t nonce[SHIM_NONCE_LEN])
{
	return shim_nonce_draw(nonce, SHIM_NONCE_LEN) == 0 ? 0 : -EIO;
}

bool shim_upgrade_retry_later(struct shim_sock *s, unsigned long long now)
{
	if (now >= s->deadline_ns)
		return false;
	s->retry_delay_ns = s->retry_delay_ns ? s->retry_delay_ns * 2 : RETRY_FIRST_NS;
	if (s->retry_delay_ns > RETRY_MAX_NS)
		s->retry_delay_ns = RETRY_MAX_NS;
	s->next_try_ns = now + s->retry_delay_ns;
	return true;
}

void shim_upgrade_arm_deadline(struct shim_sock *s, unsigned long long now)
{
	s->deadline_ns = now + (unsigned long long)shim_cfg.upgrade_timeout_ms * 1000000ull;
}

bool shim_upgrade_stoppable(const struct shim_sock *s)
{
	return s->phase == SHIM_PHASE_NEGOTIATING ||
	       (s->phase == SHIM_PHASE_COMMITTING && s->xport && s->xport->stop_peer);
}

bool shim_upgrade_holds_chan(const struct shim_sock *s)
{
	return s->neg && s->xport && s->xport->neg_is_chan;
}

/* Our direction moves to the channel: SWITCH frame in-band at tx_tcp_bytes. */
void shim_upgrade_switch_tx(struct shim_sock *s, int fd)
{
	struct shim_frame_switch frame = { .type = SHIM_FRAME_SWITCH };

	memcpy(frame.nonce, s->tx_nonce, SHIM_NONCE_LEN);
	/* From here TCP carries one-byte bells: Nagle would hold one back
	 * behind the peer's delayed ACK (40 ms). The program still reads its
	 * own TCP_NODELAY setting (sock.c); one that set it already needs
	 * no second call. */
	int one = 1;

	if (!s->app_nodelay)
		REAL(setsockopt)(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	s->tx_dir = SHIM_DIR_CHAN;
	if (unlikely(shim_cfg.test_stamps))
		s->stamp_tx_ns = shim_now_ns();
	/* Test-only (faults.h, switch_late): the peer learned our offset
	 * (SWITCH_AT) and waits there for a frame that comes late. */
	if (unlikely(shim_fault_hit(SHIM_FAULT_SWITCH_LATE, fd, &s->tuple, "switch")))
		shim_fault_sleep_ms(SHIM_FAULT_SWITCH_LATE_MS);
	shim_frames_queue(s, fd, &frame, sizeof(frame));
	shim_sockstat_sync(s);
	SHIM_TRACE(SHIM_TRACE_INFO, "tx.switch", fd, &s->tuple, SHIM_REASON_UPGRADED,
		   "\"transport\":\"%s\",\"offset\":%llu", shim_transport_name(s->chan->ops->kind),
		   (unsigned long long)s->tx_tcp_bytes);
}

/* The peer's direction moves at offset: everything before it stays TCP data. */
int shim_upgrade_learn_rx_switch(struct shim_sock *s, int fd, uint64_t offset)
{
	if (s->rx_tcp_bytes > offset) {
		SHIM_TRACE(SHIM_TRACE_ERROR, "rx.switch_behind", fd, &s->tuple, SHIM_REASON_HANDSHAKE_MALFORMED,
			   "\"offset\":%llu,\"read\":%llu", (unsigned long long)offset,
			   (unsigned long long)s->rx_tcp_bytes);
		return -EPROTO;
	}
	s->rx_switch_known = true;
	s->rx_switch_at = offset;
	if (s->rx_tcp_bytes == offset)
		s->rx_dir = SHIM_DIR_SWITCHING;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "rx.switch_at", fd, &s->tuple, SHIM_REASON_NONE, "\"offset\":%llu",
		   (unsigned long long)offset);
	return 0;
}

/*
 * After a fork found the connection idle, both processes hold it, and the
 * other may have carried bytes this one never counted: a SWITCH offset from
 * our counts would then name the wrong byte. The kernel's counts (whichever
 * process did the I/O) must match ours.
 */
static bool counts_are_ours(const struct shim_sock *s, int fd)
{
	uint64_t written, read;

	return shim_stream_position(fd, &written, &read) == 0 && written == s->tx_tcp_bytes &&
	       read == s->rx_tcp_bytes;
}

static void upgrade_start(struct shim_sock *s, int fd, unsigned long long now)
{
	enum shim_reason why = SHIM_REASON_NONE;
	const struct shim_transport_type *x;

	if (s->forked_idle && !counts_are_ours(s, fd)) {
		shim_upgrade_fail_for_good(s, fd, SHIM_REASON_FORKED);
		return;
	}
	/* A peer's file is stuck in its release: until it moves, no peer
	 * gets a new way to pass us more (reaper.h). */
	if (shim_reap_jammed()) {
		shim_upgrade_fail(s, fd, SHIM_REASON_REAPER_JAMMED);
		return;
	}
	x = shim_transport_pick(&s->tuple, &why);
	if (!x) {
		shim_upgrade_fail(s, fd, why);
		return;
	}
	/* Shadow mode's cuts are in the shm and RDMA handshakes (shm_neg.c,
	 * rdma_setup.c); a transport without one is not run at all, so
	 * nothing can switch. */
	if (shim_cfg.shadow && x->kind != SHIM_TRANSPORT_SHM && x->kind != SHIM_TRANSPORT_RDMA) {
		s->shadowed = true;
		SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.shadow", fd, &s->tuple, SHIM_REASON_SHADOW,
			   "\"role\":\"%s\",\"transport\":\"%s\",\"proved\":false", shim_role_name(s->role),
			   shim_transport_name(x->kind));
		s->await_bytes_used = true;
		s->phase = SHIM_PHASE_FAILED;
		s->reason = SHIM_REASON_SHADOW;
		shim_stats_count(SHIM_REASON_SHADOW);
		shim_sockstat_sync(s);
		return;
	}
	s->xport = x;
	s->neg_fd = fd;
	s->neg_steps++;
	if (unlikely(shim_cfg.test_stamps) && !s->stamp_start_ns)
		s->stamp_start_ns = now;
	x->start(s, fd, now);
}

/* A nonblocking connect finished once the kernel knows the peer. */
static bool connected(struct shim_sock *s, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (s->state != SHIM_STATE_CONNECTING)
		return true;
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return false;
	s->state = SHIM_STATE_TCP;
	return true;
}

/* Why no handshake may run in this process any more (NONE: they may). */
static enum shim_reason upgrades_barred = SHIM_REASON_NONE;

void shim_upgrade_bar(enum shim_reason reason)
{
	/* Relaxed: a handshake step that misses it by a moment is one the
	 * program's own thread ordered before its seccomp call. */
	__atomic_store_n(&upgrades_barred, reason, __ATOMIC_RELAXED);
}

bool shim_upgrade_barred(void)
{
	return __atomic_load_n(&upgrades_barred, __ATOMIC_RELAXED) != SHIM_REASON_NONE;
}

/* The peer may be committing and the transport can stop it. */
static bool peer_stoppable(const struct shim_sock *s)
{
	return s->phase == SHIM_PHASE_COMMITTING && s->xport && s->xport->stop_peer;
}

int shim_upgrade_pin_tcp(struct shim_sock *s, int fd, enum shim_reason reason)
{
	s->pinned = true;
	s->neg_steps++;
	if (peer_stoppable(s)) {
		s->xport->stop_peer(s, fd);
	} else if (!shim_upgrade_settled(s)) {
		shim_upgrade_fail_for_good(s, fd, reason);
	}
	if (s->tx_dir != SHIM_DIR_TCP || s->rx_dir != SHIM_DIR_TCP || s->rx_switch_known ||
	    (s->phase == SHIM_PHASE_COMMITTING && !peer_stoppable(s))) {
		SHIM_TRACE(SHIM_TRACE_WARN, "upgrade.pin_late", fd, &s->tuple, reason, "\"tx\":%d,\"rx\":%d",
			   s->tx_dir, s->rx_dir);
		return -EBUSY;
	}
	return 0;
}

/*
 * After a fork both processes would hold the handshake's state and its
 * rendezvous; the one that drives it on switches the connection under the
 * other, which then reads the peer's SWITCH frame as data. So before the
 * fork: a handshake nobody committed to ends (both copies stay on TCP, the
 * peer sees the rendezvous close), and one the peer may be committing is
 * stopped, which settles it in this step (the peer's offset is read now or
 * never comes; PROTOCOL.md). A transport that can not stop its peer's
 * commit leaves it to its own fork rules (rdma.h: a child never uses it).
 */
void shim_upgrade_settle_for_fork(struct shim_sock *s, int fd)
{
	/* Its wake fd is an epoll set the child would share with us. */
	shim_upgrade_wake_close(s);
	if (s->phase == SHIM_PHASE_NEGOTIATING) {
		/* No second attempt: either copy could make it. */
		shim_upgrade_fail_for_good(s, fd, SHIM_REASON_FORKED);
	} else if (peer_stoppable(s)) {
		SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.settle_fork", fd, &s->tuple, SHIM_REASON_FORKED,
			   "\"role\":\"%s\"", shim_role_name(s->role));
		s->xport->stop_peer(s, fd);
	}
}

void shim_upgrade_stop_commit(struct shim_sock *s, int fd)
{
	s->neg_steps++;
	if (s->phase == SHIM_PHASE_COMMITTING && s->xport && s->xport->stop_commit)
		s->xport->stop_commit(s, fd);
}

void shim_upgrade_stop_for_close(struct shim_sock *s, int fd)
{
	s->closing = true;
	s->neg_steps++;
	/* Nobody committed (or all is settled): the release ends the
	 * negotiation, and without it the peer stays on TCP. A transport
	 * without stop_peer stops at its release. */
	if (peer_stoppable(s))
		s->xport->stop_peer(s, fd);
}

void shim_upgrade_progress(struct shim_sock *s, int fd)
{
	unsigned long long now;

	if (shim_upgrade_settled(s))
		return;
	now = shim_now_ns();
	/* A short connection never pays for a handshake, nor for a system call
	 * here: an idle one starts once it is RDMASHIM_UPGRADE_AFTER_MS old
	 * (both ends use the same rule, so they start close together). */
	if (s->phase == SHIM_PHASE_IDLE && !shim_upgrade_due(s, now))
		return;
	if (!connected(s, fd))
		return;
	enum shim_reason barred = __atomic_load_n(&upgrades_barred, __ATOMIC_RELAXED);

	if (unlikely(barred != SHIM_REASON_NONE) && s->phase != SHIM_PHASE_COMMITTING) {
		/* Nobody committed: end it without another system call that a
		 * sandbox might punish (closing the negotiation's fds is all). */
		shim_upgrade_fail_for_good(s, fd, barred);
		return;
	}
	switch (s->phase) {
	case SHIM_PHASE_IDLE:
		/* Another thread is in the kernel's own read of this
		 * connection (io_rx.c, recv_raw), which would take a frame as
		 * data: the next call starts it. A second attempt waits for
		 * the first byte (retry_when_bytes_move()). */
		if (s->raw_reads)
			break;
		/* A registration of the program's is still the kernel's,
		 * under the program's data (io/epoll_young.c): a wait could
		 * not tell the channel's readiness from it. The data call
		 * that finds the upgrade due takes it over first; one that
		 * could not left the connection on TCP for good. */
		if (__atomic_load_n(&s->ep_young_set, __ATOMIC_RELAXED))
			break;
		if (!s->await_bytes_used || s->rx_tcp_bytes || s->tx_tcp_bytes)
			upgrade_start(s, fd, now);
		break;
	case SHIM_PHASE_NEGOTIATING:
	case SHIM_PHASE_COMMITTING:
		s->neg_steps++;
		s->xport->progress(s, fd, now);
		break;
	case SHIM_PHASE_DONE:
	case SHIM_PHASE_FAILED:
		break;
	}
}
