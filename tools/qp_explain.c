/* What `rdmashim qp` prints for each queue pair; see qp_explain.h. */
#include "qp_explain.h"

#include <string.h>

#include <infiniband/verbs.h>

#include "reason.h"
#include "statread.h"

static const char *const steps[] = { [SHIM_STAT_QP_RESET] = "RESET -> INIT", [SHIM_STAT_QP_INIT] = "INIT -> RTR",
				     [SHIM_STAT_QP_RTR] = "RTR -> RTS" };

/* The step out of st toward RTS, or NULL. */
static const char *step_from(unsigned st)
{
	return st >= SHIM_STAT_QP_RESET && st <= SHIM_STAT_QP_RTR ? steps[st] : NULL;
}

static unsigned mtu_bytes(unsigned m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

static bool is_route_errno(int e)
{
	return e == ENETUNREACH || e == EHOSTUNREACH || e == EADDRNOTAVAIL || e == ENODATA || e == ENOENT ||
	       e == ENODEV;
}

static void failed_cause(struct qp_view *v, const struct shim_stat_link_desc *d)
{
	unsigned want = mtu_bytes(d->path_mtu), port = mtu_bytes(d->active_mtu);

	if (d->failed_to == SHIM_STAT_QP_RTR && want && port && want > port)
		snprintf(v->cause, sizeof(v->cause), "MTU mismatch: the path MTU (%u) is larger than the port's "
			 "active MTU (%u)", want, port);
	else if (is_route_errno(d->err))
		snprintf(v->cause, sizeof(v->cause), "no route to the GID: no path or address handle for the peer (%s)",
			 strerror(d->err));
	else if (d->failed_to == SHIM_STAT_QP_RTR && d->err == EINVAL)
		snprintf(v->cause, sizeof(v->cause), "the kernel refused the RTR attributes (EINVAL): a path MTU, GID "
			 "or address the port does not take, or a request the peer's CM had given up");
	else
		snprintf(v->cause, sizeof(v->cause), "the move to %s failed: %s", shim_stat_qp_name(d->failed_to),
			 strerror(d->err));
}

static bool reason_cause(struct qp_view *v, unsigned reason)
{
	const char *t = NULL;

	switch (reason) {
	case SHIM_REASON_NONE: return false;
	case SHIM_REASON_PEER_NO_SHIM:
		t = "peer not listening: no rdma_cm listener answered at the peer (it runs without the shim, or "
		    "its port is not whitelisted there)";
		break;
	case SHIM_REASON_CM_REJECTED: t = "the peer rejected the CM request"; break;
	case SHIM_REASON_CM_UNREACHABLE:
		t = "no route to the GID: address or route resolution failed, or the peer is unreachable over RDMA";
		break;
	case SHIM_REASON_CM_TIMEOUT:
		t = "the peer did not answer in time (a CM step timed out: the peer overloaded or gone, or packets "
		    "lost)";
		break;
	case SHIM_REASON_RDMA_PORT_DOWN: t = "the port is down"; break;
	case SHIM_REASON_NO_RDMA_DEVICE: t = "no usable RDMA device for the address"; break;
	default: break;
	}
	if (t)
		snprintf(v->cause, sizeof(v->cause), "%s", t);
	else
		snprintf(v->cause, sizeof(v->cause), "%s: %s", shim_reason_name((enum shim_reason)reason),
			 shim_reason_text((enum shim_reason)reason));
	return true;
}

static void verbs_cause(struct qp_view *v, const struct shim_stat_link_desc *d)
{
	const char *w = d->verbs_err;

	if (d->verbs_wc) {
		switch (d->verbs_detail) {
		case IBV_WC_RETRY_EXC_ERR:
			w = "retry count exceeded: the peer's HCA stopped acknowledging (the peer host or the path is "
			    "gone)";
			break;
		case IBV_WC_RNR_RETRY_EXC_ERR: w = "RNR retry count exceeded: the peer had no receive posted"; break;
		case IBV_WC_REM_ACCESS_ERR: w = "remote access error: the peer refused a WRITE (its key or range)"; break;
		case IBV_WC_WR_FLUSH_ERR: w = "flushed: the QP was in error already"; break;
		default:
			snprintf(v->cause, sizeof(v->cause), "a completion failed: %s (status %d)", d->verbs_err,
				 d->verbs_detail);
			return;
		}
	} else if (!strcmp(w, "stopped")) {
		w = "stopped by this end (a failover or a hand-off)";
	} else if (!strcmp(w, "disconnected")) {
		w = "the peer disconnected (its CM DREQ came)";
	} else if (!strcmp(w, "completion_timeout")) {
		w = "no completion within the bound: the peer or the path stalled";
	} else if (!strcmp(w, "port_down")) {
		w = "the port went down";
	} else if (!strcmp(w, "injected")) {
		w = "broken on purpose by a test (RDMASHIM_TEST_FAIL_LINK_KB)";
	} else if (!strcmp(w, "violation") || !strncmp(w, "bad_", 4)) {
		snprintf(v->cause, sizeof(v->cause), "the peer broke the protocol (%s)", d->verbs_err);
		return;
	} else {
		snprintf(v->cause, sizeof(v->cause), "%s failed (%d)", d->verbs_err, d->verbs_detail);
		return;
	}
	snprintf(v->cause, sizeof(v->cause), "%s", w);
}

static void progress_cause(struct qp_view *v, const struct shim_stat_link_desc *d)
{
	switch (d->qp_state) {
	case SHIM_STAT_QP_RESET: snprintf(v->cause, sizeof(v->cause), "just made: its move to INIT has not run yet"); break;
	case SHIM_STAT_QP_INIT:
		snprintf(v->cause, sizeof(v->cause), "%s",
			 d->client ? "the peer's CM request is being answered"
				   : "waiting for the peer's CM reply: its shim has not accepted the request yet "
				     "(peer not listening, or slow)");
		break;
	case SHIM_STAT_QP_RTR: snprintf(v->cause, sizeof(v->cause), "its move to RTS has not run yet"); break;
	default: break;
	}
}

void qp_view_of(struct qp_view *v, const struct snap *s, const struct snap_link *l, const struct kqps *k)
{
	const struct shim_stat_link_desc *d = &l->rec.l;
	bool gone = d->gone;
	unsigned st = d->qp_state;

	memset(v, 0, sizeof(*v));
	v->link = l;
	v->proc = &s->procs[l->proc];
	/* A gone link's number may be another QP's by now. */
	v->k = gone ? NULL : kqp_find(k, d->dev, d->lqpn);
	v->state = v->k && v->k->state[0] ? v->k->state : shim_stat_qp_name(st);
	v->not_rts = !gone && strcmp(v->state, "RTS") != 0;
	if (d->failed_to != SHIM_STAT_QP_NONE) {
		v->missing = step_from(d->failed_to - 1u);
		failed_cause(v, d);
		return;
	}
	if (!v->not_rts && !gone)
		return;
	if (st == SHIM_STAT_QP_ERR || (v->k && strcmp(v->state, shim_stat_qp_name(st))))
		v->missing = d->reached < SHIM_STAT_QP_RTS ? step_from(d->reached) : NULL;
	else
		v->missing = step_from(st);
	if (reason_cause(v, d->reason))
		return;
	if (d->verbs_err[0]) {
		verbs_cause(v, d);
		return;
	}
	if (v->k && strcmp(v->state, shim_stat_qp_name(st))) {
		snprintf(v->cause, sizeof(v->cause), "the kernel has the QP in %s, the shim last saw %s: it changed "
			 "and the shim has not noticed yet", v->state, shim_stat_qp_name(st));
		return;
	}
	if (gone)
		snprintf(v->cause, sizeof(v->cause), "its connection's handshake ended before RTS");
	else
		progress_cause(v, d);
}

/* The fds of the connections on l (same process, same QP number). */
static void fds_of(const struct snap *s, const struct snap_link *l, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < s->nconn && at + 1 < len; i++) {
		const struct snap_conn *c = &s->conns[i];
		int n;

		if (c->proc != l->proc || !l->rec.l.lqpn || c->rec.d.qpn != l->rec.l.lqpn)
			continue;
		n = snprintf(buf + at, len - at, "%s%d", at ? "," : "", c->rec.d.fd);
		if (n < 0 || (size_t)n >= len - at) {
			buf[at] = '\0';
			break;
		}
		at += (size_t)n;
	}
	if (!at)
		snprintf(buf, len, "-");
}

