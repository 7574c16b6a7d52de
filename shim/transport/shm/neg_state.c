/* What both ways of the shm negotiation share; see neg_state.h. */
#include "neg_state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "frames.h"
#include "pair.h"
#include "real.h"
#include "reaper.h"
#include "rendezvous.h"
#include "shm.h"
#include "stats.h"
#include "transport.h"
#include "trace.h"
#include "upgrade.h"
#include "wire.h"

/* rv.refused lines, per process: 20 at once, then 10 a second. */
static struct shim_trace_budget refused_lines = { .burst = 20, .per_sec = 10 };

/* A negotiation's rendezvous is this process's alone (handshakes are
 * settled before a fork: upgrade.c), and its peer reads our hang-up as
 * "the connection closed" (rendezvous.h): it must see it now, before the
 * program's next call may reuse our TCP socket's number. */
void shm_close_fd(int *fd)
{
	if (*fd >= 0) {
		shim_reap_hung_up(*fd);
		*fd = -1;
	}
}

void shm_neg_bind_zc(struct shim_sock *s)
{
	struct shm_neg *ng = shm_neg_of(s);

	/* One copy writes into the verified peer's process only: the
	 * process the rendezvous names (a socketpair names its maker: on the
	 * pair way that is the peer for S, ourselves for C). Once, before
	 * the rendezvous goes on to be a pair's or the bell line. */
	if (ng && !ng->zc_bound && s->chan && s->chan->ops == &shim_shm_ops && ng->rv_fd >= 0 &&
	    shim_cfg.zerocopy != SHIM_ZC_OFF) {
		ng->zc_bound = true;
		shim_shm_zc_bind(s->chan, shim_rv_peer_pidfd(ng->rv_fd));
	}
}

void shm_neg_end(struct shim_sock *s)
{
	struct shm_neg *ng = shm_neg_of(s);

	if (!ng)
		return;
	shm_neg_bind_zc(s);
	/* The pair way's socketpair becomes the channel's bell line. */
	if (ng->keep_line && s->chan && ng->rv_fd >= 0 && shim_shm_line_adopt(s->chan, ng->rv_fd) == 0)
		ng->rv_fd = -1;
	shm_close_fd(&ng->rv_listen_fd);
	shm_close_fd(&ng->rv_fd);
	free(ng);
	s->neg = NULL;
}

enum shm_got shm_neg_recv(int rv_fd, union shm_neg_msg *msg, int type, int *fds, unsigned nfds, ssize_t *len)
{
	ssize_t n = shim_rv_recv_fds(rv_fd, msg, sizeof(*msg), fds, nfds);
	enum shm_got got;

	if (len)
		*len = n;
	if (n == -EAGAIN)
		return SHM_GOT_NONE;
	if (n > 0 && shim_msg_check(msg, (size_t)n) == type)
		return SHM_GOT_IT;
	got = n == 0 ? SHM_GOT_END : n < 0 ? SHM_GOT_ERROR : SHM_GOT_OTHER;
	for (unsigned i = 0; i < nfds; i++) {
		if (fds[i] >= 0) {
			shim_reap(fds[i]);
			fds[i] = -1;
		}
	}
	return got;
}

uint32_t shm_ring_bytes(void)
{
	return shim_cfg.ring_kb * 1024u;
}

const struct shim_endpoint *shm_client_ep(const struct shim_sock *s)
{
	return s->role == SHIM_ROLE_CLIENT ? &s->tuple.local : &s->tuple.peer;
}

const struct shim_endpoint *shm_server_ep(const struct shim_sock *s)
{
	return s->role == SHIM_ROLE_CLIENT ? &s->tuple.peer : &s->tuple.local;
}

enum shim_reason shm_local_failure(int rc)
{
	return rc == -EMFILE || rc == -ENFILE ? SHIM_REASON_FD_LIMIT : SHIM_REASON_INTERNAL_ERROR;
}

void shm_trace_refused(struct shim_sock *s, int fd, const char *side, int err)
{
	unsigned held = 0;

	if (shim_trace_enabled(SHIM_TRACE_WARN) && shim_trace_budget_take(&refused_lines, shim_now_ns(), &held))
		shim_trace_emit(SHIM_TRACE_WARN, "rv.refused", fd, &s->tuple, SHIM_REASON_VERIFY_FAILED,
				"\"side\":\"%s\",\"errno\":%d,\"held_back\":%u", side, err, held);
}

/* Why our direction stays on TCP after an upgrade, "no" when it moved:
 * the program shut or closed it before the upgrade was through (a stream
 * that ended first), or a program call pinned the connection to TCP. */
static const char *tx_kept_reason(const struct shim_sock *s)
{
	if (s->tx_dir != SHIM_DIR_TCP)
		return "no";
	if (s->wr_shut)
		return "shut";
	if (s->closing)
		return "closing";
	return s->pinned ? "pinned" : "not_sent";
}

void shm_trace_done(struct shim_sock *s, int fd, uint32_t ring)
{
	const struct shm_neg *ng = shm_neg_of(s);
	/* The peer rings us on a line (the pair way's comes at the end). */
	bool line = (ng && ng->keep_line) || (s->chan && s->chan->ops->bell_fd(s->chan) >= 0);

	shim_stats_count(SHIM_REASON_UPGRADED);
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.done", fd, &s->tuple, SHIM_REASON_UPGRADED,
		   "\"role\":\"%s\",\"transport\":\"shm\",\"ring_bytes\":%u,\"tx\":%d,\"rx\":%s,\"pair\":%s,"
		   "\"bell_line\":%s,\"tx_kept\":\"%s\"",
		   s->role == SHIM_ROLE_CLIENT ? "client" : "server", ring, s->tx_dir,
		   s->rx_switch_known ? "true" : "false", ng && ng->via_pair ? "true" : "false",
		   line ? "true" : "false", tx_kept_reason(s));
}

