/*
 * The shm negotiation's pair-channel way (shm_pair_neg.c, PROTOCOL.md "Pair
 * channel"), called by the transport's steps in shm_neg.c with the sock's
 * lock held; nothing here blocks.
 */
#ifndef RDMASHIM_SHM_PAIR_NEG_H
#define RDMASHIM_SHM_PAIR_NEG_H

#include <stdbool.h>

#include "sock.h"

/* C at its start: a HINT went over the pair kept for the server endpoint
 * (step SHM_C_HINTED, phase committing). false: no pair, or it could not
 * go; the named way is next. */
bool shm_c_hint(struct shim_sock *s, int fd, unsigned long long now);

enum shm_hint_result {
	SHM_HINT_PENDING,  /* nothing yet */
	SHM_HINT_ENDED,    /* done, failed or aborted: the negotiation is over */
	SHM_HINT_FALLBACK, /* nothing switched; phase negotiating again: go the named way */
};
/* C in SHM_C_HINTED: S's COMMIT, or the end of waiting for it. */
enum shm_hint_result shm_c_read_commit(struct shim_sock *s, int fd, unsigned long long now);

/* S at its start and while it retries: takes a pending HINT for this
 * connection. true: the handshake committed (SHM_S_AWAIT_C) or ended;
 * false: none that verified, the named way goes on. */
bool shm_s_claim(struct shim_sock *s, int fd, unsigned long long now);

#endif