/* An address, with its port only when it has one (a link's have none). */
static void addr_of(const struct shim_endpoint *ep, char *buf, size_t len)
{
	char *colon;

	shim_endpoint_format(ep, buf, len);
	if (!ep->port && (colon = strrchr(buf, ':')) && colon != buf && colon[-1] != ':')
		*colon = '\0';
}

static double secs(uint64_t now, uint64_t then)
{
	return then && now > then ? (double)(now - then) / 1e9 : 0;
}

int qp_print_table(FILE *out, const struct snap *s, const struct kqps *k, const char *kernel)
{
	int bad = 0;
	size_t readable = 0;

	if (s->nlink)
		fprintf(out, "%-7s %-15s %-10s %4s %8s %8s %-6s %10s %5s %-12s %8s %-24s %s\n", "PID", "PROGRAM", "DEVICE",
			"PORT", "LQPN", "RQPN", "STATE", "SQ_PSN", "CONNS", "FDS", "AGE_S", "PEER", "LAST_VERBS_ERROR");
	for (size_t i = 0; i < s->nlink; i++) {
		const struct snap_link *l = &s->links[i];
		const struct shim_stat_link_desc *d = &l->rec.l;
		char peer[SHIM_ENDPOINT_STRLEN], fds[64], rqpn[24], psn[24], dev[sizeof(d->dev)];
		struct qp_view v;

		qp_view_of(&v, s, l, k);
		bad += v.not_rts;
		memcpy(dev, d->dev, sizeof(dev));
		dev[sizeof(dev) - 1] = '\0';
		addr_of(&l->rec.d.peer, peer, sizeof(peer));
		fds_of(s, l, fds, sizeof(fds));
		if (v.k && v.k->rqpn >= 0)
			snprintf(rqpn, sizeof(rqpn), "%ld", v.k->rqpn);
		else
			snprintf(rqpn, sizeof(rqpn), d->rqpn ? "%u" : "-", d->rqpn);
		if (v.k && v.k->sq_psn >= 0)
			snprintf(psn, sizeof(psn), "%lld", v.k->sq_psn);
		else
			snprintf(psn, sizeof(psn), d->reached >= SHIM_STAT_QP_RTS ? "%u" : "-", d->sq_psn);
		fprintf(out, "%-7d %-15.15s %-10.10s %4u %8u %8s %-6.6s %10s %5llu %-12.12s %8.1f %-24s %.44s%s\n",
			v.proc->pid, v.proc->hdr.comm, dev, d->port, d->lqpn, rqpn, v.state, psn,
			(unsigned long long)l->rec.conns, fds, secs(s->now_unix_ns, l->rec.born_unix_ns), peer,
			d->verbs_err[0] ? d->verbs_err : "-", l->inconsistent ? "  inconsistent" : "");
		if (d->gone)
			fprintf(out, "  gone %.1f s ago\n", secs(s->now_unix_ns, d->gone_unix_ns));
		if (v.cause[0])
			fprintf(out, "  %s%s%s%s\n", v.missing ? "missing " : "", v.missing ? v.missing : "",
				v.missing ? ": " : "", v.cause);
	}
	for (size_t i = 0; i < s->nproc; i++) {
		const struct snap_proc *p = &s->procs[i];

		if (!p->error) {
			readable++;
			continue;
		}
		if (p->pid)
			fprintf(out, "process %d (uid %u): %s\n", p->pid, p->uid, p->error);
		else
			fprintf(out, "processes of uid %u: %s\n", p->uid, p->error);
	}
	if (readable && !s->nlink)
		fprintf(out, "no RDMA queue pair in %zu process(es) under the shim\n", readable);
	if (s->nlink)
		fprintf(out, "kernel view: %s\n", kernel);
	return bad;
}

