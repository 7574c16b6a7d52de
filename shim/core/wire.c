/* Rendezvous message validation; see wire.h. The parser is fuzzed
 * (tests/fuzz_wire.c): it must accept exactly the well-formed messages. */
#include "wire.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

static const uint32_t expected_length[] = {
	[SHIM_MSG_OFFER] = sizeof(struct shim_msg_offer),
	[SHIM_MSG_ACCEPT] = sizeof(struct shim_msg_accept),
	[SHIM_MSG_SWITCH_AT] = sizeof(struct shim_msg_switch_at),
	[SHIM_MSG_DECLINE] = sizeof(struct shim_msg_decline),
	[SHIM_MSG_HINT] = sizeof(struct shim_msg_hint),
	[SHIM_MSG_COMMIT] = sizeof(struct shim_msg_commit),
	[SHIM_MSG_RELEASE] = sizeof(struct shim_msg_release),
};

/* The flags a message of this type may carry. */
static uint32_t flags_allowed(int type)
{
	switch (type) {
	case SHIM_MSG_ACCEPT:
	case SHIM_MSG_HINT:
	case SHIM_MSG_SWITCH_AT:
	case SHIM_MSG_COMMIT:
		return SHIM_MSG_F_BELL_LINE;
	default:
		return 0;
	}
}

/* Where a message of this type holds a ring size, or 0: none. */
static size_t ring_bytes_offset(int type)
{
	switch (type) {
	case SHIM_MSG_OFFER:
		return offsetof(struct shim_msg_offer, ring_bytes);
	case SHIM_MSG_ACCEPT:
		return offsetof(struct shim_msg_accept, ring_bytes);
	case SHIM_MSG_HINT:
		return offsetof(struct shim_msg_hint, ring_bytes);
	default:
		return 0;
	}
}

/* A HINT's ring: its own memfd (no slot, no arena), or a slot of an arena
 * of at most SHIM_ARENA_SLOTS_MAX slots (the arena's size, when it comes
 * along, covers the slot). */
static bool hint_slots_ok(const void *buf)
{
	struct shim_msg_hint h;

	memcpy(&h, buf, sizeof(h));
	if (h.reserved || h.arena_slots > SHIM_ARENA_SLOTS_MAX)
		return false;
	if (h.slot == SHIM_SLOT_NONE)
		return h.arena_slots == 0 && h.slot_gen == 0;
	return h.slot < SHIM_ARENA_SLOTS_MAX && (h.arena_slots == 0 || h.slot < h.arena_slots);
}

void shim_msg_init(struct shim_msg_hdr *hdr, enum shim_msg_type type, uint32_t length)
{
	memset(hdr, 0, sizeof(*hdr));
	hdr->magic = SHIM_WIRE_MAGIC;
	hdr->version = SHIM_WIRE_VERSION;
	hdr->type = (uint16_t)type;
	hdr->length = length;
}

int shim_msg_check(const void *buf, size_t n)
{
	struct shim_msg_hdr hdr;

	if (n < sizeof(hdr))
		return -EPROTO;
	memcpy(&hdr, buf, sizeof(hdr));
	if (hdr.magic != SHIM_WIRE_MAGIC || hdr.version != SHIM_WIRE_VERSION)
		return -EPROTO;
	if (hdr.type == 0 || hdr.type >= sizeof(expected_length) / sizeof(expected_length[0]))
		return -EPROTO;
	if (hdr.flags & ~flags_allowed(hdr.type))
		return -EPROTO;
	if (hdr.length != expected_length[hdr.type] || n != hdr.length)
		return -EPROTO;
	size_t off = ring_bytes_offset(hdr.type);

	if (off) {
		uint32_t ring_bytes;

		memcpy(&ring_bytes, (const char *)buf + off, sizeof(ring_bytes));
		/* A power of two between 4 KiB and 64 MiB, as RDMASHIM_RING_KB allows. */
		if (ring_bytes < 4096 || ring_bytes > (64u << 20) || (ring_bytes & (ring_bytes - 1)))
			return -EPROTO;
	}
	if (hdr.type == SHIM_MSG_HINT && !hint_slots_ok(buf))
		return -EPROTO;
	if (hdr.type == SHIM_MSG_RELEASE) {
		struct shim_msg_release rel;

		memcpy(&rel, buf, sizeof(rel));
		if (rel.slot >= SHIM_ARENA_SLOTS_MAX)
			return -EPROTO;
	}
	return hdr.type;
}
