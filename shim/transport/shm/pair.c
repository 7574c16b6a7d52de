/* Pair channels; see pair.h and shim/PROTOCOL.md, "Pair channel". */
#include "pair.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdtable.h"
#include "real.h"
#include "rendezvous.h"
#include "trace.h"

/*
 * Bounds. A process keeps at most PAIR_CLIENT_MAX pairs as C (one per
 * server endpoint) and PAIR_SERVER_MAX as S; at most PENDING_MAX HINTs wait
 * for their connection's handshake, each at most PENDING_TTL_NS (then its
 * socketpair closes and C falls back to the named rendezvous). A pair whose
 * HINT found no taker is not used for MISS_PAUSE_NS: S was not the process
 * that holds the connection (a server that forks per connection, or
 * several processes on one listener).
 */
#define PAIR_CLIENT_MAX 64
#define PAIR_SERVER_MAX 64
#define PENDING_MAX 128
#define PENDING_TTL_NS 1000000000ull
#define MISS_PAUSE_NS 10000000000ull
#define DRAIN_MSGS_PER_PAIR 32

/*
 * One of our long-lived fds and what it was when we kept it. A program may
 * close fds it did not open (a daemon's close-all loop) and get the number
 * back for a file of its own: such a number is never read, written or
 * closed by us again.
 */
struct owned_fd {
	int fd;
	dev_t dev;
	ino_t ino;
};

