/*
 * The zero-copy registration cache; see mr_cache.h for the contract and
 * docs/ZEROCOPY.md for why it is never stale.
 *
 * The table is an array of chained buckets fixed at build time rather than
 * uthash: uthash allocates and frees its buckets inside HASH_ADD and
 * HASH_DEL, and nothing may allocate or free under this lock (free() can
 * trim the heap with brk, an unmap of watched memory, which waits for the
 * watcher, which waits for this lock).
 */
#include "mr_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stats.h"

#define MR_BUCKETS 1024u
#define MR_LOG 32u /* invalidations remembered for registrations in flight */

struct mr_entry {
	uintptr_t start, end; /* page-aligned */
	const struct shim_mr_registrar *r;
	void *handle;
	uint32_t lkey;
	unsigned refs;
	bool live;  /* in the table and the LRU */
	bool dead;  /* invalidated or evicted: deregistered at its last put */
	struct mr_entry *hnext;
	struct mr_entry *prev, *next; /* LRU (most recent first), pending, or dead */
};

struct inval_rec {
	uintptr_t start, end;
	uint64_t gen;
};

static struct {
	pthread_mutex_t lock;
	const struct shim_mr_watcher *w; /* NULL: nothing is cached */
	size_t cap, bytes;
	size_t held_bytes; /* of live entries a send holds: never evicted */
	unsigned long held;
	struct mr_entry *bucket[MR_BUCKETS];
	struct mr_entry *lru_head, *lru_tail;
	struct mr_entry *pending; /* watched, being registered outside the lock */
	struct mr_entry *dead;    /* unlinked and free of sends: to deregister */
	unsigned long dead_n;
	uint64_t gen; /* invalidations so far */
	struct inval_rec log[MR_LOG];
} mc = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Live entries; read without the lock by the hooks' fast path. */
unsigned long shim_mr_cache_entries;

static uintptr_t page_mask(void)
{
	static uintptr_t mask;

	if (!mask)
		mask = (uintptr_t)sysconf(_SC_PAGESIZE) - 1;
	return mask;
}

static unsigned bucket_of(const struct shim_mr_registrar *r, uintptr_t start, uintptr_t end)
{
	uint64_t h = ((uint64_t)start >> 12) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)end >> 12) ^ (uintptr_t)r;

	return (unsigned)(h ^ (h >> 29)) & (MR_BUCKETS - 1);
}

static bool overlaps(const struct mr_entry *e, uintptr_t start, uintptr_t end)
{
	return e->start < end && start < e->end;
}

void shim_mr_cache_lock(void)
{
	pthread_mutex_lock(&mc.lock);
}

void shim_mr_cache_unlock(void)
{
	pthread_mutex_unlock(&mc.lock);
}

void shim_mr_cache_setup(const struct shim_mr_watcher *w, size_t cap_bytes)
{
	pthread_mutex_lock(&mc.lock);
	mc.w = w;
	mc.cap = cap_bytes;
	pthread_mutex_unlock(&mc.lock);
}

/* ---- the table and the LRU, under the lock ---- */

