/*
 * The RDMA switch, once the QP is connected (rdma_setup.c gets it there):
 * SWITCH_AT offsets both ways, and the proof that the CM peer is the TCP
 * peer before this end posts a byte (shim/PROTOCOL.md, "Proof").
 */
#include "rdma.h"

#include <sys/socket.h>

#include "mrpool.h"
#include "rdma_post.h"
#include "real.h"
#include "stats.h"
#include "trace.h"
#include "upgrade.h"

/*
 * Our direction's decision, sent as SWITCH_AT: C makes it at once (it is
 * the first to switch, and posts nothing until S proved itself); S makes
 * it only once its rx read C's SWITCH frame with nonce_S (C is proved), or
 * when C said its direction stays on TCP (then no proof can come, and S
 * stays too).
 */
static void decide_tx(struct shim_sock *s, int fd, struct rdma_conn *c, bool stay)
{
	int rc;

	c->tx_decided = true;
	if (c->broken) {
		/* Nothing was sent: the peer learns no offset from us and reads
		 * our TCP plainly. */
		return;
	}
	rc = shim_rdma_send_switch_at(c, s->tx_tcp_bytes, stay);
	if (rc < 0) {
		/* Our direction stays on TCP. Had the peer got the offset
		 * anyway, it finds our plain bytes where our SWITCH frame would
		 * be and reads on (rx.switch_refused): only that frame, with
		 * its random nonce, ever moves a direction. */
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.switch_at_failed", fd, &s->tuple, SHIM_REASON_CHAN_FAILED,
			   "\"errno\":%d", -rc);
		return;
	}
	c->tx_switched = !stay;
	if (!stay)
		shim_upgrade_switch_tx(s, fd);
}

/* The peer's SWITCH_AT: where its direction moves (or that it stays). */
static void learn_rx(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	c->rx_learned = true;
	if (c->peer_no_switch) {
		SHIM_TRACE(SHIM_TRACE_WARN, "upgrade.half", fd, &s->tuple, SHIM_REASON_SHUTDOWN,
			   "\"transport\":\"rdma\"");
		return;
	}
	if (shim_upgrade_learn_rx_switch(s, fd, c->peer_at) == 0)
		return;
	if (!c->tx_switched) {
		/* An offset behind what we read: a liar, and our direction has
		 * not moved, so nothing is lost by staying on TCP. */
		shim_rdma_violation(c, "switch_at_behind", c->peer_at);
		return;
	}
	REAL(shutdown)(fd, SHUT_RDWR);
}

static void finish(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	shim_upgrade_done(s);
	c->done = true;
	shim_stats_count(SHIM_REASON_UPGRADED);
	SHIM_TRACE(SHIM_TRACE_INFO, "upgrade.done", fd, &s->tuple, SHIM_REASON_UPGRADED,
		   "\"role\":\"%s\",\"transport\":\"rdma\",\"ring_bytes\":%u,\"max_inline\":%u,\"huge\":%s,"
		   "\"mr_us\":%llu",
		   s->role == SHIM_ROLE_CLIENT ? "client" : "server", c->ring_bytes, c->max_inline,
		   shim_mrpool_slot_huge(&c->slot) ? "true" : "false", c->mr_reg_ns / 1000);
}

void shim_rdma_connected(struct shim_sock *s, int fd, struct rdma_conn *c)
{
	if (!c->tx_decided) {
		if (s->role == SHIM_ROLE_CLIENT)
			decide_tx(s, fd, c, s->wr_shut);
		else if (shim_rdma_peer_at_known(c) && c->peer_no_switch)
			decide_tx(s, fd, c, true);
		else if (c->broken || shim_rdma_tx_proved(c))
			decide_tx(s, fd, c, s->wr_shut);
	}
	if (shim_rdma_peer_at_known(c) && !c->rx_learned)
		learn_rx(s, fd, c);
	if (c->tx_switched && !c->broken && c->rx_learned && c->peer_no_switch)
		/* C switched, S stays on TCP: S can never prove itself, so our
		 * staged bytes go on TCP behind a RESUME (failover.c). */
		shim_rdma_unproven(c, "peer_stays_on_tcp");
	if (c->tx_switched && shim_rdma_tx_release(c) < 0)
		SHIM_TRACE(SHIM_TRACE_DEBUG, "rdma.release_failed", fd, &s->tuple, SHIM_REASON_NONE, NULL);
	if (c->broken && !c->tx_switched && s->rx_dir == SHIM_DIR_TCP && !s->rx_switch_known) {
		/* Nothing moved either way: drop the channel, stay on TCP. */
		shim_rdma_give_up(s, fd, c->violated ? SHIM_REASON_PEER_VIOLATION : SHIM_REASON_UNPROVEN_PEER);
		return;
	}
	/* Done when both decisions are known and nothing waits for the
	 * proof; a broken channel is the failover's from here. */
	if (c->broken || (c->tx_decided && c->rx_learned && (!c->tx_switched || c->proved)))
		finish(s, fd, c);
}
