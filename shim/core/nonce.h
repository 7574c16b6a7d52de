/*
 * Secret random bytes for the upgrade's nonces (PROTOCOL.md, "Proof"),
 * drawn from the kernel in batches: one getrandom() serves many
 * handshakes instead of one per handshake on each end. The batch is this
 * process's alone: a fork child never hands out what its parent drew
 * (shim_self_pid() changes there), so no two connections share a nonce.
 */
#ifndef RDMASHIM_NONCE_H
#define RDMASHIM_NONCE_H

#include <stddef.h>
#include <stdint.h>

/* Fills out with len (at most SHIM_NONCE_POOL_MAX) secret random bytes,
 * each handed out once; 0, or -EIO when the kernel has none to give. */
int shim_nonce_draw(uint8_t *out, size_t len);

#define SHIM_NONCE_POOL_MAX 64

#endif
