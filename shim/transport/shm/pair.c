/* Pair channels; see pair.h and shim/PROTOCOL.md, "Pair channel". */
#include "pair.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "fdtable.h"
#include "real.h"
#include "rendezvous.h"
#include "ring.h"
#include "shm.h"
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
 * A pair's ring arena and who uses its slots (PROTOCOL.md, "Ring arena").
 * C reuses a slot only when both ends are done with its last use: its own
 * channel on it went (destroy, not a fork's forget), and S sent RELEASE
 * for that use's generation. Nothing S writes can make C hand out a slot
 * its own channel still uses; a lying S can only share memory between
 * its own connections to us. Everything here is under pair_lock.
 */
struct slot_state {
	uint32_t gen;    /* C: the slot's current (or last) use */
	bool ours;       /* C: our channel on it is live */
	bool peers;      /* C: S may hold it (from the HINT to its RELEASE) */
};

struct pair_arena {
	struct shim_arena mem;
	pid_t pid;      /* the process that made or mapped it: only it frees
			 * slots or sends RELEASE (a fork's child holds none) */
	unsigned refs;  /* the pair's, each channel's on a slot, each pending HINT's */
	struct shim_owned_fd memfd; /* C: until S has it; then closed */
	/* S: the pair RELEASEs go on; NULL once the pair went. C: retired
	 * once its pair went (no slot is handed out again). */
	struct shim_owned_fd *pair;
	bool retired;
	struct slot_state slot[SHIM_ARENA_SLOTS_MAX];
};

/* One channel's use of a slot: what its done callback is told. */
struct slot_use {
	struct pair_arena *arena;
	unsigned slot;
	uint32_t gen;
	bool client;
};

struct client_pair {
	struct shim_endpoint server;
	struct shim_owned_fd fd; /* fd -1: a free slot */
	pid_t peer_pid;
	unsigned long long miss_until_ns;
	struct pair_arena *arena; /* made with the first HINT that finds a slot */
};

struct server_pair {
	struct shim_owned_fd fd; /* fd -1: a free slot */
	struct pair_arena *arena; /* from C's first HINT that brought it */
};

struct pending {
	struct shim_msg_hint msg;
	struct shim_owned_fd rv, mem; /* rv.fd -1: a free slot; mem.fd -1 with a slot */
	struct pair_arena *arena; /* the HINT's slot's, or NULL */
	unsigned long long at_ns;
};

static pthread_mutex_t pair_lock = PTHREAD_MUTEX_INITIALIZER;
static struct client_pair clients[PAIR_CLIENT_MAX];
static struct server_pair servers[PAIR_SERVER_MAX];
static struct shim_owned_fd hub; /* epoll set of servers[], made with the first */
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
		servers[i].fd.fd = -1;
	for (unsigned i = 0; i < PENDING_MAX; i++)
		pending[i].rv.fd = -1;
	hub.fd = -1;
	tables_ready = true;
}

/* ---- arenas ---- */

static struct pair_arena *arena_new(void)
{
	struct pair_arena *a = calloc(1, sizeof(*a));

	if (a) {
		a->pid = getpid();
		a->refs = 1;
		a->memfd.fd = -1;
	}
	return a;
}

static void arena_put(struct pair_arena *a)
{
	if (!a || --a->refs)
		return;
	shim_owned_close(&a->memfd);
	shim_arena_unmap(&a->mem);
	free(a);
}

/* The pair went: the arena lives on for the channels still on its slots. */
static void arena_retire(struct pair_arena **ap)
{
	struct pair_arena *a = *ap;

	if (!a)
		return;
	a->retired = true;
	a->pair = NULL;
	shim_owned_close(&a->memfd);
	*ap = NULL;
	arena_put(a);
}

/* C: a slot both ends are done with gives back what its rings touched. */
static void slot_maybe_free(struct pair_arena *a, unsigned k)
{
	if (!a->slot[k].ours && !a->slot[k].peers && !a->retired)
		shim_arena_trim(&a->mem, k);
}

