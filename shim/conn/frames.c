/* In-band frames; see frames.h and wire.h. */
#include "frames.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "msgstamps.h"
#include "real.h"
#include "sockstat.h"
#include "stats.h"
#include "trace.h"
#include "transport.h"
#include "wire.h"

/* Our RETURN frame and its bytes (handback.c), queued ahead of tcp_out:
 * it was queued when tcp_out was empty, so no frame of tcp_out is split. */
static int flush_return(struct shim_sock *s, int fd)
{
	while (s->fo_ret_off < s->fo_ret_len) {
		ssize_t n = REAL(send)(fd, s->fo_ret + s->fo_ret_off, s->fo_ret_len - s->fo_ret_off,
				       MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
		s->fo_ret_off += (size_t)n;
	}
	free(s->fo_ret);
	s->fo_ret = NULL;
	s->fo_ret_queued = false;
	return 0;
}

static int flush_tcp(struct shim_sock *s, int fd)
{
	if (s->fo_ret_queued) {
		int rc = flush_return(s, fd);

		if (rc < 0)
			return rc;
	}
	while (s->tcp_out_len) {
		ssize_t n = REAL(send)(fd, s->tcp_out, s->tcp_out_len, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
		memmove(s->tcp_out, s->tcp_out + n, s->tcp_out_len - (size_t)n);
		s->tcp_out_len -= (size_t)n;
	}
	return 0;
}

int shim_frames_flush(struct shim_sock *s, int fd)
{
	int rc;

	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	rc = flush_tcp(s, fd);
	SHIM_MSGSTAMP_MARK(SHIM_MSG_FRAMES);
	return rc;
}

int shim_frames_queue(struct shim_sock *s, int fd, const void *frame, size_t len)
{
	const uint8_t *bytes = frame;

	/* A bell only where our direction carries frames: behind our RESUME
	 * (a failover) the bytes are plain again, and a bell would be read as
	 * data. The peer, failed over too, waits on TCP, not for bells. */
	if (len == 1 && (bytes[0] == SHIM_FRAME_DATA_BELL || bytes[0] == SHIM_FRAME_SPACE_BELL) &&
	    (s->tx_dir != SHIM_DIR_CHAN || s->fo_started))
		return s->tcp_out_len ? shim_frames_flush(s, fd) : 0;
	/* One waiting bell of a kind wakes the peer as well as two would. */
	if (len == 1 && memchr(s->tcp_out, bytes[0], s->tcp_out_len))
		return shim_frames_flush(s, fd);
	if (s->tcp_out_len + len > sizeof(s->tcp_out))
		return -ENOBUFS;
	memcpy(s->tcp_out + s->tcp_out_len, frame, len);
	s->tcp_out_len += len;
	return shim_frames_flush(s, fd);
}

void shim_frames_drop_failover(struct shim_sock *s)
{
	free(s->fo_replay);
	s->fo_replay = NULL;
	free(s->fo_ret);
	s->fo_ret = NULL;
	s->fo_ret_queued = false;
	free(s->fo_back);
	s->fo_back = NULL;
}

void shim_frames_abort(struct shim_sock *s, int fd, enum shim_reason reason, const char *what)
{
	if (s->aborted)
		return;
	shim_stats_count(reason);
	SHIM_TRACE(SHIM_TRACE_ERROR, "conn.abort", fd, &s->tuple, reason, "\"what\":\"%s\",\"tx\":%d,\"rx\":%d",
		   what, s->tx_dir, s->rx_dir);
	s->aborted = true;
	if (s->chan && s->chan->ops->fail)
		s->chan->ops->fail(s->chan);
	s->fo_started = true;
	s->fo_tx_done = true;
	shim_sockstat_sync(s);
	shim_frames_drop_failover(s);
	s->tcp_out_len = 0;
	s->bells_owed = 0;
	s->bells_early = 0;
	s->rx_tcp_eof = true;
	s->peer_gone_told = true;
	REAL(shutdown)(fd, SHUT_RDWR);
}

static bool is_bell(uint8_t b)
{
	return b == SHIM_FRAME_DATA_BELL || b == SHIM_FRAME_SPACE_BELL;
}

static void drain_eof(struct shim_sock *s)
{
	s->rx_tcp_eof = true;
	s->bells_owed = 0;
	s->bells_early = 0;
}

/* The peer sent its FIN (or the connection failed): nothing more comes. */
static bool peer_closed(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return REAL(poll)(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Takes the peer's RESUME frame if all of it is there (peeked first: the
 * plain bytes right behind it are the program's, not ours to read). */
static void take_resume(struct shim_sock *s, int fd)
{
	struct shim_frame_resume frame = { 0 };
	ssize_t n = REAL(recv)(fd, &frame, sizeof(frame), MSG_DONTWAIT | MSG_PEEK);

	if (n < (ssize_t)sizeof(frame)) {
		/* The rest is on its way, unless the peer already closed: a
		 * part of a frame with nothing to follow would be peeked again
		 * at every readiness report, for good. */
		if (n > 0 && peer_closed(fd)) {
			SHIM_TRACE(SHIM_TRACE_ERROR, "frames.bad", fd, &s->tuple, SHIM_REASON_PEER_VIOLATION,
				   "\"byte\":%u,\"len\":%zd", SHIM_FRAME_RESUME, n);
			shim_frames_abort(s, fd, SHIM_REASON_PEER_VIOLATION, "resume_truncated");
		}
		return;
	}
	if (frame.flags & ~SHIM_RESUME_F_TX_FROM) {
		SHIM_TRACE(SHIM_TRACE_ERROR, "frames.bad", fd, &s->tuple, SHIM_REASON_PEER_VIOLATION,
			   "\"byte\":%u,\"flags\":%u", SHIM_FRAME_RESUME, frame.flags);
		shim_frames_abort(s, fd, SHIM_REASON_PEER_VIOLATION, "resume_flags");
		return;
	}
	if (REAL(recv)(fd, &frame, sizeof(frame), MSG_DONTWAIT) != (ssize_t)sizeof(frame)) {
		drain_eof(s);
		return;
	}
	s->fo_peer_rx_offset = be64toh(frame.rx_offset);
	s->fo_peer_from_known = frame.flags & SHIM_RESUME_F_TX_FROM;
	s->fo_peer_tx_from = s->fo_peer_from_known ? be64toh(frame.tx_from) : 0;
	s->fo_peer_known = true;
	if (s->fo_peer_from_known)
		SHIM_TRACE(SHIM_TRACE_WARN, "failover.peer_resume", fd, &s->tuple, SHIM_REASON_CHAN_FAILED,
			   "\"peer_rx\":%llu,\"peer_from\":%llu", (unsigned long long)s->fo_peer_rx_offset,
			   (unsigned long long)s->fo_peer_tx_from);
	else
		SHIM_TRACE(SHIM_TRACE_WARN, "failover.peer_resume", fd, &s->tuple, SHIM_REASON_CHAN_FAILED,
			   "\"peer_rx\":%llu", (unsigned long long)s->fo_peer_rx_offset);
}

/*
 * The peer's RETURN header (wire.h), if all of it is there: checked, taken
 * off the stream, and room made for its bytes. Before our failover only
 * (behind our RESUME our replay would already be out, and the bytes could
 * not go in front of it), once, and bounded: else a violation.
 */
static void take_return(struct shim_sock *s, int fd)
{
	struct shim_frame_return frame = { 0 };
	ssize_t n = REAL(recv)(fd, &frame, sizeof(frame), MSG_DONTWAIT | MSG_PEEK);
	uint64_t len;

	if (n < (ssize_t)sizeof(frame))
		return; /* the rest is on its way */
	len = be64toh(frame.length);
	if (!len || len > SHIM_FRAME_RETURN_MAX || s->fo_back || s->fo_started) {
		SHIM_TRACE(SHIM_TRACE_ERROR, "frames.bad", fd, &s->tuple, SHIM_REASON_PEER_VIOLATION,
			   "\"byte\":%u,\"length\":%llu", SHIM_FRAME_RETURN, (unsigned long long)len);
		shim_frames_abort(s, fd, SHIM_REASON_PEER_VIOLATION, "return");
		return;
	}
	if (REAL(recv)(fd, &frame, sizeof(frame), MSG_DONTWAIT) != (ssize_t)sizeof(frame)) {
		drain_eof(s);
		return;
	}
	s->fo_back = malloc((size_t)len);
	if (!s->fo_back) {
		shim_frames_abort(s, fd, SHIM_REASON_RESUME_FAILED, "no_memory");
		return;
	}
	s->fo_back_len = (size_t)len;
	s->fo_back_got = 0;
	SHIM_TRACE(SHIM_TRACE_INFO, "failover.peer_return", fd, &s->tuple, SHIM_REASON_HANDED_OFF,
		   "\"bytes\":%zu", s->fo_back_len);
}

/* The bytes of the peer's RETURN, as they come (nothing else is behind the
 * header until they all are). 1: all there; 0: more to come; -1: the
 * stream ended or failed first. */
static int take_returned(struct shim_sock *s, int fd)
{
	while (s->fo_back_got < s->fo_back_len) {
		ssize_t n = REAL(recv)(fd, s->fo_back + s->fo_back_got, s->fo_back_len - s->fo_back_got,
				       MSG_DONTWAIT);

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			drain_eof(s);
			return -1;
		}
		if (n < 0)
			return 0;
		s->fo_back_got += (size_t)n;
	}
	return 1;
}

/*
 * How many bytes of ours the peer left unread, 0 unless it died with them.
 * The peer's TCP ended while our direction still ran on the channel, with
 * bytes of ours it never read, and it never closed its end of the channel:
 * it died (kill -9, a crash) without a close of ours to run. Its kernel
 * found no unread bytes in the socket (they were in the ring) and sent FIN;
 * over TCP the bytes would have been in that socket, and the kernel would
 * have reset the connection. A closing peer with bytes unread resets by
 * itself (close.c), and one that read everything marks the channel closed.
 */
static size_t peer_died_unread(const struct shim_sock *s)
{
	const struct shim_chan *ch = s->chan;

	if (!ch || s->tx_dir != SHIM_DIR_CHAN || s->fo_started || !ch->ops->tx_unread || ch->ops->peer_rx_gone(ch))
		return 0;
	return ch->ops->tx_unread(ch);
}

/*
 * A reset that came after the peer ended the channel cleanly: its end of
 * our stream came on the channel, and it closed its reading side having
 * read every byte of ours (an abortive close, its own or its program's
 * SO_LINGER 0, sends no such end: close.c). Nothing of the program's was
 * left for its kernel to reset the connection over, so the reset answers
 * a frame of ours that reached its closed socket: a bell it could not
 * know was coming (rdma: a producer takes an arm the consumer can not see
 * taken). Over TCP the program would read EOF there, and it does: later
 * sends still fail as after a peer's close (io_tx.c).
 */
static bool reset_answers_a_frame(const struct shim_sock *s, int fd)
{
	struct shim_chan *ch = s->chan;

	if (!ch || s->rx_dir != SHIM_DIR_CHAN || s->tx_dir != SHIM_DIR_CHAN || s->fo_started ||
	    !ch->ops->peer_ended_clean || !ch->ops->peer_ended_clean(ch))
		return false;
	SHIM_TRACE(SHIM_TRACE_INFO, "conn.reset_after_clean_end", fd, &s->tuple, SHIM_REASON_NONE, "\"bells\":%u",
		   s->rx_bells);
	return true;
}

/* Takes the bells at the head of the n bytes peeked into buf off fd.
 * Returns how many, or -1 when the stream did not give them back. */
static ssize_t take_bells(int fd, uint8_t *buf, ssize_t n)
{
	ssize_t bells = 0;

	while (bells < n && is_bell(buf[bells]))
		bells++;
	if (bells && REAL(recv)(fd, buf, (size_t)bells, MSG_DONTWAIT) != bells)
		return -1;
	return bells;
}

static void drain_tcp(struct shim_sock *s, int fd)
{
	uint8_t scratch[256];

	while (!s->fo_peer_known && !s->rx_tcp_eof) {
		if (s->fo_back && take_returned(s, fd) <= 0)
			return;
		ssize_t n = REAL(recv)(fd, scratch, sizeof(scratch), MSG_DONTWAIT | MSG_PEEK), bells;

		if (n == 0) {
			size_t unread = peer_died_unread(s);

			if (unread) {
				SHIM_TRACE(SHIM_TRACE_WARN, "conn.peer_died_unread", fd, &s->tuple, SHIM_REASON_NONE,
					   "\"unread\":%zu", unread);
				s->rx_tcp_reset = true;
				s->rx_reset_seen = true;
			}
			drain_eof(s);
			return;
		}
		if (n < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				s->rx_tcp_reset |= errno == ECONNRESET && !reset_answers_a_frame(s, fd);
				s->rx_reset_seen |= s->rx_tcp_reset;
				drain_eof(s); /* reset: the peer is gone */
			}
			return;
		}
		bells = take_bells(fd, scratch, n);
		if (bells < 0) {
			drain_eof(s);
			return;
		}
		s->rx_bells += (unsigned)bells; /* wraps: only compared for change (io_tx.c) */
		/* A wait drains the bells the kernel woke it for before its
		 * disarm learns that the peer took the arm (wait.c, epoll.c):
		 * such a bell is kept as early, and that disarm owes nothing. */
		if ((size_t)bells >= s->bells_owed) {
			if (s->bells_early < UINT_MAX / 2)
				s->bells_early += (unsigned)bells - s->bells_owed;
			s->bells_owed = 0;
		} else {
			s->bells_owed -= (unsigned)bells;
		}
		if (bells == n) {
			if (n < (ssize_t)sizeof(scratch))
				return;
			continue;
		}
		/* A RESUME only where the channel can fail over: on one that can
		 * not (shm), it is a lie, and taking it would stop the drain. */
		if (scratch[bells] == SHIM_FRAME_RESUME && s->chan && s->chan->ops->fail) {
			take_resume(s, fd);
			return;
		}
		/* A RETURN only where the peer's wire version has it. */
		if (scratch[bells] == SHIM_FRAME_RETURN && s->chan && s->chan->ops->fail &&
		    s->chan->ops->takes_return) {
			take_return(s, fd);
			if (!s->fo_back || s->rx_tcp_eof)
				return; /* ended, or its header is not all there */
			continue;
		}
		/* Not a frame of ours where one must start: someone else writes
		 * into this stream. Reset rather than guess. */
		SHIM_TRACE(SHIM_TRACE_ERROR, "frames.bad", fd, &s->tuple, SHIM_REASON_PEER_VIOLATION,
			   "\"byte\":%u", scratch[bells]);
		shim_frames_abort(s, fd, SHIM_REASON_PEER_VIOLATION, "frame");
		return;
	}
}

void shim_frames_drain(struct shim_sock *s, int fd)
{
	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	drain_tcp(s, fd);
	SHIM_MSGSTAMP_MARK(SHIM_MSG_DRAIN);
}

size_t shim_frames_take_late_bells(int fd)
{
	uint8_t scratch[256];
	ssize_t bells = take_bells(fd, scratch, REAL(recv)(fd, scratch, sizeof(scratch), MSG_DONTWAIT | MSG_PEEK));

	return bells > 0 ? (size_t)bells : 0;
}

void shim_frames_absorb(struct shim_sock *s, const uint8_t *bytes, size_t len)
{
	size_t want = sizeof(struct shim_frame_switch) - s->rx_frame_len;
	size_t take = len < want ? len : want;

	memcpy(s->rx_frame + s->rx_frame_len, bytes, take);
	s->rx_frame_len += take;
	/* Bells may follow the SWITCH frame: nothing to keep. A RESUME can
	 * too (the channel failed at once), and the plain bytes after it
	 * would be lost here: say so loudly rather than deliver a hole. */
	for (size_t i = take; i < len; i++) {
		if (!is_bell(bytes[i])) {
			s->fo_absorb_bad = true;
			break;
		}
	}
}

static struct shim_frame_switch expected_switch(const struct shim_sock *s)
{
	struct shim_frame_switch want = { .type = SHIM_FRAME_SWITCH };

	memcpy(want.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	return want;
}

bool shim_frames_may_be_switch(const struct shim_sock *s, const uint8_t *bytes, size_t len)
{
	struct shim_frame_switch want = expected_switch(s);
	size_t room = sizeof(want) - s->rx_frame_len;

	return memcmp(bytes, (const uint8_t *)&want + s->rx_frame_len, len < room ? len : room) == 0;
}

int shim_frames_read_switch(struct shim_sock *s, int fd)
{
	struct shim_frame_switch want = expected_switch(s);
	const uint8_t *w = (const uint8_t *)&want;

	/* Bytes already absorbed past the offset must be ours. */
	if (memcmp(s->rx_frame, w, s->rx_frame_len) != 0)
		return -EPROTO;
	while (s->rx_frame_len < sizeof(want)) {
		uint8_t got[sizeof(want)];
		size_t need = sizeof(want) - s->rx_frame_len;
		ssize_t n = REAL(recv)(fd, got, need, MSG_DONTWAIT | MSG_PEEK);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -ECONNRESET;
		/* Peeked first: bytes that are not our frame stay in the
		 * stream, so the caller can still deliver them (a plain peer,
		 * or a peer that never got our nonce, wrote them). */
		if (memcmp(got, w + s->rx_frame_len, (size_t)n) != 0)
			return -EPROTO;
		n = REAL(recv)(fd, s->rx_frame + s->rx_frame_len, (size_t)n, MSG_DONTWAIT);
		if (n <= 0)
			return -ECONNRESET;
		s->rx_frame_len += (size_t)n;
	}
	return 1;
}
