/*
 * The RDMA transport: rdma_cm setup and handshake (rdma_setup.c) and the
 * channel operations over RC queue pairs (rdma_chan.c).
 *
 * Entry points for conn/upgrade.c through shim_rdma_transport, called with
 * the sock's lock held; none blocks
 * longer than one bounded wait for a completion the peer's HCA owes us.
 */
#ifndef RDMASHIM_RDMA_H
#define RDMASHIM_RDMA_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "mrpool.h"
#include "rdma_link.h"
#include "rdma_wire.h"
#include "sock.h"
#include "transport.h"

/* The transport's table (conn/transport.h), registered by init. */
extern const struct shim_transport_type shim_rdma_transport;
/* Starts the upgrade over RDMA (phase COMMITTING, s->neg) or fails it. */
void shim_rdma_start(struct shim_sock *s, int fd, unsigned long long now);
/* Advances it: rdma_cm events, the QP's completions. */
void shim_rdma_progress(struct shim_sock *s, int fd, unsigned long long now);
/* Frees s->neg (the channel, if installed, is s->chan's to destroy). */
void shim_rdma_release(struct shim_sock *s);
/* Drops s->neg of an attempt a forked parent started, touching none of
 * its objects (they are the parent's). */
void shim_rdma_forget_inherited(struct shim_sock *s);
/* Whether this process sees a usable RDMA device (checked once). */
bool shim_rdma_device_present(void);

extern const struct shim_transport_ops shim_rdma_ops;

/* rdma_dev.c: process-wide state. The warm-up (device probe, contexts, PD,
 * first pool chunk) runs once per process on a thread of its own.
 * WARM_INHERITED: this process was forked after another one (its parent or
 * an ancestor) started the warm-up; it must not touch their verbs objects,
 * so RDMA is not available to it. */
enum { WARM_IDLE, WARM_RUNNING, WARM_READY, WARM_NO_DEVICE, WARM_FAILED, WARM_INHERITED };
/* Starts the warm-up if nobody did yet and returns its state; never blocks
 * (IDLE and RUNNING both mean "not yet"). */
int shim_rdma_warm_poll(void);
/* Starts the warm-up early, without waiting, if a connection with this
 * tuple may pick RDMA (called when a client connection is tracked). */
void shim_rdma_warm_kick(const struct shim_tuple *tuple);
/* How long a connection may wait for the warm-up (RDMA_WARMING), apart
 * from its upgrade timeout, which starts once the warm-up is ready. */
unsigned long long shim_rdma_warm_wait_ns(void);
/* The reason a warm-up state ends an attempt with; NONE: go on or wait. */
enum shim_reason shim_rdma_warm_verdict(int st);
/* Whether this process started the warm-up and so owns the PDs and pool. */
bool shim_rdma_owned(void);
/* Tests only: replaces the warm-up's work (NULL: the real one). The work
 * returns the state to publish and sets *devices. */
void shim_rdma_warm_set_work(int (*work)(int *devices));
struct ibv_context;
/* NULL in a process that does not own the warm-up (shim_rdma_owned). */
struct ibv_pd *shim_rdma_pd_for(struct ibv_context *ctx);
size_t shim_rdma_slot_bytes(uint32_t ring_bytes);

/* ---- shared by rdma_setup.c and rdma_chan.c ---- */

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_qp;
struct ibv_mr;
struct rdma_cm_id;
struct rdma_event_channel;

enum rdma_step {
	RDMA_WARMING,     /* the process's RDMA warm-up still runs (rdma_setup.c) */
	RDMA_C_LISTEN,    /* C: listener up, CONNECT_REQUEST awaited */
	RDMA_C_ACCEPTED,  /* C: REP sent, ESTABLISHED awaited */
	RDMA_S_ADDR,      /* S: address resolution */
	RDMA_S_ROUTE,     /* S: route resolution */
	RDMA_S_CONNECT,   /* S: REQ sent, CONNECT_RESPONSE awaited */
	RDMA_S_RETRY,     /* S: nobody listened yet; resolve again later */
	RDMA_S_LINK_WAIT, /* S: a link goes to C's host: its OFFER awaited */
	RDMA_CONNECTED,   /* both: QP in RTS; offsets being exchanged */
};

