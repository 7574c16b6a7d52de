/*
 * Closing an RDMA connection: what must leave on TCP before the socket goes
 * (shim_rdma_release), and the teardown of the verbs and CM objects, which
 * waits (bounded) for the program's last WRITEs (shim_rdma_teardown).
 * rdma_setup.c sets them up. See rdma.h.
 */
#include "rdma.h"
#include "rdma_post.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "failover.h"
#include "frames.h"
#include "real.h"
#include "trace.h"

/* The fd we started with, if it still names this connection (the program
 * may have dup'ed and closed it since). */
static bool fd_is_ours(const struct shim_sock *s, int fd)
{
	struct sockaddr_storage ss;
	struct shim_endpoint local, peer;
	socklen_t len = sizeof(ss);

	if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0 ||
	    shim_endpoint_from_sockaddr((struct sockaddr *)&ss, len, &local) < 0)
		return false;
	len = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0 ||
	    shim_endpoint_from_sockaddr((struct sockaddr *)&ss, len, &peer) < 0)
		return false;
	return shim_endpoint_equal(&local, &s->tuple.local) && shim_endpoint_equal(&peer, &s->tuple.peer);
}

/*
 * Frames still queued for TCP (our SWITCH frame when the send buffer was
 * full at the switch, or a bell) must leave before the socket closes:
 * without its SWITCH frame the peer can never read what we put on the
 * ring. Bounded; the peer is reading TCP up to that frame.
 */
#define CLOSE_FLUSH_NS (2000ull * 1000 * 1000)

static void flush_before_close(struct shim_sock *s, int fd)
{
	unsigned long long end = shim_now_ns() + CLOSE_FLUSH_NS;

	if ((!s->tcp_out_len && !shim_failover_replaying(s)) || !fd_is_ours(s, fd))
		return;
	/* Frames first, then a failover's replay (it goes behind our RESUME):
	 * the bytes the program sent before close, as the kernel would. */
	while ((s->tcp_out_len || shim_failover_replaying(s)) && shim_now_ns() < end) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int rc = s->tcp_out_len ? shim_frames_flush(s, fd) : shim_failover_flush(s, fd);

		if (rc < 0 && rc != -EAGAIN)
			break;
		if (rc == -EAGAIN)
			REAL(poll)(&p, 1, 50);
	}
	if (s->tcp_out_len)
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.close_unflushed", fd, &s->tuple, SHIM_REASON_NONE,
			   "\"bytes\":%zu", s->tcp_out_len);
}

void shim_rdma_release(struct shim_sock *s)
{
	struct rdma_conn *c = s->rdma;

	if (!c)
		return;
	if (c->pid != getpid()) {
		shim_rdma_forget_inherited(s);
		return;
	}
	if (c->installed && c->tx_switched && c->tx_posted != c->tx_tail) {
		/* Closed with bytes still waiting for the peer's proof. If it
		 * came meanwhile (close reads the peer's SWITCH frame), they
		 * are posted and the teardown waits for them; if not, they go
		 * on TCP behind a RESUME, as the kernel would still send them
		 * after close (flushed below, bounded). */
		if (shim_rdma_tx_proved(c))
			shim_rdma_tx_release(c);
		else if (fd_is_ours(s, c->fd)) {
			shim_rdma_unproven(c, "closed_unproven");
			shim_failover_progress(s, c->fd);
		}
	}
	flush_before_close(s, c->fd);
	s->rdma = NULL;
	/* An installed channel is torn down by s->chan's destroy. */
	if (c->installed && s->chan == &c->chan)
		return;
	shim_rdma_teardown(c);
}

/* How long close waits for its "closed" WRITEs: a courtesy (TCP's FIN tells
 * the peer too), so a short bound; a peer that is gone must not stall a
 * single-threaded server once per connection. */
#define TEARDOWN_WAIT_NS (20ull * 1000 * 1000)
/* How long close waits for the program's last bytes to land: the kernel
 * keeps sending after close too, and destroying the QP would drop WRITEs
 * still queued. A live peer's HCA answers within round trips; this bounds
 * the wait for one that died. */
#define TEARDOWN_DATA_WAIT_NS (2000ull * 1000 * 1000)

/* Waits (bounded) until WR seq completed, the channel broke or the peer
 * disconnected; true if seq completed. */
static bool teardown_wait(struct rdma_conn *c, uint64_t seq, unsigned long long bound_ns, bool *peer_gone)
{
	unsigned long long end = shim_now_ns() + bound_ns;

	while (seq && c->completed < seq && !c->broken && shim_now_ns() < end) {
		shim_rdma_reap(c);
		if (rdma_drain_cm_events(c)) {
			*peer_gone = true;
			break;
		}
		sched_yield();
	}
	return seq && c->completed >= seq;
}

void shim_rdma_teardown(struct rdma_conn *c)
{
	bool peer_gone = rdma_drain_cm_events(c) || c->peer_disconnected;

	if (c->qp && c->remote_addr && c->installed && !c->broken && !peer_gone) {
		if (c->last_signaled && !teardown_wait(c, c->last_signaled, TEARDOWN_DATA_WAIT_NS, &peer_gone))
			SHIM_TRACE(SHIM_TRACE_WARN, "rdma.close_unsent", c->fd, c->sock ? &c->sock->tuple : NULL,
				   SHIM_REASON_NONE, "\"wrs\":%llu",
				   (unsigned long long)(c->last_signaled - c->completed));
		if (!c->broken && !peer_gone) {
			/* The peer sees both directions closed, as with shm
			 * (CLOSED only to a proved peer, after our last byte). */
			c->chan.ops->shutdown_tx(&c->chan);
			teardown_wait(c, rdma_post_word(c, CTL_OFF(tx_consumer_closed), 1, true), TEARDOWN_WAIT_NS,
				      &peer_gone);
		}
	}
	c->torn_down = true;
	if (c->id && c->installed && !peer_gone)
		rdma_disconnect(c->id);
	shim_rdma_qp_error(c);
	shim_rdma_reap(c);
	if (c->qp)
		ibv_destroy_qp(c->qp);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	rdma_drain_cm_events(c);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->listen_id)
		rdma_destroy_id(c->listen_id);
	if (c->ec)
		rdma_destroy_event_channel(c->ec);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	shim_mrpool_put(&c->slot);
	if (c->cq_lock_ready)
		pthread_spin_destroy(&c->cq_lock);
	free(c);
}
