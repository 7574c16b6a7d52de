/*
 * Which links a process keeps (rdma_link.h): a link goes in once a
 * connection on it proved its peer, and is looked up by the server's
 * endpoint (C) or the client's address (S). Links that broke, or whose CM
 * peer left, are dropped at the next look. The object itself is
 * rdma_link.c's.
 */
#include "rdma_link.h"
#include "rdma.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>

#include <rdma/rdma_cma.h>

#include "bgthread.h"
#include "clock.h"
#include "config.h"
#include "self.h"
#include "trace.h"

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_link *table;

static void sweeper_start_locked(void);

void shim_rdma_link_trust(struct rdma_link *l)
{
	bool added = false;

	if (__atomic_load_n(&l->trusted, __ATOMIC_RELAXED) || !shim_cfg.rdma_links)
		return;
	pthread_mutex_lock(&table_lock);
	if (!l->trusted && !shim_rdma_link_broken(l)) {
		l->trusted = true;
		if (l->cm_owned && !l->in_table) {
			l->in_table = true;
			shim_rdma_link_get(l);
			l->next = table;
			table = l;
			added = true;
			sweeper_start_locked();
		}
	}
	pthread_mutex_unlock(&table_lock);
	if (added)
		shim_rdma_link_trace(l, SHIM_TRACE_INFO, "up", NULL);
}

/* Precondition: table_lock held. The CM events are looked at too: a peer
 * process that exited sent its DREQ (a fork-per-connection server's
 * worker), and an OFFER to it would wait for nothing. */
static bool alive(struct rdma_link *l)
{
	return l->pid == shim_self_pid() && l->trusted && !shim_rdma_link_broken(l) && !shim_rdma_link_cm_gone(l);
}

/* ... and it has room for one more connection (relaxed look: the place
 * is taken under the link's lock, which says no when full). An OFFER kept
 * unclaimed holds a place at C: without it, S's waiters took a link full
 * at C's end for one with room and waited for OFFERs C could not send. */
static unsigned room_on(struct rdma_link *l)
{
	unsigned used = __atomic_load_n(&l->live, __ATOMIC_RELAXED) + __atomic_load_n(&l->held, __ATOMIC_RELAXED) +
			__atomic_load_n(&l->offers_kept, __ATOMIC_RELAXED);

	return used < l->max_conns ? l->max_conns - used : 0;
}

static bool usable(struct rdma_link *l)
{
	return alive(l) && room_on(l) > 0;
}

/* Precondition: table_lock held. S's live link toward client host addr. */
static bool toward_host(struct rdma_link *l, const uint8_t addr[16])
{
	return !l->client && alive(l) && memcmp(l->peer.addr, addr, 16) == 0;
}

/* Precondition: table_lock held. A link that carried nothing (no place,
 * no kept OFFER) for RDMASHIM_RDMA_LINK_IDLE_MS, and that only the table
 * holds: every other reference is a connection's on it or a lookup's,
 * taken under this lock, so none can come while we hold it. */
static bool idle_out(struct rdma_link *l, unsigned long long now)
{
	unsigned long long idle_ns = (unsigned long long)shim_cfg.rdma_link_idle_ms * 1000000ull;
	unsigned long long busy = __atomic_load_n(&l->busy_ns, __ATOMIC_RELAXED);

	return idle_ns && __atomic_load_n(&l->refs, __ATOMIC_ACQUIRE) == 1 && room_on(l) == l->max_conns &&
	       now > busy && now - busy >= idle_ns;
}

/* Precondition: table_lock held. Unlinks broken links, those whose CM
 * peer left, and idle ones; returns them in a list for the caller to put
 * once the lock is let go (the last reference disconnects and frees). */
static struct rdma_link *prune_locked(void)
{
	struct rdma_link **pp = &table, *gone = NULL;
	unsigned long long now = shim_now_ns();

	while (*pp) {
		struct rdma_link *l = *pp;
		bool idle = false;

		if (l->pid == shim_self_pid() && !shim_rdma_link_broken(l) &&
		    !__atomic_load_n(&l->peer_disconnected, __ATOMIC_ACQUIRE) &&
		    !(idle = idle_out(l, now))) {
			pp = &l->next;
			continue;
		}
		if (idle)
			shim_rdma_link_trace(l, SHIM_TRACE_INFO, "down", "idle");
		else if (l->pid == shim_self_pid() && !shim_rdma_link_broken(l))
			shim_rdma_link_trace(l, SHIM_TRACE_INFO, "down", "peer_left");
		*pp = l->next;
		l->in_table = false;
		l->next = gone;
		gone = l;
	}
	return gone;
}

