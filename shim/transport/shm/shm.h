/*
 * The shared-memory transport: one memfd holding two rings, C->S then S->C,
 * mapped by both processes. The memfd is created by C, has no name in any
 * file system, and reaches S only over the verified rendezvous.
 */
#ifndef RDMASHIM_SHM_H
#define RDMASHIM_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "transport.h"

extern const struct shim_transport_ops shim_shm_ops;
/* The transport's table, with its negotiation (shm_neg.c). */
extern const struct shim_transport_type shim_shm_transport;

/* C: creates the memfd and the channel; *memfd_out is sent to S, then closed. */
int shim_shm_create(uint32_t ring_bytes, struct shim_chan **out, int *memfd_out);
/* S: maps a received memfd; checks its size and both ring headers. */
int shim_shm_attach(int memfd, uint32_t ring_bytes, struct shim_chan **out);

/* A channel on rings at base (a slot of a pair's arena, ring_bytes each
 * way, formatted by C with shim_shm_format()). done(ctx, reusable) runs
 * once, when the channel goes: reusable false when another process may
 * still use the rings. */
int shim_shm_on_slot(uint8_t *base, uint32_t ring_bytes, bool is_client, void (*done)(void *ctx, bool reusable),
		     void *ctx, struct shim_chan **out);
/*
 * The bell line (shim/PROTOCOL.md, "Bell line"). C makes it with the
 * channel: shim_shm_line_make keeps C's end and returns S's, to be sent
 * with the ACCEPT or HINT and closed (-errno: no line, the connection
 * rings on TCP). S takes what came: shim_shm_line_take checks it is a
 * socketpair made by the process on rv_fd and keeps it (closed on -errno);
 * C made it, so C rings S on it. C learns from S's flag that S took it
 * (shim_shm_line_rung): S rings C on it from then on.
 */
int shim_shm_line_make(struct shim_chan *ch);
int shim_shm_line_take(struct shim_chan *ch, int line, int rv_fd);
/* The pair way: the connection's own socketpair (verified in the
 * handshake) becomes the line, both ends having said so; 0 (the channel
 * keeps rv_fd) or -errno (the caller still owns it). */
int shim_shm_line_adopt(struct shim_chan *ch, int rv_fd);
void shim_shm_line_rung(struct shim_chan *ch);

/* One copy (shm_zc.h): the peer's process, a pidfd of the verified
 * rendezvous's other end (taken; -1: none). */
void shim_shm_zc_bind(struct shim_chan *ch, int pidfd);

/* C: fresh headers for the two rings of one connection at base. */
void shim_shm_format(uint8_t *base, uint32_t ring_bytes);

/* A sealed memfd of size bytes (shrink, grow and seal sealed), owner-only,
 * or -errno. */
int shim_shm_memfd(const char *name, uint64_t size);
/* A peer's memfd we may map size bytes of: a regular file of exactly that
 * size that can not shrink under our mapping. 0 or -EPROTO (-errno). */
int shim_shm_memfd_check(int memfd, uint64_t size);

/*
 * One inaccessible page on each side of a connection's rings. Every ring
 * access is masked into the data area (ring.h), so the guards are only a
 * second line: were a bound ever wrong, the access would fault in our own
 * reservation instead of reading or writing the mapping next to it, which
 * may be another connection's ring.
 */
#define SHIM_SHM_GUARD_BYTES 4096u

/* Maps slots consecutive pieces of memfd, len bytes each, into one
 * reservation: a guard page, piece 0, a guard page, ..., a guard page.
 * Returns the reservation (piece i at SHIM_SHM_GUARD_BYTES + i * (len +
 * SHIM_SHM_GUARD_BYTES)) and its length, or MAP_FAILED with errno. */
uint8_t *shim_shm_map_slots(int memfd, size_t len, unsigned slots, size_t *map_len);

/* Bytes of memory one connection's channel maps. */
uint64_t shim_shm_footprint(uint32_t ring_bytes);

#endif
