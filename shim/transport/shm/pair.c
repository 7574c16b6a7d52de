/* Pair channels; see pair.h and shim/PROTOCOL.md, "Pair channel". */
#include "pair.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "fdtable.h"
#include "real.h"
#include "reaper.h"
#include "rendezvous.h"
#include "shm.h"
#include "slots.h"
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
	unsigned long drained;    /* the drain that brought it (drains) */
};

static struct client_pair clients[PAIR_CLIENT_MAX];
static struct server_pair servers[PAIR_SERVER_MAX];
static struct shim_owned_fd hub; /* epoll set of servers[], made with the first */
static struct pending pending[PENDING_MAX];
/* Drains of the hub so far: a HINT that came in the claim's own drain was
 * checked (fstat) as it was taken, under the same hold of the lock. */
static unsigned long drains;
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
	shim_reap_owned(&c->fd);
	shim_slots_retire(&c->arena);
}

/* The fds of messages [from, n) of a batch nobody takes. */
static void batch_close_fds(struct shim_rv_msg *msgs, int from, int n)
{
	for (int i = from; i < n; i++)
		for (unsigned k = 0; k < SHIM_RV_MAX_FDS; k++)
			shim_reap(msgs[i].fds[k]);
}

/* C: S's RELEASEs since we last read them (a bounded number: more wait for
 * the next read, so that an S that keeps sending can not hold us here).
 * false: the pair broke or S sent something else (the pair is dropped).
 * A batch a system call. */
static bool client_drain(struct client_pair *c)
{
	struct shim_rv_msg msgs[SHIM_RV_BATCH_MAX];

	for (unsigned m = 0; m < 4 * SHIM_ARENA_SLOTS_MAX; m += SHIM_RV_BATCH_MAX) {
		int n = shim_rv_recv_batch(c->fd.fd, msgs, SHIM_RV_BATCH_MAX);

		if (n == -EAGAIN)
			return true;
		if (n < 0) {
			client_drop(c);
			return false;
		}
		/* A RELEASE carries no fd: any that came is closed. */
		batch_close_fds(msgs, 0, n);
		for (int i = 0; i < n; i++) {
			struct shim_msg_release rel;

			if (msgs[i].len <= 0 || shim_msg_check(msgs[i].raw, (size_t)msgs[i].len) != SHIM_MSG_RELEASE) {
				client_drop(c);
				return false;
			}
			memcpy(&rel, msgs[i].raw, sizeof(rel));
			shim_slots_peer_released(c->arena, rel.slot, rel.slot_gen);
		}
		if (n < SHIM_RV_BATCH_MAX)
			return true;
	}
	return true;
}

int shim_pair_send_hint(const struct shim_endpoint *server, struct shim_msg_hint *msg, int rv_fd,
			unsigned long long now, pid_t *peer_pid, int *peer_pidfd, struct shim_chan **chan)
{
	int fds[2] = { rv_fd, -1 };
	struct client_pair *c;
	struct shim_slot_hint slot;
	bool in_arena;
	int rc = -ENOENT, ring_memfd = -1;

	pthread_mutex_lock(&shim_pair_lock);
	tables_init();
	c = client_of(server);
	if (!c || now < c->miss_until_ns)
		goto out;
	if (!shim_owned_still(&c->fd)) {
		c->fd.fd = -1;
		shim_slots_retire(&c->arena);
		goto out;
	}
	if (!client_drain(c)) {
		rc = -EPIPE;
		goto out;
	}
	in_arena = shim_slots_take(&c->arena, msg->ring_bytes, &slot);
	msg->slot = SHIM_SLOT_NONE;
	msg->slot_gen = 0;
	msg->arena_slots = 0;
	if (in_arena) {
		msg->slot = slot.slot;
		msg->slot_gen = slot.gen;
		msg->arena_slots = slot.arena_slots;
		fds[1] = slot.arena_fd;
	} else {
		rc = shim_shm_create(msg->ring_bytes, chan, &ring_memfd);
		if (rc < 0)
			goto out;
		fds[1] = ring_memfd;
	}
	/* A full socket buffer (S reads HINTs only when it starts a handshake,
	 * and this one has been taking none) or a closed S drops the pair. */
	rc = shim_rv_send_fds(c->fd.fd, msg, sizeof(*msg), fds, fds[1] >= 0 ? 2 : 1);
	shim_reap(ring_memfd);
	if (in_arena) {
		int sent = rc;

		rc = shim_slots_hint_done(c->arena, &slot, sent == 0, chan);
		if (sent < 0)
			rc = sent;
	} else if (rc < 0) {
		(*chan)->ops->destroy(*chan);
	}
	if (rc < 0) {
		client_drop(c);
	} else {
		*peer_pid = c->peer_pid;
		/* The pair's socket was connected by S's process, the one
		 * whose COMMIT is verified against peer_pid (one copy, shm_zc.h). */
		*peer_pidfd = shim_cfg.zerocopy != SHIM_ZC_OFF ? shim_rv_peer_pidfd(c->fd.fd) : -1;
	}
out:
	pthread_mutex_unlock(&shim_pair_lock);
	return rc;
}

