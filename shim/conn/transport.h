/*
 * The transport table: what a side channel must do for the data path.
 *
 * A channel carries both directions of one connection. Contracts, for every
 * implementation (shm today, rdma next):
 *  - send/recv never block; they move what fits or what is there and return
 *    the byte count (0: full or empty). They never return a partial iovec
 *    element out of order: bytes leave in stream order.
 *  - A sleeper arms saying how it wants its bell (SHIM_BELL_*): on TCP, or
 *    on the channel's bell line (bell_fd) when it watches that fd.
 *  - After send moved bytes, tx_bell says which bells the peer, asleep
 *    waiting for them, gets (SHIM_BELL_* bits): the caller sends a DATA
 *    bell on TCP for SHIM_BELL_TCP; SHIM_BELL_LINE is one the transport
 *    rang itself on the line. A transport must return a bell only once
 *    the bytes are visible to the peer (for RDMA: after the write
 *    completed), so a bell never overtakes its data.
 *  - After recv consumed bytes, rx_should_bell says whether the peer waits
 *    for space (the caller sends a SPACE bell).
 *  - rx_arm/tx_arm implement "armed only when about to sleep": they return
 *    false when the wait is no longer needed (data or space appeared).
 *    Every arm is followed by exactly one disarm, whether the caller slept.
 *  - All calls are made under the owning shim_sock's lock.
 *  - The peer is hostile (shim/PROTOCOL.md, "Values the peer writes"):
 *    every value it can write is read once, checked against bounds this
 *    end owns, and a violation makes violated() true for good; until then
 *    and after, no op copies, spins or faults because of such a value. The
 *    caller then ends the connection as a protocol error.
 */
#ifndef RDMASHIM_TRANSPORT_H
#define RDMASHIM_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include "config.h"
#include "reason.h"

struct shim_chan;

/* How a sleeper wants its bell: a byte on TCP, or a message on the
 * channel's bell line (bell_fd; shim/PROTOCOL.md, "Bell line"). These are
 * the bits of a ring's armed words; any other value a peer writes there is
 * read as TCP. */
#define SHIM_BELL_TCP 1u
#define SHIM_BELL_LINE 2u

