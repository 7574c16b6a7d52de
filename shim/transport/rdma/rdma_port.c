/* The port watch; see rdma_port.h. */
#include "rdma_port.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "bgthread.h"
#include "fabric_health.h"
#include "nic_counters.h"
#include "rdma_link.h"
#include "real.h"
#include "trace.h"

#define WATCH_PORTS_MAX 16
#define WATCH_DEVICES_MAX 8
#define WATCH_LOOK_MS 1000

struct watched_port {
	struct ibv_context *ctx;
	uint8_t num;
	bool active; /* atomic: the watch's thread writes, anyone reads */
	bool faulty; /* the same: a counter over its limit at the last look */
	char dev[IBV_SYSFS_NAME_MAX];
	struct shim_fh_watch watch; /* the watch's thread only */
};

static struct watched_port ports[WATCH_PORTS_MAX];
/* Published with a release store once ports[] below it is set up; pairs
 * with the acquire load in shim_rdma_port_down(). */
static unsigned n_ports;
static unsigned n_set_up; /* the start's count, before n_ports says it */
static struct ibv_context *devices[WATCH_DEVICES_MAX];
static unsigned n_devices;
/* rdmashim health's default limits (fabric_health.h): the watch judges a
 * look as health judges its default one-second window. */
static struct shim_fh_limits limits;

static const struct watched_port *known(const struct ibv_context *ctx, uint8_t port)
{
	unsigned n = __atomic_load_n(&n_ports, __ATOMIC_ACQUIRE);

	for (unsigned i = 0; i < n; i++)
		if (ports[i].ctx == ctx && ports[i].num == port)
			return &ports[i];
	return NULL;
}

bool shim_rdma_port_down(const struct ibv_context *ctx, uint8_t port)
{
	const struct watched_port *p = known(ctx, port);

	return p && !__atomic_load_n(&p->active, __ATOMIC_RELAXED);
}

bool shim_rdma_port_faulty(const struct ibv_context *ctx, uint8_t port)
{
	const struct watched_port *p = known(ctx, port);

	return p && __atomic_load_n(&p->faulty, __ATOMIC_RELAXED);
}

/* Only what counts a fault goes into the trace of growth: the congestion
 * counters health shows move on a healthy fabric under load. */
static void keep_faults(const struct shim_nic_counters *from, struct shim_nic_counters *to)
{
	to->n = to->n_bad = 0;
	for (unsigned i = 0; i < from->n; i++)
		if (shim_nic_counter_is_error(shim_fh_bare_name(from->name[i])) ||
		    shim_fh_limit_of(&limits, from->name[i])) {
			memcpy(to->name[to->n], from->name[i], sizeof(to->name[0]));
			to->value[to->n++] = from->value[i];
		}
}

/* The look at the counters: their growth traced, and judged as rdmashim
 * health judges it; a counter over its limit opens the breaker for the
 * port (no new link over it: SHIM_REASON_RDMA_PORT_FAULTY) until
 * a look finds none over its limit. */
static void look_at_counters(struct watched_port *p)
{
	static struct shim_nic_counters prev, before, now; /* the watch's thread only */
	char grew[SHIM_TRACE_LINE_MAX / 2];
	struct shim_fh_over why;
	enum shim_fh_change change = shim_fh_watch_look(&p->watch, NULL, p->dev, p->num, &limits, &prev, &why);

	keep_faults(&prev, &before);
	keep_faults(&p->watch.seen, &now);
	if (prev.n && shim_nic_counters_grew(&before, &now, grew, sizeof(grew)))
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.counters", -1, NULL, SHIM_REASON_NONE,
			   "\"device\":\"%s\",\"port\":%u,\"grew\":{%s}", p->dev, p->num, grew);
	if (change == SHIM_FH_SAME)
		return;
	__atomic_store_n(&p->faulty, change == SHIM_FH_FAULTY, __ATOMIC_RELAXED);
	if (change == SHIM_FH_FAULTY)
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.port", -1, NULL, SHIM_REASON_RDMA_PORT_FAULTY,
			   "\"device\":\"%s\",\"port\":%u,\"state\":\"faulty\",\"source\":\"counters\","
			   "\"counter\":\"%s\",\"delta\":%llu,\"limit\":%llu",
			   p->dev, p->num, why.name, why.delta, why.limit);
	else
		SHIM_TRACE(SHIM_TRACE_INFO, "rdma.port", -1, NULL, SHIM_REASON_NONE,
			   "\"device\":\"%s\",\"port\":%u,\"state\":\"recovered\",\"source\":\"counters\","
			   "\"counter\":\"%s\"",
			   p->dev, p->num, why.name);
}

