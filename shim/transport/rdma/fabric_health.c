/* The health of this host's RDMA ports; see fabric_health.h. */
#include "fabric_health.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "real.h"

/* RoCE v2 puts IP, UDP, BTH and ICRC around an RDMA MTU's payload; the
 * kernel derives active_mtu from the netdev MTU less this much. */
#define ROCE_HEADERS 58

/* The defaults: a fault counter that should never move on a healthy link
 * may not grow at all; the sequence counters, which move with ordinary
 * loss and retransmission, get some room; the congestion counters are
 * shown and never judged (their level depends on the fabric's ECN setup). */
static const struct {
	const char *name;
	unsigned long long max;
} default_limits[] = {
	{ "link_downed", 0 },
	{ "symbol_error", 0 },
	{ "port_rcv_errors", 0 },
	{ "port_xmit_discards", 0 },
	{ "local_link_integrity_errors", 0 },
	{ "excessive_buffer_overrun_errors", 0 },
	{ "local_ack_timeout_err", 0 },
	{ "rnr_nak_retry_err", 0 },
	{ "req_cqe_error", 0 },
	{ "resp_cqe_error", 0 },
	{ "out_of_buffer", 0 },
	{ "retry_exceeded_err", 0 },
	{ "retry_rnr_exceeded_err", 0 },
	{ "out_of_sequence", 100 },
	{ "packet_seq_err", 100 },
	{ "rcvd_seq_err", 100 },
	{ "out_of_seq_request", 100 },
	{ "duplicate_request", 100 },
};

void shim_fh_limits_default(struct shim_fh_limits *lim)
{
	memset(lim, 0, sizeof(*lim));
	for (size_t i = 0; i < sizeof(default_limits) / sizeof(default_limits[0]); i++) {
		snprintf(lim->l[i].name, sizeof(lim->l[i].name), "%s", default_limits[i].name);
		lim->l[i].max = default_limits[i].max;
	}
	lim->n = sizeof(default_limits) / sizeof(default_limits[0]);
}

int shim_fh_limits_set(struct shim_fh_limits *lim, const char *spec)
{
	const char *eq = strchr(spec, '=');
	size_t len = eq ? (size_t)(eq - spec) : 0;
	unsigned long long max = 0;
	bool off = false;
	char *end;
	unsigned i;

	if (!eq || len == 0 || len >= SHIM_NIC_COUNTER_NAME || !eq[1])
		return -EINVAL;
	if (strcmp(eq + 1, "off") == 0) {
		off = true;
	} else {
		/* strtoull would take a sign or leading blanks too. */
		if (eq[1] < '0' || eq[1] > '9')
			return -EINVAL;
		errno = 0;
		max = strtoull(eq + 1, &end, 10);
		if (errno || *end)
			return -EINVAL;
	}
	for (i = 0; i < lim->n; i++)
		if (strlen(lim->l[i].name) == len && strncmp(lim->l[i].name, spec, len) == 0)
			break;
	if (i == lim->n) {
		if (lim->n >= SHIM_FH_LIMITS_MAX)
			return -ENOSPC;
		memcpy(lim->l[i].name, spec, len);
		lim->l[i].name[len] = '\0';
		lim->n++;
	}
	lim->l[i].max = max;
	lim->l[i].off = off;
	return 0;
}

const char *shim_fh_bare_name(const char *counter)
{
	return strncmp(counter, "hw.", 3) == 0 ? counter + 3 : counter;
}

const unsigned long long *shim_fh_limit_of(const struct shim_fh_limits *lim, const char *counter)
{
	const char *bare = shim_fh_bare_name(counter);

	for (unsigned i = 0; i < lim->n; i++)
		if (strcmp(lim->l[i].name, bare) == 0)
			return lim->l[i].off ? NULL : &lim->l[i].max;
	return NULL;
}

bool shim_fh_counter_shown(const char *name)
{
	return shim_nic_counter_is_error(name) || strstr(name, "out_of_buffer") || strstr(name, "cnp") ||
	       strstr(name, "ecn") || strstr(name, "cqe_error");
}

