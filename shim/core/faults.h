/*
 * Test-only fault injection: RDMASHIM_TEST_FAULTS=KIND@N[,KIND@N...]
 * (docs/CONFIG.md, docs/TESTING.md; integration/t_faults.sh).
 *
 * N counts attempts: the Nth occurrence of the kind's operation in this
 * process strikes (counted from 1 over every thread and connection, from
 * the process's start; a fork's child goes on from its parent's counts).
 * For qp_error alone N is a byte offset: the strike comes with the post
 * that takes the process's RDMA data bytes (every link's, every
 * connection's, counted as they are posted) to N or past it.
 * A kind may be listed more than once (bell_loss@3,bell_loss@40). Each
 * strike is traced (`fault.injected`, level warn, with its kind, N and
 * where it struck), so that a test tells it from a real failure, and
 * counted (process.stats, "faults").
 *
 * Off unless the variable is set: then a check is one relaxed load of a
 * word that is 0 (shim_fault_hit).
 *
 * The trace line is written by the site (shim_fault_hit is a macro, and
 * needs trace.h there): trace.c uses config.c, which parses with this
 * module, so this module may not call trace.c.
 *
 * The kinds, and what a strike does (the caller's site):
 *   ring_alloc   a shm ring or pair arena allocation or mapping fails
 *                (shim_shm_create, the server's attach of the client's
 *                ring, a pair arena's creation)
 *   bell_loss    a shm bell that a sleeper asked for (its armed word was
 *                taken) is never sent, on the bell line or on TCP
 *   peer_stall   a recv on a channel sleeps SHIM_FAULT_STALL_MS first,
 *                without the connection's lock: the peer's writer finds
 *                its ring full
 *   verify_fail  a check that the peer on a rendezvous or pair channel
 *                owns the TCP connection's other end fails (-EACCES)
 *   rv_silent    a named rendezvous this process connected (server) or
 *                accepted (client) gets nothing more from it: it neither
 *                sends nor reads there until its upgrade's deadline, then
 *                fails its upgrade (timeout)
 *   switch_late  a SWITCH frame goes out SHIM_FAULT_SWITCH_LATE_MS late
 *                (after its SWITCH_AT, so the peer waits at that offset)
 *   stat_kill    the process SIGKILLs itself while it writes a connection's
 *                record in its stats area (the record's sequence count
 *                odd): the area a killed process leaves (statarea.c,
 *                shim_stat_rec_describe)
 * RDMA (shim/transport/rdma/):
 *   cm_timeout   an address or route resolution's answer (ADDR_RESOLVED,
 *                ROUTE_RESOLVED; both count) is dropped as if it never
 *                came: the step runs to RDMASHIM_CM_TIMEOUT_MS and the
 *                attempt gives up with cm_timeout, which the peer's
 *                breaker counts (rdma_setup.c, on_event)
 *   cm_reject    a connect request the client side took (CONNECT_REQUEST)
 *                is rejected with rdma_reject: the server side reads
 *                REJECTED (cm_rejected, counted by its breaker); both
 *                stay on TCP (rdma_setup.c, c_connect_request)
 *   qp_error     N is a byte offset (above): the link's QP is moved to ERR
 *                with ibv_modify_qp right after that post, and nothing
 *                else: the flushed completions are what the reaper finds,
 *                so the real error path breaks the link and every
 *                connection on it fails over (rdma_link.c, link_post)
 *   cq_lost      a completion taken from a link's CQ (send or receive;
 *                each counts) is late, and every later one on that CQ
 *                with it: none is taken for SHIM_FAULT_CQ_LATE_MS, or
 *                until the link breaks (the stall watch breaks it past
 *                RDMASHIM_RDMA_STALL_MS, or a writer that found the ring
 *                full meanwhile spills and fails over); then all of them
 *                are, before any offset is read. Once per link. Never
 *                lost for good: an immediate the HCA acked and the shim
 *                never counts is cq_stall's
 *                (rdma_fail.c, "acked means counted") (rdma_link.c, reap)
 *   cq_stall     the Nth data completion taken from a link's CQ (a
 *                receive an immediate took, counted over every link), and
 *                every later receive completion on that CQ, is lost for
 *                good: never counted, its receive never posted again. The
 *                device acknowledged each one, so the peer's count of what
 *                we got is ahead of ours: either the stall watch
 *                (RDMASHIM_RDMA_STALL_MS, rdma_link.c) sees the peer's tail
 *                words ahead of our count and breaks the link (cq_stall;
 *                the peer waits for our RESUME and resumes right), or a
 *                peer that stopped on purpose (a spill) said where its
 *                bytes start and our count is not there: a reset at both
 *                ends (failover.gap), never wrong bytes. Send completions
 *                are taken as before. Once per link (rdma_link.c, take_wc)
 *   reg_fail     a connection's memory registration (its MR, one per
 *                connection) fails with ENOMEM, as a full memlock limit
 *                makes it: that upgrade gives up, TCP stays
 *                (rdma_qp.c, shim_rdma_conn_memory)
 *   link_qp_lost the Nth connection put on a link (counted over every
 *                link) marks its link: at that connection's first data
 *                post the link's QP goes to ERR (ibv_modify_qp) under
 *                every connection on it at once (rdma_post.c)
 */