static void lru_unlink(struct mr_entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		mc.lru_head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		mc.lru_tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_push(struct mr_entry *e)
{
	e->prev = NULL;
	e->next = mc.lru_head;
	if (mc.lru_head)
		mc.lru_head->prev = e;
	mc.lru_head = e;
	if (!mc.lru_tail)
		mc.lru_tail = e;
}

static void insert(struct mr_entry *e)
{
	unsigned b = bucket_of(e->r, e->start, e->end);

	e->hnext = mc.bucket[b];
	mc.bucket[b] = e;
	lru_push(e);
	e->live = true;
	mc.bytes += e->end - e->start;
	__atomic_store_n(&shim_mr_cache_entries, shim_mr_cache_entries + 1, __ATOMIC_RELAXED);
}

/* Out of the table and the LRU; onto the dead list when no send holds
 * it, else its last put deregisters it. */
static void unlink_entry(struct mr_entry *e)
{
	struct mr_entry **pp = &mc.bucket[bucket_of(e->r, e->start, e->end)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(e);
	e->live = false;
	e->dead = true;
	mc.bytes -= e->end - e->start;
	if (e->refs)
		mc.held_bytes -= e->end - e->start;
	__atomic_store_n(&shim_mr_cache_entries, shim_mr_cache_entries - 1, __ATOMIC_RELAXED);
	if (!e->refs) {
		e->next = mc.dead;
		mc.dead = e;
		/* Relaxed: reap()'s look without the lock only decides
		 * whether to take it. */
		__atomic_store_n(&mc.dead_n, mc.dead_n + 1, __ATOMIC_RELAXED);
	}
}

/* The exact range first (one bucket), then any live entry of r holding it. */
static struct mr_entry *find_entry(const struct shim_mr_registrar *r, uintptr_t start, uintptr_t end)
{
	for (struct mr_entry *e = mc.bucket[bucket_of(r, start, end)]; e; e = e->hnext)
		if (e->r == r && e->start == start && e->end == end)
			return e;
	for (struct mr_entry *e = mc.lru_head; e; e = e->next)
		if (e->r == r && e->start <= start && end <= e->end)
			return e;
	return NULL;
}

/* The lowest-starting live or pending entry over part of [start, end). */
static struct mr_entry *lowest_over(uintptr_t start, uintptr_t end)
{
	struct mr_entry *best = NULL;

	for (struct mr_entry *e = mc.lru_head; e; e = e->next)
		if (overlaps(e, start, end) && (!best || e->start < best->start))
			best = e;
	for (struct mr_entry *e = mc.pending; e; e = e->next)
		if (overlaps(e, start, end) && (!best || e->start < best->start))
			best = e;
	return best;
}

/* Stops watching what of [start, end) no live or pending entry covers:
 * another entry's pages stay watched. */
static void unwatch_gaps(uintptr_t start, uintptr_t end)
{
	while (start < end) {
		struct mr_entry *o = lowest_over(start, end);

		if (!o) {
			mc.w->unwatch(start, end);
			return;
		}
		if (o->start > start)
			mc.w->unwatch(start, o->start);
		start = o->end;
	}
}

void shim_mr_cache_unwatch_locked(uintptr_t start, uintptr_t end)
{
	if (mc.w)
		unwatch_gaps(start, end);
}

static void log_inval(uintptr_t start, uintptr_t end)
{
	mc.gen++;
	mc.log[mc.gen % MR_LOG] = (struct inval_rec){ .start = start, .end = end, .gen = mc.gen };
}

/* Whether an invalidation since gen touched [start, end); one too old to
 * be remembered counts as touching it. */
static bool raced(uintptr_t start, uintptr_t end, uint64_t gen)
{
	if (mc.gen - gen >= MR_LOG)
		return true;
	for (uint64_t g = gen + 1; g <= mc.gen; g++) {
		const struct inval_rec *l = &mc.log[g % MR_LOG];

		if (l->start < end && start < l->end)
			return true;
	}
	return false;
}

void shim_mr_cache_invalidate_locked(uintptr_t start, uintptr_t end, enum shim_mr_inval why)
{
	struct mr_entry *e, *next;
	unsigned long n = 0;

	start &= ~page_mask();
	log_inval(start, end);
	for (e = mc.lru_head; e; e = next) {
		next = e->next;
		if (!overlaps(e, start, end))
			continue;
		unlink_entry(e);
		n++;
		if (!mc.w)
			continue;
		/* An unmapped range is watched by no one any more; pages of the
		 * entry outside it still are, and all of a REMOVE's or REMAP's. */
		if (why != SHIM_MR_INVAL_UNMAP) {
			unwatch_gaps(e->start, e->end);
			continue;
		}
		if (e->start < start)
			unwatch_gaps(e->start, start);
		if (e->end > end)
			unwatch_gaps(end, e->end);
	}
	if (n)
		shim_stats_zc_add(SHIM_ZC_MR_INVALIDATIONS, n);
}

/* ---- outside the lock ---- */

static void release(struct mr_entry *e)
{
	e->r->dereg(e->r->ctx, e->handle);
	free(e);
}

/* Deregisters what the watcher (or anyone under the lock) left dead. */
static void reap(void)
{
	struct mr_entry *list;

	if (!__atomic_load_n(&mc.dead_n, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&mc.lock);
	list = mc.dead;
	mc.dead = NULL;
	__atomic_store_n(&mc.dead_n, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&mc.lock);
	while (list) {
		struct mr_entry *next = list->next;

		release(list);
		list = next;
	}
}

void shim_mr_cache_invalidate(uintptr_t start, size_t len, enum shim_mr_inval why)
{
	uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;

	/* Nothing cached nor being registered: nothing to drop. One being
	 * registered meanwhile is watched already; its watcher reports this
	 * change too (mr_watch.c), and its insert sees it (raced). */
	if (!shim_mr_cache_active() && !__atomic_load_n(&mc.pending, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&mc.lock);
	shim_mr_cache_invalidate_locked(start, end, why);
	pthread_mutex_unlock(&mc.lock);
	reap();
}

void shim_mr_cache_purge(void)
{
	pthread_mutex_lock(&mc.lock);
	shim_mr_cache_invalidate_locked(0, UINTPTR_MAX, SHIM_MR_INVAL_REMOVE);
	pthread_mutex_unlock(&mc.lock);
	reap();
}

static void pending_remove(struct mr_entry *e)
{
	struct mr_entry **pp = &mc.pending;

	while (*pp && *pp != e)
		pp = &(*pp)->next;
	if (*pp)
		*pp = e->next;
	e->next = NULL;
}

/* Room for bytes more within the cap, least recently used first, never
 * an entry a send holds. false: every entry left is held. */
static bool make_room(size_t bytes)
{
	struct mr_entry *e = mc.lru_tail, *prev;

	while (mc.bytes + bytes > mc.cap && e) {
		prev = e->prev;
		if (!e->refs) {
			unlink_entry(e);
			unwatch_gaps(e->start, e->end);
		}
		e = prev;
	}
	return mc.bytes + bytes <= mc.cap;
}

static void hold(struct mr_entry *e, struct shim_mr_ref *out)
{
	if (!e->refs++) {
		mc.held++;
		mc.held_bytes += e->end - e->start;
	}
	out->lkey = e->lkey;
	out->handle = e->handle;
	out->entry = e;
}

/* The registration, outside the lock, then its insert under it. */
static int register_new(const struct shim_mr_registrar *r, struct mr_entry *e, uint64_t gen, struct shim_mr_ref *out)
{
	struct mr_entry *other;
	int err = -EIO;
	int rc = 0;

	e->handle = r->reg(r->ctx, (void *)e->start, e->end - e->start, &e->lkey, &err);
	pthread_mutex_lock(&mc.lock);
	pending_remove(e);
	if (!e->handle)
		rc = err < 0 ? err : -EIO;
	else if (mc.w->drain(), raced(e->start, e->end, gen))
		rc = -EAGAIN;
	else if ((other = find_entry(r, e->start, e->end))) {
		/* Another thread cached it meanwhile: use its entry. */
		hold(other, out);
		rc = 1;
	} else if (!make_room(e->end - e->start))
		rc = -ENOSPC;
	if (rc) {
		unwatch_gaps(e->start, e->end);
		pthread_mutex_unlock(&mc.lock);
		if (e->handle)
			r->dereg(r->ctx, e->handle);
		free(e);
		return rc == 1 ? 0 : rc;
	}
	insert(e);
	hold(e, out);
	pthread_mutex_unlock(&mc.lock);
	return 0;
}

int shim_mr_cache_get(const struct shim_mr_registrar *r, const void *addr, size_t len, struct shim_mr_ref *out)
{
	uintptr_t start = (uintptr_t)addr & ~page_mask();
	uintptr_t end = ((uintptr_t)addr + len + page_mask()) & ~page_mask();
	struct mr_entry *e, *fresh;
	uint64_t gen;
	int rc;

	if (!len || end <= start)
		return -EINVAL;
	reap();
	/* Allocated here: nothing allocates under the lock (see the top). */
	fresh = calloc(1, sizeof(*fresh));
	if (!fresh)
		return -ENOMEM;
	pthread_mutex_lock(&mc.lock);
	if (!mc.w) {
		rc = -EXDEV;
		goto out_unlock;
	}
	if (end - start > mc.cap) {
		rc = -E2BIG;
		goto out_unlock;
	}
	/* Changes already made are taken before we trust an entry: an unmap
	 * that returned has had its event read (mr_watch.c). */
	mc.w->drain();
	e = find_entry(r, start, end);
	if (e) {
		lru_unlink(e);
		lru_push(e);
		hold(e, out);
		pthread_mutex_unlock(&mc.lock);
		free(fresh);
		shim_stats_zc_add(SHIM_ZC_MR_HITS, 1);
		return 0;
	}
	/* Held entries are never evicted: no room, no registration. */
	if (mc.held_bytes + (end - start) > mc.cap) {
		rc = -ENOSPC;
		goto out_unlock;
	}
	rc = mc.w->watch(start, end);
	if (rc) {
		rc = -EXDEV;
		goto out_unlock;
	}
	fresh->start = start;
	fresh->end = end;
	fresh->r = r;
	fresh->next = mc.pending;
	__atomic_store_n(&mc.pending, fresh, __ATOMIC_RELAXED);
	gen = mc.gen;
	pthread_mutex_unlock(&mc.lock);
	shim_stats_zc_add(SHIM_ZC_MR_MISSES, 1);
	rc = register_new(r, fresh, gen, out);
	reap();
	return rc;
out_unlock:
	pthread_mutex_unlock(&mc.lock);
	free(fresh);
	return rc;
}

void shim_mr_cache_put(struct shim_mr_ref *ref)
{
	struct mr_entry *e = ref->entry;
	bool gone = false;

	if (!e)
		return;
	ref->entry = NULL;
	pthread_mutex_lock(&mc.lock);
	if (!--e->refs) {
		mc.held--;
		if (e->live)
			mc.held_bytes -= e->end - e->start;
		/* Dead (invalidated while the send used it): out of every
		 * list, nobody else can reach it now. */
		gone = e->dead;
	}
	pthread_mutex_unlock(&mc.lock);
	if (gone)
		release(e);
	reap();
}

void shim_mr_cache_stats(struct shim_mr_cache_stats *out)
{
	pthread_mutex_lock(&mc.lock);
	out->entries = shim_mr_cache_entries;
	out->held = mc.held;
	out->bytes = mc.bytes;
	out->cap = mc.cap;
	out->dead = mc.dead_n;
	pthread_mutex_unlock(&mc.lock);
}

/* ---- fork ---- */

void shim_mr_cache_atfork_prepare(void)
{
	pthread_mutex_lock(&mc.lock);
}

void shim_mr_cache_atfork_parent(void)
{
	/* The fork made our pages copy-on-write: a kernel without reliable
	 * read-only pinning could give the parent new pages under its
	 * registrations at its next write. None is kept. */
	if (shim_mr_cache_active())
		shim_mr_cache_invalidate_locked(0, UINTPTR_MAX, SHIM_MR_INVAL_REMOVE);
	pthread_mutex_unlock(&mc.lock);
	reap();
}

void shim_mr_cache_atfork_child(void)
{
	struct mr_entry *e, *next;

	/* The registrations are the parent's (its verbs file): never
	 * deregistered here. The child's pages are watched by no one
	 * (userfaultfd registrations stay with the parent without
	 * UFFD_FEATURE_EVENT_FORK), so nothing is cached until a watcher is
	 * set up again. */
	for (e = mc.lru_head; e; e = next) {
		next = e->next;
		free(e);
	}
	for (e = mc.dead; e; e = next) {
		next = e->next;
		free(e);
	}
	/* Pending ones belong to threads the child does not have. */
	memset(mc.bucket, 0, sizeof(mc.bucket));
	mc.lru_head = mc.lru_tail = mc.pending = mc.dead = NULL;
	mc.dead_n = mc.held = 0;
	mc.bytes = mc.held_bytes = 0;
	mc.w = NULL;
	__atomic_store_n(&shim_mr_cache_entries, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&mc.lock);
}

void shim_mr_cache_reset_for_test(void)
{
	shim_mr_cache_purge();
	pthread_mutex_lock(&mc.lock);
	mc.w = NULL;
	mc.cap = 0;
	pthread_mutex_unlock(&mc.lock);
}