static void add_line(char (*lines)[SHIM_FH_LINE], unsigned *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void add_line(char (*lines)[SHIM_FH_LINE], unsigned *n, const char *fmt, ...)
{
	va_list ap;

	if (*n >= SHIM_FH_LINES_MAX)
		return;
	va_start(ap, fmt);
	vsnprintf(lines[*n], SHIM_FH_LINE, fmt, ap);
	va_end(ap);
	(*n)++;
}

/* One sysfs attribute's first line, without its newline. 0, -ENOENT when
 * the file is missing, another -errno when it does not read (some
 * attributes fail with EINVAL on a port that is down or a GID slot that is
 * empty), -EILSEQ when it is empty or holds what no attribute holds
 * (control characters: a garbled file). */
static int fh_read_attr(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC); /* not hooked */
	ssize_t n;
	int rc;

	if (fd < 0)
		return -errno;
	n = REAL(read)(fd, buf, len - 1);
	rc = n < 0 ? -errno : 0;
	REAL(close)(fd);
	if (rc < 0)
		return rc;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	if (!buf[0])
		return -EILSEQ;
	for (char *c = buf; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f)
			return -EILSEQ;
	return 0;
}

static int port_attr(const struct shim_fh_report *r, const struct shim_fh_port *p, const char *attr, char *buf,
		     size_t len)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%u/%s", r->root, p->dev, p->num, attr);
	return fh_read_attr(path, buf, len);
}

static const char *read_failure(int rc)
{
	return rc == -EILSEQ ? "garbled" : rc == -ENOENT ? "missing" : strerror(-rc);
}

/* "4: ACTIVE" -> code 4, text "ACTIVE"; false when it is not that shape. */
static bool parse_state(const char *line, int *code, char *text, size_t len)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(line, &end, 10);
	if (errno || end == line || end[0] != ':' || end[1] != ' ' || !end[2] || v < 0 || v > 255)
		return false;
	*code = (int)v;
	snprintf(text, len, "%s", end + 2);
	return true;
}

static void read_state(const struct shim_fh_report *r, struct shim_fh_port *p)
{
	char line[SHIM_FH_TEXT];
	int code, rc;

	p->state_code = -1;
	rc = port_attr(r, p, "state", line, sizeof(line));
	if (rc == 0 && !parse_state(line, &p->state_code, p->state, sizeof(p->state)))
		rc = -EILSEQ;
	if (rc < 0)
		add_line(p->problems, &p->n_problems, "state file %s: the port's state is unknown", read_failure(rc));
	rc = port_attr(r, p, "phys_state", line, sizeof(line));
	if (rc == 0 && !parse_state(line, &code, p->phys_state, sizeof(p->phys_state)))
		rc = -EILSEQ;
	if (rc < 0 && rc != -ENOENT)
		add_line(p->notes, &p->n_notes, "phys_state file %s", read_failure(rc));
	if (port_attr(r, p, "rate", p->rate, sizeof(p->rate)) < 0)
		p->rate[0] = '\0';
	if (port_attr(r, p, "link_layer", p->link_layer, sizeof(p->link_layer)) < 0)
		p->link_layer[0] = '\0';
}

/* A netdev's MTU; -1 when unknown. */
static int netdev_mtu(const struct shim_fh_report *r, const char *netdev)
{
	char path[512], line[32], *end;
	long v;

	snprintf(path, sizeof(path), "%s/class/net/%s/mtu", r->root, netdev);
	if (fh_read_attr(path, line, sizeof(line)) < 0)
		return -1;
	errno = 0;
	v = strtol(line, &end, 10);
	return errno || *end || v <= 0 || v > 1 << 20 ? -1 : (int)v;
}

static bool gid_is_zero(const char *gid)
{
	for (const char *c = gid; *c; c++)
		if (*c != '0' && *c != ':')
			return false;
	return true;
}

/* The GIDs in use (not all zero), with their types and netdevs; the first
 * netdev found is the port's. */