static void json_str(FILE *out, const char *str, size_t max)
{
	fputc('"', out);
	for (size_t i = 0; i < max && str[i]; i++) {
		unsigned char c = (unsigned char)str[i];

		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

static void json_opt_str(FILE *out, const char *key, const char *v)
{
	fprintf(out, ",\"%s\":", key);
	if (v)
		json_str(out, v, 256);
	else
		fputs("null", out);
}

static void json_conns(FILE *out, const struct snap *s, const struct snap_link *l)
{
	bool first = true;

	fputs(",\"connections\":[", out);
	for (size_t i = 0; i < s->nconn; i++) {
		const struct snap_conn *c = &s->conns[i];
		char lo[SHIM_ENDPOINT_STRLEN], pe[SHIM_ENDPOINT_STRLEN];

		if (c->proc != l->proc || !l->rec.l.lqpn || c->rec.d.qpn != l->rec.l.lqpn)
			continue;
		shim_endpoint_format(&c->rec.d.local, lo, sizeof(lo));
		shim_endpoint_format(&c->rec.d.peer, pe, sizeof(pe));
		fprintf(out, "%s{\"fd\":%d,\"local\":\"%s\",\"peer\":\"%s\",\"state\":\"%s\"}", first ? "" : ",",
			c->rec.d.fd, lo, pe, shim_stat_state_name(c->rec.d.state));
		first = false;
	}
	fputs("]", out);
}

static void json_qp(FILE *out, const struct snap *s, const struct snap_link *l, const struct qp_view *v)
{
	const struct shim_stat_link_desc *d = &l->rec.l;
	char lo[SHIM_ENDPOINT_STRLEN], pe[SHIM_ENDPOINT_STRLEN];

	addr_of(&l->rec.d.local, lo, sizeof(lo));
	addr_of(&l->rec.d.peer, pe, sizeof(pe));
	fprintf(out, "{\"pid\":%d,\"program\":", v->proc->pid);
	json_str(out, v->proc->hdr.comm, sizeof(v->proc->hdr.comm));
	fputs(",\"device\":", out);
	json_str(out, d->dev, sizeof(d->dev));
	fprintf(out, ",\"port\":%u,\"lqpn\":%u,\"rqpn\":", d->port, d->lqpn);
	if (v->k && v->k->rqpn >= 0)
		fprintf(out, "%ld", v->k->rqpn);
	else
		fprintf(out, d->rqpn ? "%u" : "null", d->rqpn);
	fputs(",\"state\":", out);
	json_str(out, v->state, 16);
	fprintf(out, ",\"shim_state\":\"%s\",\"reached\":\"%s\"", shim_stat_qp_name(d->qp_state),
		shim_stat_qp_name(d->reached));
	json_opt_str(out, "kernel_state", v->k && v->k->state[0] ? v->k->state : NULL);
	fputs(",\"sq_psn\":", out);
	if (v->k && v->k->sq_psn >= 0)
		fprintf(out, "%lld", v->k->sq_psn);
	else
		fprintf(out, d->reached >= SHIM_STAT_QP_RTS ? "%u" : "null", d->sq_psn);
	fputs(",\"rq_psn\":", out);
	fprintf(out, v->k && v->k->rq_psn >= 0 ? "%lld" : "null", v->k ? v->k->rq_psn : 0);
	fprintf(out, ",\"kernel_pid\":");
	fprintf(out, v->k && v->k->pid >= 0 ? "%ld" : "null", v->k ? v->k->pid : 0);
	fprintf(out, ",\"role\":\"%s\",\"link\":%u,\"local\":\"%s\",\"peer\":\"%s\",\"conns\":%llu,\"held\":%llu,"
		"\"max_conns\":%u",
		d->client ? "client" : "server", d->num, lo, pe, (unsigned long long)l->rec.conns,
		(unsigned long long)l->rec.held, d->max_conns);
	json_conns(out, s, l);
	fprintf(out, ",\"age_s\":%.3f,\"gone\":%s,\"gone_s\":", secs(s->now_unix_ns, l->rec.born_unix_ns),
		d->gone ? "true" : "false");
	fprintf(out, d->gone ? "%.3f" : "null", secs(s->now_unix_ns, d->gone_unix_ns));
	json_opt_str(out, "missing_step", v->missing);
	json_opt_str(out, "cause", v->cause[0] ? v->cause : NULL);
	json_opt_str(out, "failed_step", d->failed_to ? shim_stat_qp_name(d->failed_to) : NULL);
	fputs(",\"errno\":", out);
	fprintf(out, d->failed_to ? "%d" : "null", d->err);
	json_opt_str(out, "reason", d->reason ? shim_reason_name((enum shim_reason)d->reason) : NULL);
	fputs(",\"last_verbs_error\":", out);
	if (d->verbs_err[0]) {
		fputs("{\"what\":", out);
		json_str(out, d->verbs_err, sizeof(d->verbs_err));
		fprintf(out, ",\"code\":%d,\"wc_status\":%s,\"age_s\":%.3f}", d->verbs_detail,
			d->verbs_wc ? "true" : "false", secs(s->now_unix_ns, d->verbs_err_unix_ns));
	} else {
		fputs("null", out);
	}
	fprintf(out, ",\"consistent\":%s}", l->inconsistent ? "false" : "true");
}

int qp_print_json(FILE *out, const struct snap *s, const struct kqps *k, const char *kernel)
{
	int bad = 0;

	fprintf(out, "{\"time_unix\":%.3f,\"kernel\":\"%s\",\"processes\":[", (double)s->now_unix_ns / 1e9, kernel);
	for (size_t i = 0; i < s->nproc; i++) {
		const struct snap_proc *p = &s->procs[i];

		fprintf(out, "%s{\"pid\":", i ? "," : "");
		fprintf(out, p->pid ? "%d" : "null", p->pid);
		fprintf(out, ",\"uid\":%u,\"program\":", p->uid);
		if (p->error)
			fputs("null", out);
		else
			json_str(out, p->hdr.comm, sizeof(p->hdr.comm));
		json_opt_str(out, "error", p->error);
		fputs("}", out);
	}
	fputs("],\"qps\":[", out);
	for (size_t i = 0; i < s->nlink; i++) {
		struct qp_view v;

		qp_view_of(&v, s, &s->links[i], k);
		bad += v.not_rts;
		if (i)
			fputs(",", out);
		json_qp(out, s, &s->links[i], &v);
	}
	fputs("]}\n", out);
	return bad;
}