struct rdma_conn {
	struct shim_chan chan; /* first: the channel is the conn */
	enum rdma_step step;
	struct rdma_event_channel *ec;
	struct rdma_cm_id *listen_id, *id; /* id and ec: the link's once it is up */
	struct ibv_pd *pd;
	struct rdma_link *link; /* the QP this connection posts on, shared */
	uint32_t link_id;       /* our id of the connection: the peer's immediates name it */
	uint32_t peer_id;       /* the peer's id: ours name it */
	bool on_link;           /* link_id is valid (attached) */
	bool link_told_peer;    /* our hello went out: the peer may WRITE into our slot */
	bool peer_id_known;     /* the peer's hello came: peer_id names it */
	unsigned long long link_wait_ns; /* C: the OFFER's deadline; S: the wait for one */
	bool offered;           /* C: an OFFER went out once (never twice) */
	unsigned long long offer_again_ns; /* C: an OFFER that never went out is tried again from then */
	bool waits_for_link;    /* S: in RDMA_S_LINK_WAIT for a link being made, then for the OFFER */
	bool making_link;       /* S: counted as a link being made toward the client host */
	bool waiting_counted;   /* S: counted as waiting to join a link toward it */
	uint8_t making_addr[16]; /* ... that host */
	/* C: S's ACCEPT, put here by whichever thread reaped it. */
	struct shim_rdma_link_msg accept_msg;
	bool accept_in;         /* atomic, release: accept_msg is complete */
	struct shim_mr_slot slot;
	struct ibv_mr *mr; /* remote access to the ctl page and rx ring only */
	unsigned long long mr_reg_ns; /* what registering it took (traced) */
	struct shim_rdma_ctl *ctl;
	uint8_t *rx_data, *tx_shadow;
	uint32_t ring_bytes, mask;
	uint32_t max_inline;
	uint64_t remote_addr; /* the peer's control page */
	uint32_t rkey;
	unsigned long long step_deadline_ns;
	unsigned long long listen_ns; /* when the client side began to listen (rdma_setup.c) */
	bool breaker_probe; /* this attempt reports to the breaker */
	bool established;   /* C: S is committed (ESTABLISHED or its SWITCH_AT) */
	bool installed;     /* s->chan points here */
	bool rx_line_armed; /* our rx arm is the link's CQ event (rdma_chan.c) */
	bool tx_decided;    /* our SWITCH_AT went out (or we stay on TCP) */
	bool tx_switched;   /* ... and it moved our direction */
	bool rx_learned;    /* the peer's SWITCH_AT was taken (learn_rx) */
	bool peer_at_known; /* the peer's SWITCH_AT arrived */
	bool peer_no_switch;
	uint64_t peer_at;
	bool broken;        /* the QP failed: the channel carries nothing more */
	bool violated;      /* the peer broke the protocol (shim_rdma_violation) */
	bool stopped;       /* we moved it to ERR and disconnected (rdma_fail) */
	bool settled;       /* ... on purpose, with every immediate acknowledged first */
	bool rx_dropped;    /* after stopped: unread bytes given up (drop_unread); atomic */
	bool abortive;      /* our close resets the connection: no CLOSED for the peer (transport.h) */
	bool done;          /* handshake over: CM events are the channel's now */
	bool peer_disconnected;
	bool torn_down;
	/* The link's number of our last signaled WR (completions: the link's
	 * completed and completed_ok, in order for all its connections). */
	uint64_t last_signaled;
	/* tx_announced: the bytes our immediates announced (tx_posted but for
	 * a test's injected break); tx_imm_seq: the WR that carried the last
	 * of them. Once it completed successfully, the peer's RESUME can only
	 * name tx_announced (rchan_tx_offset). */
	uint64_t tx_announced, tx_imm_seq;
	/* tx_announced is atomic (the links' sweeper reads it): stored after
	 * the post of what it counts. tx_word: the largest tail a WRITE of
	 * ours put in the peer's rx_announced (atomic, written here and by
	 * the sweeper); with DATA immediates it lags, and only the peer's
	 * stall watch reads it (rdma_wire.h, the lazy tail word).
	 * tx_lag_ns/tx_lag_tail, under the link's lock: the sweeper saw
	 * the word lag tx_lag_tail since tx_lag_ns (0: not). */
	uint64_t tx_word;
	unsigned long long tx_lag_ns;
	uint64_t tx_lag_tail;
	/* Cursors: ours live here, the peer's in ctl (written remotely).
	 * tx_tail: bytes the program gave us (staged); tx_posted: those
	 * posted to the peer, which lag while the peer is unproven. */
	uint64_t tx_tail, tx_posted;
	/* The end of the last bytes sent from the program's memory
	 * (rdma_zc.h): the staging copy holds nothing before it. */
	uint64_t zc_end;
	bool proved;        /* the peer proved it is the TCP peer (PROTOCOL.md) */
	bool close_pending; /* shutdown_tx came before the staged bytes left */
	unsigned long long staged_since_ns; /* unproven: when bytes started waiting */
	uint64_t rx_head, rx_head_sent;
	uint64_t rx_head_imm; /* the head our last DATA immediate carried (rdma_wire.h) */
	uint64_t rx_tail;   /* bytes the peer's immediates announced; atomic */
	bool rx_closed;     /* the peer's CLOSED immediate arrived; atomic */
	/* The stall watch, under the link's lock: since when the peer's tail
	 * word stood ahead of rx_tail, which stood at stall_tail (0: not). */
	unsigned long long stall_since_ns;
	uint64_t stall_tail;
	uint64_t recv_posted, recv_reported; /* our receives, and what the peer knows */
	uint64_t peer_recvs_used; /* our immediates: one of the peer's receives each */
	uint64_t peer_head_seen, peer_recvs_seen; /* the peer's credits we accepted last */
	/* The peer's head as its DATA immediates gave it (rdma_wire.h): its
	 * rx_head_imm. Its credit is the larger of this and ctl->tx_head.
	 * Atomic: the link's reaper writes it on any thread. */
	uint64_t peer_head_imm;
	bool closed_sent;
	/* Test-only (faults.h, link_qp_lost): its attach was the Nth: the
	 * link's QP goes to ERR at its first post once proved; 0: none. */
	uint64_t fault_link_n;
	struct shim_sock *sock; /* for traces only */
	int fd;
	pid_t pid; /* the process that made it: only it may touch its objects */
};

