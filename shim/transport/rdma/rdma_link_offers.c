/*
 * The OFFERs a link keeps for the connections of this process that will
 * claim them (shim/PROTOCOL.md, "Links"; rdma_link_join.c sends and claims
 * them), and the RELEASEs owed for those dropped unclaimed. Under the
 * link's lock; the reaper keeps them (rdma_link.c, take_message), a claim
 * or the sweeper scans them.
 */
#include "rdma_link.h"

#include <string.h>

#include <endian.h>

#include "clock.h"
#include "trace.h"

/* An OFFER we drop unclaimed: the peer holds its memory until we say we
 * will never write there. */
static void owe_release(struct rdma_link *l, const struct rdma_link_offer *o)
{
	if (l->n_owed < SHIM_LINK_OFFERS)
		l->owed[l->n_owed++] = be32toh(o->msg.hello.conn_id);
}

/* An OFFER is kept until a connection of ours claims it, a younger one
 * needs its cell, or a claim finds it older than the CM bound
 * (shim_rdma_link_offers_scan). It must name the link's CM peer as the
 * client. */
void shim_rdma_link_keep_offer(struct rdma_link *l, const struct shim_rdma_link_msg *m)
{
	struct rdma_link_offer *slot = &l->offers[0];

	if (l->client || memcmp(m->client_addr, l->peer.addr, 16) != 0) {
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.violation", -1, NULL, SHIM_REASON_PEER_VIOLATION,
			   "\"why\":\"offer_not_from_peer\",\"link\":%u", l->num);
		return;
	}
	for (unsigned i = 0; i < SHIM_LINK_OFFERS; i++) {
		if (!l->offers[i].used) {
			slot = &l->offers[i];
			break;
		}
		if (l->offers[i].at_ns < slot->at_ns)
			slot = &l->offers[i];
	}
	if (slot->used)
		owe_release(l, slot);
	else
		__atomic_add_fetch(&l->offers_kept, 1, __ATOMIC_RELAXED);
	slot->used = true;
	slot->at_ns = shim_now_ns();
	slot->msg = *m;
	shim_rdma_link_busy(l);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "rdma.link", -1, NULL, SHIM_REASON_NONE,
		   "\"state\":\"offer_in\",\"link\":%u,\"client_port\":%u", l->num, be16toh(m->client_port));
}

static bool offer_names(const struct shim_rdma_link_msg *m, const struct shim_tuple *t)
{
	return memcmp(m->client_addr, t->peer.addr, 16) == 0 && be16toh(m->client_port) == t->peer.port &&
	       memcmp(m->server_addr, t->local.addr, 16) == 0 && be16toh(m->server_port) == t->local.port;
}

bool shim_rdma_link_offers_scan(struct rdma_link *l, const struct shim_tuple *t, unsigned long long max_age_ns,
				unsigned long long now, struct shim_rdma_link_msg *out)
{
	bool found = false;

	for (unsigned i = 0; i < SHIM_LINK_OFFERS; i++) {
		struct rdma_link_offer *o = &l->offers[i];
		/* at_ns may be after the now of a caller that reaped it. */
		bool aged = o->at_ns + max_age_ns < now;

		if (!o->used || (!aged && (found || !t || !offer_names(&o->msg, t))))
			continue;
		o->used = false;
		__atomic_sub_fetch(&l->offers_kept, 1, __ATOMIC_RELAXED);
		shim_rdma_link_busy(l);
		if (aged) {
			owe_release(l, o);
			continue;
		}
		*out = o->msg;
		found = true;
	}
	return found;
}
