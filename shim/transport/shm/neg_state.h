/*
 * The state of one shared-memory negotiation and the steps both of its ways
 * share: the named rendezvous (shm_neg.c) and the pair channel
 * (shm_pair_neg.c). shim/PROTOCOL.md tells the protocol; every function is
 * called with the sock's lock held and never blocks.
 */
#ifndef RDMASHIM_NEG_STATE_H
#define RDMASHIM_NEG_STATE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "faults.h"
#include "trace.h"
#include "rendezvous.h"
#include "sock.h"

enum shm_step {
	SHM_C_LISTENING, /* C: rendezvous open, waiting for S */
	SHM_C_CONNECTED, /* C: S connected and verified, OFFER awaited */
	SHM_C_ACCEPTED,  /* C: ACCEPT and ring sent, S's SWITCH_AT awaited; nothing switched */
	SHM_C_HINTED,    /* C: HINT and ring sent over a pair, S's COMMIT awaited */
	SHM_S_RETRY,     /* S: C had no rendezvous yet; retry later */
	SHM_S_OFFERED,   /* S: OFFER sent, ACCEPT awaited */
	SHM_S_AWAIT_C,   /* S: ring mapped, SWITCH_AT or COMMIT sent (switched); C's awaited */
};

struct shm_neg {
	enum shm_step step;
	int rv_listen_fd, rv_fd;
	struct shim_rv_owner rv_owner; /* the peer's TCP socket, asked once */
	unsigned rv_refusals;          /* strangers refused on our rendezvous */
	/* C: when it began to wait for S (listen or HINT), and the bytes read
	 * by then (a peer without the shim answers over TCP, never on the
	 * rendezvous). */
	unsigned long long listen_ns;
	uint64_t rx_at_listen;
	uint16_t turns_at_hint; /* the connection's tcp_turns when its HINT went (shm_pair_neg.c) */
	/* S: the bytes read when C's rendezvous was not there, and whether the
	 * one early retry that new bytes allow was taken (s_retry_due()). */
	uint64_t rx_at_retry;
	bool early_retry_used;
	/* S: a miss to measure from (s_client_plain()): when, and the bytes
	 * that had arrived by then, read or queued (SHM_ARRIVED_UNKNOWN before
	 * the first, or when the kernel could not say). */
	unsigned long long miss_ns;
	uint64_t arrived_at_miss;
	bool client_active; /* bytes came after such a miss once already */
	/* The rendezvous came from a pair (a socketpair end): it is never kept
	 * as a pair itself. C: the process at the pair's other end. */
	bool via_pair;
	pid_t pair_pid;
	/* The transport's stop_peer ran: what it stopped ends the upgrade. */
	bool stopped;
	/* The pair way: the connection's socketpair stays on as its bell line
	 * when the handshake ends with a channel (both ends said so: C in its
	 * HINT, S in its COMMIT). */
	bool keep_line;
	bool zc_bound; /* shm_neg_bind_zc() ran */
	/* C: a HINT for this server went unanswered and C went the named way:
	 * the server runs the shim (its pair did), and its process that holds
	 * the connection comes once its back-off lets it, however long the
	 * bytes flow meanwhile. */
	bool server_has_shim;
	/* Test-only (faults.h, rv_silent): this end says and reads nothing
	 * more on its rendezvous; its upgrade ends at its deadline. */
	bool silent;
};

#define SHM_ARRIVED_UNKNOWN UINT64_MAX

static inline struct shm_neg *shm_neg_of(const struct shim_sock *s)
{
	return s->neg;
}

/* Test-only (faults.h, verify_fail): -EACCES where this check of the
 * peer must fail as a stranger's would, else 0 (then the real check runs). */
static inline int shm_verify_fault(const struct shim_sock *s, int fd, const char *where)
{
	return shim_fault_hit(SHIM_FAULT_VERIFY_FAIL, fd, &s->tuple, where) ? -EACCES : 0;
}

/* A message on a negotiation's rendezvous: any a handshake waits for, with
 * room for one byte more (a longer one comes truncated: -EPROTO). */
union shm_neg_msg {
	struct shim_msg_hdr hdr;
	struct shim_msg_offer offer;
	struct shim_msg_accept accept;
	struct shim_msg_switch_at at;
	struct shim_msg_commit commit;
	uint8_t raw[SHIM_MSG_MAX + 1];
};