/* A channel's conn: the channel is its first member. The const data ops
 * reap the CQ through it, as readable() does. */
static inline struct rdma_conn *shim_rdma_conn_of(const struct shim_chan *ch)
{
	return (struct rdma_conn *)ch;
}

/* rdma_close.c: gives up before any direction moved (TCP stays). */
void shim_rdma_give_up(struct shim_sock *s, int fd, enum shim_reason reason);
/* RDMASHIM_MODE=shadow: the peer proved itself and this end would go on.
 * It rejects the peer's id with the shadow marker (a negative errno when
 * the REJ could not go: the peer then sees the teardown's plain one),
 * then drops everything and stays on TCP, traced upgrade.shadow. */
int shim_rdma_shadow_reject(struct rdma_cm_id *id);
/* Links (RDMASHIM_RDMA_LINKS) serve upgrades that go on: in shadow mode
 * every connection takes rdma_cm's way, where the cuts are. */
static inline bool shim_rdma_links_on(void)
{
	return shim_cfg.rdma_links && !shim_cfg.shadow;
}
void shim_rdma_shadow_cut(struct shim_sock *s, int fd);
/* A REJ's private data is the shadow marker (struct shim_rdma_shadow_rej). */
bool shim_rdma_rej_is_shadow(const void *pdata, size_t plen);
/* rdma_link_join.c: a connection set up over a link already up.
 * C: link_offer sends an OFFER on a link to the server's endpoint, if there
 * is one, beside its rdma_cm listener; link_accepted takes S's ACCEPT
 * (true: joined, or given up); link_withdraw leaves the link when S took
 * rdma_cm's way. S: link_begin is true if it took an OFFER or waits for one
 * (RDMA_S_LINK_WAIT); link_progress is true while it waits or once it took
 * one, false when the wait ended (the caller takes rdma_cm's way). */