static void read_gids(const struct shim_fh_report *r, struct shim_fh_port *p)
{
	char dir[512];
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/ports/%u/gids", r->root, p->dev, p->num);
	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d)) && p->n_gids < SHIM_FH_GIDS_MAX) {
		struct shim_fh_gid *g = &p->gids[p->n_gids];
		char attr[96], *end;
		unsigned long idx;

		if (e->d_name[0] == '.')
			continue;
		errno = 0;
		idx = strtoul(e->d_name, &end, 10);
		if (errno || *end || idx > 0xffff)
			continue;
		memset(g, 0, sizeof(*g));
		g->index = (unsigned)idx;
		snprintf(attr, sizeof(attr), "gids/%lu", idx);
		if (port_attr(r, p, attr, g->gid, sizeof(g->gid)) < 0 || gid_is_zero(g->gid))
			continue;
		snprintf(attr, sizeof(attr), "gid_attrs/types/%lu", idx);
		if (port_attr(r, p, attr, g->type, sizeof(g->type)) < 0)
			g->type[0] = '\0';
		snprintf(attr, sizeof(attr), "gid_attrs/ndevs/%lu", idx);
		if (port_attr(r, p, attr, g->netdev, sizeof(g->netdev)) < 0)
			g->netdev[0] = '\0';
		if (g->netdev[0] && !p->netdev[0])
			memcpy(p->netdev, g->netdev, sizeof(p->netdev));
		p->n_gids++;
	}
	closedir(d);
	/* readdir's order is the file system's: show them by index. */
	for (unsigned i = 1; i < p->n_gids; i++)
		for (unsigned j = i; j > 0 && p->gids[j - 1].index > p->gids[j].index; j--) {
			struct shim_fh_gid t = p->gids[j];

			p->gids[j] = p->gids[j - 1];
			p->gids[j - 1] = t;
		}
}

/* The port's netdev when no GID names one: an mlx5 function's device
 * folder lists its netdev under device/net. */
static void find_netdev(const struct shim_fh_report *r, struct shim_fh_port *p)
{
	char dir[512];
	struct dirent *e;
	DIR *d;

	if (p->netdev[0])
		return;
	snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/device/net", r->root, p->dev);
	d = opendir(dir);
	if (!d)
		return;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof(p->netdev)) {
			snprintf(p->netdev, sizeof(p->netdev), "%s", e->d_name);
			break;
		}
	closedir(d);
}

static void scan_port(struct shim_fh_report *r, const char *dev, unsigned num)
{
	struct shim_fh_port *p;
	char ib[512];

	if (r->n_ports >= SHIM_FH_PORTS_MAX) {
		r->ports_left_out = true;
		return;
	}
	p = &r->ports[r->n_ports++];
	memset(p, 0, sizeof(*p));
	snprintf(p->dev, sizeof(p->dev), "%.*s", (int)sizeof(p->dev) - 1, dev);
	p->num = num;
	p->active_mtu = -1;
	p->netdev_mtu = -1;
	read_state(r, p);
	read_gids(r, p);
	find_netdev(r, p);
	if (p->netdev[0])
		p->netdev_mtu = netdev_mtu(r, p->netdev);
	snprintf(ib, sizeof(ib), "%s/class/infiniband", r->root);
	p->has_counters = shim_nic_counters_read_if(ib, p->dev, p->num, shim_fh_counter_shown, &p->before) == 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* A folder's entries that are not dot files, sorted; how many. */
static unsigned list_dir(const char *path, char (*names)[SHIM_FH_TEXT], unsigned max, int *err)
{
	struct dirent *e;
	unsigned n = 0;
	DIR *d = opendir(path);

	*err = d ? 0 : -errno;
	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max)
		if (e->d_name[0] != '.' && strlen(e->d_name) < SHIM_FH_TEXT)
			snprintf(names[n++], SHIM_FH_TEXT, "%s", e->d_name);
	closedir(d);
	qsort(names, n, SHIM_FH_TEXT, by_name);
	return n;
}

