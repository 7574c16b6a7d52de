/*
 * The slots of the pairs' ring arenas (shim/PROTOCOL.md, "Ring arena"): who
 * uses each, and when C may hand one out again. Used by pair.c only.
 *
 * Every function runs under shim_pair_lock, the pairs' one lock, except a
 * slot channel's end, which takes it (from under its sock's lock: the
 * order atfork.c names). The lock lives here, below pair.c, for that.
 */
#ifndef RDMASHIM_SLOTS_H
#define RDMASHIM_SLOTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "fdtable.h"
#include "transport.h"

extern pthread_mutex_t shim_pair_lock;

struct pair_arena;

/* What a HINT says of its ring's slot. */
struct shim_slot_hint {
	uint32_t slot, gen;
	uint16_t arena_slots; /* not 0: the arena goes with this HINT, as arena_fd */
	int arena_fd;
};

/* C: a free slot of *ap's arena (made with the first; *ap stays NULL when
 * it can not be), formatted and marked used by both ends. false: none
 * (the HINT brings a ring of its own). */
bool shim_slots_take(struct pair_arena **ap, uint32_t ring_bytes, struct shim_slot_hint *out);
/* C: the HINT naming h went (sent) or not. Sent: *chan is our channel on
 * the slot (0), or -errno (the slot is then S's alone to give back); not
 * sent: the slot is free again. */
int shim_slots_hint_done(struct pair_arena *a, const struct shim_slot_hint *h, bool sent, struct shim_chan **chan);
/* C: S's RELEASE of a slot's use; one C did not give, or gave again
 * since, changes nothing. */
void shim_slots_peer_released(struct pair_arena *a, uint32_t slot, uint32_t gen);

/* S: the arena C sent on pair (memfd checked: exactly slots slots of
 * rings of ring_bytes, sealed against shrinking; not taken), or NULL. */
struct pair_arena *shim_slots_map(int memfd, uint32_t ring_bytes, unsigned slots, struct shim_owned_fd *pair);
/* S: whether a HINT's slot and ring size are a's. */
bool shim_slots_fit(const struct pair_arena *a, uint32_t slot, uint32_t ring_bytes);
/* S: our channel on a slot C formatted (takes a reference of its own). */
int shim_slots_chan(struct pair_arena *a, uint32_t slot, uint32_t gen, struct shim_chan **out);
/* S: a HINT's slot was not used (refused, stopped, expired, pushed out,
 * or no channel could be made on it): RELEASE on the pair (in the process
 * that mapped it, while the pair lives), and the HINT's reference to *ap
 * goes (*ap is NULL after). */
void shim_slots_give_back(struct pair_arena **ap, uint32_t slot, uint32_t gen);

/* References: a pair's, each channel's on a slot, each pending HINT's. */
void shim_slots_get(struct pair_arena *a);
void shim_slots_put(struct pair_arena *a);
/* The pair went: *ap's arena hands out no slot again and lives on for the
 * channels still on it; *ap is NULL after. */
void shim_slots_retire(struct pair_arena **ap);

#endif
