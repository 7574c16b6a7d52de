/*
 * Ring arenas (shim/PROTOCOL.md, "Ring arena"): the memory of a pair
 * channel's connections. C makes one sealed memfd per pair, cut into slots
 * of one connection's two rings each (shim_shm_footprint), and maps it
 * once; S maps it once, from the HINT that brings it. A connection's
 * upgrade then costs no memfd, truncate, seal, map or unmap. Each slot
 * lies between guard pages of its own, as a connection's own ring does.
 *
 * Memory only: which slot is in use is the pair's (pair.c).
 */
#ifndef RDMASHIM_ARENA_H
#define RDMASHIM_ARENA_H

#include <stddef.h>
#include <stdint.h>

struct shim_arena {
	uint8_t *map; /* the reservation: guard, slot 0, guard, ..., slot n-1, guard */
	size_t map_len;
	size_t slot_len; /* shim_shm_footprint(ring_bytes) */
	size_t stride;   /* slot_len and its guard */
	uint32_t ring_bytes;
	unsigned slots;
};

/* C: a new arena of slots (at most SHIM_ARENA_SLOTS_MAX) and its memfd, to
 * send once. 0 or -errno. */
int shim_arena_make(uint32_t ring_bytes, unsigned slots, struct shim_arena *a, int *memfd_out);
/* S: maps a received arena memfd, which must be exactly that size and
 * sealed against shrinking. Does not take memfd. 0, -EPROTO or -errno. */
int shim_arena_map(int memfd, uint32_t ring_bytes, unsigned slots, struct shim_arena *a);
/* Where slot (below a->slots) starts. */
uint8_t *shim_arena_slot(const struct shim_arena *a, unsigned slot);
/* C, a slot nobody uses: gives back the memory its rings touched beyond
 * the first SHIM_ARENA_WARM_BYTES of each (the warm part stays mapped and
 * faulted in for the next short connection); a ring whose last use wrote
 * no more than that is left alone. */
void shim_arena_trim(const struct shim_arena *a, unsigned slot);
void shim_arena_unmap(struct shim_arena *a);

#define SHIM_ARENA_WARM_BYTES (64u * 1024)

#endif