void shim_fh_scan(const char *sysroot, struct shim_fh_report *r)
{
	char devs[SHIM_FH_PORTS_MAX][SHIM_FH_TEXT], nums[SHIM_FH_PORTS_MAX][SHIM_FH_TEXT], path[512];
	unsigned n_devs;
	int err;

	memset(r, 0, sizeof(*r));
	snprintf(r->root, sizeof(r->root), "%s", sysroot && *sysroot ? sysroot : "/sys");
	snprintf(path, sizeof(path), "%s/class/infiniband", r->root);
	n_devs = list_dir(path, devs, SHIM_FH_PORTS_MAX, &err);
	if (err < 0 && err != -ENOENT)
		snprintf(r->why, sizeof(r->why), "no RDMA device: %.100s can not be read (%s)", path, strerror(-err));
	else
		snprintf(r->why, sizeof(r->why), "no RDMA device: %.100s %s", path,
			 err < 0 ? "does not exist (no RDMA driver loaded: load rdma_rxe or a NIC driver)" : "is empty");
	for (unsigned i = 0; i < n_devs; i++) {
		unsigned n_nums;

		snprintf(path, sizeof(path), "%.255s/class/infiniband/%.63s/ports", r->root, devs[i]);
		n_nums = list_dir(path, nums, SHIM_FH_PORTS_MAX, &err);
		r->n_devices++;
		for (unsigned j = 0; j < n_nums; j++) {
			char *end;
			unsigned long num;

			errno = 0;
			num = strtoul(nums[j], &end, 10);
			if (!errno && !*end && num > 0 && num < 256)
				scan_port(r, devs[i], (unsigned)num);
		}
	}
	if (r->n_devices && !r->n_ports)
		snprintf(r->why, sizeof(r->why), "no usable RDMA device: %u device(s) under %.80s/class/infiniband, none with a port",
			 r->n_devices, r->root);
	else if (r->n_ports)
		r->why[0] = '\0';
	r->status = r->n_ports ? SHIM_FH_HEALTHY : SHIM_FH_NO_DEVICE;
}

bool shim_fh_counter_delta(const struct shim_nic_counters *before, const struct shim_nic_counters *after, unsigned i,
			   unsigned long long *delta)
{
	for (unsigned j = 0; j < before->n; j++)
		if (strcmp(before->name[j], after->name[i]) == 0) {
			/* A counter that went back was reset (a driver reload):
			 * nothing is known to have grown. */
			*delta = after->value[i] >= before->value[j] ? after->value[i] - before->value[j] : 0;
			return true;
		}
	return false;
}

bool shim_fh_delta(const struct shim_fh_port *p, unsigned i, unsigned long long *delta)
{
	return shim_fh_counter_delta(&p->before, &p->after, i, delta);
}

bool shim_fh_state_active(int state_code)
{
	return state_code == SHIM_FH_STATE_ACTIVE;
}

bool shim_fh_mtu_fits(int active_mtu, int netdev_mtu)
{
	return active_mtu <= netdev_mtu - ROCE_HEADERS;
}

unsigned shim_fh_counters_over(const struct shim_nic_counters *before, const struct shim_nic_counters *after,
			       const struct shim_fh_limits *lim, struct shim_fh_over *out, unsigned max)
{
	unsigned n = 0;

	for (unsigned i = 0; i < after->n; i++) {
		const unsigned long long *limit = shim_fh_limit_of(lim, after->name[i]);
		unsigned long long d;

		if (!limit || !shim_fh_counter_delta(before, after, i, &d) || d <= *limit)
			continue;
		if (n < max) {
			memcpy(out[n].name, after->name[i], sizeof(out[n].name));
			out[n].delta = d;
			out[n].limit = *limit;
		}
		n++;
	}
	return n;
}

enum shim_fh_change shim_fh_watch_look(struct shim_fh_watch *w, const char *sysroot, const char *dev, unsigned port,
				       const struct shim_fh_limits *lim, struct shim_nic_counters *prev,
				       struct shim_fh_over *why)
{
	static struct shim_nic_counters now; /* large: off the stack; the watch's thread only */
	char ib[300];
	unsigned over;

