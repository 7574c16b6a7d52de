/*
 * libFuzzer harness for the rendezvous message parser, shim_msg_check()
 * (shim/core/wire.c). Built and run by integration/t_fuzz_wire.sh:
 *
 *   clang -fsanitize=fuzzer,address,undefined -Ishim/core -D_GNU_SOURCE \
 *         tests/fuzz_wire.c shim/core/wire.c -o build/fuzz_wire
 *   build/fuzz_wire NEW_DIR tests/corpus/wire -max_total_time=20
 *
 * Every input is copied into a heap buffer of exactly its size, so a read
 * past the message is an AddressSanitizer report. When the parser accepts a
 * message, the harness re-checks what acceptance promises and aborts (a
 * crash for libFuzzer) on any violation:
 *   - the returned type is one of OFFER, ACCEPT, SWITCH_AT, DECLINE, HINT,
 *     COMMIT, RELEASE and is the type in the header;
 *   - magic and version are ours and the flags are those the type allows
 *     (the bell line's, on ACCEPT, HINT, SWITCH_AT and COMMIT only);
 *   - the length field, the input size and the struct size of that type are
 *     all equal (no trailing or missing byte is tolerated), so one byte less
 *     or one byte more is rejected;
 *   - OFFER, ACCEPT and HINT carry a ring size that is a power of two in
 *     [4 KiB, 64 MiB];
 *   - a HINT's ring is its own memfd (no slot, generation 0, no arena) or
 *     a slot below SHIM_ARENA_SLOTS_MAX (and below the arena's slots when
 *     the arena comes along); a RELEASE names a slot below the maximum;
 *   - the verdict is a pure function of the bytes (a second call agrees).
 * A rejection must be exactly -EPROTO.
 *
 * Built with -DFUZZ_WIRE_GEN instead (no sanitizers needed) it is the seed
 * generator: `fuzz_wire_gen DIR` writes the valid OFFER, ACCEPT, SWITCH_AT,
 * DECLINE, HINT, COMMIT and RELEASE made with the shim's own shim_msg_init(), plus malformed
 * variants, into DIR (tests/corpus/wire holds its output), checking each
 * file's verdict as it goes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

#ifndef FUZZ_WIRE_GEN

static size_t expected_size(int type)
{
	switch (type) {
	case SHIM_MSG_OFFER:
		return sizeof(struct shim_msg_offer);
	case SHIM_MSG_ACCEPT:
		return sizeof(struct shim_msg_accept);
	case SHIM_MSG_SWITCH_AT:
		return sizeof(struct shim_msg_switch_at);
	case SHIM_MSG_DECLINE:
		return sizeof(struct shim_msg_decline);
	case SHIM_MSG_HINT:
		return sizeof(struct shim_msg_hint);
	case SHIM_MSG_COMMIT:
		return sizeof(struct shim_msg_commit);
	case SHIM_MSG_RELEASE:
		return sizeof(struct shim_msg_release);
	default:
		return 0;
	}
}

static uint32_t ring_of(const uint8_t *buf, int type)
{
	uint32_t ring;
	size_t off = type == SHIM_MSG_OFFER    ? offsetof(struct shim_msg_offer, ring_bytes)
		     : type == SHIM_MSG_ACCEPT ? offsetof(struct shim_msg_accept, ring_bytes)
					       : offsetof(struct shim_msg_hint, ring_bytes);

	memcpy(&ring, buf + off, sizeof(ring));
	return ring;
}

#define REQUIRE(cond)                                                                        \
	do {                                                                                 \
		if (!(cond)) {                                                               \
			fprintf(stderr, "fuzz_wire: invariant failed: %s (line %d)\n", #cond, \
				__LINE__);                                                   \
			abort();                                                             \
		}                                                                            \
	} while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Exactly size bytes on the heap: any overread is an ASan report. */
	uint8_t *buf = malloc(size ? size : 1);
	int type;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	type = shim_msg_check(buf, size);
	REQUIRE(type == -EPROTO || (type >= SHIM_MSG_OFFER && type <= SHIM_MSG_RELEASE));
	REQUIRE(shim_msg_check(buf, size) == type);
	if (type > 0) {
		struct shim_msg_hdr hdr;

		REQUIRE(size >= sizeof(hdr));
		memcpy(&hdr, buf, sizeof(hdr));
		REQUIRE(hdr.type == (uint16_t)type);
		REQUIRE(hdr.magic == SHIM_WIRE_MAGIC && hdr.version == SHIM_WIRE_VERSION);
		REQUIRE((hdr.flags & ~SHIM_MSG_F_BELL_LINE) == 0);
		REQUIRE(hdr.flags == 0 || type == SHIM_MSG_ACCEPT || type == SHIM_MSG_HINT ||
			type == SHIM_MSG_SWITCH_AT || type == SHIM_MSG_COMMIT);
		REQUIRE(hdr.length == size && size == expected_size(type));
		REQUIRE(size <= SHIM_MSG_MAX);
		if (type == SHIM_MSG_OFFER || type == SHIM_MSG_ACCEPT || type == SHIM_MSG_HINT) {
			uint32_t ring = ring_of(buf, type);

			REQUIRE(ring >= 4096 && ring <= (64u << 20) && (ring & (ring - 1)) == 0);
		}
		if (type == SHIM_MSG_HINT) {
			struct shim_msg_hint h;

			memcpy(&h, buf, sizeof(h));
			REQUIRE(h.reserved == 0 && h.arena_slots <= SHIM_ARENA_SLOTS_MAX);
			REQUIRE(h.slot == SHIM_SLOT_NONE ? h.arena_slots == 0 && h.slot_gen == 0
							 : h.slot < SHIM_ARENA_SLOTS_MAX &&
								   (!h.arena_slots || h.slot < h.arena_slots));
		}
		if (type == SHIM_MSG_RELEASE) {
			struct shim_msg_release r;

			memcpy(&r, buf, sizeof(r));
			REQUIRE(r.slot < SHIM_ARENA_SLOTS_MAX);
		}
		/* Length exact: one byte less, or one more, is malformed. */
		REQUIRE(shim_msg_check(buf, size - 1) == -EPROTO);
		uint8_t *longer = malloc(size + 1);

		if (longer) {
			memcpy(longer, buf, size);
			longer[size] = data[0];
			REQUIRE(shim_msg_check(longer, size + 1) == -EPROTO);
			free(longer);
		}
		/* The same header rebuilt by shim_msg_init() is accepted alike. */
		uint8_t *again = malloc(size);

		if (again) {
			struct shim_msg_hdr fresh;

			memcpy(again, buf, size);
			shim_msg_init(&fresh, (enum shim_msg_type)type, (uint32_t)size);
			memcpy(again, &fresh, sizeof(fresh));
			REQUIRE(shim_msg_check(again, size) == type);
			free(again);
		}
	}
	free(buf);
	return 0;
}