struct shim_transport_ops {
	enum shim_transport kind;
	size_t (*send)(struct shim_chan *ch, const struct iovec *iov, int iovcnt, size_t skip);
	size_t (*recv)(struct shim_chan *ch, const struct iovec *iov, int iovcnt, bool peek);
	size_t (*readable)(const struct shim_chan *ch);
	size_t (*writable)(const struct shim_chan *ch);
	/* The least room worth reporting as writable (poll's POLLOUT). */
	size_t (*space_lowat)(const struct shim_chan *ch);
	/* The peer closed its sending side and everything was read. */
	bool (*rx_eof)(const struct shim_chan *ch);
	/* The peer closed its sending side (read or not yet): POLLRDHUP.
	 * Optional. */
	bool (*rx_fin)(const struct shim_chan *ch);
	/* The peer closed its receiving side: sends fail with EPIPE. */
	bool (*peer_rx_gone)(const struct shim_chan *ch);
	/* Bytes we sent that the peer has not read yet (optional: NULL when
	 * the transport can not tell). A peer that goes with some unread is
	 * one whose kernel would have reset the connection. Never 0 while some
	 * are unread; 0 for a peer that read everything (rdma: once it made a
	 * call on the socket after the read that emptied its ring: a send, a
	 * wait or its close carries its exact head). */
	size_t (*tx_unread)(const struct shim_chan *ch);
	/* The peer ended the channel cleanly: the end of its stream came, it
	 * closed its reading side, and it read every byte we sent. Under the
	 * lock; may take completions. A TCP reset after that answers a frame
	 * of ours, not the program's (frames.c). Optional: NULL where our
	 * frames never reach a peer that closed (shm: a taken arm is seen). */
	bool (*peer_ended_clean)(struct shim_chan *ch);
	/* The peer broke the channel's rules (a cursor, length or credit out
	 * of bounds): sticky, lock-free. send/recv move nothing from then on. */
	bool (*violated)(const struct shim_chan *ch);
	unsigned (*tx_bell)(struct shim_chan *ch);
	bool (*rx_should_bell)(struct shim_chan *ch);
	/* how: SHIM_BELL_TCP, or SHIM_BELL_LINE when bell_fd gave a line and
	 * the caller watches it. */
	bool (*rx_arm)(struct shim_chan *ch, unsigned how);
	/* false: the peer took the arm and its bell is on the way on TCP (a
	 * bell on the line is not counted: the line's messages are drained
	 * here, and mean nothing beyond a wake-up). */
	bool (*rx_disarm)(struct shim_chan *ch);
	bool (*tx_arm)(struct shim_chan *ch, unsigned how);
	bool (*tx_disarm)(struct shim_chan *ch);
	/* Optional: the fd whose POLLIN is the peer's bells when we arm with
	 * SHIM_BELL_LINE, or -1 when this channel has no line the peer rings
	 * (now: it has none, it was shared by a fork, or the peer did not take
	 * it). Lock-free; valid while the channel lives. */
	int (*bell_fd)(const struct shim_chan *ch);
	/* Optional, with bell_fd: a wait armed for the line saw it readable;
	 * the next disarm takes everything on it (else only the bells its
	 * taken arms are owed), so that a stray message does not keep a
	 * level-triggered wait awake. */
	void (*line_rang)(struct shim_chan *ch);
	/* Optional, with bell_fd: the peer's bells to us on the line so far
	 * (our arms for the line it took). A count that wraps, compared only
	 * for change: io_tx.c's pay judgment counts them with the bells on TCP
	 * (shim/PROTOCOL.md, "Bell line"); the bells we ring there, tx_bell
	 * reports. Under the sock's lock. */
	unsigned (*line_bells_in)(const struct shim_chan *ch);
	void (*shutdown_tx)(struct shim_chan *ch);
	/* Optional: the queue pair number carrying the channel, for `rdmashim
	 * stat` (0: none). Under the sock's lock. */
	uint32_t (*qpn)(const struct shim_chan *ch);
	/* Releases the channel; the peer sees both directions closed. */
	void (*destroy)(struct shim_chan *ch);
	/* The close about to come is abortive (bytes left unread): destroy
	 * then closes only our receiving side, so the peer's sends fail at
	 * once while its reads end at TCP's reset, not at a clean end of our
	 * direction that could reach it first. Optional. */
	void (*abortive)(struct shim_chan *ch);
	/* Releases this process's view only; the peer sees nothing, and the
	 * end of the connection reaches it as TCP's own FIN or reset, when the
	 * last descriptor of the socket in any process goes (shim/LIFETIME.md).
	 * NULL when the transport can not (destroy is used then). */
	void (*forget)(struct shim_chan *ch);
	/* fork: another process of ours now reaches the channel and may move
	 * it, one process at a time (shim/LIFETIME.md). Called in the parent
	 * before the fork, so both inherit it. Optional. */
	void (*share)(struct shim_chan *ch);
	/*
	 * Optional, shared channels (after share): another process of ours
	 * stopped this channel and went back to TCP with its RESUME (a
	 * hand-back as it sandboxed itself, or a failover it answered), so
	 * the stream is plain TCP both ways from where the kernel stands, and
	 * our view of the channel is stale (shim/LIFETIME.md). Lock-free.
	 * With it, any process sharing the channel may stop it (a hand-back
	 * by a process that did not make it, conn/sockfd.c); without it only
	 * the one that made it may.
	 */
	bool (*moved_elsewhere)(const struct shim_chan *ch);
	/* The peer's end takes a RETURN frame (wire.h; shm's wire version 4):
	 * a hand-back may then read past plain bytes the program never read
	 * to reach the peer's SWITCH frame, and give them back (handback.c). */
	bool takes_return;
	/*
	 * Optional, one copy (shm: transport/shm/shm_zc.h): a blocking
	 * receive that found the channel empty offers its buffer (0), or
	 * not (-errno); after its wait, whatever it was, rx_offer_end
	 * withdraws the offer, waits for a write in progress, and returns
	 * the bytes that landed in the buffer. Under the sock's lock.
	 * rx_offer_out, lock-free: the offer is still out. Another call's
	 * read may settle it (its DONE bytes are the offering call's), and
	 * then nothing else on the channel says so: the offering call's
	 * wait ends on it (io_sleep.c).
	 */
	int (*rx_offer)(struct shim_chan *ch, void *buf, size_t len);
	size_t (*rx_offer_end)(struct shim_chan *ch);
	bool (*rx_offer_out)(const struct shim_chan *ch);
	/* The producer may look at the armed word before its bytes are visible
	 * (and so miss an arm that lands meanwhile): a consumer's first sleep
	 * after an rx arm must then be short (IO_GRACE_MS in io/io_sleep.c), so that it
	 * looks at its ring again. */
	bool arm_grace;
	/* A message that must wake its sleeping receiver with a bell on TCP
	 * costs more than TCP would: the bell is a TCP send and receive of its
	 * own on top of the ring's copy (shm: 64-byte ping-pong with no
	 * spinning 1.2x TCP's round trip, still 1.1x at 64 KB; a bell on the
	 * line, where a system call costs 1 us, about as much). The data path then
	 * hands a connection whose exchanges keep doing so back to TCP
	 * (RDMASHIM_UNPAID_PERCENT; io_tx.c). false where the channel still pays
	 * (rdma: the NIC moves the bytes without the CPUs). */
	bool bell_bound_costs;
	/* Optional: the peer's end is shared by several processes of its own
	 * (a fork, SCM_RIGHTS), as it says in the channel. A failover we start
	 * reaches only the one that reads our RESUME; the data path then
	 * keeps such a connection on its channel rather than hand it back as
	 * unpaid (io_tx.c). */
	bool (*peer_shared)(const struct shim_chan *ch);
	/*
	 * Optional, both or neither: our RESUME and the peer's close must not
	 * cross (transport/ring.h, shim_ring_resume_announce). resume_announce
	 * is called before our RESUME is queued: false when the peer's program
	 * closed first, and then no RESUME may go (failover.c).
	 * close_before_resume, at our close while a failover waits for the
	 * peer's RESUME: marks our end closed and tells whether the peer
	 * announced its RESUME (close.c waits for it only then). Without them
	 * a closing end always waits for the peer's RESUME (bounded).
	 */
	bool (*resume_announce)(struct shim_chan *ch);
	bool (*close_before_resume)(struct shim_chan *ch);
	/* Optional: the peer announced its RESUME (resume_announce on its
	 * end), which it queues on TCP before its send returns. A look at
	 * readiness with nothing in the ring reads it first (io_ready.c): the
	 * bytes behind it are what a poll must report. */
	bool (*peer_resuming)(const struct shim_chan *ch);