static bool owned_still(const struct owned_fd *o)
{
	struct stat st;

	return o->fd >= 0 && fstat(o->fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino;
}

static int owned_take(struct owned_fd *o, int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	o->fd = fd;
	o->dev = st.st_dev;
	o->ino = st.st_ino;
	return 0;
}

static void owned_close(struct owned_fd *o)
{
	if (owned_still(o))
		REAL(close)(o->fd);
	o->fd = -1;
}

struct client_pair {
	struct shim_endpoint server;
	struct owned_fd fd; /* fd -1: a free slot */
	pid_t peer_pid;
	unsigned long long miss_until_ns;
};

struct pending {
	struct shim_msg_hint msg;
	struct owned_fd rv, mem; /* rv.fd -1: a free slot */
	unsigned long long at_ns;
};

static pthread_mutex_t pair_lock = PTHREAD_MUTEX_INITIALIZER;
static struct client_pair clients[PAIR_CLIENT_MAX];
static struct owned_fd servers[PAIR_SERVER_MAX];
static struct owned_fd hub; /* epoll set of servers[], made with the first */
static struct pending pending[PENDING_MAX];
static bool tables_ready;

/* Under pair_lock: every slot free (static storage starts at fd 0). */
static void tables_init(void)
{
	if (tables_ready)
		return;
	for (unsigned i = 0; i < PAIR_CLIENT_MAX; i++)
		clients[i].fd.fd = -1;
	for (unsigned i = 0; i < PAIR_SERVER_MAX; i++)
		servers[i].fd = -1;
	for (unsigned i = 0; i < PENDING_MAX; i++)
		pending[i].rv.fd = -1;
	hub.fd = -1;
	tables_ready = true;
}

/* ---- C ---- */

static struct client_pair *client_of(const struct shim_endpoint *server)
{
	for (unsigned i = 0; i < PAIR_CLIENT_MAX; i++)
		if (clients[i].fd.fd >= 0 && shim_endpoint_equal(&clients[i].server, server))
			return &clients[i];
	return NULL;
}

static void client_drop(struct client_pair *c)
{
	owned_close(&c->fd);
}

int shim_pair_send_hint(const struct shim_endpoint *server, const struct shim_msg_hint *msg, int rv_fd,
			int memfd, unsigned long long now, pid_t *peer_pid)
{
	const int fds[2] = { rv_fd, memfd };
	struct client_pair *c;
	int rc = -ENOENT;

	pthread_mutex_lock(&pair_lock);
	tables_init();
	c = client_of(server);
	if (!c || now < c->miss_until_ns)
		goto out;
	if (!owned_still(&c->fd)) {
		c->fd.fd = -1;
		goto out;
	}
	/* A full socket buffer (S reads HINTs only when it starts a handshake,
	 * and this one has been taking none) or a closed S drops the pair. */
	rc = shim_rv_send_fds(c->fd.fd, msg, sizeof(*msg), fds, 2);
	if (rc < 0)
		client_drop(c);
	else
		*peer_pid = c->peer_pid;
out:
	pthread_mutex_unlock(&pair_lock);
	return rc;
}

void shim_pair_miss(const struct shim_endpoint *server, unsigned long long now)
{
	struct client_pair *c;

	pthread_mutex_lock(&pair_lock);
	tables_init();
	c = client_of(server);
	if (c)
		c->miss_until_ns = now + MISS_PAUSE_NS;
	pthread_mutex_unlock(&pair_lock);
}

/*
 * Only with a process of our own user: another user's process could
 * otherwise make us hold fds that outlive its connections (a pair per
 * process it runs, up to the bound). Its connections take the named way.
 * true: rv_fd may be kept, *pid is its peer, and pair_lock is held; false:
 * rv_fd was closed.
 */
static bool keep_begin(int rv_fd, pid_t *pid)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (REAL(getsockopt)(rv_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != geteuid()) {
		REAL(close)(rv_fd);
		return false;
	}
	*pid = cred.pid;
	pthread_mutex_lock(&pair_lock);
	tables_init();
	return true;
}

void shim_pair_keep_client(int rv_fd, const struct shim_endpoint *server)
{
	struct client_pair *c;
	pid_t pid;

	if (!keep_begin(rv_fd, &pid))
		return;
	c = client_of(server);
	if (c && owned_still(&c->fd)) {
		c = NULL; /* one per server endpoint is enough */
	} else if (!c) {
		for (unsigned i = 0; i < PAIR_CLIENT_MAX && !c; i++)
			if (clients[i].fd.fd < 0)
				c = &clients[i];
	}
	if (c && owned_take(&c->fd, rv_fd) == 0) {
		c->server = *server;
		c->peer_pid = pid;
		c->miss_until_ns = 0;
		rv_fd = -1;
	}
	pthread_mutex_unlock(&pair_lock);
	shim_rv_close_if(rv_fd);
}

/* ---- S ---- */

/* A pair at S goes; with the last one, the epoll set too (a server whose
 * clients all left holds no fd for them). */
static void server_drop(struct owned_fd *o)
{
	if (owned_still(o) && owned_still(&hub))
		REAL(epoll_ctl)(hub.fd, EPOLL_CTL_DEL, o->fd, NULL);
	owned_close(o);
	for (unsigned i = 0; i < PAIR_SERVER_MAX; i++)
		if (servers[i].fd >= 0)
			return;
	owned_close(&hub);
}

void shim_pair_keep_server(int rv_fd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct owned_fd *slot = NULL;
	pid_t pid;

	if (!keep_begin(rv_fd, &pid))
		return;
	if (hub.fd < 0 || !owned_still(&hub)) {
		int ep = REAL(epoll_create1)(EPOLL_CLOEXEC);

		hub.fd = -1;
		if (ep >= 0)
			ep = shim_fd_own_checked(ep);
		if (ep >= 0 && owned_take(&hub, ep) < 0)
			REAL(close)(ep);
	}
	for (unsigned i = 0; i < PAIR_SERVER_MAX && !slot; i++)
		if (servers[i].fd < 0)
			slot = &servers[i];
	ev.data.fd = rv_fd;
	if (hub.fd >= 0 && slot && owned_take(slot, rv_fd) == 0) {
		if (REAL(epoll_ctl)(hub.fd, EPOLL_CTL_ADD, rv_fd, &ev) == 0)
			rv_fd = -1;
		else
			slot->fd = -1;
	}
	pthread_mutex_unlock(&pair_lock);
	shim_rv_close_if(rv_fd);
}

static void pending_free(struct pending *p)
{
	owned_close(&p->rv);
	owned_close(&p->mem);
}

/* Under pair_lock: a HINT in, its fds ours; the oldest goes when full. */
static void pending_add(const struct shim_msg_hint *msg, int rv_fd, int memfd, unsigned long long now)
{
	struct pending *slot = NULL, *oldest = NULL;

	for (unsigned i = 0; i < PENDING_MAX && !slot; i++) {
		if (pending[i].rv.fd < 0)
			slot = &pending[i];
		else if (!oldest || pending[i].at_ns < oldest->at_ns)
			oldest = &pending[i];
	}
	if (!slot) {
		pending_free(oldest);
		slot = oldest;
	}
	if (owned_take(&slot->rv, rv_fd) < 0 || owned_take(&slot->mem, memfd) < 0) {
		slot->rv.fd = -1;
		shim_rv_close_if(rv_fd);
		shim_rv_close_if(memfd);
		return;
	}
	slot->msg = *msg;
	slot->at_ns = now;
}

/* Under pair_lock: the HINTs one pair brought. A pair that closed, or sent
 * anything but well-formed HINTs, is dropped. */
static void drain_one(struct owned_fd *o, unsigned long long now)
{
	for (unsigned m = 0; m < DRAIN_MSGS_PER_PAIR; m++) {
		union {
			struct shim_msg_hint hint;
			uint8_t raw[SHIM_MSG_MAX + 1];
		} msg;
		int fds[2];
		ssize_t n = shim_rv_recv_fds(o->fd, &msg, sizeof(msg), fds, 2);

		if (n == -EAGAIN)
			return;
		if (n <= 0 || shim_msg_check(&msg, (size_t)n) != SHIM_MSG_HINT || fds[0] < 0 || fds[1] < 0) {
			/* Near our fd limit (-EMFILE) the HINT alone is lost. */
			bool fd_limit = n > 0 && (fds[0] == -EMFILE || fds[1] == -EMFILE);

			shim_rv_close_if(fds[0]);
			shim_rv_close_if(fds[1]);
			if (fd_limit)
				continue;
			SHIM_TRACE(SHIM_TRACE_DEBUG, "pair.drop", -1, NULL, SHIM_REASON_NONE,
				   "\"side\":\"server\",\"read\":%zd", n);
			server_drop(o);
			return;
		}
		pending_add(&msg.hint, fds[0], fds[1], now);
	}
}

static void drain(unsigned long long now)
{
	struct epoll_event evs[16];
	int n;

	if (hub.fd < 0)
		return;
	if (!owned_still(&hub)) {
		hub.fd = -1;
		for (unsigned i = 0; i < PAIR_SERVER_MAX; i++)
			owned_close(&servers[i]);
		return;
	}
	n = REAL(epoll_wait)(hub.fd, evs, 16, 0);
	for (int e = 0; e < n; e++) {
		for (unsigned i = 0; i < PAIR_SERVER_MAX; i++) {
			if (servers[i].fd != evs[e].data.fd)
				continue;
			if (owned_still(&servers[i]))
				drain_one(&servers[i], now);
			else
				servers[i].fd = -1;
			break;
		}
	}
	for (unsigned i = 0; i < PENDING_MAX; i++)
		if (pending[i].rv.fd >= 0 && now - pending[i].at_ns > PENDING_TTL_NS)
			pending_free(&pending[i]);
}

static bool names(const struct shim_msg_hint *m, const struct shim_tuple *t)
{
	return m->client_port == t->peer.port && m->server_port == t->local.port &&
	       !memcmp(m->client_addr, t->peer.addr, 16) && !memcmp(m->server_addr, t->local.addr, 16);
}

bool shim_pair_claim(const struct shim_tuple *t, struct shim_pair_hint *out, unsigned long long now)
{
	bool found = false;

	pthread_mutex_lock(&pair_lock);
	tables_init();
	drain(now);
	for (unsigned i = 0; i < PENDING_MAX && !found; i++) {
		struct pending *p = &pending[i];

		if (p->rv.fd < 0 || !names(&p->msg, t))
			continue;
		if (owned_still(&p->rv) && owned_still(&p->mem)) {
			out->msg = p->msg;
			out->rv_fd = p->rv.fd;
			out->memfd = p->mem.fd;
			found = true;
			p->rv.fd = -1;
			p->mem.fd = -1;
		} else {
			pending_free(p);
		}
	}
	pthread_mutex_unlock(&pair_lock);
	return found;
}

int shim_pair_hub_fd(void)
{
	int fd;

	pthread_mutex_lock(&pair_lock);
	tables_init();
	fd = hub.fd;
	pthread_mutex_unlock(&pair_lock);
	return fd;
}

/* ---- fork ---- */

void shim_pair_atfork_prepare(void)
{
	pthread_mutex_lock(&pair_lock);
}

void shim_pair_atfork_parent(void)
{
	pthread_mutex_unlock(&pair_lock);
}

void shim_pair_atfork_child(void)
{
	if (tables_ready) {
		for (unsigned i = 0; i < PAIR_CLIENT_MAX; i++)
			owned_close(&clients[i].fd);
		for (unsigned i = 0; i < PAIR_SERVER_MAX; i++)
			owned_close(&servers[i]);
		for (unsigned i = 0; i < PENDING_MAX; i++)
			if (pending[i].rv.fd >= 0)
				pending_free(&pending[i]);
		owned_close(&hub);
	}
	pthread_mutex_unlock(&pair_lock);
}