#else /* FUZZ_WIRE_GEN: the seed corpus */

static int failures;

static void put(const char *dir, const char *name, const void *msg, size_t len, int want)
{
	char path[4096];
	FILE *f;
	int got = shim_msg_check(msg, len);

	if (got != want) {
		fprintf(stderr, "%s: shim_msg_check says %d, expected %d\n", name, got, want);
		failures++;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(msg, 1, len, f) != len || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
	printf("%-28s %3zu bytes  %s\n", name, len, want > 0 ? "valid" : "malformed");
}

int main(int argc, char **argv)
{
	struct shim_msg_offer offer;
	struct shim_msg_accept accept;
	struct shim_msg_switch_at at;
	struct shim_msg_decline decline;
	struct shim_msg_hint hint;
	struct shim_msg_commit commit;
	struct shim_msg_release release;
	uint8_t raw[SHIM_MSG_MAX + 8];
	const char *dir;

	if (argc != 2) {
		fprintf(stderr, "usage: fuzz_wire_gen DIR\n");
		return 2;
	}
	dir = argv[1];

	/* The four valid messages, as the shim builds them (upgrade.c). */
	memset(&offer, 0, sizeof(offer));
	shim_msg_init(&offer.hdr, SHIM_MSG_OFFER, sizeof(offer));
	for (int i = 0; i < SHIM_NONCE_LEN; i++)
		offer.nonce[i] = (uint8_t)(0xa0 + i);
	offer.ring_bytes = 1024 * 1024;
	put(dir, "offer", &offer, sizeof(offer), SHIM_MSG_OFFER);

	memset(&accept, 0, sizeof(accept));
	shim_msg_init(&accept.hdr, SHIM_MSG_ACCEPT, sizeof(accept));
	for (int i = 0; i < SHIM_NONCE_LEN; i++)
		accept.nonce[i] = (uint8_t)(0x50 + i);
	accept.unused = 0;
	accept.ring_bytes = 64 * 1024;
	put(dir, "accept", &accept, sizeof(accept), SHIM_MSG_ACCEPT);

	memset(&at, 0, sizeof(at));
	shim_msg_init(&at.hdr, SHIM_MSG_SWITCH_AT, sizeof(at));
	at.switch_offset = 4096;
	put(dir, "switch_at", &at, sizeof(at), SHIM_MSG_SWITCH_AT);

	memset(&decline, 0, sizeof(decline));
	shim_msg_init(&decline.hdr, SHIM_MSG_DECLINE, sizeof(decline));
	decline.reason = 7;
	put(dir, "decline", &decline, sizeof(decline), SHIM_MSG_DECLINE);

	memset(&hint, 0, sizeof(hint));
	shim_msg_init(&hint.hdr, SHIM_MSG_HINT, sizeof(hint));
	hint.client_addr[15] = 1;
	hint.server_addr[15] = 1;
	hint.client_port = 40000;
	hint.server_port = 6379;
	hint.ring_bytes = 1024 * 1024;
	hint.tcp_fd = 7;
	hint.slot = SHIM_SLOT_NONE;
	put(dir, "hint", &hint, sizeof(hint), SHIM_MSG_HINT);
	hint.slot = 3;
	hint.slot_gen = 9;
	hint.arena_slots = SHIM_ARENA_SLOTS_MAX;
	put(dir, "hint_slot_arena", &hint, sizeof(hint), SHIM_MSG_HINT);
	hint.arena_slots = 0;
	put(dir, "hint_slot", &hint, sizeof(hint), SHIM_MSG_HINT);

	memset(&release, 0, sizeof(release));
	shim_msg_init(&release.hdr, SHIM_MSG_RELEASE, sizeof(release));
	release.slot = 3;
	release.slot_gen = 9;
	put(dir, "release", &release, sizeof(release), SHIM_MSG_RELEASE);

	memset(&commit, 0, sizeof(commit));
	shim_msg_init(&commit.hdr, SHIM_MSG_COMMIT, sizeof(commit));
	commit.switch_offset = 5;
	commit.tcp_fd = 9;
	put(dir, "commit", &commit, sizeof(commit), SHIM_MSG_COMMIT);

	/* Ring sizes at the edges. */
	offer.ring_bytes = 4096;
	put(dir, "offer_ring_min", &offer, sizeof(offer), SHIM_MSG_OFFER);
	offer.ring_bytes = 64u << 20;
	put(dir, "offer_ring_max", &offer, sizeof(offer), SHIM_MSG_OFFER);

	/* Malformed ones. */
	put(dir, "empty", "", 0, -EPROTO);
	put(dir, "header_only", &offer, sizeof(struct shim_msg_hdr), -EPROTO);
	put(dir, "offer_truncated", &offer, sizeof(offer) - 1, -EPROTO);
	memcpy(raw, &accept, sizeof(accept));
	raw[sizeof(accept)] = 0;
	put(dir, "accept_trailing_byte", raw, sizeof(accept) + 1, -EPROTO);

	offer.ring_bytes = 1024 * 1024;
	memcpy(raw, &offer, sizeof(offer));
	((struct shim_msg_offer *)raw)->hdr.magic ^= 1;
	put(dir, "offer_bad_magic", raw, sizeof(offer), -EPROTO);
	memcpy(raw, &offer, sizeof(offer));
	((struct shim_msg_offer *)raw)->hdr.version = SHIM_WIRE_VERSION + 1;
	put(dir, "offer_bad_version", raw, sizeof(offer), -EPROTO);
	memcpy(raw, &offer, sizeof(offer));
	((struct shim_msg_offer *)raw)->hdr.flags = SHIM_MSG_F_BELL_LINE;
	put(dir, "offer_flag_not_its", raw, sizeof(offer), -EPROTO);
	memcpy(raw, &at, sizeof(at));
	((struct shim_msg_switch_at *)raw)->hdr.flags = SHIM_MSG_F_BELL_LINE << 1;
	put(dir, "switch_at_flag_unknown", raw, sizeof(at), -EPROTO);
	memcpy(raw, &at, sizeof(at));
	((struct shim_msg_switch_at *)raw)->hdr.flags = SHIM_MSG_F_BELL_LINE;
	put(dir, "switch_at_bell_line", raw, sizeof(at), SHIM_MSG_SWITCH_AT);
	memcpy(raw, &offer, sizeof(offer));
	((struct shim_msg_offer *)raw)->hdr.length = sizeof(accept);
	put(dir, "offer_length_mismatch", raw, sizeof(offer), -EPROTO);
	memcpy(raw, &offer, sizeof(offer));
	((struct shim_msg_offer *)raw)->ring_bytes = 65537;
	put(dir, "offer_ring_not_pow2", raw, sizeof(offer), -EPROTO);
	memcpy(raw, &offer, sizeof(offer));
	((struct shim_msg_offer *)raw)->ring_bytes = 2048;
	put(dir, "offer_ring_too_small", raw, sizeof(offer), -EPROTO);
	memcpy(raw, &accept, sizeof(accept));
	((struct shim_msg_accept *)raw)->ring_bytes = 128u << 20;
	put(dir, "accept_ring_too_big", raw, sizeof(accept), -EPROTO);
	memcpy(raw, &accept, sizeof(accept));
	((struct shim_msg_accept *)raw)->ring_bytes = 0;
	put(dir, "accept_ring_zero", raw, sizeof(accept), -EPROTO);
	memcpy(raw, &at, sizeof(at));
	((struct shim_msg_switch_at *)raw)->hdr.type = 0;
	put(dir, "type_zero", raw, sizeof(at), -EPROTO);
	memcpy(raw, &at, sizeof(at));
	((struct shim_msg_switch_at *)raw)->hdr.type = SHIM_MSG_RELEASE + 1;
	put(dir, "type_unknown", raw, sizeof(at), -EPROTO);
	memcpy(raw, &hint, sizeof(hint));
	((struct shim_msg_hint *)raw)->ring_bytes = 3 << 20;
	put(dir, "hint_ring_not_pow2", raw, sizeof(hint), -EPROTO);
	memcpy(raw, &hint, sizeof(hint));
	((struct shim_msg_hint *)raw)->slot = SHIM_ARENA_SLOTS_MAX;
	put(dir, "hint_slot_too_far", raw, sizeof(hint), -EPROTO);
	memcpy(raw, &hint, sizeof(hint));
	((struct shim_msg_hint *)raw)->arena_slots = 2;
	put(dir, "hint_slot_past_arena", raw, sizeof(hint), -EPROTO);
	memcpy(raw, &hint, sizeof(hint));
	((struct shim_msg_hint *)raw)->arena_slots = SHIM_ARENA_SLOTS_MAX + 1;
	put(dir, "hint_arena_too_big", raw, sizeof(hint), -EPROTO);
	memcpy(raw, &hint, sizeof(hint));
	((struct shim_msg_hint *)raw)->slot = SHIM_SLOT_NONE;
	put(dir, "hint_no_slot_with_gen", raw, sizeof(hint), -EPROTO);
	memcpy(raw, &hint, sizeof(hint));
	((struct shim_msg_hint *)raw)->reserved = 1;
	put(dir, "hint_reserved_set", raw, sizeof(hint), -EPROTO);
	memcpy(raw, &release, sizeof(release));
	((struct shim_msg_release *)raw)->slot = SHIM_SLOT_NONE;
	put(dir, "release_no_slot", raw, sizeof(release), -EPROTO);
	memcpy(raw, &commit, sizeof(commit));
	((struct shim_msg_commit *)raw)->hdr.type = SHIM_MSG_HINT;
	put(dir, "commit_as_hint", raw, sizeof(commit), -EPROTO);
	memcpy(raw, &at, sizeof(at));
	((struct shim_msg_switch_at *)raw)->hdr.type = 0xffff;
	put(dir, "type_ffff", raw, sizeof(at), -EPROTO);
	/* A DECLINE's bytes labelled SWITCH_AT: same size, must pass as SWITCH_AT. */
	memcpy(raw, &decline, sizeof(decline));
	((struct shim_msg_decline *)raw)->hdr.type = SHIM_MSG_SWITCH_AT;
	put(dir, "decline_as_switch_at", raw, sizeof(decline), SHIM_MSG_SWITCH_AT);

	if (failures) {
		fprintf(stderr, "%d seed(s) with an unexpected verdict\n", failures);
		return 1;
	}
	return 0;
}

#endif
