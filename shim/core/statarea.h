/*
 * The live stats area: one file per process, RDMASHIM_STATS_DIR/<uid>/
 * <pid>-<start>.stat, mapped shared, that `rdmashim stat` maps read-only.
 *
 * Layout: a header of SHIM_STAT_HDR_SIZE bytes (the process, its reason
 * counts, what its closed connections carried) and then fixed-size
 * records, one per tracked connection, in segments the writer maps one by
 * one as the file grows, so that a record never moves while the process
 * lives. hdr.nrec says how many records the file holds; a reader maps what
 * fstat says and reads records below both.
 *
 * Two kinds of fields, two rules:
 *  - a record's description (address, path, state, reason, qpn) and the
 *    header's identity are written under a sequence count (seqlock): odd
 *    while the writer is in the middle. Writers of one record are the
 *    holders of its connection's lock, so one at a time.
 *  - counters are 64-bit, each written by one writer at a time (the
 *    connection's lock holder) as a relaxed load and store, read with a
 *    relaxed load: never torn (aligned 64-bit), never a syscall, no lock
 *    prefix on the data path. A reader sees each counter whole but not
 *    all of them at one instant.
 * A SIGKILLed process may leave a record odd for good: readers try a few
 * times, then report it inconsistent with the values they saw.
 *
 * Records of other kinds share the segments (statlink.h: a queue pair's),
 * each marked by a d.state past SHIM_STAT_STATE_COUNT: a reader skips a
 * state it does not know.
 */
#ifndef RDMASHIM_STATAREA_H
#define RDMASHIM_STATAREA_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "tuple.h"

#define SHIM_STAT_MAGIC "RSHSTAT1"
#define SHIM_STAT_VERSION 2
/* The header's room: struct shim_stat_hdr in the first 16 KiB, then the
 * A/B area (struct shim_stat_ab) at SHIM_STAT_AB_OFF. The file is sparse:
 * a process with no A/B test never touches the A/B pages. */
#define SHIM_STAT_AB_OFF 16384
#define SHIM_STAT_HDR_SIZE (SHIM_STAT_AB_OFF + 856064)
#define SHIM_STAT_REC_SIZE 1024
#define SHIM_STAT_REASONS 64
#define SHIM_STAT_ZC 16   /* room for enum shim_zc_stat (stats.h) */
#define SHIM_STAT_PATHS 3 /* enum shim_transport: tcp, shm, rdma */
/* Log-linear round-trip histogram: bucket 0 holds [0, 320 ns), then four
 * buckets per power of two from 256 ns; the last holds everything above. */
#define SHIM_STAT_RTT_BUCKETS 88
/* One round trip in this many is timed (shim/conn/sockstat.h). */
#define SHIM_STAT_RTT_EVERY 16u
#define SHIM_STAT_FIRST_SEG 64u /* records in the first segment; each later doubles the file */
#define SHIM_STAT_MAX_SEGS 24

enum shim_stat_state {
	SHIM_STAT_FREE = 0,   /* no connection in this record */
	SHIM_STAT_CONNECTING, /* nonblocking connect in progress */
	SHIM_STAT_TCP,        /* on TCP, may still upgrade */
	SHIM_STAT_UPGRADING,  /* a side channel is being negotiated */
	SHIM_STAT_SWITCHING,  /* one direction on the side channel */
	SHIM_STAT_SWITCHED,   /* both directions on the side channel */
	SHIM_STAT_FALLBACK,   /* was on a side channel, back on TCP */
	SHIM_STAT_KERNEL,     /* stays on TCP, its calls go straight to the kernel (not counted) */
	SHIM_STAT_SHADOW,     /* RDMASHIM_MODE=shadow: negotiated up to the switch, stays on TCP */
	SHIM_STAT_STATE_COUNT,
};

const char *shim_stat_state_name(unsigned state);

/* What a record describes; written under the record's sequence count. */
struct shim_stat_desc {
	int32_t fd;
	uint8_t path;  /* enum shim_transport */
	uint8_t state; /* enum shim_stat_state */
	uint8_t role;  /* 0 client, 1 server */
	uint8_t arm;   /* enum shim_stat_arm_id: its A/B arm, 0 with no A/B test */
	uint16_t reason; /* enum shim_reason: the last decision about it */
	uint16_t pad1;
	uint32_t qpn; /* RDMA queue pair number, 0 otherwise */
	uint32_t pad2;
	struct shim_endpoint local, peer;
};

