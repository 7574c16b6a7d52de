/*
 * The queue pair of an RDMA connection and the hellos its CM messages carry
 * (OFFER, ACCEPT: shim/PROTOCOL.md, "RDMA"), for the handshake in
 * rdma_setup.c. Called with the sock's lock held.
 */
#include "rdma.h"
#include "rdma_qp.h"

#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "faults.h"
#include "trace.h"
#include "rdma_post.h"
#include "rdma_link_stat.h"

/* 4.096 us * 2^17 = 537 ms per try, 8 tries: a dead peer shows as a failed
 * completion in about four seconds (a peer that closed is seen at once, by
 * its DREQ). rdma_cm's default on RoCE comes from the path's packet
 * lifetime and was about a second per try on rxe; shorter tries than these
 * gave up under QEMU TCG load, where a VM can stall for 100 ms. */
#define ACK_TIMEOUT 17
#define RETRY_COUNT 7

socklen_t shim_rdma_sockaddr(const struct shim_endpoint *ep, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (shim_endpoint_is_v4(ep)) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		memcpy(&sin->sin_addr, ep->addr + 12, 4);
		return sizeof(*sin);
	}
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(port);
	memcpy(&sin6->sin6_addr, ep->addr, 16);
	return sizeof(*sin6);
}

static const char *state_name(enum ibv_qp_state st)
{
	switch (st) {
	case IBV_QPS_RESET: return "reset";
	case IBV_QPS_INIT: return "init";
	case IBV_QPS_RTR: return "rtr";
	case IBV_QPS_RTS: return "rts";
	case IBV_QPS_ERR: return "err";
	default: return "other";
	}
}

/* One explicit QP transition, attributes from rdma_cm (path, PSNs, QPNs). */
int shim_rdma_qp_to(struct rdma_conn *c, enum ibv_qp_state st)
{
	struct ibv_qp_attr attr;
	int mask = 0, rc;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = st;
	rc = rdma_init_qp_attr(c->id, &attr, &mask) ? -errno : 0;
	if (rc == 0) {
		if (st == IBV_QPS_INIT) {
			/* Before the CM exchange (the active side) rdma_cm hands
			 * out no access rights; the peer WRITEs into our ring. */
			attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
			mask |= IBV_QP_ACCESS_FLAGS;
		}
		if (st == IBV_QPS_RTS) {
			/* Our retries are ours to bound, whatever the peer's CM
			 * message asked for (rdma_cm takes them from it). RNR: an
			 * honest peer never runs out of receives (a link's cover
			 * every credit of its connections: rdma_link.h), so the
			 * first RNR NAK fails the WR at once: 7 would mean retry
			 * forever, and a peer posting no receives would stall us in
			 * shim_rdma_wait_seq(). */
			attr.rnr_retry = 0;
			attr.retry_cnt = RETRY_COUNT;
			mask |= IBV_QP_RNR_RETRY | IBV_QP_RETRY_CNT;
		}
		rc = -ibv_modify_qp(c->link->qp, &attr, mask);
	}
	shim_rdma_link_stat_qp(c->link, st, rc, &attr, c->id->verbs, c->id->port_num);
	SHIM_TRACE(rc ? SHIM_TRACE_WARN : SHIM_TRACE_DEBUG, "qp.state", c->fd, &c->sock->tuple, SHIM_REASON_NONE,
		   "\"qp\":%u,\"link\":%u,\"state\":\"%s\",\"rc\":%d", c->link->qp->qp_num, c->link->num,
		   state_name(st), rc);
	return rc;
}

/* The connection's own memory on pd: its slot (ring, control page,
 * staging copy) and the MR the peer writes through. */
int shim_rdma_conn_memory(struct rdma_conn *c, struct ibv_pd *pd)
{
	size_t slot_bytes = shim_rdma_slot_bytes(c->ring_bytes);
	int rc;

	if (c->slot.chunk && c->pd != pd) {
		if (c->mr)
			ibv_dereg_mr(c->mr);
		c->mr = NULL;
		shim_mrpool_put(&c->slot);
	}
	if (!c->slot.chunk) {
		rc = shim_mrpool_get(pd, slot_bytes, &c->slot);
		if (rc < 0)
			return rc;
	}
	if (!c->mr) {
		/* The peer's window into our memory: this connection's control
		 * page and receive ring, nothing else (the pool's chunk MR
		 * grants local access only). One registration per connection,
		 * of ring_bytes + 4 KiB already faulted in. */
		unsigned long long t0 = shim_now_ns();

		/* Test-only (faults.h, reg_fail): ENOMEM, as memlock's limit. */
		if (unlikely(shim_fault_hit(SHIM_FAULT_REG_FAIL, c->fd, c->sock ? &c->sock->tuple : NULL, "conn_mr")))
			return -ENOMEM;
		c->mr = ibv_reg_mr(pd, c->slot.addr, SHIM_RDMA_CTL_BYTES + c->ring_bytes,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!c->mr)
			return -errno;
		c->mr_reg_ns = shim_now_ns() - t0;
	}
	c->pd = pd;
	shim_rdma_chan_init(c);
	shim_rdma_post_recvs(c);
	return 0;
}