static void put_all(struct rdma_link *gone)
{
	while (gone) {
		struct rdma_link *next = gone->next;

		shim_rdma_link_put(gone);
		gone = next;
	}
}

/*
 * The sweeper: while the table holds links of this process, a thread of
 * the shim's own looks at them every SWEEP_MS (or a quarter of the idle
 * bound, when shorter) and lets go of those prune_locked drops: an idle
 * link is closed though no connection comes to look (a server whose
 * clients went quiet keeps no QP and no cells for them), and one whose CM
 * peer left is freed at once, with the port its CM id holds. It ends when
 * the table has no link left; a fork child starts its own.
 */
#define SWEEP_MS 1000
/* Links the stall watch looks at per sweep; past that, a receiver waiting
 * in a call looks at its own (its idle reaps). */
#define WATCH_MAX 64
static pid_t sweeper_pid; /* under table_lock: the process whose sweeper runs */

static unsigned sweep_ms(void)
{
	unsigned q = shim_cfg.rdma_link_idle_ms / 4, w = shim_cfg.rdma_stall_ms / 4, ms;

	ms = q && q < SWEEP_MS ? (q < 10 ? 10 : q) : SWEEP_MS;
	/* The stall watch looks at most once per quarter of its bound. */
	return w && w < ms ? (w < 10 ? 10 : w) : ms;
}

static void *sweeper_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "rdmashim-links");
	for (;;) {
		unsigned ms = sweep_ms();
		struct timespec pause = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
		struct rdma_link *gone, *aging[8], *quiet[8], *busy[WATCH_MAX];
		unsigned n_aging = 0, n_quiet = 0, n_busy = 0;
		bool more;

		nanosleep(&pause, NULL);
		pthread_mutex_lock(&table_lock);
		/* The CM events say whether a peer left (it sent its DREQ). */
		for (struct rdma_link *l = table; l; l = l->next)
			if (l->pid == shim_self_pid())
				(void)shim_rdma_link_cm_gone(l);
		gone = prune_locked();
		/* OFFERs kept for connections no claim here takes (another
		 * process's) age out here too: each holds a place at both
		 * ends, and the link would never be idle. */
		for (struct rdma_link *l = table; l && n_aging < 8; l = l->next)
			if (!l->client && __atomic_load_n(&l->offers_kept, __ATOMIC_RELAXED)) {
				shim_rdma_link_get(l);
				aging[n_aging++] = l;
			}
		/* A link no connection is on any more is reaped by no data call:
		 * the peer's RELEASE of the last place would wait in its CQ,
		 * the place stay held and the link never be idle. */
		for (struct rdma_link *l = table; l && n_quiet < 8; l = l->next)
			if (l->pid == shim_self_pid() && !__atomic_load_n(&l->live, __ATOMIC_RELAXED) &&
			    __atomic_load_n(&l->held, __ATOMIC_RELAXED)) {
				shim_rdma_link_get(l);
				quiet[n_quiet++] = l;
			}
		/* The stall watch (rdma_link.h) for receivers in no call. */
		for (struct rdma_link *l = table; l && n_busy < WATCH_MAX && shim_cfg.rdma_stall_ms; l = l->next)
			if (l->pid == shim_self_pid() && __atomic_load_n(&l->live, __ATOMIC_RELAXED) &&
			    !shim_rdma_link_broken(l)) {
				shim_rdma_link_get(l);
				busy[n_busy++] = l;
			}
		more = table != NULL;
		if (!more)
			sweeper_pid = 0;
		pthread_mutex_unlock(&table_lock);
		put_all(gone);
		for (unsigned i = 0; i < n_busy; i++) {
			shim_rdma_link_watch(busy[i]);
			shim_rdma_link_put(busy[i]);
		}
		for (unsigned i = 0; i < n_quiet; i++) {
			shim_rdma_link_reap_try(quiet[i]);
			shim_rdma_link_put(quiet[i]);
		}
		for (unsigned i = 0; i < n_aging; i++) {
			struct shim_rdma_link_msg none;

			(void)shim_rdma_link_take_offer(aging[i], NULL, (unsigned long long)shim_cfg.cm_timeout_ms * 1000000ull,
							&none);
			shim_rdma_link_put(aging[i]);
		}
		if (!more)
			return NULL;
	}
}

