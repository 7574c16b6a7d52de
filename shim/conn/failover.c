/*
 * Failover to TCP after a side channel failed; see failover.h.
 *
 * Each end, on noticing the failure (a completion error, a broken QP, the
 * peer's DREQ, or the peer's RESUME frame), stops its channel for good and
 * queues RESUME(rx_offset): the bytes the channel brought it, which it will
 * still deliver from its ring. On the peer's RESUME(n) it sends, as plain
 * bytes right behind its own RESUME, its stream from offset n on (still in
 * its staging copy), and from then on writes the program's bytes to TCP.
 * Its receive side delivers what the ring holds, then reads TCP plainly.
 *
 * Our RESUME needs our sending direction on the channel: a TCP direction
 * carries frames only after its switch. Our receiving direction may still
 * be on TCP (we have not read up to the peer's SWITCH frame yet): the ring
 * then holds what came after it, and the peer's RESUME follows its SWITCH
 * frame, so both are read in stream order. When our sending side never
 * switched (it was shut first, the channel died before our SWITCH_AT went
 * out, or we never got the peer's proof), the peer never got the proof it
 * needs to post a byte (PROTOCOL.md, "Proof"): it knows it sent nothing
 * on the channel and replays from 0 without waiting for our RESUME.
 */
#include "failover.h"

#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include "frames.h"
#include "real.h"
#include "sockstat.h"
#include "stats.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"
#include "wire.h"

/* A failover we chose (the channel did not pay) is news, not a warning;
 * the peer's end can not tell and reports a failed channel. */
static enum shim_trace_level fo_level(const struct shim_sock *s)
{
	return s->fo_why == SHIM_REASON_UNPAID ? SHIM_TRACE_INFO : SHIM_TRACE_WARN;
}

static enum shim_reason fo_reason(const struct shim_sock *s)
{
	return s->fo_why != SHIM_REASON_NONE ? s->fo_why : SHIM_REASON_CHAN_FAILED;
}

static void reset(struct shim_sock *s, int fd, const char *why)
{
	shim_frames_abort(s, fd, SHIM_REASON_RESUME_FAILED, why);
}

/* What our RESUME names (or would have, had our direction switched):
 * final once the channel is stopped. */
static uint64_t note_rx_said(struct shim_sock *s, struct shim_chan *ch)
{
	s->fo_rx_said = ch->ops->rx_offset ? ch->ops->rx_offset(ch) : 0;
	s->fo_rx_said_known = ch->ops->rx_offset != NULL;
	return s->fo_rx_said;
}

/*
 * The peer said where its bytes behind its RESUME start (wire.h,
 * SHIM_RESUME_F_TX_FROM), and it is not where our count stopped: a
 * completion it had acknowledged never reached our count (or the reverse),
 * so the next byte on TCP is not the stream's next one. Nothing of them
 * has been read: the connection is reset, never given a byte out of place.
 * true: reset.
 */
static bool replay_misplaced(struct shim_sock *s, int fd)
{
	if (s->aborted || !s->fo_peer_known || !s->fo_peer_from_known || !s->fo_rx_said_known ||
	    s->fo_peer_tx_from == s->fo_rx_said)
		return false;
	SHIM_TRACE(SHIM_TRACE_ERROR, "failover.gap", fd, &s->tuple, SHIM_REASON_RESUME_FAILED,
		   "\"rx\":%llu,\"peer_from\":%llu", (unsigned long long)s->fo_rx_said,
		   (unsigned long long)s->fo_peer_tx_from);
	reset(s, fd, s->fo_peer_tx_from > s->fo_rx_said ? "replay_gap" : "replay_overlap");
	return true;
}