void shim_rdma_link_offer(struct shim_sock *s, int fd, struct rdma_conn *c);
bool shim_rdma_link_accepted(struct shim_sock *s, int fd, struct rdma_conn *c);
void shim_rdma_link_withdraw(struct rdma_conn *c);
/* rdma_link_table.c. S: this attempt makes a link toward the client host
 * by rdma_cm (marked) or no longer does (its link is trusted, or it
 * ended). */
void shim_rdma_link_making_mark(struct shim_sock *s, struct rdma_conn *c);
void shim_rdma_link_making_done(struct rdma_conn *c);
/* ... this connection waits to join a link toward the client host
 * (counted), or no longer does. */
void shim_rdma_link_waiting_mark(struct shim_sock *s, struct rdma_conn *c);
void shim_rdma_link_waiting_done(struct rdma_conn *c);
bool shim_rdma_link_begin(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now);
bool shim_rdma_link_progress(struct shim_sock *s, int fd, struct rdma_conn *c, unsigned long long now);
/* rdma_switch.c: RDMA_CONNECTED, offsets both ways, then the proof. */
void shim_rdma_connected(struct shim_sock *s, int fd, struct rdma_conn *c);

/* rdma_dev.c. Fork handler half: true takes the PD table's lock, false drops it. */
void shim_rdma_dev_atfork(bool prepare);

/* rdma_chan.c */
void shim_rdma_chan_init(struct rdma_conn *c);
/* Reaps completions; records SWITCH_AT receives and failures. */
void shim_rdma_reap(struct rdma_conn *c);
/* Posts our SWITCH_AT and waits (bounded) for it; 0 or -errno. */
int shim_rdma_send_switch_at(struct rdma_conn *c, uint64_t offset, bool no_switch);

/* rdma_fail.c: the channel's failure and resume operations (transport.h),
 * and tx_unread. */
bool shim_rdma_failed(const struct shim_chan *ch);
bool shim_rdma_violated(const struct shim_chan *ch);
void shim_rdma_fail(struct shim_chan *ch);
uint64_t shim_rdma_rx_offset(const struct shim_chan *ch);
bool shim_rdma_tx_offset(const struct shim_chan *ch, uint64_t *offset);
void shim_rdma_drop_unread(struct shim_chan *ch);
int shim_rdma_tx_unreceived(const struct shim_chan *ch, uint64_t from, struct iovec out[2]);
size_t shim_rdma_tx_unread(const struct shim_chan *ch);

/* rdma_teardown.c: releases every verbs/cm resource and the slot, then frees c. */
void shim_rdma_teardown(struct rdma_conn *c);
/* Nothing more lands for this connection (traced): its link's QP goes to
 * ERR, and every connection on it fails over. */
void shim_rdma_qp_error(struct rdma_conn *c);
/* Whether the peer proved it owns the TCP peer's end (our rx read its
 * SWITCH frame with our nonce); latched. Under the sock's lock. */
bool shim_rdma_tx_proved(struct rdma_conn *c);
/* The channel ends because the peer can not, or did not in time, prove
 * itself (traced unproven_peer); the QP goes to ERR. */
void shim_rdma_unproven(struct rdma_conn *c, const char *why);
/* Posts what the program wrote while the peer was unproven, once it is;
 * fails the channel when the hold lasted too long. 0 or -errno. */
int shim_rdma_tx_release(struct rdma_conn *c);
/* Counts the first SHIM_RDMA_RQ_DEPTH receives of the link as this
 * connection's (SWITCH_AT, immediates). */
void shim_rdma_post_recvs(struct rdma_conn *c);

#endif
