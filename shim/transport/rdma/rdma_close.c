/*
 * Ending an RDMA connection: giving up before any direction moved
 * (shim_rdma_give_up), an attempt a forked parent started, and the bytes
 * still held for an unproven peer at close (shim_rdma_release; what is
 * queued for TCP then leaves through conn's shim_close_flush()). The
 * objects themselves go in rdma_teardown.c; rdma_setup.c sets them up.
 * See rdma.h.
 */
#include "rdma.h"
#include "rdma_post.h"
#include "rdma_link_stat.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "breaker.h"
#include "close.h"
#include "failover.h"
#include "frames.h"
#include "real.h"
#include "self.h"
#include "trace.h"
#include "upgrade.h"

void shim_rdma_release(struct shim_sock *s)
{
	struct rdma_conn *c = s->neg;

	if (!c)
		return;
	if (c->pid != shim_self_pid()) {
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
		else if (shim_close_fd_is_ours(s, c->fd)) {
			shim_rdma_unproven(c, "closed_unproven");
			shim_failover_progress(s, c->fd);
		}
	}
	shim_close_flush(s, c->fd);
	s->neg = NULL;
	/* An installed channel is torn down by s->chan's destroy. */
	if (c->installed && s->chan == &c->chan)
		return;
	shim_rdma_teardown(c);
}

/* ---- failing ---- */

static bool breaker_counts(enum shim_reason r)
{
	return r == SHIM_REASON_CM_TIMEOUT || r == SHIM_REASON_CM_REJECTED || r == SHIM_REASON_CM_UNREACHABLE;
}

bool shim_rdma_rej_is_shadow(const void *pdata, size_t plen)
{
	struct shim_rdma_shadow_rej m;

	if (!pdata || plen < sizeof(m))
		return false;
	memcpy(&m, pdata, sizeof(m));
	return ntohl(m.magic) == SHIM_RDMA_MAGIC && m.type == SHIM_RDMA_SHADOW;
}

int shim_rdma_shadow_reject(struct rdma_cm_id *id)
{
	struct shim_rdma_shadow_rej m = { .magic = htonl(SHIM_RDMA_MAGIC), .version = SHIM_RDMA_VERSION,
					  .type = SHIM_RDMA_SHADOW };

	return rdma_reject(id, &m, sizeof(m)) ? -errno : 0;
}

void shim_rdma_shadow_cut(struct shim_sock *s, int fd)
{
	struct rdma_conn *c = s->neg;

	if (c) {
		if (c->installed && s->chan == &c->chan)
			s->chan = NULL;
		c->installed = false;
		s->neg = NULL;
		shim_rdma_teardown(c);
	}
	shim_upgrade_shadow(s, fd, SHIM_TRANSPORT_RDMA);
}

/* Gives up before any direction moved: everything goes, TCP stays. */
void shim_rdma_give_up(struct shim_sock *s, int fd, enum shim_reason reason)
{
	struct rdma_conn *c = s->neg;

	if (c) {
		if (c->link)
			shim_rdma_link_stat_gave_up(c->link, reason);
		if (s->role == SHIM_ROLE_SERVER && breaker_counts(reason))
			shim_breaker_record(shim_breaker_global(), s->tuple.peer.addr, false, shim_breaker_now_ms());
		if (c->installed && s->chan == &c->chan)
			s->chan = NULL;
		c->installed = false;
		s->neg = NULL;
		shim_rdma_teardown(c);
	}
	shim_upgrade_fail(s, fd, reason);
}

/*
 * An attempt a forked parent started: its ids, QP, CQ and slot are the
 * parent's (the rdma_cm and uverbs file descriptions are shared, so even
 * destroying our copies would destroy the parent's objects). Forget them,
 * touching nothing, not even the frames queued for TCP (the parent's to
 * send).
 */
void shim_rdma_forget_inherited(struct shim_sock *s)
{
	struct rdma_conn *c = s->neg;

	if (c->installed && s->chan == &c->chan)
		s->chan = NULL;
	s->neg = NULL;
	free(c);
}
