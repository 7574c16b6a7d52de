/*
 * Links: one RC queue pair shared by every RDMA connection between two
 * processes (rdma_link.c; shim/PROTOCOL.md, "Links"). The kernel's SMC-R
 * link groups are the model: a host pair's connections do not each pay a
 * QP, a CQ and rdma_cm's round trips.
 *
 * A link is made by the rdma_cm handshake of its first connection
 * (rdma_setup.c) and is offered to later ones only once a connection on it
 * proved its peer (shim_rdma_link_trust). A later connection between the
 * same two processes is then one OFFER and one ACCEPT on the link. Each
 * connection keeps its own registered slot (ring, control page, MR), and
 * the link names it by an id in every immediate and message.
 *
 * Locks: the table's mutex (rdma_link_table.c: which links exist), then
 * a link's lock (its CQ, its connections' places, pending OFFERs), then its
 * post lock (sequence numbers and ibv_post_send). A sock's lock comes before
 * all of them; the reaper touches other connections only through their
 * atomic words (take_imm, take_switch_at, the ACCEPT mailbox).
 */
#ifndef RDMASHIM_RDMA_LINK_H
#define RDMASHIM_RDMA_LINK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>

#include "clock.h"
#include "config.h"
#include "mrpool.h"
#include "statlink.h"
#include "rdma_wire.h"
#include "tuple.h"

struct rdma_conn;
struct rdma_cm_id;
struct rdma_event_channel;
struct ibv_pd;
struct ibv_cq;
struct ibv_qp;
struct ibv_mr;

/*
 * A link carries at most max_conns connections (live, or closed and
 * waiting for the peer's RELEASE), so that its receives cover every credit
 * it gives out: each connection may have SHIM_RDMA_RQ_DEPTH of the peer's
 * immediates (and its SWITCH_AT) outstanding, and link messages (OFFER,
 * ACCEPT, RELEASE) take SHIM_LINK_MSGS_PER_CONN more. An honest peer then
 * never finds the link's receives used up (no RNR: rnr_retry stays 0), and
 * a connection beyond the cap makes a new link. Each end caps by its own
 * receives (a connection exists only once both attached it), so the two
 * ends need not agree: max_conns is RDMASHIM_RDMA_LINK_CONNS, or fewer when
 * the device's max_qp_wr or max_cqe can not hold that many receives.
 */
#define SHIM_LINK_MAX_CONNS SHIM_CFG_LINK_CONNS_MAX
#define SHIM_LINK_MSGS_PER_CONN 8
#define SHIM_LINK_RECVS_PER_CONN (SHIM_RDMA_RQ_DEPTH + SHIM_LINK_MSGS_PER_CONN)
#define SHIM_LINK_SQ_DEPTH 1024
#define SHIM_LINK_CELL 128 /* one receive or one send's message or word */
#define SHIM_LINK_OFFERS 32

/*
 * WRs are built into a chain and posted with one ibv_post_send: a send's
 * data and its tail cost one doorbell to the HCA (on Soft-RoCE one system
 * call). A word or a message is posted inline where the device allows it,
 * else from the link's send cell for its sequence number.
 */
#define CHAIN_MAX 4
struct wr_chain {
	struct ibv_send_wr wr[CHAIN_MAX];
	struct ibv_sge sge[CHAIN_MAX];
	uint64_t words[CHAIN_MAX];
	uint64_t tail_head[2]; /* shim_rdma_chain_tail's two words: one per chain */
	/* At most one word whose value is read as the chain takes its place
	 * on the QP, under the post lock (shim_rdma_chain_tail_word). */
	const uint64_t *late_src;
	unsigned late_i;
	unsigned copy_mask; /* entries whose source must sit in a send cell unless inline */
	unsigned n;
};

/* What the reaper hands to a connection (rdma_post.c fills it): the link
 * knows connections only by their places. Called with the link's lock
 * held, from any thread; false: the peer broke the rules, and the link
 * breaks (its other connections have the same peer). */
