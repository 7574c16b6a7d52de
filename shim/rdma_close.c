/*
 * Closing an RDMA connection's handshake state: what must leave on TCP
 * before the socket goes (rdma_setup.c sets it up; rdma_chan.c tears the
 * channel down). See rdma.h.
 */
#include "rdma.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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