/* What one look at the rendezvous found (shm_neg_recv). */
enum shm_got {
	SHM_GOT_NONE,  /* nothing queued yet */
	SHM_GOT_END,   /* the peer's end: it closed or shut its side */
	SHM_GOT_ERROR, /* the socket's error, or a message cut short */
	SHM_GOT_OTHER, /* a message, malformed or not of the type awaited */
	SHM_GOT_IT,    /* the message awaited, checked (shim_msg_check) */
};

/*
 * One message off rv_fd, never waiting, checked against the type the
 * handshake awaits, with up to nfds fds it brought (as shim_rv_recv_fds
 * leaves them: -1 where none came, -EMFILE where one came near our fd
 * limit). The fds are the caller's only with SHM_GOT_IT: with anything
 * else, any that came are released here (through the reaper: a peer's
 * file). *len (may be NULL): what the read returned, for a trace.
 */
enum shm_got shm_neg_recv(int rv_fd, union shm_neg_msg *msg, int type, int *fds, unsigned nfds, ssize_t *len);

/* The negotiation ends (failed, done or released): its fds and state go. */
void shm_neg_end(struct shim_sock *s);
void shm_close_fd(int *fd);
/* RDMASHIM_RING_KB in bytes. */
uint32_t shm_ring_bytes(void);
/* The endpoints as C sees them: C's own, and S's. */
const struct shim_endpoint *shm_client_ep(const struct shim_sock *s);
const struct shim_endpoint *shm_server_ep(const struct shim_sock *s);
/* Why a rendezvous socket could not be had: the fd limit the shim keeps
 * clear of (fdtable.h), or something unexpected. */
enum shim_reason shm_local_failure(int rc);
/* A refused rendezvous peer, traced within a budget (any local user can
 * make these lines; the stats still count every refusal). */
void shm_trace_refused(struct shim_sock *s, int fd, const char *side, int err);
void shm_trace_done(struct shim_sock *s, int fd, uint32_t ring);
/* C waited RDMASHIM_PLAIN_PEER_MS with bytes coming over TCP meanwhile. */
bool shm_peer_answers_plain(const struct shim_sock *s, const struct shm_neg *ng, unsigned long long now);
/* May our direction move? Not with our write side shut, nor closing. */
bool shm_tx_may_switch(const struct shim_sock *s);
/* Our SWITCH_AT on the rendezvous (switching: our offset; else NEVER). */
int shm_send_switch_at(struct shim_sock *s, bool switching, uint32_t flags);
/* The peer's offset (or NEVER); false when it lies behind what we read as
 * plain bytes (the connection was reset: a peer breaking the protocol). */
bool shm_take_peer_switch_at(struct shim_sock *s, int fd, uint64_t offset);
/* S: maps the ring C sent (memfd, closed here) of ring_bytes per
 * direction, which may be no larger than ours (a larger one would let the
 * peer park more of our memory than a TCP peer can: traced
 * upgrade.ring_refused). 0 or -errno; the caller fails the upgrade with
 * ring_alloc_failed. */
int shm_s_attach_ring(struct shim_sock *s, int fd, int memfd, uint32_t ring_bytes, struct shim_chan **out);
/* S: whether C's ring size is no larger than ours (else traced
 * upgrade.ring_refused, as above). */
bool shm_s_ring_fits(struct shim_sock *s, int fd, uint32_t ring_bytes);
/* S told C where its direction moves (switching) or that it stays: the
 * ring is the connection's, our direction switches, C's offset is awaited
 * (SHM_S_AWAIT_C). */
void shm_s_committed(struct shim_sock *s, int fd, struct shim_chan *chan, bool switching, uint32_t ring_bytes);
/* C's ring goes: S never took it, nothing switched. */
void shm_c_drop_ring(struct shim_sock *s);
/* C without S's commit: nothing switched, both ends stay on TCP. */
void shm_c_give_up(struct shim_sock *s, int fd, enum shim_reason reason);
/* C after S committed at offset: its own direction follows (SWITCH_AT,
 * then the frame) unless it may not move; the negotiation is done. */
void shm_c_follow(struct shim_sock *s, int fd, uint64_t offset);

/* Gives the channel the rendezvous peer's pidfd for one copy (shm_zc.h). */
void shm_neg_bind_zc(struct shim_sock *s);

#endif
