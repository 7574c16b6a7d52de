/*
 * A tracked connection's record in the live stats area (core/statarea.h):
 * made when the connection is tracked, described again when its path or
 * state changes (each such place calls shim_sockstat_sync under the
 * sock's lock), counted by the data path (io_rx.c, io_tx.c), freed with the sock.
 */
#ifndef RDMASHIM_SOCKSTAT_H
#define RDMASHIM_SOCKSTAT_H

#include "sock.h"
#include "statarea.h"

void shim_sockstat_track(struct shim_sock *s, int fd);
void shim_sockstat_sync(struct shim_sock *s);
void shim_sockstat_release(struct shim_sock *s);

/* The path a direction's bytes take now. */
static inline unsigned shim_sockstat_path(const struct shim_sock *s, enum shim_dir dir)
{
	return dir == SHIM_DIR_CHAN ? s->stat_chan : 0;
}

/*
 * The data path, under the sock's lock: n > 0 bytes moved by one call.
 * A send with no round trip open opens one; the next receive that returns
 * data closes it. One round trip in SHIM_STAT_RTT_EVERY, the first among
 * them, is timed (two clock reads) and is a sample of the round trip as
 * the program sees it through the shim: the clock read at the receive is
 * on the program's path, and reading it every time cost a busy-polled shm
 * round trip a measurable share (docs/BENCHMARKS.md, "Stats area").
 */
static inline void shim_sockstat_sent(struct shim_sock *s, size_t n)
{
	struct shim_stat_rec *r = s->stat;

	if (!r)
		return;
	shim_stat_io(r, shim_sockstat_path(s, s->tx_dir), 0, n);
	if (!s->stat_rt_open) {
		s->stat_rt_open = true;
		if (!(s->stat_rts++ % SHIM_STAT_RTT_EVERY))
			s->stat_sent_ns = shim_now_ns();
	}
}

static inline void shim_sockstat_received(struct shim_sock *s, size_t n)
{
	struct shim_stat_rec *r = s->stat;
	unsigned path;

	if (!r)
		return;
	path = shim_sockstat_path(s, s->rx_dir);
	shim_stat_io(r, path, 1, n);
	s->stat_rt_open = false;
	if (s->stat_sent_ns) {
		uint64_t now = shim_now_ns(), ns = now - s->stat_sent_ns;

		s->stat_sent_ns = 0;
		if (likely(__atomic_load_n(&r->rtt_path, __ATOMIC_RELAXED) == path))
			shim_stat_add(&r->rtt[shim_stat_rtt_bucket(ns)], 1);
		else
			shim_stat_rec_rtt(r, path, ns);
		if (s->ab_arm)
			shim_stat_ab_rtt(s->ab_arm, now, ns);
	}
}

#endif