struct rdma_link_handlers {
	bool (*imm)(struct rdma_conn *c, uint32_t imm, uint32_t byte_len);
	bool (*switch_at)(struct rdma_conn *c, const void *buf, size_t len);
	bool (*accept)(struct rdma_conn *c, const struct shim_rdma_link_msg *m);
	void (*broken)(struct rdma_conn *c, const char *why, int detail);
	/* The stall watch (shim_rdma_link_reap's): the peer's tail word has
	 * stood ahead of what the connection's immediates delivered, with
	 * our count not moving, for bound_ns or longer as of now. The
	 * excess in *behind. */
	bool (*rx_stalled)(struct rdma_conn *c, unsigned long long now, unsigned long long bound_ns,
			   uint64_t *behind);
	/* At the same look: our lazy tail word for the peer's watch, when it
	 * lagged a quarter of bound_ns (rdma_wire.h, version 8). Posts with
	 * shim_rdma_link_post_locked only. */
	void (*tx_lazy)(struct rdma_conn *c, unsigned long long now, unsigned long long bound_ns);
};
void shim_rdma_link_set_handlers(const struct rdma_link_handlers *h);

/* A connection's place on a link: its memory stays until both ends let it
 * go (the peer may still WRITE there until its RELEASE arrives). */
struct rdma_link_place {
	struct rdma_conn *conn; /* NULL once detached: nothing more lands for it */
	struct shim_mr_slot slot;
	struct ibv_mr *mr;
	bool used;
	bool peer_released; /* the peer's RELEASE came */
	bool local_done;    /* our connection is gone; slot and mr are ours here */
};

struct rdma_link_offer {
	bool used;
	unsigned long long at_ns;
	struct shim_rdma_link_msg msg;
};

struct rdma_link {
	unsigned num; /* for traces */
	pid_t pid;
	int refs; /* connections on it, the table, lookups; atomic */
	struct rdma_event_channel *ec;
	struct rdma_cm_id *id;
	bool cm_owned; /* up: ec and id are the link's (before, its first connection's) */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	/* The CQ's completion channel: a sleeper's wake-up (rdma_chan.c,
	 * rx arms for the line): every data WRITE ends with an immediate,
	 * whose completion an armed CQ turns into an event on this fd.
	 * NULL: none (the sleepers are belled on TCP). */
	struct ibv_comp_channel *comp;
	/* The thread whose sleeps comp wakes now (atomic; 0: none) and its
	 * arms outstanding (its own to count): one thread at a time, since a
	 * drain of one would take the event that woke another. The others'
	 * arms are belled on TCP, as without a channel (rdma_chan.c). */
	uintptr_t comp_owner;
	unsigned comp_nest;
	/* An owner gave comp back without draining it (rdma_chan.c,
	 * comp_give): the next owner drains before it arms. The owner's
	 * alone to read and write (the owner word's release and acquire
	 * hand it over). */
	bool comp_dirty;
	struct ibv_qp *qp;
	unsigned max_conns; /* live + held, at most (see SHIM_LINK_MAX_CONNS) */
	unsigned rq_depth;  /* max_conns * SHIM_LINK_RECVS_PER_CONN */
	uint8_t *cells; /* rq_depth receive cells, then SHIM_LINK_SQ_DEPTH send cells */
	struct ibv_mr *cells_mr;
	uint32_t max_inline;
	pthread_mutex_t lock;      /* the CQ, places, offers */
	pthread_mutex_t post_lock; /* sequence numbers and posting */
	/* Send queue accounting: WRs are numbered 1, 2, ... on the link; RC
	 * completes them in order, so one signaled completion retires all
	 * earlier ones, whichever connection posted them. */
	uint64_t posted, last_signaled;
	uint64_t completed, completed_ok; /* atomic */
	uint64_t bytes_posted; /* RDMASHIM_TEST_FAIL_LINK_KB */
	/* Under lock. cq_lost struck (faults.h): the CQ is not polled until
	 * fault_cq_until_ns or the link's break; fault_held: completions
	 * polled at the strike; fault_cq_done: it struck here once. */
	bool fault_cq_lost, fault_cq_done;
	unsigned long long fault_cq_until_ns;
	unsigned fault_held_n;
	struct ibv_wc *fault_held;
	/* Under lock. cq_stall struck (faults.h): receive completions are
	 * dropped for good from then on. */
	bool fault_cq_stall;
	/* Under lock: the stall watch's last look (shim_rdma_link_watch),
	 * and the reaps that took something since (one in 64 looks). */
	unsigned long long stall_look_ns;
	unsigned stall_reaps;
	bool broken;             /* atomic: the QP failed; every connection on it did */
	bool peer_disconnected;  /* the CM peer's DREQ came (after up) */
	bool disconnect_sent;    /* under lock: our DREQ went (break_locked) */
	bool trusted;            /* a connection on it proved its peer */
	bool in_table;
	bool client;             /* we were C of its first connection */
	struct shim_endpoint peer;   /* C: the server's TCP endpoint; S: the client's address (port 0) */
	struct rdma_link_place *places;
	unsigned n_places, live, held; /* held: places waiting for the peer's RELEASE */
	struct rdma_link_offer offers[SHIM_LINK_OFFERS];
	/* OFFERs kept unclaimed (atomic for lookups): each holds a place at
	 * C, so a link full at C's end looks full here too. */
	unsigned offers_kept;
	/* The ids (the peer's) of OFFERs dropped unclaimed: their RELEASE is
	 * owed (sent outside the lock, by shim_rdma_link_claim). */
	uint32_t owed[SHIM_LINK_OFFERS];
	unsigned n_owed;
	/* Atomic: when a place or a kept OFFER last came or went (its idle
	 * time starts there: rdma_link_table.c closes a link that carried
	 * nothing for RDMASHIM_RDMA_LINK_IDLE_MS). */
	unsigned long long busy_ns;
	/* Its record in the stats area (rdma_link_stat.c; NULL: none) and
	 * the description last written there, under lock. */
	struct shim_stat_link *stat;
	struct shim_stat_link_desc stat_d;
	struct rdma_link *next;
};

