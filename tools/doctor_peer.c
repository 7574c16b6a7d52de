/*
 * rdmashim doctor PEER: can this host reach PEER over RDMA? Resolves the
 * name, asks the kernel which local address a packet to it would leave
 * from (a UDP connect: nothing is sent), finds that address's netdev and
 * its RoCE v2 GID among the ports health read, compares the netdev's MTU
 * with the port's active MTU, then asks rdma_cm to resolve the address and
 * a route to it, as the shim does before every connection (rdma_setup.c),
 * with a short timeout. One line each, as cmd_doctor.c prints them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "doctor.h"

/* Each rdma_cm step's own timeout, and how long doctor waits for its event
 * beyond it. */
#define CM_TIMEOUT_MS 2000
#define CM_WAIT_MS (CM_TIMEOUT_MS + 1000)

#define NOTE_LEN 256

struct peer {
	const char *name;
	struct sockaddr_storage addr, local;
	socklen_t addr_len, local_len;
	char addr_text[INET6_ADDRSTRLEN], local_text[INET6_ADDRSTRLEN];
	char netdev[IF_NAMESIZE];
	const struct shim_fh_port *port; /* the port holding the local GID */
};

static void text_of(const struct sockaddr_storage *ss, char *buf, size_t len)
{
	const void *a = ss->ss_family == AF_INET ? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
						 : (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;

	if (!inet_ntop(ss->ss_family, a, buf, (socklen_t)len))
		snprintf(buf, len, "?");
}

/* The peer's first address (as a program's connect would take it). */
static bool resolve(struct peer *p)
{
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM }, *res = NULL;
	int rc = getaddrinfo(p->name, NULL, &hints, &res);

	if (rc != 0 || !res) {
		rdmashim_doctor_line("FAIL", "peer", "'%s' does not resolve (%s): give its address, or fix the name "
				     "(/etc/hosts, DNS)", p->name, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return false;
	}
	memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
	p->addr_len = res->ai_addrlen;
	freeaddrinfo(res);
	text_of(&p->addr, p->addr_text, sizeof(p->addr_text));
	if (strcmp(p->name, p->addr_text) == 0)
		rdmashim_doctor_line("PASS", "peer", "%s", p->addr_text);
	else
		rdmashim_doctor_line("PASS", "peer", "%s is %s", p->name, p->addr_text);
	return true;
}

/* The netdev that holds the local address (for a peer on this host
 * itself the route is lo's, but rdma_cm and the GIDs go by the address). */
static void netdev_of(struct peer *p)
{
	struct ifaddrs *ifs, *i;

	p->netdev[0] = '\0';
	if (getifaddrs(&ifs) < 0)
		return;
	for (i = ifs; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != p->local.ss_family)
			continue;
		if (p->local.ss_family == AF_INET
			    ? ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
				      ((struct sockaddr_in *)&p->local)->sin_addr.s_addr
			    : memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
				     &((struct sockaddr_in6 *)&p->local)->sin6_addr, sizeof(struct in6_addr)) == 0) {
			snprintf(p->netdev, sizeof(p->netdev), "%s", i->ifa_name);
			break;
		}
	}
	freeifaddrs(ifs);
}

/* The local address a packet to the peer would leave from: a UDP socket's
 * connect picks it (the kernel's route lookup) and sends nothing. */