struct shim_stat_rec {
	uint64_t seq;           /* odd while the description is written */
	uint64_t gen;           /* which connection of this record (alloc count) */
	uint64_t born_unix_ns;  /* CLOCK_REALTIME at tracking: any reader's clock */
	struct shim_stat_desc d;
	/* Counters: [path][0 sent, 1 received]. */
	uint64_t bytes[SHIM_STAT_PATHS][2];
	uint64_t msgs[SHIM_STAT_PATHS][2];
	uint64_t rtt[SHIM_STAT_RTT_BUCKETS]; /* samples on the current path */
	uint64_t rtt_path;                   /* the path the samples belong to */
	uint8_t pad[SHIM_STAT_REC_SIZE - 8 * 3 - sizeof(struct shim_stat_desc) - 8 * 4 * SHIM_STAT_PATHS -
		    8 * SHIM_STAT_RTT_BUCKETS - 8];
};
_Static_assert(sizeof(struct shim_stat_rec) == SHIM_STAT_REC_SIZE, "a record is SHIM_STAT_REC_SIZE bytes");

struct shim_stat_hdr {
	char magic[8];
	uint32_t version, hdr_size, rec_size, pad0;
	uint64_t seq; /* identity below: written once, at create and after a fork */
	int32_t pid;
	uint32_t uid;
	uint64_t start_ticks; /* /proc/<pid>/stat field 22: names the process across pid reuse */
	uint64_t started_unix_ns;
	char comm[32];
	uint64_t nrec;  /* records the file holds (release: the file is that long) */
	uint64_t conns; /* connections ever tracked */
	uint64_t reasons[SHIM_STAT_REASONS];
	/* Of connections whose records were freed (or whose samples moved to
	 * another path): what they carried, by path, atomic adds. */
	uint64_t closed_bytes[SHIM_STAT_PATHS][2];
	uint64_t closed_msgs[SHIM_STAT_PATHS][2];
	uint64_t closed_rtt[SHIM_STAT_PATHS][SHIM_STAT_RTT_BUCKETS];
	/* Zero copy's counters, by enum shim_zc_stat (stats.h), atomic adds. */
	uint64_t zc[SHIM_STAT_ZC];
};
_Static_assert(sizeof(struct shim_stat_hdr) <= SHIM_STAT_AB_OFF, "the header fits its room");

/*
 * A/B (RDMASHIM_AB_PERCENT below 100): each connection belongs to an arm
 * by the 4-tuple hash that decides whether it may upgrade, the same at
 * both ends. Per arm: connections, bytes of closed ones, fallbacks,
 * errors; and a ring of one-second intervals, each holding a round-trip
 * histogram per arm, for `rdmashim stat --ab` to bootstrap over.
 *
 * Writers are every thread with a connection, so the interval counters
 * are atomic adds (only under an A/B test: one locked add per round trip).
 * A slot is reused for a new second by the one writer that wins its
 * sequence count (odd while it zeroes the slot); readers copy a slot under
 * that count and use only seconds that are over, so adds still arriving
 * in the current second never matter.
 */
enum shim_stat_arm_id {
	SHIM_STAT_ARM_NONE = 0,
	SHIM_STAT_ARM_ACCEL,   /* the hash selected it: it may upgrade */
	SHIM_STAT_ARM_CONTROL, /* the hash excluded it: stays on TCP */
};
#define SHIM_STAT_ARMS 2 /* index: arm id - 1 */
#define SHIM_STAT_AB_INTERVALS 600

struct shim_stat_ab_slot {
	uint64_t seq; /* odd while the slot is zeroed for a new second */
	uint64_t sec; /* the CLOCK_REALTIME second it counts; 0 never used */
	uint64_t hist[SHIM_STAT_ARMS][SHIM_STAT_RTT_BUCKETS];
};

struct shim_stat_arm {
	uint64_t conns;           /* connections tracked in this arm */
	uint64_t closed_bytes[2]; /* sent, received by its closed connections */
	uint64_t fallbacks;       /* were on a side channel, went back to TCP */
	uint64_t errors;          /* reset by the shim, or a local fault in the upgrade */
	uint64_t dropped;         /* round trips not counted: their slot was being reused */
	uint64_t pad[2];
};

struct shim_stat_ab {
	uint64_t percent; /* RDMASHIM_AB_PERCENT; 0 in the area: no A/B test (set once) */
	uint64_t active;  /* 1 once an A/B test counts here */
	uint64_t pad[6];
	struct shim_stat_arm arm[SHIM_STAT_ARMS];
	struct shim_stat_ab_slot slot[SHIM_STAT_AB_INTERVALS];
};
_Static_assert(SHIM_STAT_AB_OFF + sizeof(struct shim_stat_ab) <= SHIM_STAT_HDR_SIZE, "the A/B area fits");