/* Test-only faults (faults.h: qp_error, link_qp_lost): the link's QP
 * goes to ERR, and nothing else: the reaper finds the flushed
 * completions and breaks the link as after a real failure. */
void shim_rdma_link_fault_err(struct rdma_link *l);

/*
 * The stall watch (RDMASHIM_RDMA_STALL_MS): takes what the CQ holds, then
 * compares each connection's count with the tail word its peer wrote
 * (rdma_post.c, rx_stalled); one standing ahead, unmoved, past the bound
 * means the CQ stopped delivering: the link breaks ("cq_stall", traced
 * rdma.cq_stall, counted as reason cq_stall) and every connection on it
 * fails over. At most one look per quarter of the bound. An idle reap
 * looks too (a receiver waiting in a call); the links' sweeper
 * (rdma_link_table.c) looks at every link of the table, for receivers in
 * no call. The same looks publish our own lazy tail words for the peer's
 * watch (handlers' tx_lazy).
 */
void shim_rdma_link_watch(struct rdma_link *l);

/*
 * The watch's rule for one connection, at a look at time now: the peer's
 * tail word (word) against our count (tail). *since and *at_tail are the
 * connection's (0: nothing ahead at the last look). true once a word ahead
 * stood with our count unmoved for bound_ns; a count that moved starts the
 * time again, and one that caught up forgets it.
 */
static inline bool shim_rdma_stall_judge(unsigned long long *since, uint64_t *at_tail, uint64_t word, uint64_t tail,
					 unsigned long long now, unsigned long long bound_ns)
{
	if (word <= tail) {
		*since = 0;
		return false;
	}
	if (!*since || *at_tail != tail) {
		*since = now ? now : 1;
		*at_tail = tail;
		return false;
	}
	return now - *since >= bound_ns;
}

/*
 * The sender's side, at the same looks: whether our lazy tail word
 * (word) is due, against what our DATA immediates announced. *since and
 * *at are the connection's (0: the word did not lag at the last look):
 * true once bytes announced at a look stood unpublished for a quarter of
 * bound_ns; a word that caught up with them starts the time again.
 */
static inline bool shim_rdma_lazy_due(unsigned long long *since, uint64_t *at, uint64_t word, uint64_t announced,
				      unsigned long long now, unsigned long long bound_ns)
{
	if (word >= announced) {
		*since = 0;
		return false;
	}
	if (!*since || word >= *at) {
		*since = now ? now : 1;
		*at = announced;
		return false;
	}
	return now - *since >= bound_ns / 4;
}