/* Precondition: table_lock held, and the table holds a link of ours. */
static void sweeper_start_locked(void)
{
	if (sweeper_pid == shim_self_pid())
		return;
	if (shim_bgthread_start(sweeper_main, NULL) == 0)
		sweeper_pid = shim_self_pid();
}

struct rdma_link *shim_rdma_link_for_server(const struct shim_endpoint *server)
{
	struct rdma_link *found = NULL, *gone;

	pthread_mutex_lock(&table_lock);
	gone = prune_locked();
	for (struct rdma_link *l = table; l && !found; l = l->next)
		if (l->client && usable(l) && shim_endpoint_equal(&l->peer, server)) {
			found = l;
			shim_rdma_link_get(l);
		}
	pthread_mutex_unlock(&table_lock);
	put_all(gone);
	return found;
}

enum shim_link_toward shim_rdma_link_toward(const struct shim_endpoint *client)
{
	enum shim_link_toward found = SHIM_LINK_NONE;
	struct rdma_link *gone;

	pthread_mutex_lock(&table_lock);
	gone = prune_locked();
	for (struct rdma_link *l = table; l && found != SHIM_LINK_ROOM; l = l->next)
		if (toward_host(l, client->addr))
			found = room_on(l) > 0 ? SHIM_LINK_ROOM : SHIM_LINK_FULL;
	pthread_mutex_unlock(&table_lock);
	/* A broken link's CM id holds a port in rdma_cm's space until it is
	 * freed: let it go now. */
	put_all(gone);
	return found;
}

bool shim_rdma_link_claim(const struct shim_tuple *t, unsigned long long max_age_ns, struct rdma_link **link,
			  struct shim_rdma_link_msg *out)
{
	struct rdma_link *cand[8];
	unsigned n = 0;
	bool found = false;

	/* Candidates with a reference each, then each looked at without the
	 * table's lock (taking an offer may post, and wait). A full link too:
	 * its OFFER is taken and released (rdma_link_join.c). */
	pthread_mutex_lock(&table_lock);
	for (struct rdma_link *l = table; l && n < 8; l = l->next)
		if (toward_host(l, t->peer.addr)) {
			shim_rdma_link_get(l);
			cand[n++] = l;
		}
	pthread_mutex_unlock(&table_lock);
	for (unsigned i = 0; i < n; i++) {
		if (!found && shim_rdma_link_take_offer(cand[i], t, max_age_ns, out)) {
			*link = cand[i];
			found = true;
			continue;
		}
		shim_rdma_link_put(cand[i]);
	}
	return found;
}

/*
 * S: per client host, the links being made toward it (a connection of
 * ours in rdma_cm's way) and the connections waiting to join one. A burst
 * of connections (a pool that opens at once, or one past a full link)
 * then makes about a link per cap, not a link per connection, each sized
 * for a full cap (1000 at once made 528 and the server was killed for
 * memory): a connection waits while the room on the links up and on their
 * way covers every waiter (shim_rdma_link_room_coming). A few hosts at a
 * time; past that, no waiting. A fork child's counts are its parent's: it
 * starts afresh.
 */
#define PENDING_HOSTS 16
struct host_count {
	uint8_t addr[16];
	unsigned making;  /* links on their way */
	unsigned waiting; /* connections waiting to join one */
};
static struct host_count pending[PENDING_HOSTS];
static pid_t pending_pid;

/* Precondition: table_lock held. The host's counts; a free entry taken
 * for it when make is true; NULL when it has none. */
static struct host_count *host_counts(const uint8_t addr[16], bool make)
{
	struct host_count *spare = NULL;

	if (pending_pid != shim_self_pid()) {
		memset(pending, 0, sizeof(pending));
		pending_pid = shim_self_pid();
	}
	for (unsigned i = 0; i < PENDING_HOSTS; i++) {
		bool used = pending[i].making || pending[i].waiting;

		if (used && memcmp(pending[i].addr, addr, 16) == 0)
			return &pending[i];
		if (!used && !spare)
			spare = &pending[i];
	}
	if (!make || !spare)
		return NULL;
	memcpy(spare->addr, addr, 16);
	return spare;
}

/* One more (start) or one fewer in *field of addr's counts; true:
 * counted (the end must then be told). */
