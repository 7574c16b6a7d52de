/* A link's record in the live stats area; see rdma_link_stat.h. */
#include "rdma_link_stat.h"

#include <stdio.h>
#include <string.h>

#include "self.h"
#include "statlink.h"

static bool ours(const struct rdma_link *l)
{
	return l->stat && l->pid == shim_self_pid();
}

static uint8_t qp_of(enum ibv_qp_state st)
{
	switch (st) {
	case IBV_QPS_RESET: return SHIM_STAT_QP_RESET;
	case IBV_QPS_INIT: return SHIM_STAT_QP_INIT;
	case IBV_QPS_RTR: return SHIM_STAT_QP_RTR;
	case IBV_QPS_RTS: return SHIM_STAT_QP_RTS;
	default: return SHIM_STAT_QP_ERR;
	}
}

void shim_rdma_link_stat_new(struct rdma_link *l, struct ibv_context *verbs, uint8_t port, const struct shim_tuple *t)
{
	struct shim_stat_desc d = { .fd = -1, .path = SHIM_TRANSPORT_RDMA, .role = !l->client, .qpn = l->qp->qp_num };
	struct shim_stat_link_desc *sd = &l->stat_d;

	memset(sd, 0, sizeof(*sd));
	snprintf(sd->dev, sizeof(sd->dev), "%s", verbs ? ibv_get_device_name(verbs->device) : "?");
	sd->port = port;
	sd->qp_state = sd->reached = SHIM_STAT_QP_RESET;
	sd->client = l->client;
	sd->lqpn = l->qp->qp_num;
	sd->num = l->num;
	sd->max_conns = l->max_conns;
	sd->state_unix_ns = shim_stat_now_unix_ns();
	/* The hosts' addresses: the link carries connections of many ports. */
	if (t) {
		d.local = t->local;
		d.peer = t->peer;
		d.local.port = d.peer.port = 0;
	}
	l->stat = shim_stat_link_new(&d, sd);
}

void shim_rdma_link_stat_qp(struct rdma_link *l, enum ibv_qp_state st, int rc, const struct ibv_qp_attr *attr,
			    struct ibv_context *verbs, uint8_t port)
{
	struct shim_stat_link_desc *sd = &l->stat_d;
	struct ibv_port_attr pa;

	if (!ours(l))
		return;
	pthread_mutex_lock(&l->lock);
	if (rc == 0) {
		sd->qp_state = qp_of(st);
		if (sd->qp_state > sd->reached && sd->qp_state <= SHIM_STAT_QP_RTS)
			sd->reached = sd->qp_state;
		sd->failed_to = SHIM_STAT_QP_NONE;
		sd->err = 0;
		if (st == IBV_QPS_RTR) {
			sd->rqpn = attr->dest_qp_num;
			sd->path_mtu = (uint8_t)attr->path_mtu;
		}
		if (st == IBV_QPS_RTS)
			sd->sq_psn = attr->sq_psn;
	} else {
		sd->failed_to = qp_of(st);
		sd->err = -rc;
		/* A path MTU above what the port carries is refused (EINVAL):
		 * what the port says now tells that cause from the others. */
		if (st == IBV_QPS_RTR) {
			sd->path_mtu = (uint8_t)attr->path_mtu;
			if (verbs && ibv_query_port(verbs, port, &pa) == 0)
				sd->active_mtu = (uint8_t)pa.active_mtu;
		}
	}
	sd->state_unix_ns = shim_stat_now_unix_ns();
	shim_stat_link_describe(l->stat, sd);
	pthread_mutex_unlock(&l->lock);
}

void shim_rdma_link_stat_broken_locked(struct rdma_link *l, const char *why, int detail)
{
	struct shim_stat_link_desc *sd = &l->stat_d;

	if (!ours(l))
		return;
	if (!why)
		why = "?";
	sd->qp_state = SHIM_STAT_QP_ERR;
	sd->state_unix_ns = sd->verbs_err_unix_ns = shim_stat_now_unix_ns();
	sd->verbs_detail = detail;
	/* A failed completion's why is its status's own text (take_wc,
	 * rdma_link.c): then detail is that status. */
	sd->verbs_wc = detail > 0 && detail <= IBV_WC_GENERAL_ERR &&
		       strcmp(why, ibv_wc_status_str((enum ibv_wc_status)detail)) == 0;
	snprintf(sd->verbs_err, sizeof(sd->verbs_err), "%s", why);
	shim_stat_link_describe(l->stat, sd);
}

void shim_rdma_link_stat_gave_up(struct rdma_link *l, unsigned reason)
{
	if (!ours(l) || l->cm_owned)
		return;
	pthread_mutex_lock(&l->lock);
	l->stat_d.reason = (uint16_t)reason;
	shim_stat_link_describe(l->stat, &l->stat_d);
	pthread_mutex_unlock(&l->lock);
}

void shim_rdma_link_stat_conns_locked(struct rdma_link *l)
{
	if (ours(l))
		shim_stat_link_conns(l->stat, __atomic_load_n(&l->live, __ATOMIC_RELAXED),
				     __atomic_load_n(&l->held, __ATOMIC_RELAXED));
}

void shim_rdma_link_stat_end(struct rdma_link *l)
{
	const struct shim_stat_link_desc *sd = &l->stat_d;

	if (!ours(l))
		return;
	/* A channel we stopped on purpose (a failover, a hand-off) is no
	 * failure of the link. */
	shim_stat_link_end(l->stat, sd->failed_to != SHIM_STAT_QP_NONE || sd->reason != 0 ||
					    (sd->verbs_err[0] && strcmp(sd->verbs_err, "stopped") != 0));
	l->stat = NULL;
}