static void start(struct shim_sock *s, int fd)
{
	struct shim_chan *ch = s->chan;
	struct shim_frame_resume frame = { .type = SHIM_FRAME_RESUME };
	uint64_t rx_offset;

	if (s->tx_dir != SHIM_DIR_CHAN) {
		/* Our direction never switched, so the peer never read its
		 * proof from us and never sent a byte on the channel: it
		 * replays from 0 without our RESUME (fo_peer_rx_nothing). We
		 * still take its RESUME if our rx switched. */
		ch->ops->fail(ch);
		note_rx_said(s, ch);
		s->fo_started = true;
		s->fo_tx_done = true;
		shim_stats_count(SHIM_REASON_CHAN_FAILED);
		shim_sockstat_sync(s);
		SHIM_TRACE(fo_level(s), "failover.start", fd, &s->tuple, fo_reason(s),
			   "\"tx_switched\":false");
		return;
	}
	if (s->fo_absorb_bad) {
		ch->ops->fail(ch);
		reset(s, fd, "frames_after_switch");
		return;
	}
	/* Stopped before reading the offset: nothing lands after it. */
	ch->ops->fail(ch);
	if (ch->ops->resume_announce && !ch->ops->resume_announce(ch)) {
		/* The peer's program closed the connection first (its end of
		 * the channel says so): our RESUME would reach a closed
		 * socket, whose kernel answers with a reset TCP would not have
		 * sent. Nothing of ours can be read there any more; our
		 * direction goes on over TCP, as towards any closed peer. */
		note_rx_said(s, ch);
		s->fo_started = true;
		s->fo_tx_done = true;
		s->fo_peer_closed = true;
		s->tx_dir = SHIM_DIR_TCP;
		shim_stats_count(SHIM_REASON_CHAN_FAILED);
		shim_sockstat_sync(s);
		SHIM_TRACE(fo_level(s), "failover.start", fd, &s->tuple, fo_reason(s), "\"peer_closed\":true");
		return;
	}
	rx_offset = note_rx_said(s, ch);
	frame.rx_offset = htobe64(rx_offset);
	/* Where our bytes behind the frame start, when we know it before the
	 * peer's RESUME: said in the frame, so that the peer checks it against
	 * its own count before it reads one of them. Decided here or never: a
	 * count learned after the frame went would start our bytes where the
	 * peer does not look for them. */
	if (!s->fo_peer_known && ch->ops->tx_offset && ch->ops->tx_offset(ch, &s->fo_implied_at))
		s->fo_offset_implied = true;
	else if (!s->fo_peer_known && s->fo_peer_rx_nothing)
		s->fo_implied_at = 0; /* we posted nothing: our bytes start at 0 */
	if (s->fo_offset_implied || (!s->fo_peer_known && s->fo_peer_rx_nothing)) {
		frame.flags = SHIM_RESUME_F_TX_FROM;
		frame.tx_from = htobe64(s->fo_implied_at);
	}
	/* The peer's direction never moved and never will (its SWITCH_AT
	 * never came, and the handshake is over): it sends no RESUME (see
	 * above, from its side), and its bytes on TCP were plain all along. */
	s->fo_peer_stays = s->rx_dir == SHIM_DIR_TCP && !s->rx_switch_known && shim_upgrade_settled(s);
	s->fo_started = true;
	shim_stats_count(SHIM_REASON_CHAN_FAILED);
	shim_sockstat_sync(s);
	SHIM_TRACE(fo_level(s), "failover.start", fd, &s->tuple, fo_reason(s),
		   "\"rx_offset\":%llu,\"peer_first\":%s,\"tx_from\":%lld", (unsigned long long)rx_offset,
		   s->fo_peer_known ? "true" : "false",
		   frame.flags & SHIM_RESUME_F_TX_FROM ? (long long)s->fo_implied_at : -1ll);
	if (shim_frames_queue(s, fd, &frame, sizeof(frame)) == -ENOBUFS)
		reset(s, fd, "frame_queue_full");
}

/* The peer told us where its receive side stopped: take what it lacks out
 * of the channel, and write to TCP from now on. */
