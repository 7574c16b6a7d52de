/*
 * The teardown of an RDMA connection's verbs and CM objects, which waits
 * (bounded) for the program's last WRITEs and tells a live peer both
 * directions closed (shim_rdma_teardown). Used by the channel's destroy
 * (rdma_chan.c) and by every way an attempt ends (rdma_close.c).
 */
#include "rdma.h"
#include "rdma_post.h"

#include <sched.h>
#include <stdlib.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "trace.h"

/*
 * How long close waits for the program's last bytes to land (the kernel
 * keeps sending after close too, and destroying the QP would drop WRITEs
 * still queued), and then for its exact head and "closed" WRITEs. Those
 * are no courtesy: the peer, seeing our FIN, tells a clean end from a
 * reset by them (frames.c, peer_died_unread), and the FIN must not overtake
 * them. A live peer's HCA answers within round trips (under emulation,
 * tens of ms: a 20 ms bound here let FINs overtake and made clean closes
 * look like resets); this bounds the wait for one that died (its CM
 * events or a broken QP end it sooner).
 */
#define TEARDOWN_WAIT_NS (2000ull * 1000 * 1000)

/* Waits (bounded) until WR seq completed, the channel broke or the peer
 * disconnected; true if seq completed. */
static bool teardown_wait(struct rdma_conn *c, uint64_t seq, unsigned long long bound_ns, bool *peer_gone)
{
	unsigned long long end = shim_now_ns() + bound_ns;

	while (seq && shim_rdma_link_completed(c->link) < seq && !c->broken && shim_now_ns() < end) {
		shim_rdma_reap(c);
		if (shim_rdma_drain_cm_events(c)) {
			*peer_gone = true;
			break;
		}
		sched_yield();
	}
	return seq && shim_rdma_link_completed(c->link) >= seq;
}

void shim_rdma_teardown(struct rdma_conn *c)
{
	bool peer_gone = shim_rdma_drain_cm_events(c) || c->peer_disconnected;
	/* The CM objects are the link's once it is up (it outlives us). */
	bool cm_ours = !(c->link && c->link->cm_owned && c->link->id == c->id);

	if (c->link && c->on_link && c->remote_addr && c->installed && !c->broken && !peer_gone) {
		if (c->last_signaled && !teardown_wait(c, c->last_signaled, TEARDOWN_WAIT_NS, &peer_gone))
			SHIM_TRACE(SHIM_TRACE_WARN, "rdma.close_unsent", c->fd, c->sock ? &c->sock->tuple : NULL,
				   SHIM_REASON_NONE, "\"wrs\":%llu",
				   (unsigned long long)(c->last_signaled - shim_rdma_link_completed(c->link)));
		if (!c->broken && !peer_gone) {
			/* The peer sees both directions closed, as with shm
			 * (CLOSED only to a proved peer, after our last byte);
			 * an abortive close's end is TCP's reset alone. */
			if (!c->abortive)
				c->chan.ops->shutdown_tx(&c->chan);
			/* Our exact head before "closed" (same QP, placed in
			 * order): the peer's count of bytes we left unread
			 * (tx_unread) is then exact. */
			struct wr_chain wrs = { .n = 0 };

			shim_rdma_chain_head(c, &wrs, false);
			shim_rdma_chain_word(c, &wrs, CTL_OFF(tx_consumer_closed), 1, true);
			teardown_wait(c, shim_rdma_chain_post(c, &wrs), TEARDOWN_WAIT_NS, &peer_gone);
		}
	}
	shim_rdma_link_making_done(c);
	shim_rdma_link_waiting_done(c);
	c->torn_down = true;
	/* Our place on the link goes (its memory once the peer released it
	 * too); the last reference frees the link. */
	shim_rdma_link_leave(c);
	if (cm_ours) {
		if (c->id && c->installed && !peer_gone)
			rdma_disconnect(c->id);
		shim_rdma_drain_cm_events(c);
		if (c->id)
			rdma_destroy_id(c->id);
	}
	if (c->listen_id)
		rdma_destroy_id(c->listen_id);
	if (cm_ours && c->ec)
		rdma_destroy_event_channel(c->ec);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	if (c->slot.chunk)
		shim_mrpool_put(&c->slot);
	free(c);
}