void shim_pair_miss(const struct shim_endpoint *server, unsigned long long now)
{
	struct client_pair *c;

	pthread_mutex_lock(&shim_pair_lock);
	tables_init();
	c = client_of(server);
	if (c)
		c->miss_until_ns = now + MISS_PAUSE_NS;
	pthread_mutex_unlock(&shim_pair_lock);
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
		shim_reap(rv_fd);
		return false;
	}
	*pid = cred.pid;
	pthread_mutex_lock(&shim_pair_lock);
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
	pthread_mutex_unlock(&shim_pair_lock);
	shim_reap(rv_fd);
}

/* ---- S ---- */

/* A pair at S goes; with the last one, the epoll set too (a server whose
 * clients all left holds no fd for them). */
static void server_drop(struct server_pair *sp)
{
	if (shim_owned_still(&sp->fd) && shim_owned_still(&hub))
		REAL(epoll_ctl)(hub.fd, EPOLL_CTL_DEL, sp->fd.fd, NULL);
	shim_reap_owned(&sp->fd);
	shim_slots_retire(&sp->arena);
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

		shim_owned_forget(&hub);
		if (ep >= 0)
			ep = shim_fd_own_checked(ep);
		if (ep >= 0 && shim_owned_take_epoll(&hub, ep) < 0)
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
	pthread_mutex_unlock(&shim_pair_lock);
	shim_reap(rv_fd);
}

/* A pending HINT goes unclaimed: its slot back to C. */
static void pending_free(struct pending *p)
{
	shim_reap_owned(&p->rv);
	shim_reap_owned(&p->mem);
	if (p->arena)
		shim_slots_give_back(&p->arena, p->msg.slot, p->msg.slot_gen);
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
	slot->drained = drains;
	slot->mem.fd = -1;
	slot->arena = arena;
	if (arena)
		shim_slots_get(arena);
	if (shim_owned_take(&slot->rv, rv_fd) < 0 || (memfd >= 0 && shim_owned_take(&slot->mem, memfd) < 0)) {
		shim_reap(rv_fd);
		shim_reap(memfd);
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
		/* One arena per pair, of rings no larger than ours. */
		if (sp->arena || *memfd < 0 || h->ring_bytes > shim_cfg.ring_kb * 1024u)
			return false;
		sp->arena = shim_slots_map(*memfd, h->ring_bytes, h->arena_slots, &sp->fd);
		shim_reap(*memfd);
		*memfd = -1;
		if (!sp->arena)
			return false;
	}
	return *memfd < 0 && shim_slots_fit(sp->arena, h->slot, h->ring_bytes);
}

/* Under pair_lock: a pair that closed, failed a read (len < 0) or sent
 * anything but a well-formed HINT is dropped. */
static void drain_drop(struct server_pair *sp, ssize_t len)
{
	SHIM_TRACE(SHIM_TRACE_DEBUG, "pair.drop", -1, NULL, SHIM_REASON_NONE, "\"side\":\"server\",\"read\":%zd", len);
	server_drop(sp);
}