static void take_peer_offset(struct shim_sock *s, int fd)
{
	struct shim_chan *ch = s->chan;
	struct iovec part[2];
	int n = ch->ops->tx_unreceived(ch, s->fo_peer_rx_offset, part);
	size_t len;

	if (n < 0) {
		reset(s, fd, "peer_offset_out_of_range");
		return;
	}
	if (s->fo_back && s->fo_back_got < s->fo_back_len) {
		/* Our own failover came first, in the middle of the peer's
		 * RETURN: its bytes can no longer go where they belong. */
		reset(s, fd, "return_incomplete");
		return;
	}
	/* The peer's RETURN goes first: those bytes preceded our switch. */
	size_t back = s->fo_back ? s->fo_back_len : 0;

	len = back + part[0].iov_len + (n > 1 ? part[1].iov_len : 0);
	if (len) {
		s->fo_replay = malloc(len);
		if (!s->fo_replay) {
			reset(s, fd, "no_memory");
			return;
		}
		if (back)
			memcpy(s->fo_replay, s->fo_back, back);
		memcpy(s->fo_replay + back, part[0].iov_base, part[0].iov_len);
		if (n > 1)
			memcpy(s->fo_replay + back + part[0].iov_len, part[1].iov_base, part[1].iov_len);
	}
	free(s->fo_back);
	s->fo_back = NULL;
	s->fo_replay_len = len;
	s->fo_replay_off = 0;
	s->tx_dir = SHIM_DIR_TCP;
	shim_sockstat_sync(s);
	SHIM_TRACE(fo_level(s), "failover.tx_tcp", fd, &s->tuple, fo_reason(s),
		   "\"peer_rx\":%llu,\"replay\":%zu", (unsigned long long)s->fo_peer_rx_offset, len);
}

/* Sends the replay behind our RESUME frame (never before it), then ends
 * our direction's failover: with no replay too, once the RESUME is out. */
static void flush_replay(struct shim_sock *s, int fd)
{
	if (s->fo_tx_done || s->tx_dir != SHIM_DIR_TCP || (s->tcp_out_len && shim_frames_flush(s, fd) < 0))
		return;
	while (s->fo_replay && s->fo_replay_off < s->fo_replay_len) {
		ssize_t n = REAL(send)(fd, s->fo_replay + s->fo_replay_off, s->fo_replay_len - s->fo_replay_off,
				       MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				s->fo_replay_off = s->fo_replay_len; /* the peer is gone: so is the rest */
			else
				return;
		} else {
			s->fo_replay_off += (size_t)n;
		}
	}
	free(s->fo_replay);
	s->fo_replay = NULL;
	s->fo_tx_done = true;
	/* A write side the program shut while on the channel ends here, after
	 * the last byte, as TCP's own FIN. */
	if (s->wr_shut)
		REAL(shutdown)(fd, SHUT_WR);
}

/*
 * Both directions back on TCP for good, with nothing of ours left to send
 * (RESUME, replay) or to read (the peer's RESUME was taken, the ring is
 * empty): every later byte either way is plain, and the kernel's socket
 * (queued bytes, EOF, errors, readiness) is the program's whole truth
 * again. The data path then leaves the connection to the kernel, as one
 * that never moved: a call costs a table lookup, not the lock and the
 * frame checks (a connection handed back as unpaid would otherwise pay
 * both for the rest of its life). Not while the shim keeps something the
 * kernel does not know: a reset it read under the bells and still owes
 * the program, a write after the peer's close it answered itself, a
 * shutdown or an end of stream it took on the channel's side. The channel
 * stays attached until close (close.c), and an epoll item still on its
 * switched registration is given back by the set's next look
 * (epoll_wait.c).
 */
