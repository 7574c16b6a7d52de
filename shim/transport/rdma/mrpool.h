/*
 * The registered-memory pool for RDMA rings.
 *
 * Memory is mapped in big chunks (2 MiB huge pages with MAP_HUGETLB when the
 * system has them, else normal pages) and registered once per protection
 * domain with one ibv_reg_mr per chunk. A connection takes a fixed-size slot
 * and gives it back at close; slots are reused, chunks are never
 * deregistered while the process lives. So connection setup never calls
 * ibv_reg_mr on its fast path (registration pins and maps pages in the
 * kernel: tens of microseconds per MiB with 4 KiB pages).
 *
 * The chunk's MR grants local access only. A connection registers a second
 * MR over its own control page and receive ring (rdma_setup.c) and gives the
 * peer that rkey: the peer can write there and nowhere else, not into the
 * slot's staging copy nor into another connection's slot. The cost is one
 * ibv_reg_mr of ring + 4 KiB per connection, of pages already faulted in.
 */
#ifndef RDMASHIM_MRPOOL_H
#define RDMASHIM_MRPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ibv_pd;
struct mrpool_chunk;

struct shim_mr_slot {
	void *addr;
	size_t len;
	uint32_t lkey, rkey;
	struct mrpool_chunk *chunk;
	unsigned index;
};

/* Takes a zeroed slot of at least bytes from pd's pool. 0 or -errno. */
int shim_mrpool_get(struct ibv_pd *pd, size_t bytes, struct shim_mr_slot *out);
/* Fork handler half: true takes the pool's lock, false drops it. */
void shim_mrpool_atfork(bool prepare);
void shim_mrpool_put(struct shim_mr_slot *slot);
/* Whether the slot's chunk sits on huge pages. */
bool shim_mrpool_slot_huge(const struct shim_mr_slot *slot);

/* The bytes of one chunk for slots of slot_bytes, and in *slots how many
 * it holds. A chunk is registered (pinned, counted against
 * RLIMIT_MEMLOCK) whole, so `rdmashim doctor` weighs the limit by it. */
size_t shim_mrpool_chunk_bytes(size_t slot_bytes, unsigned *slots);

/* What the pool did so far (tool, bench, tests). */
struct shim_mrpool_stats {
	unsigned chunks, huge_chunks, slots_in_use;
	unsigned long long reg_ns; /* time spent in ibv_reg_mr */
};
void shim_mrpool_stats(struct shim_mrpool_stats *out);

/* For the bench: map (huge or not) and register bytes once; returns the ns
 * ibv_reg_mr took, or -errno. The memory is released again. */
long long shim_mrpool_time_registration(struct ibv_pd *pd, size_t bytes, bool huge);

#endif