/* S: the slot's use is over at our end; C may hand it out again. */
static void slot_release_to_c(struct pair_arena *a, unsigned k, uint32_t gen)
{
	struct shim_msg_release rel;

	if (a->pid != getpid() || !a->pair || !shim_owned_still(a->pair))
		return;
	memset(&rel, 0, sizeof(rel));
	shim_msg_init(&rel.hdr, SHIM_MSG_RELEASE, sizeof(rel));
	rel.slot = k;
	rel.slot_gen = gen;
	/* A full buffer loses it: the slot stays C's to not reuse. */
	(void)shim_rv_send(a->pair->fd, &rel, sizeof(rel), -1);
}

/* A channel on a slot went (shim_shm_on_slot's done). */
static void slot_done(void *ctx, bool reusable)
{
	struct slot_use *u = ctx;
	struct pair_arena *a = u->arena;

	pthread_mutex_lock(&pair_lock);
	if (reusable && a->pid == getpid()) {
		if (u->client) {
			if (a->slot[u->slot].gen == u->gen) {
				a->slot[u->slot].ours = false;
				slot_maybe_free(a, u->slot);
			}
		} else {
			slot_release_to_c(a, u->slot, u->gen);
		}
	}
	arena_put(a);
	pthread_mutex_unlock(&pair_lock);
	free(u);
}

/* A channel on slot k of a (formatted by C); takes one reference. */
static int slot_chan(struct pair_arena *a, unsigned k, uint32_t gen, bool client, struct shim_chan **out)
{
	struct slot_use *u = calloc(1, sizeof(*u));
	int rc;

	if (!u)
		return -ENOMEM;
	*u = (struct slot_use){ .arena = a, .slot = k, .gen = gen, .client = client };
	rc = shim_shm_on_slot(shim_arena_slot(&a->mem, k), a->mem.ring_bytes, client, false, slot_done, u, out);
	if (rc < 0) {
		free(u);
		return rc;
	}
	a->refs++;
	return 0;
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
	shim_owned_close(&c->fd);
	arena_retire(&c->arena);
}

/* C: S's RELEASEs since our last HINT (a bounded number: more wait for
 * the next one, so that an S that keeps sending can not hold us here).
 * false: the pair broke or S sent something else (the pair is dropped). */
static bool client_drain(struct client_pair *c)
{
	for (unsigned m = 0; m < 4 * SHIM_ARENA_SLOTS_MAX; m++) {
		union {
			struct shim_msg_release rel;
			uint8_t raw[SHIM_MSG_MAX + 1];
		} msg;
		ssize_t n = shim_rv_recv(c->fd.fd, &msg, sizeof(msg), NULL);

		if (n == -EAGAIN)
			return true;
		if (n <= 0 || shim_msg_check(&msg, (size_t)n) != SHIM_MSG_RELEASE) {
			client_drop(c);
			return false;
		}
		struct pair_arena *a = c->arena;
		unsigned k = msg.rel.slot;

		/* Only the use S was given: a stale or made-up one changes nothing. */
		if (a && k < a->mem.slots && a->slot[k].peers && a->slot[k].gen == msg.rel.slot_gen) {
			a->slot[k].peers = false;
			slot_maybe_free(a, k);
		}
	}
	return true;
}

/* C: a free slot of the pair's arena (made with the first), formatted and
 * marked used by both ends, or -1: none (the HINT brings its own ring). */
static int client_take_slot(struct client_pair *c, uint32_t ring_bytes)
{
	struct pair_arena *a = c->arena;

	if (!a) {
		int memfd;

		a = arena_new();
		if (!a)
			return -1;
		if (shim_arena_make(ring_bytes, SHIM_ARENA_SLOTS_MAX, &a->mem, &memfd) < 0 ||
		    shim_owned_take(&a->memfd, memfd) < 0) {
			free(a);
			return -1;
		}
		c->arena = a;
		SHIM_TRACE(SHIM_TRACE_DEBUG, "pair.arena", -1, NULL, SHIM_REASON_NONE,
			   "\"side\":\"client\",\"slots\":%u,\"ring_bytes\":%u", a->mem.slots, ring_bytes);
	}
	if (a->mem.ring_bytes != ring_bytes)
		return -1;
	for (unsigned k = 0; k < a->mem.slots; k++) {
		struct slot_state *st = &a->slot[k];

		if (st->ours || st->peers)
			continue;
		st->gen++;
		st->ours = true;
		st->peers = true;
		shim_ring_format(shim_arena_slot(&a->mem, k), ring_bytes);
		shim_ring_format(shim_arena_slot(&a->mem, k) + shim_ring_footprint(ring_bytes), ring_bytes);
		return (int)k;
	}
	return -1;
}