static bool route(struct peer *p)
{
	struct sockaddr_storage to = p->addr;
	int fd = socket(p->addr.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int err = 0;

	if (p->addr.ss_family == AF_INET)
		((struct sockaddr_in *)&to)->sin_port = htons(9);
	else
		((struct sockaddr_in6 *)&to)->sin6_port = htons(9);
	p->local_len = sizeof(p->local);
	if (fd < 0 || connect(fd, (struct sockaddr *)&to, p->addr_len) < 0 ||
	    getsockname(fd, (struct sockaddr *)&p->local, &p->local_len) < 0)
		err = errno;
	if (fd >= 0)
		close(fd);
	if (err) {
		rdmashim_doctor_line("FAIL", "route", "no route to %s (%s): give this host an address on the peer's "
				     "subnet, or a route to it (ip route)", p->addr_text, strerror(err));
		return false;
	}
	text_of(&p->local, p->local_text, sizeof(p->local_text));
	netdev_of(p);
	rdmashim_doctor_line("PASS", "route", "%s leaves from %s (%s)", p->addr_text, p->local_text,
			     p->netdev[0] ? p->netdev : "netdev unknown");
	return true;
}

/* The GID RoCE gives an address: an IPv4 address mapped into IPv6. */
static void gid_of(const struct sockaddr_storage *ss, struct in6_addr *gid)
{
	if (ss->ss_family == AF_INET6) {
		*gid = ((const struct sockaddr_in6 *)ss)->sin6_addr;
		return;
	}
	memset(gid, 0, sizeof(*gid));
	gid->s6_addr[10] = gid->s6_addr[11] = 0xff;
	memcpy(&gid->s6_addr[12], &((const struct sockaddr_in *)ss)->sin_addr, 4);
}

static void check_gid(struct peer *p, const struct shim_fh_report *r)
{
	const char *nd = p->netdev[0] ? p->netdev : "IFACE";
	const struct shim_fh_port *v1 = NULL, *down = NULL;
	const struct shim_fh_gid *v1_gid = NULL, *down_gid = NULL;
	struct in6_addr want;

	/* lo first: no device could be put over it. */
	if (strcmp(nd, "lo") == 0) {
		rdmashim_doctor_line("FAIL", "gid", "%s is on lo, which carries no RoCE: name the peer by an address "
				     "on the RDMA netdev (its GIDs: rdmashim health)", p->local_text);
		return;
	}
	if (r->status == SHIM_FH_NO_DEVICE) {
		rdmashim_doctor_line("FAIL", "gid", "no RDMA device, so no RoCE v2 GID for %s: put one over %s "
				     "(modprobe rdma_rxe; rdma link add rxe0 type rxe netdev %s) or use the VM recipe in "
				     DOCTOR_VM_RECIPE, p->local_text, nd, nd);
		return;
	}
	gid_of(&p->local, &want);
	for (unsigned i = 0; i < r->n_ports; i++)
		for (unsigned j = 0; j < r->ports[i].n_gids; j++) {
			const struct shim_fh_port *port = &r->ports[i];
			const struct shim_fh_gid *g = &port->gids[j];
			struct in6_addr have;

			if (inet_pton(AF_INET6, g->gid, &have) != 1 || memcmp(&have, &want, sizeof(have)) != 0)
				continue;
			if (strcmp(g->type, "RoCE v2") != 0) {
				v1 = v1 ? v1 : port;
				v1_gid = v1_gid ? v1_gid : g;
			} else if (!shim_fh_state_active(port->state_code)) {
				down = down ? down : port;
				down_gid = down_gid ? down_gid : g;
			} else {
				p->port = port;
				rdmashim_doctor_line("PASS", "gid", "%s port %u GID %u is %s's RoCE v2 GID (%s)", port->dev,
						     port->num, g->index, p->local_text, g->netdev[0] ? g->netdev : nd);
				return;
			}
		}
	if (down) {
		rdmashim_doctor_line("FAIL", "gid", "%s's RoCE v2 GID is on %s port %u (GID %u), which is %s: bring "
				     "%s's link up (ip link set %s up) or check the cable", p->local_text, down->dev,
				     down->num, down_gid->index, down->state[0] ? down->state : "in an unknown state",
				     nd, nd);
	} else if (v1) {
		p->port = v1;
		rdmashim_doctor_line("WARN", "gid", "%s has only a %s GID (%s port %u, GID %u): rdma_cm may pick "
				     "RoCE v1, which does not route; make v2 its default (cma_roce_mode -d %s -p %u -m 2)",
				     p->local_text, v1_gid->type[0] ? v1_gid->type : "non-v2", v1->dev, v1->num,
				     v1_gid->index, v1->dev, v1->num);
	} else {
		rdmashim_doctor_line("FAIL", "gid", "no port has a RoCE v2 GID for %s: %s has no RDMA device over it; "
				     "route the peer over the RDMA NIC's netdev (its GIDs: rdmashim health) or add "
				     "one (rdma link add rxe0 type rxe netdev %s)", p->local_text, nd, nd);
	}
}

static int read_mtu(const char *sysroot, const char *netdev)
{
	char path[512];
	FILE *f;
	int v = -1;

	snprintf(path, sizeof(path), "%s/class/net/%s/mtu", sysroot ? sysroot : "/sys", netdev);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d", &v) != 1 || v <= 0)
			v = -1;
		fclose(f);
	}
	return v;
}

static void check_mtu(const struct peer *p, const char *sysroot)
{
	const struct shim_fh_port *port = p->port;
	int mtu = p->netdev[0] ? read_mtu(sysroot, p->netdev) : -1;

	if (!port)
		return; /* the gid line said why */
	if (mtu <= 0 || port->active_mtu <= 0) {
		rdmashim_doctor_line("WARN", "mtu", "%s port %u: active MTU %s, %s MTU %s: compare ibv_devinfo's "
				     "active_mtu with ip link's mtu on both ends", port->dev, port->num,
				     port->active_mtu > 0 ? "known" : "unknown", p->netdev[0] ? p->netdev : "netdev",
				     mtu > 0 ? "known" : "unknown");
	} else if (!shim_fh_mtu_fits(port->active_mtu, mtu)) {
		rdmashim_doctor_line("WARN", "mtu", "%s port %u: active MTU %d and the RoCE v2 headers do not fit "
				     "%s's MTU %d: set the netdev MTU alike on both ends and let the RDMA MTU follow it",
				     port->dev, port->num, port->active_mtu, p->netdev, mtu);
	} else {
		rdmashim_doctor_line("PASS", "mtu", "%s's MTU %d carries %s port %u's active MTU %d", p->netdev, mtu,
				     port->dev, port->num, port->active_mtu);
	}
}