/* The connection's memory and a new link (CQ, QP) on the id's device, the
 * QP in INIT with the link's receives posted (a SWITCH_AT may arrive as
 * soon as the peer is in RTS). */
int shim_rdma_make_qp(struct rdma_conn *c)
{
	struct ibv_pd *pd = shim_rdma_pd_for(c->id->verbs);
	struct rdma_link *l;
	uint8_t timeout = ACK_TIMEOUT;
	int rc;

	if (!pd)
		return -ENOMEM;
	/* Before RTS, whose attributes rdma_init_qp_attr computes from it. */
	rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof(timeout));
	rc = shim_rdma_conn_memory(c, pd);
	if (rc == 0)
		rc = shim_rdma_link_make(c->id, c->ec, pd, c->sock->role == SHIM_ROLE_CLIENT, &c->sock->tuple.peer, &l);
	if (rc < 0)
		return rc;
	shim_rdma_link_stat_new(l, c->id->verbs, c->id->port_num, &c->sock->tuple);
	rc = shim_rdma_link_attach(l, c);
	shim_rdma_link_put(l); /* the place holds it now */
	if (rc < 0)
		return rc;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "qp.state", c->fd, &c->sock->tuple, SHIM_REASON_NONE,
		   "\"qp\":%u,\"link\":%u,\"state\":\"reset\",\"rc\":0,\"max_inline\":%u", l->qp->qp_num, l->num,
		   l->max_inline);
	rc = shim_rdma_qp_to(c, IBV_QPS_INIT);
	if (rc == 0)
		rc = shim_rdma_link_post_recvs(l);
	return rc;
}

/* S, before a retry: the link made for the attempt goes (it never
 * connected); the connection's memory stays for the next one. */
void shim_rdma_drop_qp(struct rdma_conn *c)
{
	struct shim_mr_slot slot = c->slot;
	struct ibv_mr *mr = c->mr;

	if (c->link) {
		/* Not told to anyone: leave frees nothing we still want. */
		memset(&c->slot, 0, sizeof(c->slot));
		c->mr = NULL;
		c->link_told_peer = false;
		shim_rdma_link_leave(c);
		c->slot = slot;
		c->mr = mr;
	}
	/* The next link's make_qp counts our share of receives afresh: the
	 * peer checks the count we report against the queue depth. */
	c->recv_posted = c->recv_reported = 0;
}

void shim_rdma_fill_hello(const struct rdma_conn *c, struct shim_rdma_hello *h, uint8_t type, const uint8_t *nonce)
{
	memset(h, 0, sizeof(*h));
	h->magic = htobe32(SHIM_RDMA_MAGIC);
	h->version = SHIM_RDMA_VERSION;
	h->type = type;
	h->order = 0x0102;
	memcpy(h->nonce, nonce, SHIM_NONCE_LEN);
	h->addr = htobe64((uint64_t)(uintptr_t)c->slot.addr);
	h->rkey = htobe32(c->mr->rkey);
	h->ring_bytes = htobe32(c->ring_bytes);
	h->conn_id = htobe32(c->link_id);
}

/* Checks a hello of type from private data; fills the peer's ring. */
int shim_rdma_take_hello(struct rdma_conn *c, const void *data, size_t len, uint8_t type, uint8_t *nonce_out)
{
	struct shim_rdma_hello h;

	if (!data || len < sizeof(h))
		return -EPROTO;
	memcpy(&h, data, sizeof(h));
	if (be32toh(h.magic) != SHIM_RDMA_MAGIC || h.version != SHIM_RDMA_VERSION || h.type != type ||
	    h.order != 0x0102 || be32toh(h.ring_bytes) != c->ring_bytes || !h.addr ||
	    be32toh(h.conn_id) > SHIM_RDMA_IMM_ID || h.reserved)
		return -EPROTO;
	memcpy(nonce_out, h.nonce, SHIM_NONCE_LEN);
	c->remote_addr = be64toh(h.addr);
	c->rkey = be32toh(h.rkey);
	c->peer_id = be32toh(h.conn_id);
	c->peer_id_known = true;
	return 0;
}

void shim_rdma_conn_param(struct rdma_conn *c, struct rdma_conn_param *p, const void *pd, size_t len)
{
	memset(p, 0, sizeof(*p));
	p->private_data = pd;
	p->private_data_len = (uint8_t)len;
	/* WRITEs and SENDs only: no RDMA READ or atomics either way. */
	p->responder_resources = 0;
	p->initiator_depth = 0;
	/* What we ask of the peer; our own QP is set in shim_rdma_qp_to() regardless. */
	p->retry_count = RETRY_COUNT;
	p->rnr_retry_count = 0; /* receives are posted before RTR, and credited */
	p->qp_num = c->link->qp->qp_num;
}