/* The watch's thread, or the start before it runs. */
static void set_state(struct watched_port *p, bool active, const char *source)
{
	if (__atomic_load_n(&p->active, __ATOMIC_RELAXED) == active)
		return;
	__atomic_store_n(&p->active, active, __ATOMIC_RELAXED);
	if (active) {
		SHIM_TRACE(SHIM_TRACE_INFO, "rdma.port", -1, NULL, SHIM_REASON_NONE,
			   "\"device\":\"%s\",\"port\":%u,\"state\":\"active\",\"source\":\"%s\"", p->dev, p->num, source);
		return;
	}
	unsigned links = shim_rdma_links_break_on_port(p->ctx, p->num, "port_down");

	SHIM_TRACE(SHIM_TRACE_WARN, "rdma.port", -1, NULL, SHIM_REASON_RDMA_PORT_DOWN,
		   "\"device\":\"%s\",\"port\":%u,\"state\":\"down\",\"source\":\"%s\",\"links_broken\":%u", p->dev,
		   p->num, source, links);
}

static bool port_is_active(struct watched_port *p)
{
	struct ibv_port_attr attr;

	/* The judgement of rdmashim health (fabric_health.h). */
	return ibv_query_port(p->ctx, p->num, &attr) == 0 && shim_fh_state_active((int)attr.state);
}

static struct watched_port *watched(const struct ibv_context *ctx, uint8_t num)
{
	for (unsigned i = 0; i < n_ports; i++)
		if (ports[i].ctx == ctx && (ports[i].num == num))
			return &ports[i];
	return NULL;
}

/* Every event queued on ctx's async fd (made nonblocking at the start). An
 * event is acked at once: ibv_destroy_qp and ibv_destroy_cq wait for the
 * acks of their objects' events. false when the fd failed for good (a
 * device gone): the caller stops polling it rather than spin on it. */
static bool take_events(struct ibv_context *ctx)
{
	struct ibv_async_event ev;

	for (;;) {
		if (ibv_get_async_event(ctx, &ev) != 0)
			return errno == EAGAIN || errno == EINTR;
		enum ibv_event_type type = ev.event_type;
		uint8_t num = type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_PORT_ACTIVE ? ev.element.port_num : 0;
		struct watched_port *p = num ? watched(ctx, num) : NULL;

		ibv_ack_async_event(&ev);
		if (type == IBV_EVENT_PORT_ERR && p) {
			set_state(p, false, "port_err");
		} else if (type == IBV_EVENT_PORT_ACTIVE && p) {
			/* The event may be older than the state: ask. */
			set_state(p, port_is_active(p), "port_active");
		} else if (type == IBV_EVENT_DEVICE_FATAL) {
			for (unsigned i = 0; i < n_ports; i++)
				if (ports[i].ctx == ctx)
					set_state(&ports[i], false, "device_fatal");
		} else {
			/* QP and CQ faults reach their connections by their
			 * completions; the event says it first. */
			SHIM_TRACE(SHIM_TRACE_DEBUG, "rdma.async", -1, NULL, SHIM_REASON_NONE,
				   "\"device\":\"%s\",\"event\":\"%s\"", ibv_get_device_name(ctx->device),
				   ibv_event_type_str(type));
		}
	}
}

