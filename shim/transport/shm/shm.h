/*
 * The shared-memory transport: one memfd holding two rings, C->S then S->C,
 * mapped by both processes. The memfd is created by C, has no name in any
 * file system, and reaches S only over the verified rendezvous.
 */
#ifndef RDMASHIM_SHM_H
#define RDMASHIM_SHM_H

#include <stdbool.h>
#include <stdint.h>

#include "transport.h"

extern const struct shim_transport_ops shim_shm_ops;
/* The transport's table, with its negotiation (shm_neg.c). */
extern const struct shim_transport_type shim_shm_transport;

/* C: creates the memfd and the channel; *memfd_out is sent to S, then closed. */
int shim_shm_create(uint32_t ring_bytes, struct shim_chan **out, int *memfd_out);
/* S: maps a received memfd; checks its size and both ring headers. */
int shim_shm_attach(int memfd, uint32_t ring_bytes, struct shim_chan **out);

/* Bytes of memory one connection's channel maps. */
uint64_t shim_shm_footprint(uint32_t ring_bytes);

#endif
