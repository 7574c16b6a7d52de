/* The slots of the pairs' ring arenas; see slots.h. */
#include "slots.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "rendezvous.h"
#include "self.h"
#include "shm.h"
#include "trace.h"
#include "wire.h"

pthread_mutex_t shim_pair_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * A pair's ring arena and who uses its slots (PROTOCOL.md, "Ring arena").
 * C reuses a slot only when both ends are done with its last use: its own
 * channel on it went (destroy, not a fork's forget), and S sent RELEASE
 * for that use's generation. Nothing S writes can make C hand out a slot
 * its own channel still uses; a lying S can only share memory between
 * its own connections to us.
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

static struct pair_arena *arena_new(void)
{
	struct pair_arena *a = calloc(1, sizeof(*a));

	if (a) {
		a->pid = shim_self_pid();
		a->refs = 1;
		a->memfd.fd = -1;
	}
	return a;
}

void shim_slots_put(struct pair_arena *a)
{
	if (!a || --a->refs)
		return;
	shim_owned_close(&a->memfd);
	shim_arena_unmap(&a->mem);
	free(a);
}

void shim_slots_retire(struct pair_arena **ap)
{
	struct pair_arena *a = *ap;

	if (!a)
		return;
	a->retired = true;
	a->pair = NULL;
	shim_owned_close(&a->memfd);
	*ap = NULL;
	shim_slots_put(a);
}

/* C: a slot both ends are done with gives back what its rings touched. */
static void slot_maybe_free(struct pair_arena *a, unsigned k)
{
	if (!a->slot[k].ours && !a->slot[k].peers && !a->retired)
		shim_arena_trim(&a->mem, k);
}

/* S: the slot's use is over at our end: RELEASE on the pair (in the
 * process that mapped it, while the pair lives). */
static void release_to_c(struct pair_arena *a, uint32_t k, uint32_t gen)
{
	struct shim_msg_release rel;

	if (a->pid != shim_self_pid() || !a->pair || !shim_owned_still(a->pair))
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

	pthread_mutex_lock(&shim_pair_lock);
	if (reusable && a->pid == shim_self_pid()) {
		if (u->client) {
			if (a->slot[u->slot].gen == u->gen) {
				a->slot[u->slot].ours = false;
				slot_maybe_free(a, u->slot);
			}
		} else {
			release_to_c(a, u->slot, u->gen);
		}
	}
	shim_slots_put(a);
	pthread_mutex_unlock(&shim_pair_lock);
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
	rc = shim_shm_on_slot(shim_arena_slot(&a->mem, k), a->mem.ring_bytes, client, slot_done, u, out);
	if (rc < 0) {
		free(u);
		return rc;
	}
	a->refs++;
	return 0;
}

static int take_slot(struct pair_arena **ap, uint32_t ring_bytes)
{
	struct pair_arena *a = *ap;

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
		*ap = a;
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
		shim_shm_format(shim_arena_slot(&a->mem, k), ring_bytes);
		return (int)k;
	}
	return -1;
}

bool shim_slots_take(struct pair_arena **ap, uint32_t ring_bytes, struct shim_slot_hint *out)
{
	int k = take_slot(ap, ring_bytes);
	struct pair_arena *a = *ap;

	if (k < 0)
		return false;
	out->slot = (uint32_t)k;
	out->gen = a->slot[k].gen;
	out->arena_slots = 0;
	out->arena_fd = -1;
	if (a->memfd.fd >= 0 && shim_owned_still(&a->memfd)) {
		out->arena_slots = (uint16_t)a->mem.slots;
		out->arena_fd = a->memfd.fd;
	}
	return true;
}

int shim_slots_hint_done(struct pair_arena *a, const struct shim_slot_hint *h, bool sent, struct shim_chan **chan)
{
	int rc;

	if (!sent) {
		a->slot[h->slot].ours = false;
		a->slot[h->slot].peers = false;
		return 0;
	}
	if (h->arena_slots)
		shim_owned_close(&a->memfd); /* S has it now */
	rc = slot_chan(a, h->slot, h->gen, true, chan);
	if (rc < 0)
		a->slot[h->slot].ours = false; /* S still releases it */
	return rc;
}

void shim_slots_peer_released(struct pair_arena *a, uint32_t k, uint32_t gen)
{
	if (a && k < a->mem.slots && a->slot[k].peers && a->slot[k].gen == gen) {
		a->slot[k].peers = false;
		slot_maybe_free(a, k);
	}
}

struct pair_arena *shim_slots_map(int memfd, uint32_t ring_bytes, unsigned slots, struct shim_owned_fd *pair)
{
	struct pair_arena *a = arena_new();

	if (!a)
		return NULL;
	if (shim_arena_map(memfd, ring_bytes, slots, &a->mem) < 0) {
		free(a);
		return NULL;
	}
	a->pair = pair;
	SHIM_TRACE(SHIM_TRACE_DEBUG, "pair.arena", -1, NULL, SHIM_REASON_NONE,
		   "\"side\":\"server\",\"slots\":%u,\"ring_bytes\":%u", a->mem.slots, ring_bytes);
	return a;
}

bool shim_slots_fit(const struct pair_arena *a, uint32_t slot, uint32_t ring_bytes)
{
	return a && slot < a->mem.slots && ring_bytes == a->mem.ring_bytes;
}

int shim_slots_chan(struct pair_arena *a, uint32_t slot, uint32_t gen, struct shim_chan **out)
{
	return slot_chan(a, slot, gen, false, out);
}

void shim_slots_get(struct pair_arena *a)
{
	a->refs++;
}

void shim_slots_give_back(struct pair_arena **ap, uint32_t slot, uint32_t gen)
{
	release_to_c(*ap, slot, gen);
	shim_slots_put(*ap);
	*ap = NULL;
}