/* A device whose event fd failed: its ports are down for good, and the
 * looks go on saying so. */
static void unwatch(struct pollfd *pfd, struct ibv_context *ctx)
{
	pfd->fd = -1; /* poll skips it */
	for (unsigned i = 0; i < n_ports; i++)
		if (ports[i].ctx == ctx)
			set_state(&ports[i], false, "device_gone");
}

static void *watch_main(void *arg)
{
	struct pollfd pfd[WATCH_DEVICES_MAX];

	(void)arg;
	pthread_setname_np(pthread_self(), "rdmashim-port");
	for (unsigned i = 0; i < n_devices; i++)
		pfd[i] = (struct pollfd){ .fd = devices[i]->async_fd, .events = POLLIN };
	for (;;) {
		int ready = REAL(poll)(pfd, n_devices, WATCH_LOOK_MS);

		if (ready < 0 && errno != EINTR)
			return NULL;
		for (unsigned i = 0; ready > 0 && i < n_devices; i++) {
			if (pfd[i].fd < 0 || !pfd[i].revents)
				continue;
			if ((pfd[i].revents & (POLLERR | POLLHUP | POLLNVAL)) || !take_events(devices[i]))
				unwatch(&pfd[i], devices[i]);
		}
		/* The looks: a missed or coalesced event, and the counters (a
		 * port that just went down has its own counted here). */
		for (unsigned i = 0; i < n_ports; i++) {
			set_state(&ports[i], port_is_active(&ports[i]), "look");
			look_at_counters(&ports[i]);
		}
	}
}

static void add_ports(struct ibv_context *ctx)
{
	struct ibv_device_attr dev_attr;
	int flags;

	if (ibv_query_device(ctx, &dev_attr) != 0 || n_devices >= WATCH_DEVICES_MAX)
		return;
	flags = REAL(fcntl)(ctx->async_fd, F_GETFL);
	if (flags < 0 || REAL(fcntl)(ctx->async_fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return;
	devices[n_devices++] = ctx;
	for (unsigned num = 1; num <= dev_attr.phys_port_cnt && n_set_up < WATCH_PORTS_MAX; num++) {
		struct watched_port *p = &ports[n_set_up];

		p->ctx = ctx;
		p->num = (uint8_t)num;
		snprintf(p->dev, sizeof(p->dev), "%s", ibv_get_device_name(ctx->device));
		p->active = port_is_active(p);
		/* The first look takes the counters, judges nothing. */
		shim_fh_watch_look(&p->watch, NULL, p->dev, p->num, &limits, NULL, &(struct shim_fh_over){ 0 });
		SHIM_TRACE(p->active ? SHIM_TRACE_INFO : SHIM_TRACE_WARN, "rdma.port", -1, NULL,
			   p->active ? SHIM_REASON_NONE : SHIM_REASON_RDMA_PORT_DOWN,
			   "\"device\":\"%s\",\"port\":%u,\"state\":\"%s\",\"source\":\"start\",\"counters\":%u", p->dev,
			   p->num, p->active ? "active" : "down", p->watch.seen.n);
		n_set_up++;
	}
}

void shim_rdma_port_watch_start(struct ibv_context **ctxs, int n)
{
	shim_fh_limits_default(&limits);
	for (int i = 0; i < n; i++)
		add_ports(ctxs[i]);
	/* Release: pairs with the acquire in shim_rdma_port_down(). */
	__atomic_store_n(&n_ports, n_set_up, __ATOMIC_RELEASE);
	if (n_devices && shim_bgthread_start(watch_main, NULL) < 0)
		SHIM_TRACE(SHIM_TRACE_WARN, "rdma.port", -1, NULL, SHIM_REASON_INTERNAL_ERROR,
			   "\"state\":\"unwatched\"");
}