static bool count_host(const uint8_t addr[16], size_t field, bool start)
{
	struct host_count *h;
	bool counted = false;

	pthread_mutex_lock(&table_lock);
	h = host_counts(addr, start);
	if (h) {
		unsigned *n = (unsigned *)((char *)h + field);

		/* An end never counted (the host's entry kept by its other
		 * count) must not wrap this one. */
		counted = start || *n > 0;
		if (counted)
			*n += start ? 1 : -1;
	}
	pthread_mutex_unlock(&table_lock);
	return counted;
}

bool shim_rdma_link_making(const uint8_t addr[16], bool start)
{
	return count_host(addr, offsetof(struct host_count, making), start);
}

bool shim_rdma_link_waiting(const uint8_t addr[16], bool start)
{
	return count_host(addr, offsetof(struct host_count, waiting), start);
}

unsigned shim_rdma_link_makings(const struct shim_endpoint *client)
{
	struct host_count *h;
	unsigned n;

	pthread_mutex_lock(&table_lock);
	h = host_counts(client->addr, false);
	n = h ? h->making : 0;
	pthread_mutex_unlock(&table_lock);
	return n;
}

bool shim_rdma_link_room_coming(const struct shim_endpoint *client)
{
	unsigned room = 0, per_new = shim_cfg.rdma_link_conns > 1 ? shim_cfg.rdma_link_conns - 1 : 0;
	struct host_count *h;
	struct rdma_link *gone;
	bool enough;

	pthread_mutex_lock(&table_lock);
	gone = prune_locked();
	for (struct rdma_link *l = table; l; l = l->next)
		if (toward_host(l, client->addr))
			room += room_on(l);
	h = host_counts(client->addr, false);
	/* Each link on its way comes up with its maker on it. */
	enough = h && (h->making >= SHIM_LINK_MAKING_MAX ||
		       ((room > 0 || h->making > 0) && room + h->making * per_new >= h->waiting));
	pthread_mutex_unlock(&table_lock);
	put_all(gone);
	return enough;
}

/* c counted in one of its client host's counts (field), *counted saying
 * so; and the end of that. */
static void conn_count(struct rdma_conn *c, bool *counted, size_t field, const uint8_t addr[16])
{
	if (*counted)
		return;
	memcpy(c->making_addr, addr, 16);
	*counted = count_host(c->making_addr, field, true);
}

static void conn_uncount(struct rdma_conn *c, bool *counted, size_t field)
{
	/* A fork child's count was its parent's, not here. */
	if (!*counted || c->pid != shim_self_pid())
		return;
	*counted = false;
	count_host(c->making_addr, field, false);
}

void shim_rdma_link_making_mark(struct shim_sock *s, struct rdma_conn *c)
{
	if (shim_rdma_links_on() && s->role == SHIM_ROLE_SERVER)
		conn_count(c, &c->making_link, offsetof(struct host_count, making), s->tuple.peer.addr);
}

void shim_rdma_link_making_done(struct rdma_conn *c)
{
	conn_uncount(c, &c->making_link, offsetof(struct host_count, making));
}

void shim_rdma_link_waiting_mark(struct shim_sock *s, struct rdma_conn *c)
{
	conn_count(c, &c->waiting_counted, offsetof(struct host_count, waiting), s->tuple.peer.addr);
}

void shim_rdma_link_waiting_done(struct rdma_conn *c)
{
	conn_uncount(c, &c->waiting_counted, offsetof(struct host_count, waiting));
}

void shim_rdma_link_atfork(bool prepare)
{
	if (prepare)
		pthread_mutex_lock(&table_lock);
	else
		pthread_mutex_unlock(&table_lock);
}

unsigned shim_rdma_links_break_on_port(const struct ibv_context *ctx, uint8_t port, const char *why)
{
	unsigned n = 0;

	/* The table's lock, then each link's (rdma_link.h's order): what a
	 * break calls on the link's connections (shim_rdma_mark_broken) takes
	 * neither again. */
	pthread_mutex_lock(&table_lock);
	for (struct rdma_link *l = table; l; l = l->next)
		if (l->pid == shim_self_pid() && !shim_rdma_link_broken(l) && l->id->verbs == ctx &&
		    l->id->port_num == port) {
			shim_rdma_link_break(l, why, port);
			n++;
		}
	pthread_mutex_unlock(&table_lock);
	return n;
}