	/*
	 * Failure and resume (failover.c, the RESUME frame in wire.h). A
	 * transport that can not fail over leaves these NULL. Offsets count
	 * the bytes of one direction carried by the channel since that
	 * direction switched. shm fails only on purpose (a hand-off, or the
	 * peer's RESUME); rdma also when the QP breaks.
	 */
	/* The channel failed: it carries nothing more. Lock-free, like readable. */
	bool (*failed)(const struct shim_chan *ch);
	/* Stops the channel for good (the peer's side fails too); idempotent.
	 * Afterwards nothing more lands: rx_offset stays put. */
	void (*fail)(struct shim_chan *ch);
	/* After fail: the bytes received but not read yet are given up, and
	 * rx_offset falls back to the bytes read, so that the peer sends them
	 * again on TCP (a hand-off: the process that gets the socket can not
	 * reach this channel). Optional. */
	void (*drop_unread)(struct shim_chan *ch);
	/* A channel that loses nothing (shm: the peer reads every byte we
	 * put in it, unless it hands the socket on): true and *offset, the
	 * bytes we sent on it, which is where the peer's RESUME will say it
	 * stands. false: this end can not tell (rdma: a write was still in
	 * flight when the channel stopped), the RESUME decides. Optional: with
	 * it, our direction may return to TCP without waiting for that RESUME
	 * (failover.c), which a peer not in any call would never send; a
	 * failover on purpose (fail) settles what is in flight first, so that
	 * the answer is then known. */
	bool (*tx_offset)(const struct shim_chan *ch, uint64_t *offset);
	/* Bytes received so far, read or not: where the peer must resume. */
	uint64_t (*rx_offset)(const struct shim_chan *ch);
	/* Our bytes from offset `from` on, which the peer never received: at
	 * most two pieces into out. Returns the count, or -ERANGE when `from`
	 * is outside what we still hold (a peer that lies or a bug). */
	int (*tx_unreceived)(const struct shim_chan *ch, uint64_t from, struct iovec out[2]);
};

