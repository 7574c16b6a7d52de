/* Ring arenas; see arena.h. */
#include "arena.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "real.h"
#include "ring.h"
#include "shm.h"
#include "wire.h"

static int arena_map(int memfd, uint32_t ring_bytes, unsigned slots, struct shim_arena *a)
{
	a->ring_bytes = ring_bytes;
	a->slots = slots;
	a->slot_len = (size_t)shim_shm_footprint(ring_bytes);
	a->stride = a->slot_len + SHIM_SHM_GUARD_BYTES;
	a->map = shim_shm_map_slots(memfd, a->slot_len, slots, &a->map_len);
	if (a->map == MAP_FAILED) {
		a->map = NULL;
		return -errno;
	}
	return 0;
}

int shim_arena_make(uint32_t ring_bytes, unsigned slots, struct shim_arena *a, int *memfd_out)
{
	int memfd, rc;

	if (!slots || slots > SHIM_ARENA_SLOTS_MAX)
		return -EINVAL;
	memfd = shim_shm_memfd("rdmashim-arena", slots * shim_shm_footprint(ring_bytes));
	if (memfd < 0)
		return memfd;
	rc = arena_map(memfd, ring_bytes, slots, a);
	if (rc < 0) {
		REAL(close)(memfd);
		return rc;
	}
	*memfd_out = memfd;
	return 0;
}

int shim_arena_map(int memfd, uint32_t ring_bytes, unsigned slots, struct shim_arena *a)
{
	int rc;

	if (!slots || slots > SHIM_ARENA_SLOTS_MAX)
		return -EPROTO;
	rc = shim_shm_memfd_check(memfd, slots * shim_shm_footprint(ring_bytes));
	return rc < 0 ? rc : arena_map(memfd, ring_bytes, slots, a);
}

uint8_t *shim_arena_slot(const struct shim_arena *a, unsigned slot)
{
	return a->map + SHIM_SHM_GUARD_BYTES + slot * a->stride;
}

void shim_arena_trim(const struct shim_arena *a, unsigned slot)
{
	size_t warm = SHIM_RING_HDR_BYTES + SHIM_ARENA_WARM_BYTES;
	size_t ring_len = shim_ring_footprint(a->ring_bytes);

	if (ring_len <= warm)
		return;
	/* Both rings of the slot: the data past the warm part of each, if its
	 * use wrote past it (a ring is formatted, its tail 0, at each use). A
	 * short connection wrote none there, and the hole punch cost 3 us a
	 * ring all the same. Its peer writes one tail: a lie keeps pages of
	 * this slot resident, which holding the connection open would too. */
	for (unsigned r = 0; r < 2; r++) {
		uint8_t *ring = shim_arena_slot(a, slot) + r * ring_len;
		const struct shim_ring_hdr *hdr = (const struct shim_ring_hdr *)ring;

		if (__atomic_load_n(&hdr->tail, __ATOMIC_RELAXED) > SHIM_ARENA_WARM_BYTES)
			REAL(madvise)(ring + warm, ring_len - warm, MADV_REMOVE);
	}
}

void shim_arena_unmap(struct shim_arena *a)
{
	if (a->map)
		REAL(munmap)(a->map, a->map_len);
	a->map = NULL;
}