/* Makes a link's CQ and QP (in RESET) on id's device, its cells registered
 * and receives to be posted in INIT. The CM objects stay the first
 * connection's until shim_rdma_link_up. 0 or -errno; *out holds one
 * reference. */
int shim_rdma_link_make(struct rdma_cm_id *id, struct rdma_event_channel *ec, struct ibv_pd *pd, bool client,
			const struct shim_endpoint *peer, struct rdma_link **out);
/* Posts every receive (after INIT). */
int shim_rdma_link_post_recvs(struct rdma_link *l);
/* Takes and acks every event the link's completion channel holds (none:
 * returns at once). Lock-free: the channel's reads are the kernel's. */
void shim_rdma_link_comp_drain(struct rdma_link *l);
/* The handshake connected: the CM objects are the link's from now on. */
void shim_rdma_link_up(struct rdma_link *l);
/* A connection on it proved its peer: later connections may use it. */
void shim_rdma_link_trust(struct rdma_link *l);
/* Gives c a place (its id) on l, with one more reference. 0 or -errno. */
int shim_rdma_link_attach(struct rdma_link *l, struct rdma_conn *c);
/* c goes: detach, tell the peer (RELEASE), keep its memory until the peer
 * released it too, drop the reference (the last one frees the link). */
void shim_rdma_link_leave(struct rdma_conn *c);
/* RELEASE of the peer's place peer_id: we write nothing more there (an
 * OFFER we did not take, or a connection that left). */
void shim_rdma_link_release_to(struct rdma_link *l, uint32_t peer_id);
/* A place or a kept OFFER came or went (l->busy_ns). Inline: both the
 * link (rdma_link.c) and its OFFERs (rdma_link_offers.c) mark it. */
static inline void shim_rdma_link_busy(struct rdma_link *l)
{
	__atomic_store_n(&l->busy_ns, shim_now_ns(), __ATOMIC_RELAXED);
}
/* One more reference; shim_rdma_link_put drops one (the last frees it). */
void shim_rdma_link_get(struct rdma_link *l);
void shim_rdma_link_put(struct rdma_link *l);
/* Traces rdma.link with its state (up, down) and why. */
void shim_rdma_link_trace(const struct rdma_link *l, int level, const char *state, const char *why);
/* S: takes the pending OFFER for connection t (S's view) younger than
 * max_age_ns, reaping first; sends the RELEASEs owed for OFFERs dropped
 * (t NULL: takes none, only drops the aged ones). */
bool shim_rdma_link_take_offer(struct rdma_link *l, const struct shim_tuple *t, unsigned long long max_age_ns,
			       struct shim_rdma_link_msg *out);
/* Under l->lock, with now from shim_now_ns(): takes the OFFER for t into
 * *out unless older than max_age_ns, and drops every OFFER older than that,
 * whichever connection it names (no claim takes it any more, and a kept one
 * counts as a held place, so a stale OFFER at a process that will never
 * claim it made the link look full at both ends); a RELEASE is owed for
 * each dropped (l->owed, sent by the caller outside the lock). t NULL:
 * takes none, only ages (the sweeper, rdma_link_table.c). */
bool shim_rdma_link_offers_scan(struct rdma_link *l, const struct shim_tuple *t, unsigned long long max_age_ns,
				unsigned long long now, struct shim_rdma_link_msg *out);
/* Under l->lock: keeps the peer's OFFER m (the reaper's; rdma_link_offers.c),
 * in the oldest cell when all are used, whose OFFER is then owed a
 * RELEASE. An OFFER not from the link's CM peer as client is refused. */
void shim_rdma_link_keep_offer(struct rdma_link *l, const struct shim_rdma_link_msg *m);