static void leave_to_kernel(struct shim_sock *s, int fd)
{
	const int nodelay = s->app_nodelay;

	if (s->tx_dir != SHIM_DIR_TCP || s->rx_dir != SHIM_DIR_TCP || !s->fo_started ||
	    (!s->fo_peer_known && !s->fo_peer_stays) ||
	    s->fo_replay || s->tcp_out_len || s->aborted || s->rx_tcp_reset || s->rx_reset_seen ||
	    s->peer_gone_told || s->rd_shut || s->wr_shut || s->rx_tcp_eof || s->rx_switch_known || s->closing ||
	    !__atomic_load_n(&s->intercept, __ATOMIC_RELAXED) || s->ab_arm)
		return; /* an A/B arm stays counted: its calls stay the shim's */
	/* The shim set TCP_NODELAY for its bells (upgrade.c); the kernel's
	 * is the program's own again. */
	if (!nodelay)
		REAL(setsockopt)(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, sizeof(nodelay));
	__atomic_store_n(&s->intercept, false, __ATOMIC_RELAXED);
	shim_sockstat_sync(s);
	SHIM_TRACE(fo_level(s), "failover.kernel", fd, &s->tuple, fo_reason(s), NULL);
}

void shim_failover_elsewhere(struct shim_sock *s, int fd)
{
	struct shim_chan *ch = s->chan;

	if (!ch->ops->moved_elsewhere(ch))
		return;
	/* Private stops: the rings' shared words are the other process's
	 * and the peer's now. Whatever this process had queued for TCP (a
	 * bell, a frame) was inherited by the one that went back too, which
	 * sent it or dropped it there. */
	ch->ops->fail(ch);
	s->fo_started = true;
	s->fo_peer_known = true;
	s->fo_tx_done = true;
	s->fo_why = SHIM_REASON_HANDED_OFF;
	shim_frames_drop_failover(s);
	s->tcp_out_len = 0;
	s->bells_owed = 0;
	s->bells_early = 0;
	s->tx_dir = SHIM_DIR_TCP;
	s->rx_dir = SHIM_DIR_TCP;
	s->rx_switch_known = false;
	s->rx_frame_len = 0;
	s->fo_absorb_bad = false;
	shim_sockstat_sync(s);
	SHIM_TRACE(SHIM_TRACE_INFO, "failover.elsewhere", fd, &s->tuple, SHIM_REASON_HANDED_OFF, NULL);
	leave_to_kernel(s, fd);
}

void shim_failover_progress(struct shim_sock *s, int fd)
{
	struct shim_chan *ch;

	shim_failover_look_elsewhere(s, fd);
	ch = s->chan;

	if (!ch || !ch->ops->failed || (s->fo_tx_done && s->rx_dir != SHIM_DIR_CHAN))
		return;
	if (!s->fo_started) {
		if (s->tx_dir != SHIM_DIR_CHAN && s->rx_dir != SHIM_DIR_CHAN)
			return; /* not switched (yet): the upgrade code owns failures */
		if (!s->fo_peer_known && !ch->ops->failed(ch))
			return;
		start(s, fd);
		/* A reset, or a direction that never switched (the upgrade's
		 * to settle); a peer that closed first goes on below, its
		 * RESUME read and its bytes behind it the program's. */
		if (s->fo_tx_done && !s->fo_peer_closed)
			return;
	}
	if (!s->fo_peer_known && s->rx_dir == SHIM_DIR_CHAN)
		shim_frames_drain(s, fd);
	if (replay_misplaced(s, fd))
		return;
	if (s->fo_offset_implied && s->fo_peer_known && s->fo_peer_rx_offset != s->fo_implied_at) {
		/* The peer gave up bytes of ours (its own hand-back) after our
		 * direction had gone on without them: nothing can put them back
		 * in their place. */
		reset(s, fd, "peer_offset_behind");
		return;
	}
	if (!s->fo_peer_known && s->fo_offset_implied && s->tx_dir == SHIM_DIR_CHAN) {
		/* A lossless channel: the peer's RESUME can only name our own
		 * count, which our RESUME named as where our bytes start
		 * (start), so our direction need not wait for it (the frame is
		 * still read, and checked, above; the peer checks ours). */
		s->fo_peer_rx_offset = s->fo_implied_at;
		take_peer_offset(s, fd);
	}
	if (!s->fo_peer_known && !s->fo_peer_rx_nothing) {
		if (!s->fo_tx_done && s->tx_dir == SHIM_DIR_TCP)
			flush_replay(s, fd);
		if (s->fo_peer_stays)
			leave_to_kernel(s, fd);
		return;
	}
	if (s->tx_dir == SHIM_DIR_CHAN) {
		if (!s->fo_peer_known)
			s->fo_peer_rx_offset = 0;
		take_peer_offset(s, fd);
	}
	if (!s->fo_tx_done && s->tx_dir == SHIM_DIR_TCP)
		flush_replay(s, fd);
	if (s->fo_peer_known && s->rx_dir == SHIM_DIR_CHAN && !ch->ops->readable(ch)) {
		/* The ring is empty up to the offset we announced: the peer's
		 * bytes from there on follow its RESUME on TCP. */
		s->rx_dir = SHIM_DIR_TCP;
		s->rx_switch_known = false;
		/* A SHUT_RD taken while switched was the channel's alone
		 * (io_ready.c): the kernel's socket says so from here, as its
		 * poll reports (POLLIN, POLLRDHUP). */
		if (s->rd_shut)
			REAL(shutdown)(fd, SHUT_RD);
		shim_sockstat_sync(s);
		SHIM_TRACE(fo_level(s), "failover.rx_tcp", fd, &s->tuple, fo_reason(s), NULL);
	}
	leave_to_kernel(s, fd);
}