/* The bucket of a round trip of ns nanoseconds, and a bucket's upper bound. */
static inline unsigned shim_stat_rtt_bucket(uint64_t ns)
{
	unsigned o, idx;

	if (ns < 256)
		return 0;
	o = 63u - (unsigned)__builtin_clzll(ns);
	idx = (o - 8) * 4 + (unsigned)((ns >> (o - 2)) & 3);
	return idx < SHIM_STAT_RTT_BUCKETS ? idx : SHIM_STAT_RTT_BUCKETS - 1;
}

static inline uint64_t shim_stat_rtt_upper_ns(unsigned bucket)
{
	unsigned o = 8 + bucket / 4, sub = bucket % 4;

	return (uint64_t)(4 + sub + 1) << (o - 2);
}

/* One writer at a time (the connection's lock): a plain add, stored whole. */
static inline void shim_stat_add(uint64_t *p, uint64_t n)
{
	__atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* The data path: n bytes in one call, way 0 sent, 1 received. */
static inline void shim_stat_io(struct shim_stat_rec *r, unsigned path, unsigned way, uint64_t n)
{
	shim_stat_add(&r->bytes[path][way], n);
	shim_stat_add(&r->msgs[path][way], 1);
}

/* ---- the writer: this process's own area ---- */

/* Seqlock write side. The caller is the one writer of this count. */
static inline void shim_stat_seq_begin(uint64_t *seq)
{
	__atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	/* release fence: the odd count is visible before any field written
	 * after it; pairs with the acquire fence in shim_stat_read_rec()
	 * (statread.c) between its field loads and its second count load. */
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void shim_stat_seq_end(uint64_t *seq)
{
	/* release: the fields are in place before the count is even again;
	 * pairs with the acquire load of the first count in
	 * shim_stat_read_rec(). */
	__atomic_store_n(seq, __atomic_load_n(seq, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
}


/* A record for a connection just tracked, described by d (NULL: stats off
 * or the area could not be made; the caller counts nothing then). Makes
 * the area at the first call. */
struct shim_stat_rec *shim_stat_rec_new(const struct shim_stat_desc *d);
/* A new description; the caller holds the connection's lock. */
void shim_stat_rec_describe(struct shim_stat_rec *r, const struct shim_stat_desc *d);
/* A round trip of ns on path: one sample (the caller holds the lock). A
 * path other than the samples' own moves those to the header first. */
void shim_stat_rec_rtt(struct shim_stat_rec *r, unsigned path, uint64_t ns);
/* The connection is gone: its counts go to the header, the record is free. */
void shim_stat_rec_free(struct shim_stat_rec *r);
/* For other kinds of record (statlink.h): a free record whose gen and
 * birth are set, its description still free (NULL: stats off, no area or
 * no room), and a record given back as it is (nothing folded). */
struct shim_stat_rec *shim_stat_rec_take(void);
void shim_stat_rec_give_back(struct shim_stat_rec *r);

/* A/B: a connection of arm (enum shim_stat_arm_id) tracked; a round trip
 * of ns ending at now_ns (CLOCK_MONOTONIC, shim_now_ns()); a connection
 * that fell back or met an error (each counted once per connection). */
void shim_stat_ab_conn(unsigned arm);
void shim_stat_ab_rtt(unsigned arm, uint64_t now_ns, uint64_t ns);
void shim_stat_ab_fallback(unsigned arm);
void shim_stat_ab_error(unsigned arm);

/* A reason counted (stats.h); before the area exists nothing is lost:
 * the area takes the counts so far when it is made. */
void shim_stat_reason(unsigned reason);
/* A zero-copy counter (enum shim_zc_stat) grew by n; the same rule. */
void shim_stat_zc(unsigned what, uint64_t n);

/* Normal exit: the file goes. Before exec: the file goes (the new image
 * makes its own if it runs the shim). */
void shim_statarea_exit(void);
void shim_statarea_before_exec(void);
/* The process sandboxes itself (bypass.c): the file goes now, and no call
 * on disk is made for the area again; counting goes on in memory. */
void shim_statarea_leave(void);
/* A fork's child: the parent's file is not its own. It gets a file of its
 * own holding a copy, mapped where the parent's was, so that the records
 * of the connections it inherited stay where they are. */
void shim_statarea_atfork_child(void);

/* For tests: make the area under dir now (0 or a negative errno), and
 * what the file's name and path are. */
int shim_statarea_open_in(const char *dir);
const char *shim_statarea_path(void);
void shim_statarea_reset_for_test(void);

/* The directory of uid's areas under base, made if need be (0700), and
 * checked: a directory, not a link, uid's own, no access for others. An
 * open O_DIRECTORY fd or a negative errno. */
int shim_stat_dir_open(const char *base, uid_t uid, bool create);
/* /proc/<pid>/stat's start time (field 22), or 0. */
uint64_t shim_stat_start_ticks(pid_t pid);

#endif