/*
 * A peer with the shim comes to the rendezvous (or takes our HINT) from its
 * first call after RDMASHIM_UPGRADE_AFTER_MS, before that call sends a
 * byte. Bytes that came over TCP while we waited, RDMASHIM_PLAIN_PEER_MS
 * after we began, say the peer has none (or, after a HINT, that S is not
 * the process that took it): waiting out RDMASHIM_UPGRADE_TIMEOUT_MS would
 * only slow the connection (each call looks at the rendezvous). A shim
 * peer busy for longer than that between two calls loses the upgrade, not
 * a byte.
 */
bool shm_peer_answers_plain(const struct shim_sock *s, const struct shm_neg *ng, unsigned long long now)
{
	return shim_cfg.plain_peer_ms && !ng->server_has_shim && s->rx_tcp_bytes > ng->rx_at_listen &&
	       now - ng->listen_ns >= shim_cfg.plain_peer_ms * 1000000ull;
}

bool shm_tx_may_switch(const struct shim_sock *s)
{
	return !s->wr_shut && !s->closing && !s->pinned;
}

/* Where our SWITCH frame will sit, or SHIM_SWITCH_NEVER when our direction
 * stays on TCP. -errno if it could not go out (then we must not switch:
 * the peer would not know where). */
int shm_send_switch_at(struct shim_sock *s, bool switching, uint32_t flags)
{
	struct shm_neg *ng = shm_neg_of(s);
	struct shim_msg_switch_at at;

	memset(&at, 0, sizeof(at));
	shim_msg_init(&at.hdr, SHIM_MSG_SWITCH_AT, sizeof(at));
	at.hdr.flags = flags;
	at.switch_offset = switching ? s->tx_tcp_bytes : SHIM_SWITCH_NEVER;
	return shim_rv_send(ng->rv_fd, &at, sizeof(at), -1);
}

bool shm_take_peer_switch_at(struct shim_sock *s, int fd, uint64_t offset)
{
	if (offset == SHIM_SWITCH_NEVER)
		return true;
	if (shim_upgrade_learn_rx_switch(s, fd, offset) == 0)
		return true;
	shim_frames_abort(s, fd, SHIM_REASON_PEER_VIOLATION, "switch_offset");
	return false;
}

bool shm_s_ring_fits(struct shim_sock *s, int fd, uint32_t ring_bytes)
{
	if (ring_bytes <= shm_ring_bytes())
		return true;
	SHIM_TRACE(SHIM_TRACE_WARN, "upgrade.ring_refused", fd, &s->tuple, SHIM_REASON_RING_ALLOC_FAILED,
		   "\"ring_bytes\":%u,\"ours\":%u", ring_bytes, shm_ring_bytes());
	return false;
}

int shm_s_attach_ring(struct shim_sock *s, int fd, int memfd, uint32_t ring_bytes, struct shim_chan **out)
{
	int rc;

	if (!shm_s_ring_fits(s, fd, ring_bytes))
		rc = -EPROTO;
	else if (shim_fault_hit(SHIM_FAULT_RING_ALLOC, fd, &s->tuple, "server_ring"))
		rc = -ENOMEM; /* test-only (faults.h) */
	else
		rc = shim_shm_attach(memfd, ring_bytes, out);
	shim_reap(memfd);
	return rc;
}

void shm_s_committed(struct shim_sock *s, int fd, struct shim_chan *chan, bool switching, uint32_t ring_bytes)
{
	s->chan = chan;
	if (switching)
		shim_upgrade_switch_tx(s, fd);
	shm_neg_of(s)->step = SHM_S_AWAIT_C;
	shim_upgrade_committing(s);
	shm_trace_done(s, fd, ring_bytes);
}

void shm_c_drop_ring(struct shim_sock *s)
{
	s->chan->ops->destroy(s->chan);
	s->chan = NULL;
}

/* S did not map the ring (it failed, refused us, or never came back). */
void shm_c_give_up(struct shim_sock *s, int fd, enum shim_reason reason)
{
	shm_c_drop_ring(s);
	shim_upgrade_fail(s, fd, reason);
}

void shm_c_follow(struct shim_sock *s, int fd, uint64_t offset)
{
	if (!shm_take_peer_switch_at(s, fd, offset))
		return;
	struct shm_neg *ng = shm_neg_of(s);
	/* Our offset first, then our frame. */
	bool sent = shm_tx_may_switch(s) && shm_send_switch_at(s, true, 0) == 0;

	if (sent)
		shim_upgrade_switch_tx(s, fd);
	shm_trace_done(s, fd, shm_ring_bytes());
	/* A named rendezvous that verified both ways and saw the exchange
	 * through carries the next connections' HINTs (pair.h). */
	shm_neg_bind_zc(s);
	if (sent && !ng->via_pair && shim_cfg.shm_pairs) {
		shim_pair_keep_client(ng->rv_fd, shm_server_ep(s));
		ng->rv_fd = -1;
	}
	shm_neg_end(s);
	shim_upgrade_done(s);
}