int shim_pair_send_hint(const struct shim_endpoint *server, struct shim_msg_hint *msg, int rv_fd,
			unsigned long long now, pid_t *peer_pid, struct shim_chan **chan)
{
	int fds[2] = { rv_fd, -1 };
	struct client_pair *c;
	struct pair_arena *a;
	int rc = -ENOENT, k, ring_memfd = -1;

	pthread_mutex_lock(&pair_lock);
	tables_init();
	c = client_of(server);
	if (!c || now < c->miss_until_ns)
		goto out;
	if (!shim_owned_still(&c->fd)) {
		c->fd.fd = -1;
		arena_retire(&c->arena);
		goto out;
	}
	if (!client_drain(c)) {
		rc = -EPIPE;
		goto out;
	}
	k = client_take_slot(c, msg->ring_bytes);
	a = c->arena;
	msg->slot = SHIM_SLOT_NONE;
	msg->slot_gen = 0;
	msg->arena_slots = 0;
	if (k >= 0) {
		msg->slot = (uint32_t)k;
		msg->slot_gen = a->slot[k].gen;
		if (a->memfd.fd >= 0 && shim_owned_still(&a->memfd)) {
			msg->arena_slots = (uint16_t)a->mem.slots;
			fds[1] = a->memfd.fd;
		}
	} else {
		rc = shim_shm_create(msg->ring_bytes, chan, &ring_memfd);
		if (rc < 0)
			goto out;
		fds[1] = ring_memfd;
	}
	/* A full socket buffer (S reads HINTs only when it starts a handshake,
	 * and this one has been taking none) or a closed S drops the pair. */
	rc = shim_rv_send_fds(c->fd.fd, msg, sizeof(*msg), fds, fds[1] >= 0 ? 2 : 1);
	shim_rv_close_if(ring_memfd);
	if (rc == 0 && k >= 0) {
		if (msg->arena_slots)
			shim_owned_close(&a->memfd); /* S has it now */
		rc = slot_chan(a, (unsigned)k, msg->slot_gen, true, chan);
		if (rc < 0)
			a->slot[k].ours = false; /* S still releases it */
	} else if (k >= 0) {
		a->slot[k].ours = false;
		a->slot[k].peers = false;
	} else if (rc < 0) {
		(*chan)->ops->destroy(*chan);
	}
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
	if (c && shim_owned_still(&c->fd)) {
		c = NULL; /* one per server endpoint is enough */
	} else if (!c) {
		for (unsigned i = 0; i < PAIR_CLIENT_MAX && !c; i++)
			if (clients[i].fd.fd < 0)
				c = &clients[i];
	}
	if (c && shim_owned_take(&c->fd, rv_fd) == 0) {
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
static void server_drop(struct server_pair *sp)
{
	if (shim_owned_still(&sp->fd) && shim_owned_still(&hub))
		REAL(epoll_ctl)(hub.fd, EPOLL_CTL_DEL, sp->fd.fd, NULL);
	shim_owned_close(&sp->fd);
	arena_retire(&sp->arena);
	for (unsigned i = 0; i < PAIR_SERVER_MAX; i++)
		if (servers[i].fd.fd >= 0)
			return;
	shim_owned_close(&hub);
}

void shim_pair_keep_server(int rv_fd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct server_pair *slot = NULL;
	pid_t pid;

	if (!keep_begin(rv_fd, &pid))
		return;
	if (hub.fd < 0 || !shim_owned_still(&hub)) {
		int ep = REAL(epoll_create1)(EPOLL_CLOEXEC);

		hub.fd = -1;
		if (ep >= 0)
			ep = shim_fd_own_checked(ep);
		if (ep >= 0 && shim_owned_take(&hub, ep) < 0)
			REAL(close)(ep);
	}
	for (unsigned i = 0; i < PAIR_SERVER_MAX && !slot; i++)
		if (servers[i].fd.fd < 0)
			slot = &servers[i];
	ev.data.fd = rv_fd;
	if (hub.fd >= 0 && slot && shim_owned_take(&slot->fd, rv_fd) == 0) {
		slot->arena = NULL;
		if (REAL(epoll_ctl)(hub.fd, EPOLL_CTL_ADD, rv_fd, &ev) == 0)
			rv_fd = -1;
		else
			slot->fd.fd = -1;
	}
	pthread_mutex_unlock(&pair_lock);
	shim_rv_close_if(rv_fd);
}

/* A pending HINT goes unclaimed: its slot back to C. */
static void pending_free(struct pending *p)
{
	shim_owned_close(&p->rv);
	shim_owned_close(&p->mem);
	if (p->arena) {
		slot_release_to_c(p->arena, p->msg.slot, p->msg.slot_gen);
		arena_put(p->arena);
		p->arena = NULL;
	}
}

/* Under pair_lock: a HINT in, its fds ours (memfd -1 for a slot of arena,
 * whose reference it takes); the oldest goes when full. */
static void pending_add(const struct shim_msg_hint *msg, int rv_fd, int memfd, struct pair_arena *arena,
			unsigned long long now)
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
	slot->msg = *msg;
	slot->at_ns = now;
	slot->mem.fd = -1;
	slot->arena = arena;
	if (arena)
		arena->refs++;
	if (shim_owned_take(&slot->rv, rv_fd) < 0 || (memfd >= 0 && shim_owned_take(&slot->mem, memfd) < 0)) {
		shim_rv_close_if(rv_fd);
		shim_rv_close_if(memfd);
		slot->rv.fd = -1;
		slot->mem.fd = -1;
		pending_free(slot);
	}
}

/*
 * Under pair_lock: where a HINT's ring is. Its own memfd (fds[1]); a slot
 * of the pair's arena, which the first such HINT brings (fds[1], mapped
 * here once and closed); nothing else. false: the HINT breaks those rules
 * (the pair is dropped; fds[1] closed).
 */
static bool hint_ring(struct server_pair *sp, const struct shim_msg_hint *h, int *memfd)
{
	if (h->slot == SHIM_SLOT_NONE)
		return *memfd >= 0;
	if (h->arena_slots) {
		struct pair_arena *a;
		int rc;

		/* One arena per pair, of rings no larger than ours. */
		if (sp->arena || *memfd < 0 || h->ring_bytes > shim_cfg.ring_kb * 1024u)
			return false;
		a = arena_new();
		if (!a)
			return false;
		rc = shim_arena_map(*memfd, h->ring_bytes, h->arena_slots, &a->mem);
		REAL(close)(*memfd);
		*memfd = -1;
		if (rc < 0) {
			free(a);
			return false;
		}
		a->pair = &sp->fd;
		sp->arena = a;
		SHIM_TRACE(SHIM_TRACE_DEBUG, "pair.arena", -1, NULL, SHIM_REASON_NONE,
			   "\"side\":\"server\",\"slots\":%u,\"ring_bytes\":%u", a->mem.slots, h->ring_bytes);
	}
	return *memfd < 0 && sp->arena && h->slot < sp->arena->mem.slots && h->ring_bytes == sp->arena->mem.ring_bytes;
}

/* Under pair_lock: the HINTs one pair brought. A pair that closed, or sent
 * anything but well-formed HINTs, is dropped. */
static void drain_one(struct server_pair *sp, unsigned long long now)
{
	for (unsigned m = 0; m < DRAIN_MSGS_PER_PAIR; m++) {
		union {
			struct shim_msg_hint hint;
			uint8_t raw[SHIM_MSG_MAX + 1];
		} msg;
		int fds[2];
		ssize_t n = shim_rv_recv_fds(sp->fd.fd, &msg, sizeof(msg), fds, 2);

		if (n == -EAGAIN)
			return;
		bool hint = n > 0 && shim_msg_check(&msg, (size_t)n) == SHIM_MSG_HINT;

		if (hint && (fds[0] == -EMFILE || fds[1] == -EMFILE)) {
			/* Near our fd limit the HINT alone is lost (its slot,
			 * if any, with it: C does not reuse it). */
			shim_rv_close_if(fds[0]);
			shim_rv_close_if(fds[1]);
			continue;
		}
		if (!hint || fds[0] < 0 || !hint_ring(sp, &msg.hint, &fds[1])) {
			shim_rv_close_if(fds[0]);
			shim_rv_close_if(fds[1]);
			SHIM_TRACE(SHIM_TRACE_DEBUG, "pair.drop", -1, NULL, SHIM_REASON_NONE,
				   "\"side\":\"server\",\"read\":%zd", n);
			server_drop(sp);
			return;
		}
		pending_add(&msg.hint, fds[0], fds[1], msg.hint.slot == SHIM_SLOT_NONE ? NULL : sp->arena, now);
	}
}

static void drain(unsigned long long now)
{
	struct epoll_event evs[16];
	int n;

	if (hub.fd < 0)
		return;
	if (!shim_owned_still(&hub)) {
		hub.fd = -1;
		for (unsigned i = 0; i < PAIR_SERVER_MAX; i++) {
			shim_owned_close(&servers[i].fd);
			arena_retire(&servers[i].arena);
		}
		return;
	}
	n = REAL(epoll_wait)(hub.fd, evs, 16, 0);
	for (int e = 0; e < n; e++) {
		for (unsigned i = 0; i < PAIR_SERVER_MAX; i++) {
			if (servers[i].fd.fd != evs[e].data.fd)
				continue;
			if (shim_owned_still(&servers[i].fd)) {
				drain_one(&servers[i], now);
			} else {
				servers[i].fd.fd = -1;
				arena_retire(&servers[i].arena);
			}
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
		if (shim_owned_still(&p->rv) && (p->arena || shim_owned_still(&p->mem))) {
			out->msg = p->msg;
			out->rv_fd = p->rv.fd;
			out->memfd = p->mem.fd;
			out->arena = p->arena;
			found = true;
			p->rv.fd = -1;
			p->mem.fd = -1;
			p->arena = NULL;
		} else {
			pending_free(p);
		}
	}
	pthread_mutex_unlock(&pair_lock);
	return found;
}

int shim_pair_hint_ring(struct shim_pair_hint *h, struct shim_chan **out)
{
	int rc;

	if (!h->arena) {
		rc = shim_shm_attach(h->memfd, h->msg.ring_bytes, out);
		REAL(close)(h->memfd);
		h->memfd = -1;
		return rc;
	}
	pthread_mutex_lock(&pair_lock);
	rc = slot_chan(h->arena, h->msg.slot, h->msg.slot_gen, false, out);
	if (rc < 0)
		slot_release_to_c(h->arena, h->msg.slot, h->msg.slot_gen);
	arena_put(h->arena);
	h->arena = NULL;
	pthread_mutex_unlock(&pair_lock);
	return rc;
}

void shim_pair_hint_drop_ring(struct shim_pair_hint *h)
{
	if (!h->arena) {
		shim_rv_close_if(h->memfd);
		h->memfd = -1;
		return;
	}
	pthread_mutex_lock(&pair_lock);
	slot_release_to_c(h->arena, h->msg.slot, h->msg.slot_gen);
	arena_put(h->arena);
	h->arena = NULL;
	pthread_mutex_unlock(&pair_lock);
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
		/* The arenas stay mapped for the channels we inherited on
		 * their slots; their pid is the parent's, so nothing here
		 * frees a slot or sends a RELEASE. */
		for (unsigned i = 0; i < PAIR_CLIENT_MAX; i++)
			client_drop(&clients[i]);
		for (unsigned i = 0; i < PAIR_SERVER_MAX; i++) {
			shim_owned_close(&servers[i].fd);
			arena_retire(&servers[i].arena);
		}
		for (unsigned i = 0; i < PENDING_MAX; i++)
			if (pending[i].rv.fd >= 0)
				pending_free(&pending[i]);
		shim_owned_close(&hub);
	}
	pthread_mutex_unlock(&pair_lock);
}
