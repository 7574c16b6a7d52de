/* The registered-memory pool; see mrpool.h. */
#include "mrpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/verbs.h>

#include "config.h"
#include "real.h"
#include "clock.h"
#include "trace.h"

#define HUGE_2M (2u << 20)
/* Slots per chunk: enough that a busy server registers rarely, few enough
 * that one idle connection does not pin much. */
#define SLOTS_PER_CHUNK 8
#define MAX_SLOTS_PER_CHUNK 64

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << 26)
#endif

struct mrpool_chunk {
	struct mrpool_chunk *next;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	uint8_t *base;
	size_t len, slot_bytes;
	unsigned nslots;
	bool huge;
	uint64_t used; /* bit i: slot i handed out */
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mrpool_chunk *chunks;
static struct shim_mrpool_stats stats;

static size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

/* Huge pages first: one TLB entry and one MTT entry per 2 MiB makes both
 * the registration and the HCA's address translation cheaper. */
static void *map_chunk(size_t len, bool try_huge, bool *huge)
{
	void *p;

	if (try_huge) {
		p = REAL(mmap)(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB,
			 -1, 0);
		if (p != MAP_FAILED) {
			*huge = true;
			return p;
		}
	}
	*huge = false;
	p = REAL(mmap)(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

size_t shim_mrpool_chunk_bytes(size_t slot_bytes, unsigned *slots)
{
	size_t len = round_up(slot_bytes * SLOTS_PER_CHUNK, HUGE_2M);
	unsigned n = (unsigned)(len / slot_bytes);

	/* Rounding up to 2 MiB may leave room for more slots: use it. */
	*slots = n > MAX_SLOTS_PER_CHUNK ? MAX_SLOTS_PER_CHUNK : n;
	return len;
}

static struct mrpool_chunk *new_chunk(struct ibv_pd *pd, size_t slot_bytes)
{
	struct mrpool_chunk *c = calloc(1, sizeof(*c));
	unsigned long long t0;
	unsigned n;

	if (!c)
		return NULL;
	c->len = shim_mrpool_chunk_bytes(slot_bytes, &n);
	c->base = map_chunk(c->len, shim_cfg.huge_pages, &c->huge);
	if (!c->base) {
		free(c);
		return NULL;
	}
	/* No MADV_DONTFORK: since Linux 5.13 fork copies pinned pages for the
	 * child up front, so the parent keeps the pages the HCA writes, and a
	 * child that touches an inherited connection reads a snapshot instead
	 * of faulting on an unmapped ring. */
	t0 = shim_now_ns();
	/* Local access only: a peer reaches a slot through the MR its
	 * connection registers over that slot alone (rdma_setup.c). */
	c->mr = ibv_reg_mr(pd, c->base, c->len, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr) {
		int err = errno;

		REAL(munmap)(c->base, c->len);
		free(c);
		errno = err;
		return NULL;
	}
	stats.reg_ns += shim_now_ns() - t0;
	stats.chunks++;
	stats.huge_chunks += c->huge;
	c->pd = pd;
	c->slot_bytes = slot_bytes;
	c->nslots = n;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "mrpool.chunk", -1, NULL, SHIM_REASON_NONE,
		   "\"bytes\":%zu,\"slots\":%u,\"huge\":%s,\"reg_us\":%llu", c->len, n, c->huge ? "true" : "false",
		   (shim_now_ns() - t0) / 1000);
	return c;
}

int shim_mrpool_get(struct ibv_pd *pd, size_t bytes, struct shim_mr_slot *out)
{
	struct mrpool_chunk *c;
	size_t slot_bytes = round_up(bytes, 4096);

	pthread_mutex_lock(&pool_lock);
	for (c = chunks; c; c = c->next)
		if (c->pd == pd && c->slot_bytes == slot_bytes && c->used != (c->nslots == 64 ? ~0ull : (1ull << c->nslots) - 1))
			break;
	if (!c) {
		c = new_chunk(pd, slot_bytes);
		if (!c) {
			int err = errno ? errno : ENOMEM;

			pthread_mutex_unlock(&pool_lock);
			return -err;
		}
		c->next = chunks;
		chunks = c;
	}
	for (unsigned i = 0; i < c->nslots; i++) {
		if (c->used & (1ull << i))
			continue;
		c->used |= 1ull << i;
		out->addr = c->base + (size_t)i * slot_bytes;
		out->len = slot_bytes;
		out->lkey = c->mr->lkey;
		out->rkey = c->mr->rkey;
		out->chunk = c;
		out->index = i;
		stats.slots_in_use++;
		break;
	}
	pthread_mutex_unlock(&pool_lock);
	/* A reused slot holds the last connection's cursors and bytes, all of
	 * it: a peer that announces bytes it never wrote must read zeros, not
	 * what another connection received. */
	memset(out->addr, 0, slot_bytes);
	return 0;
}

void shim_mrpool_put(struct shim_mr_slot *slot)
{
	if (!slot->chunk)
		return;
	pthread_mutex_lock(&pool_lock);
	slot->chunk->used &= ~(1ull << slot->index);
	stats.slots_in_use--;
	pthread_mutex_unlock(&pool_lock);
	slot->chunk = NULL;
}

bool shim_mrpool_slot_huge(const struct shim_mr_slot *slot)
{
	return slot->chunk && slot->chunk->huge;
}

void shim_mrpool_stats(struct shim_mrpool_stats *out)
{
	pthread_mutex_lock(&pool_lock);
	*out = stats;
	pthread_mutex_unlock(&pool_lock);
}

long long shim_mrpool_time_registration(struct ibv_pd *pd, size_t bytes, bool huge)
{
	bool got_huge;
	size_t len = round_up(bytes, HUGE_2M);
	void *p = map_chunk(len, huge, &got_huge);
	unsigned long long t0;
	struct ibv_mr *mr;
	long long ns;

	if (!p)
		return -ENOMEM;
	if (huge && !got_huge) {
		REAL(munmap)(p, len);
		return -ENOMEM;
	}
	memset(p, 0, len); /* fault the pages in, as a pool chunk is used */
	t0 = shim_now_ns();
	mr = ibv_reg_mr(pd, p, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	ns = (long long)(shim_now_ns() - t0);
	if (!mr) {
		REAL(munmap)(p, len);
		return -errno;
	}
	ibv_dereg_mr(mr);
	REAL(munmap)(p, len);
	return ns;
}

/* fork (atfork.c): the child must not inherit the lock held. */
void shim_mrpool_atfork(bool prepare)
{
	if (prepare)
		pthread_mutex_lock(&pool_lock);
	else
		pthread_mutex_unlock(&pool_lock);
}