/* A channel: its operations and the transport's private state. */
struct shim_chan {
	const struct shim_transport_ops *ops;
	void *priv;
};

/*
 * A transport's whole life, as conn sees it (as Redis's ConnectionType):
 * whether it fits a peer, its warm-up, its negotiation beside TCP, the
 * channel it installs, and its release. conn/upgrade.c runs the generic
 * state machine and calls only these; a transport reports back through
 * conn's upgrade services (upgrade.h: shim_upgrade_negotiating/committing/
 * done/fail, switch_tx, learn_rx_switch, new_nonce, retry_later), never by
 * writing the connection's phase. Only shim_layers_register() (interpose/)
 * registers transports. Every call is made under the sock's lock and none
 * blocks.
 */
struct shim_sock;
struct shim_tuple;

struct shim_transport_type {
	enum shim_transport kind;
	/* SHIM_REASON_NONE when this transport can reach the peer of t, else
	 * why not (shm: not_same_host). Both ends see the same facts. */
	enum shim_reason (*fits)(const struct shim_tuple *t);
	/* Optional: a connection that will pick this transport was tracked by
	 * connect, in the process that will do its I/O: warm up now (never
	 * waits). */
	void (*warm)(const struct shim_tuple *t);
	/* Optional: this process serves t->local's port (it listens on it
	 * tracked, or accepted a connection there): tell would-be clients on
	 * this host that their offers will be taken up (shm: the port's
	 * beacon). Cheap after the first call; never waits. */
	void (*serving)(const struct shim_tuple *t);
	/* Starts a negotiation: ends in shim_upgrade_negotiating() (s->neg is
	 * then its state) or shim_upgrade_fail(). */
	void (*start)(struct shim_sock *s, int fd, unsigned long long now);
	/* Advances it, while the phase is NEGOTIATING or COMMITTING. */
	void (*progress)(struct shim_sock *s, int fd, unsigned long long now);
	/* Optional: the program closes or pins the connection while the peer
	 * may commit (COMMITTING): stop the peer committing now, and take in
	 * what it committed already. NULL: the negotiation can not be stopped
	 * from outside; close and pin leave it to the release. */
	void (*stop_peer)(struct shim_sock *s, int fd);
	/* Optional: the socket is about to change hands (handback.c): as
	 * stop_peer, a peer that may be committing backs out, but one that
	 * already committed is followed, our own direction switching too.
	 * NULL: nothing to stop (the peer committed, or can not be stopped). */
	void (*stop_commit)(struct shim_sock *s, int fd);
	/* Optional: the negotiation ended without a switch
	 * (shim_upgrade_fail): drop what only it needed. */
	void (*abandon)(struct shim_sock *s);
	/* Optional: a fd a sleeping data call also waits on while the
	 * negotiation runs (-1: none), so that the peer's step wakes it. */
	int (*wait_fd)(const struct shim_sock *s);
	/* Optional: when a step falls due that no fd announces (a retry after
	 * a back-off), on shim_now_ns's clock; 0: none. A wait that watches
	 * the connection ends its sleep by then, so that its next look takes
	 * the step: an event loop would sleep until the program's next event
	 * (under s->lock). */
	unsigned long long (*due_ns)(const struct shim_sock *s);
	/* The last reference went (under the lock): frees s->neg. An
	 * installed channel is s->chan's, destroyed after this. */
	void (*release)(struct shim_sock *s);
	/* While s->neg exists the stream may not be plain TCP (its state is
	 * the channel to be: rdma). */
	bool neg_is_chan;
	/* The channel's data operations. */
	const struct shim_transport_ops *chan_ops;
};

/* conn/transport.c: the registry, in no particular order. */
void shim_transport_register(const struct shim_transport_type *t);
const struct shim_transport_type *shim_transport_find(enum shim_transport kind);
/* The first configured transport that fits the peer of t (NULL: none; then
 * *why says why, when asked). */
const struct shim_transport_type *shim_transport_pick(const struct shim_tuple *t, enum shim_reason *why);
/* connect tracked t: the transport it will pick warms up (a sock hook). */
void shim_transport_warm(const struct shim_tuple *t);
/* A tracked listener, or a connection accepted from one: every configured
 * transport that says so does (a sock hook). */
void shim_transport_serving(const struct shim_tuple *t);

#endif