/* Under pair_lock: the HINTs one pair brought, a batch a system call. */
static void drain_one(struct server_pair *sp, unsigned long long now)
{
	struct shim_rv_msg msgs[SHIM_RV_BATCH_MAX];

	for (unsigned m = 0; m < DRAIN_MSGS_PER_PAIR; m += SHIM_RV_BATCH_MAX) {
		int n = shim_rv_recv_batch(sp->fd.fd, msgs, SHIM_RV_BATCH_MAX);

		if (n == -EAGAIN)
			return;
		if (n < 0) {
			drain_drop(sp, n);
			return;
		}
		for (int i = 0; i < n; i++) {
			struct shim_msg_hint hint;
			int *fds = msgs[i].fds;
			ssize_t len = msgs[i].len;

			if (len <= 0 || shim_msg_check(msgs[i].raw, (size_t)len) != SHIM_MSG_HINT) {
				batch_close_fds(msgs, i, n);
				drain_drop(sp, len);
				return;
			}
			memcpy(&hint, msgs[i].raw, sizeof(hint));
			if (fds[0] == -EMFILE || fds[1] == -EMFILE) {
				/* Near our fd limit the HINT alone is lost (its
				 * slot, if any, with it: C does not reuse it). */
				batch_close_fds(msgs, i, i + 1);
				continue;
			}
			if (fds[0] < 0 || !hint_ring(sp, &hint, &fds[1])) {
				batch_close_fds(msgs, i, n);
				drain_drop(sp, len);
				return;
			}
			pending_add(&hint, fds[0], fds[1], hint.slot == SHIM_SLOT_NONE ? NULL : sp->arena, now);
		}
		if (n < SHIM_RV_BATCH_MAX)
			return;
	}
}

static void drain(unsigned long long now)
{
	struct epoll_event evs[16];
	int n;

	drains++;
	if (hub.fd < 0)
		return;
	if (!shim_owned_still(&hub)) {
		shim_owned_forget(&hub);
		for (unsigned i = 0; i < PAIR_SERVER_MAX; i++) {
			shim_reap_owned(&servers[i].fd);
			shim_slots_retire(&servers[i].arena);
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
				shim_slots_retire(&servers[i].arena);
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

	pthread_mutex_lock(&shim_pair_lock);
	tables_init();
	drain(now);
	for (unsigned i = 0; i < PENDING_MAX && !found; i++) {
		struct pending *p = &pending[i];

		if (p->rv.fd < 0 || !names(&p->msg, t))
			continue;
		bool fresh = p->drained == drains;

		if (fresh || (shim_owned_still(&p->rv) && (p->arena || shim_owned_still(&p->mem)))) {
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
	pthread_mutex_unlock(&shim_pair_lock);
	return found;
}

int shim_pair_hint_ring(struct shim_pair_hint *h, struct shim_chan **out)
{
	int rc;

	if (!h->arena) {
		rc = shim_shm_attach(h->memfd, h->msg.ring_bytes, out);
		shim_reap(h->memfd);
		h->memfd = -1;
		return rc;
	}
	pthread_mutex_lock(&shim_pair_lock);
	rc = shim_slots_chan(h->arena, h->msg.slot, h->msg.slot_gen, out);
	if (rc < 0) {
		shim_slots_give_back(&h->arena, h->msg.slot, h->msg.slot_gen);
	} else {
		shim_slots_put(h->arena); /* the channel holds its own */
		h->arena = NULL;
	}
	pthread_mutex_unlock(&shim_pair_lock);
	return rc;
}

void shim_pair_hint_drop_ring(struct shim_pair_hint *h)
{
	if (!h->arena) {
		shim_reap(h->memfd);
		h->memfd = -1;
		return;
	}
	pthread_mutex_lock(&shim_pair_lock);
	shim_slots_give_back(&h->arena, h->msg.slot, h->msg.slot_gen);
	pthread_mutex_unlock(&shim_pair_lock);
}

int shim_pair_hub_fd(void)
{
	int fd;

	pthread_mutex_lock(&shim_pair_lock);
	tables_init();
	fd = hub.fd;
	pthread_mutex_unlock(&shim_pair_lock);
	return fd;
}

/* ---- fork ---- */

void shim_pair_atfork_prepare(void)
{
	pthread_mutex_lock(&shim_pair_lock);
}

void shim_pair_atfork_parent(void)
{
	pthread_mutex_unlock(&shim_pair_lock);
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
			shim_reap_owned(&servers[i].fd);
			shim_slots_retire(&servers[i].arena);
		}
		for (unsigned i = 0; i < PENDING_MAX; i++)
			if (pending[i].rv.fd >= 0)
				pending_free(&pending[i]);
		shim_owned_close(&hub);
	}
	pthread_mutex_unlock(&shim_pair_lock);
}
