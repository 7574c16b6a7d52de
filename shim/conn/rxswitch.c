/*
 * The end of the peer's switch on our rx side: its SWITCH frame read from
 * TCP at the announced offset (frames.c), checked against our nonce. Used
 * by the data path (io/), and by a hand-back (handback.c). Under the
 * sock's lock.
 */
#include "rxswitch.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "frames.h"
#include "real.h"
#include "sockstat.h"
#include "stats.h"
#include "trace.h"
#include "upgrade.h"
#include "wire.h"

/* Bytes at the peer's switch offset that are not its frame, nothing of
 * them consumed as one, and our direction on TCP (never moved, or back
 * after a failover): the channel's peer is not the TCP peer (a squatter's
 * offset), or the TCP peer did not switch after all. They are plain. */
static bool refusable(const struct shim_sock *s)
{
	return !s->rx_frame_len && s->tx_dir == SHIM_DIR_TCP;
}

static void refuse(struct shim_sock *s, int fd)
{
	SHIM_TRACE(SHIM_TRACE_WARN, "rx.switch_refused", fd, &s->tuple, SHIM_REASON_SWITCH_MISMATCH, NULL);
	s->rx_dir = SHIM_DIR_TCP;
	s->rx_switch_known = false;
	if (!s->fo_started) {
		shim_upgrade_release(s);
		shim_upgrade_fail(s, fd, SHIM_REASON_SWITCH_MISMATCH);
		/* Still ours to watch: an epoll set may hold this fd in its
		 * switched registration until it sees it on TCP. */
		__atomic_store_n(&s->intercept, true, __ATOMIC_RELAXED);
	}
}

bool shim_rxswitch_crossed(struct shim_sock *s, int fd, const struct iovec *past, int n)
{
	uint8_t head[sizeof(struct shim_frame_switch)] = { 0 };
	size_t len = 0;

	for (int i = 0; i < n && len < sizeof(head); i++) {
		size_t take = past[i].iov_len < sizeof(head) - len ? past[i].iov_len : sizeof(head) - len;

		memcpy(head + len, past[i].iov_base, take);
		len += take;
	}
	if (!shim_frames_may_be_switch(s, head, len) && refusable(s)) {
		refuse(s, fd);
		return true;
	}
	/* The frame's start (an honest peer's), or, with our direction
	 * moved, a mismatch that shim_rxswitch_finish() then reports. */
	for (int i = 0; i < n; i++)
		shim_frames_absorb(s, past[i].iov_base, past[i].iov_len);
	return false;
}

/* 1: rx moved on (to the channel, or refused and back to TCP); 0: the
 * frame is not all there yet; -errno: the connection was reset. */
int shim_rxswitch_finish(struct shim_sock *s, int fd)
{
	int rc = shim_frames_read_switch(s, fd);

	if (rc == 1) {
		s->rx_dir = SHIM_DIR_CHAN;
		if (unlikely(shim_cfg.test_stamps))
			s->stamp_rx_ns = shim_now_ns();
		shim_sockstat_sync(s);
		SHIM_TRACE(SHIM_TRACE_INFO, "rx.switch", fd, &s->tuple, SHIM_REASON_UPGRADED,
			   "\"offset\":%llu", (unsigned long long)s->rx_switch_at);
		/* The frame proved the peer (rdma): bytes held for it go now. */
		shim_upgrade_progress(s, fd);
		return 1;
	}
	if (rc == -EPROTO && refusable(s)) {
		refuse(s, fd);
		return 1;
	}
	if (rc == -EPROTO) {
		/* Not our peer's frame: someone else wrote into this stream. */
		shim_stats_count(SHIM_REASON_SWITCH_MISMATCH);
		SHIM_TRACE(SHIM_TRACE_ERROR, "rx.switch_mismatch", fd, &s->tuple, SHIM_REASON_SWITCH_MISMATCH, NULL);
		REAL(shutdown)(fd, SHUT_RDWR);
		return -ECONNRESET;
	}
	if (rc == -ECONNRESET) {
		s->rx_tcp_eof = true;
		return 0;
	}
	return 0;
}