	snprintf(ib, sizeof(ib), "%.280s/class/infiniband", sysroot && *sysroot ? sysroot : "/sys");
	if (shim_nic_counters_read_if(ib, dev, port, shim_fh_counter_shown, &now) < 0)
		now.n = now.n_bad = 0; /* none, or gone: nothing can be over */
	if (prev)
		*prev = w->seen;
	over = w->have_seen ? shim_fh_counters_over(&w->seen, &now, lim, why, 1) : 0;
	w->seen = now;
	w->have_seen = true;
	if (over && !w->faulty) {
		w->faulty = true;
		w->why = *why;
		return SHIM_FH_FAULTY;
	}
	if (over) {
		w->why = *why;
		return SHIM_FH_SAME;
	}
	if (w->faulty) {
		w->faulty = false;
		*why = w->why;
		return SHIM_FH_RECOVERED;
	}
	return SHIM_FH_SAME;
}

/* Counters in name order (readdir gives the file system's), counters/
 * before hw_counters/: a reader compares two runs line by line. */
static void sort_counters(struct shim_nic_counters *c)
{
	for (unsigned i = 1; i < c->n; i++)
		for (unsigned j = i; j > 0 && strcmp(c->name[j - 1], c->name[j]) > 0; j--) {
			char name[SHIM_NIC_COUNTER_NAME];
			unsigned long long v = c->value[j];

			memcpy(name, c->name[j], sizeof(name));
			memcpy(c->name[j], c->name[j - 1], sizeof(name));
			memcpy(c->name[j - 1], name, sizeof(name));
			c->value[j] = c->value[j - 1];
			c->value[j - 1] = v;
		}
}

static void judge_counters(const struct shim_fh_report *r, struct shim_fh_port *p, const struct shim_fh_limits *lim)
{
	char ib[512];

	if (!p->has_counters)
		return;
	snprintf(ib, sizeof(ib), "%s/class/infiniband", r->root);
	if (shim_nic_counters_read_if(ib, p->dev, p->num, shim_fh_counter_shown, &p->after) < 0) {
		p->counters_gone = true;
		p->after.n = 0;
		add_line(p->problems, &p->n_problems,
			 "counters vanished during the window (device removed or driver reloaded?)");
		return;
	}
	sort_counters(&p->after);
	{
		struct shim_fh_over over[SHIM_FH_LINES_MAX];
		unsigned n = shim_fh_counters_over(&p->before, &p->after, lim, over, SHIM_FH_LINES_MAX);

		for (unsigned i = 0; i < n && i < SHIM_FH_LINES_MAX; i++)
			add_line(p->problems, &p->n_problems, "counter %s grew by %llu (limit %llu)",
				 shim_fh_bare_name(over[i].name), over[i].delta, over[i].limit);
	}
	for (unsigned i = 0; i < p->after.n_bad; i++)
		add_line(p->notes, &p->n_notes, "counter %s does not read as a number: left out",
			 shim_fh_bare_name(p->after.bad[i]));
}

enum shim_fh_status shim_fh_judge(struct shim_fh_report *r, const struct shim_fh_limits *lim)
{
	if (!r->n_ports)
		return r->status = SHIM_FH_NO_DEVICE;
	r->status = SHIM_FH_HEALTHY;
	for (unsigned i = 0; i < r->n_ports; i++) {
		struct shim_fh_port *p = &r->ports[i];

		if (p->state_code >= 0 && !shim_fh_state_active(p->state_code))
			add_line(p->problems, &p->n_problems, "port is %s, not ACTIVE%s%s%s", p->state,
				 p->phys_state[0] ? " (physical state " : "", p->phys_state,
				 p->phys_state[0] ? ")" : "");
		if (p->active_mtu > 0 && p->netdev_mtu > 0 && strcmp(p->link_layer, "Ethernet") == 0 &&
		    !shim_fh_mtu_fits(p->active_mtu, p->netdev_mtu))
			add_line(p->problems, &p->n_problems,
				 "active MTU %d does not fit netdev %s's MTU %d (needs %d)", p->active_mtu, p->netdev,
				 p->netdev_mtu, p->active_mtu + ROCE_HEADERS);
		judge_counters(r, p, lim);
		if (p->n_problems)
			r->status = SHIM_FH_DEGRADED;
	}
	return r->status;
}