/* The next event on ch within CM_WAIT_MS; NULL on a timeout or error. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;
	int n;

	do
		n = poll(&pfd, 1, CM_WAIT_MS);
	while (n < 0 && errno == EINTR);
	if (n <= 0 || rdma_get_cm_event(ch, &ev) != 0)
		return NULL;
	return ev;
}

static long long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000LL + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* One rdma_cm step's outcome: true when its event is `want`; else a FAIL
 * line naming the step, what came and the fix. */
static bool cm_step(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *step,
		    const struct peer *p, const char *fix)
{
	struct rdma_cm_event *ev = next_event(ch);
	char got[NOTE_LEN];
	bool ok;

	if (!ev) {
		rdmashim_doctor_line("FAIL", "rdma_cm", "%s of %s: no answer in %d ms: %s", step, p->addr_text,
				     CM_WAIT_MS, fix);
		return false;
	}
	ok = ev->event == want;
	if (!ok) {
		snprintf(got, sizeof(got), "%s%s%s", rdma_event_str(ev->event), ev->status ? ", " : "",
			 ev->status ? strerror(ev->status < 0 ? -ev->status : ev->status) : "");
		rdmashim_doctor_line("FAIL", "rdma_cm", "%s of %s failed (%s): %s", step, p->addr_text, got, fix);
	}
	rdma_ack_cm_event(ev);
	return ok;
}

static void check_cm(const struct peer *p)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_storage src = p->local;
	struct timespec t0;
	int flags;

	if (!ch) {
		rdmashim_doctor_line("FAIL", "rdma_cm", "no rdma_cm (%s: /dev/infiniband/rdma_cm): load rdma_ucm and "
				     "an RDMA driver (modprobe rdma_ucm rdma_rxe) or use the VM recipe in " DOCTOR_VM_RECIPE,
				     strerror(errno));
		return;
	}
	flags = fcntl(ch->fd, F_GETFL);
	if (flags >= 0)
		fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) != 0) {
		rdmashim_doctor_line("FAIL", "rdma_cm", "rdma_create_id: %s: check that rdma_ucm is loaded and "
				     "/dev/infiniband/rdma_cm is open to this user", strerror(errno));
		rdma_destroy_event_channel(ch);
		return;
	}
	if (src.ss_family == AF_INET)
		((struct sockaddr_in *)&src)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&src)->sin6_port = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* From the address the route picked, as the kernel's TCP socket
	 * has it: the device rdma_cm binds is that address's. */
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&p->addr, CM_TIMEOUT_MS) != 0) {
		rdmashim_doctor_line("FAIL", "rdma_cm", "rdma_resolve_addr of %s from %s: %s: no RDMA device holds "
				     "%s; put one over %s or use the VM recipe in " DOCTOR_VM_RECIPE, p->addr_text,
				     p->local_text, strerror(errno), p->local_text, p->netdev[0] ? p->netdev : "its netdev");
	} else if (cm_step(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "address resolution", p,
			   "check that the peer is up on the fabric and answers ARP or neighbour discovery")) {
		if (rdma_resolve_route(id, CM_TIMEOUT_MS) != 0)
			rdmashim_doctor_line("FAIL", "rdma_cm", "rdma_resolve_route to %s: %s: check the route to the "
					     "peer (ip route get %s)", p->addr_text, strerror(errno), p->addr_text);
		else if (cm_step(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolution", p,
				 "check the route to the peer (ip route get) and its neighbour entry (ip neigh)"))
			rdmashim_doctor_line("PASS", "rdma_cm", "resolved %s and a route to it from %s over %s port %u "
					     "in %lld ms", p->addr_text, p->local_text,
					     id->verbs ? ibv_get_device_name(id->verbs->device) : "?", id->port_num,
					     ms_since(&t0));
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

void rdmashim_doctor_peer(const char *name, const struct shim_fh_report *r, const char *sysroot)
{
	struct peer p = { .name = name };

	if (!resolve(&p) || !route(&p))
		return;
	check_gid(&p, r);
	check_mtu(&p, sysroot);
	check_cm(&p);
}