bool shim_failover_alone(struct shim_sock *s, int fd)
{
	const struct shim_chan *ch;
	bool done = true;

	pthread_mutex_lock(&s->lock);
	ch = s->chan;
	if (!s->closed && !s->aborted && ch && ch->ops->failed && (fd = shim_sock_fd_locked(s, fd)) >= 0) {
		if (s->tcp_out_len)
			shim_frames_flush(s, fd);
		shim_failover_progress(s, fd);
		if (s->fo_started)
			done = s->aborted || (s->fo_tx_done && !s->tcp_out_len);
		else
			done = s->tx_dir != SHIM_DIR_CHAN && s->rx_dir != SHIM_DIR_CHAN;
	}
	pthread_mutex_unlock(&s->lock);
	return done;
}

int shim_failover_flush(struct shim_sock *s, int fd)
{
	flush_replay(s, fd);
	if (s->fo_replay)
		return -EAGAIN;
	leave_to_kernel(s, fd);
	return 0;
}

/* Our direction goes to TCP at once, the peer's when it reads our RESUME
 * (a lossless channel only: the peer's RESUME can only name our tail). */
static int leave(struct shim_sock *s, int fd, const char *event, enum shim_reason why)
{
	struct shim_chan *ch = s->chan;

	if (!ch || !ch->ops->fail || !ch->ops->tx_offset || s->fo_started || s->aborted ||
	    s->tx_dir != SHIM_DIR_CHAN || (ch->ops->violated && ch->ops->violated(ch)))
		return -EOPNOTSUPP;
	uint64_t sent = 0;
	bool known;

	shim_stats_count(why);
	s->fo_why = why;
	/* fail settles what is in flight, so the count is known after it
	 * (unless the channel broke meanwhile: the peer's RESUME then says). */
	ch->ops->fail(ch);
	known = ch->ops->tx_offset(ch, &sent);
	SHIM_TRACE(fo_level(s), event, fd, &s->tuple, why, "\"sent\":%llu,\"known\":%s",
		   (unsigned long long)sent, known ? "true" : "false");
	shim_failover_progress(s, fd);
	return 0;
}

int shim_failover_spill(struct shim_sock *s, int fd)
{
	return leave(s, fd, "failover.spill", SHIM_REASON_RING_FULL);
}

int shim_failover_oob(struct shim_sock *s, int fd)
{
	return leave(s, fd, "failover.oob", SHIM_REASON_OOB);
}

int shim_failover_unpaid(struct shim_sock *s, int fd)
{
	return leave(s, fd, "failover.unpaid", SHIM_REASON_UNPAID);
}
