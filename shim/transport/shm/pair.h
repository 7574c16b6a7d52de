/*
 * Pair channels (shim/PROTOCOL.md, "Pair channel"): the rendezvous of a
 * handshake that ended with both ends verified is kept, and carries the
 * HINTs of later connections between the same two processes, C -> S only.
 * A HINT hands S a fresh socketpair end, which then is that connection's
 * own rendezvous, and the ring: no name, no listen or connect, no retry.
 *
 * C keeps one per server endpoint (the address it connects to). S keeps
 * every one it was given (up to a bound) and reads their HINTs into a
 * table of pending ones, which a connection's handshake looks up by its
 * endpoints when it starts. A pair carries nothing a stranger could use:
 * S checks each HINT's sender against the TCP connection it names, as on
 * any rendezvous, and the pair's own verification is never relied on.
 *
 * Every function takes the pairs' lock (shim_pair_lock, slots.h), which comes after the socks'
 * (atfork.c); none blocks.
 */
#ifndef RDMASHIM_PAIR_H
#define RDMASHIM_PAIR_H

#include <stdbool.h>
#include <sys/types.h>

#include "transport.h"
#include "tuple.h"
#include "wire.h"

/* C: sends a HINT over the pair kept for server, with S's socketpair end
 * (rv_fd stays ours: the kernel copies it) and the connection's ring: a
 * free slot of the pair's arena (PROTOCOL.md, "Ring arena"), or, with none
 * free, a memfd of its own. Fills msg's slot fields (msg->ring_bytes is the
 * ring's size). 0, with *chan our side of the ring, *peer_pid the
 * process at the pair's other end and *peer_pidfd a pidfd of it (-errno:
 * none; RDMASHIM_ZEROCOPY=off asks for none); -ENOENT: no pair (or one that missed
 * lately, shim_pair_miss()); another -errno: no HINT went (a broken pair
 * is dropped). */
int shim_pair_send_hint(const struct shim_endpoint *server, struct shim_msg_hint *msg, int rv_fd,
			unsigned long long now, pid_t *peer_pid, int *peer_pidfd, struct shim_chan **chan);
/* C: the HINT sent over server's pair found no taker (S was not the
 * process holding the connection: a prefork server); HINTs for it pause. */
void shim_pair_miss(const struct shim_endpoint *server, unsigned long long now);
/* C: rv_fd's handshake ended verified both ways: keep it as server's pair
 * (or close it when there is one). Takes rv_fd. */
void shim_pair_keep_client(int rv_fd, const struct shim_endpoint *server);
/* S: the same at S's end: rv_fd joins the ones HINTs come on. Takes it. */
void shim_pair_keep_server(int rv_fd);

/* A HINT taken from the pending table: its message, its socketpair end
 * (now the caller's to close) and its ring (the caller's to map with
 * shim_pair_hint_ring() or drop with shim_pair_hint_drop_ring()). */
struct pair_arena;
struct shim_pair_hint {
	struct shim_msg_hint msg;
	int rv_fd;
	int memfd;                /* the ring's own memfd, or -1: a slot of arena */
	struct pair_arena *arena;
};
/* S: reads what the pairs brought, then takes a pending HINT naming t (S's
 * view: local the server endpoint, peer the client's). false: none. */
bool shim_pair_claim(const struct shim_tuple *t, struct shim_pair_hint *out, unsigned long long now);

/* S: our channel on a claimed HINT's ring (its memfd mapped, or its
 * slot); the ring is consumed whatever the result. 0 or -errno. */
int shim_pair_hint_ring(struct shim_pair_hint *h, struct shim_chan **out);
/* S: a claimed HINT's ring unused: its memfd closed, or its slot given
 * back to C (RELEASE). */
void shim_pair_hint_drop_ring(struct shim_pair_hint *h);

/* S: the fd that turns readable when a pair brings something (an epoll
 * set), for a handshake that waits for a HINT to wait on too; -1: none. */
int shim_pair_hub_fd(void);

/* Fork handlers (atfork.c): the child keeps no pair (its parent's are the
 * parent's; a child's own connections make their own). */
void shim_pair_atfork_prepare(void);
void shim_pair_atfork_parent(void);
void shim_pair_atfork_child(void);

#endif