/* Reaps the link's CQ and hands what it holds to its connections. */
void shim_rdma_link_reap(struct rdma_link *l);
/* The same, unless another thread is reaping. */
void shim_rdma_link_reap_try(struct rdma_link *l);
/* The QP goes to ERR and every connection on it is broken. */
void shim_rdma_link_break(struct rdma_link *l, const char *why, int detail);
/* Whether the CM peer disconnected (looks at the link's CM events). */
bool shim_rdma_link_cm_gone(struct rdma_link *l);
/* One link message (SEND); returns its sequence number, 0 on failure. */
uint64_t shim_rdma_link_send(struct rdma_link *l, const void *msg, size_t len);
/* Posts the chain (waiting, bounded, for room in the send queue); the
 * last WR's sequence number, or 0: nothing posted (the link is broken). */
uint64_t shim_rdma_link_post(struct rdma_link *l, struct wr_chain *ch);
/* The same with l->lock held: never waits; 0 when the send queue has no
 * room (the caller tries again later) or the link is broken. */
uint64_t shim_rdma_link_post_locked(struct rdma_link *l, struct wr_chain *ch);
/* Spins (bounded) until WR seq completed; false when the link broke. */
bool shim_rdma_link_wait(struct rdma_link *l, uint64_t seq);
static inline uint64_t shim_rdma_link_completed(const struct rdma_link *l)
{
	return __atomic_load_n(&l->completed, __ATOMIC_ACQUIRE);
}
static inline uint64_t shim_rdma_link_completed_ok(const struct rdma_link *l)
{
	return __atomic_load_n(&l->completed_ok, __ATOMIC_ACQUIRE);
}
static inline bool shim_rdma_link_broken(const struct rdma_link *l)
{
	return __atomic_load_n(&l->broken, __ATOMIC_ACQUIRE);
}

/* The port watch (rdma_port.c): breaks every link of this process on
 * port `port` of device ctx, each connection on them failing over to TCP;
 * how many it broke. */
unsigned shim_rdma_links_break_on_port(const struct ibv_context *ctx, uint8_t port, const char *why);
/* C: a trusted link of this process to the server's endpoint, with a
 * reference, or NULL. */
struct rdma_link *shim_rdma_link_for_server(const struct shim_endpoint *server);
/* S: whether a trusted link goes to that client host, and whether one of
 * them has room (wait for C's OFFER on it). */
enum shim_link_toward { SHIM_LINK_NONE, SHIM_LINK_FULL, SHIM_LINK_ROOM };
enum shim_link_toward shim_rdma_link_toward(const struct shim_endpoint *client);
/* S: a link toward the client host addr is being made by rdma_cm (start),
 * or that attempt ended (its link trusted, or it failed); a connection
 * waits to join a link toward it, or no longer does. true: counted (the
 * end must then be told). */
bool shim_rdma_link_making(const uint8_t addr[16], bool start);
bool shim_rdma_link_waiting(const uint8_t addr[16], bool start);
/* S: how many links toward that client host are being made. At most
 * SHIM_LINK_MAKING_MAX at once: each rdma_cm handshake takes round trips
 * the program's calls must carry, so links made one at a time are far too
 * few for a burst of connections served in turn, and every link more
 * costs a QP (docs/BENCHMARKS.md, "Making RDMA links"). */
#define SHIM_LINK_MAKING_MAX 4
unsigned shim_rdma_link_makings(const struct shim_endpoint *client);
/* S: whether the connections waiting to join a link toward that client
 * host (those that found SHIM_LINK_MAKING_MAX on their way) fit on what is
 * there and on its way: the room on the trusted links, plus
 * RDMASHIM_RDMA_LINK_CONNS - 1 for each link being made (its maker takes a
 * place), covers them all; or SHIM_LINK_MAKING_MAX are on their way.
 * false: the asking waiter makes a link. A burst so makes about a link
 * per cap; a waiter that made one whenever a link filled up while others
 * were still on their way made about twice the links a burst needs
 * (docs/BENCHMARKS.md, "Making RDMA links"). */
bool shim_rdma_link_room_coming(const struct shim_endpoint *client);
/* S: takes a pending OFFER for the connection t (S's view: local = server),
 * younger than max_age_ns, and its link (with a reference). */
bool shim_rdma_link_claim(const struct shim_tuple *t, unsigned long long max_age_ns, struct rdma_link **link,
			  struct shim_rdma_link_msg *out);
/* Fork handler half: true takes the table's lock, false drops it. */
void shim_rdma_link_atfork(bool prepare);

#endif
