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
#include <string.h>
#include <sys/types.h>

#include "config.h"
#include "self.h"
#include "trace.h"

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_link *table;

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
static bool usable(struct rdma_link *l)
{
	return alive(l) && __atomic_load_n(&l->live, __ATOMIC_RELAXED) + __atomic_load_n(&l->held, __ATOMIC_RELAXED) +
				   __atomic_load_n(&l->offers_kept, __ATOMIC_RELAXED) <
			   l->max_conns;
}

/* Precondition: table_lock held. Unlinks broken links; returns them in a
 * list for the caller to put once the lock is let go. */
static struct rdma_link *prune_locked(void)
{
	struct rdma_link **pp = &table, *gone = NULL;

	while (*pp) {
		struct rdma_link *l = *pp;

		if (l->pid == shim_self_pid() && !shim_rdma_link_broken(l) && !l->peer_disconnected) {
			pp = &l->next;
			continue;
		}
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

bool shim_rdma_link_toward(const struct shim_endpoint *client)
{
	struct rdma_link *gone;
	bool found = false;

	pthread_mutex_lock(&table_lock);
	gone = prune_locked();
	for (struct rdma_link *l = table; l && !found; l = l->next)
		found = !l->client && usable(l) && memcmp(l->peer.addr, client->addr, 16) == 0;
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
		if (!l->client && alive(l) && memcmp(l->peer.addr, t->peer.addr, 16) == 0) {
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
 * S: links being made toward client hosts (a connection of ours in
 * rdma_cm's way), counted per host. With SHIM_LINK_MAKING_MAX of them on
 * the way, a later connection to that host waits for one to come up and
 * for the client's OFFER on it, instead of making a link of its own: a
 * burst of connections (a pool that opens at once, or one past a full
 * link) then makes about a link per cap, not a link per connection, each
 * sized for a full cap (1000 at once made 528 and the server was killed
 * for memory). A few hosts at a time; past that, no
 * waiting. A fork child's attempts are its parent's: it starts afresh.
 */
#define PENDING_HOSTS 16
static struct {
	uint8_t addr[16];
	unsigned n;
} pending[PENDING_HOSTS];
static pid_t pending_pid;

/* Precondition: table_lock held. */
static void pending_own_locked(void)
{
	if (pending_pid != shim_self_pid()) {
		memset(pending, 0, sizeof(pending));
		pending_pid = shim_self_pid();
	}
}

bool shim_rdma_link_making(const uint8_t addr[16], bool start)
{
	bool counted = false;
	unsigned i;

	pthread_mutex_lock(&table_lock);
	pending_own_locked();
	for (i = 0; i < PENDING_HOSTS && !counted; i++) {
		if (pending[i].n && memcmp(pending[i].addr, addr, 16) == 0) {
			pending[i].n += start ? 1 : -1;
			counted = true;
		}
	}
	for (i = 0; i < PENDING_HOSTS && !counted && start; i++) {
		if (!pending[i].n) {
			memcpy(pending[i].addr, addr, 16);
			pending[i].n = 1;
			counted = true;
		}
	}
	pthread_mutex_unlock(&table_lock);
	return counted;
}

unsigned shim_rdma_link_makings(const struct shim_endpoint *client)
{
	unsigned n = 0;

	pthread_mutex_lock(&table_lock);
	pending_own_locked();
	for (unsigned i = 0; i < PENDING_HOSTS && !n; i++)
		if (pending[i].n && memcmp(pending[i].addr, client->addr, 16) == 0)
			n = pending[i].n;
	pthread_mutex_unlock(&table_lock);
	return n;
}

void shim_rdma_link_making_mark(struct shim_sock *s, struct rdma_conn *c)
{
	if (!shim_cfg.rdma_links || c->making_link || s->role != SHIM_ROLE_SERVER)
		return;
	memcpy(c->making_addr, s->tuple.peer.addr, 16);
	c->making_link = shim_rdma_link_making(c->making_addr, true);
}

void shim_rdma_link_making_done(struct rdma_conn *c)
{
	/* A fork child's attempt was counted in its parent, not here. */
	if (!c->making_link || c->pid != shim_self_pid())
		return;
	c->making_link = false;
	shim_rdma_link_making(c->making_addr, false);
}

void shim_rdma_link_atfork(bool prepare)
{
	if (prepare)
		pthread_mutex_lock(&table_lock);
	else
		pthread_mutex_unlock(&table_lock);
}