#ifndef RDMASHIM_FAULTS_H
#define RDMASHIM_FAULTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

enum shim_fault_kind {
	SHIM_FAULT_RING_ALLOC = 0,
	SHIM_FAULT_BELL_LOSS,
	SHIM_FAULT_PEER_STALL,
	SHIM_FAULT_VERIFY_FAIL,
	SHIM_FAULT_RV_SILENT,
	SHIM_FAULT_SWITCH_LATE,
	SHIM_FAULT_STAT_KILL,
	SHIM_FAULT_CM_TIMEOUT,
	SHIM_FAULT_CM_REJECT,
	SHIM_FAULT_QP_ERROR,
	SHIM_FAULT_CQ_LOST,
	SHIM_FAULT_REG_FAIL,
	SHIM_FAULT_LINK_QP_LOST,
	SHIM_FAULT_CQ_STALL,
	SHIM_FAULT_KINDS,
};

/* Entries one list may hold. */
#define SHIM_FAULTS_MAX 16
/* Largest N: far beyond any count a test reaches, and it keeps the counts
 * clear of wrapping. */
#define SHIM_FAULT_N_MAX (1ull << 62)
/* How long peer_stall sleeps: longer than a blocked writer's spill bound
 * (io_tx.c, IO_SPILL_AFTER_MS, 1 s). */
#define SHIM_FAULT_STALL_MS 2000
/* How late switch_late sends its SWITCH frame. */
#define SHIM_FAULT_SWITCH_LATE_MS 500
/* How long cq_lost holds a link's completions: longer than a blocked
 * writer's spill bound (io_tx.c, IO_SPILL_AFTER_MS, 1 s). */
#define SHIM_FAULT_CQ_LATE_MS 2000

struct shim_fault_entry {
	enum shim_fault_kind kind;
	uint64_t n; /* 1..SHIM_FAULT_N_MAX */
};

struct shim_fault_plan {
	unsigned count;
	struct shim_fault_entry e[SHIM_FAULTS_MAX];
};


/*
 * Parses text (NULL or blank: no faults) into plan. Returns 0, or -EINVAL
 * (bad syntax, unknown kind, too many entries) or -ERANGE (N is 0 or past
 * SHIM_FAULT_N_MAX) with why, a clause for the one line on stderr ("unknown
 * kind 'x'"), written into why; plan is then empty.
 */
int shim_faults_parse(const char *text, struct shim_fault_plan *plan, char *why, size_t whylen);

/* Makes plan this process's faults, counts from zero (once, at start-up;
 * the unit tests call it again). */
void shim_faults_arm(const struct shim_fault_plan *plan);

/* A bit per kind listed in the armed plan. */
extern unsigned shim_faults_armed;

/* Counts one occurrence of kind's operation: its number when it strikes
 * (counted then as injected), else 0. */
uint64_t shim_fault_strike(enum shim_fault_kind kind);

/* Counts len more bytes of kind's operation (qp_error): the offset N of
 * an entry in (bytes before, bytes after] when it strikes, else 0. */
uint64_t shim_fault_strike_bytes(enum shim_fault_kind kind, uint64_t len);

#define SHIM_FAULT_TRACE_(kind, fd, tuple, where, n)                                              \
	SHIM_TRACE(SHIM_TRACE_WARN, "fault.injected", fd, tuple, SHIM_REASON_NONE,                 \
		   "\"kind\":\"%s\",\"n\":%llu,\"where\":\"%s\"", shim_fault_name(kind),            \
		   (unsigned long long)(n), where)

/*
 * Counts one occurrence of kind's operation (an enum shim_fault_kind);
 * true when it must fail here, and then traced (fault.injected) and
 * counted. fd and tuple (may be -1, NULL) name the connection in the
 * trace, where the site in it.
 */
#define shim_fault_hit(kind, fd, tuple, where)                                                     \
	__extension__({                                                                            \
		uint64_t fault_n_ = 0;                                                             \
		if (unlikely(__atomic_load_n(&shim_faults_armed, __ATOMIC_RELAXED) & (1u << (kind))) && \
		    (fault_n_ = shim_fault_strike(kind)) != 0)                                     \
			SHIM_FAULT_TRACE_(kind, fd, tuple, where, fault_n_);                        \
		fault_n_ != 0;                                                                     \
	})

/* shim_fault_hit for a kind whose N is a byte offset: len more bytes. */
#define shim_fault_hit_bytes(kind, len, fd, tuple, where)                                         \
	__extension__({                                                                            \
		uint64_t fault_n_ = 0;                                                             \
		if (unlikely(__atomic_load_n(&shim_faults_armed, __ATOMIC_RELAXED) & (1u << (kind))) && \
		    (fault_n_ = shim_fault_strike_bytes(kind, len)) != 0)                          \
			SHIM_FAULT_TRACE_(kind, fd, tuple, where, fault_n_);                        \
		fault_n_ != 0;                                                                     \
	})

/* Sleeps ms in this thread (a stall or a delay a kind injects). */
void shim_fault_sleep_ms(unsigned ms);

const char *shim_fault_name(enum shim_fault_kind kind);
/* Strikes so far of kind, in this process. */
unsigned long shim_faults_injected(enum shim_fault_kind kind);

#endif
