/*
 * Per-message stamps (RDMASHIM_TEST_MSGSTAMPS=1, testing only): where the
 * time of each send and each receive on a switched connection goes, by
 * phase, kept in memory and written into the trace at exit as
 * "msg.stamps" lines at level warn (shim_msgstamps_trace).
 *
 * Why: issue 34 asks where a message's time goes on the shm and RDMA
 * paths, and perf does not sample usefully inside the emulated VM
 * (integration/vm/guest-rdma-profile.sh). integration/bench/msg_breakdown.sh
 * reads these lines.
 *
 * How: a data call's exported wrapper opens a record for its thread
 * (shim_msgstamp_begin); each mark closes the interval since the previous
 * mark and adds it to the phase it names ("what this thread did since the
 * last mark"); the wrapper's return closes the last one as "return"
 * (shim_msgstamp_end). The phases of one call therefore add up to its
 * total exactly. A call that moved no byte on a channel (TCP, a young
 * connection, an error) leaves nothing. Times are CLOCK_MONOTONIC
 * nanoseconds (shim_now_ns); each mark costs one clock read, which the
 * trace line reports (clock_ns) so that a reader can judge it.
 *
 * Off (the default), every mark is one load of shim_cfg and a branch not
 * taken; nothing of this file's memory (.bss, thread-local) is touched.
 */
#ifndef RDMASHIM_MSGSTAMPS_H
#define RDMASHIM_MSGSTAMPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "config.h"

/* What a thread did between two marks. The names are the trace's. */
enum shim_msg_phase {
	SHIM_MSG_SHIM = 0,   /* the shim's own path (lookup, lock, checks) */
	SHIM_MSG_REAP,       /* rdma: polling the CQ, taking the peer's credits */
	SHIM_MSG_COPY,       /* the copy into the ring/staging (tx) or out (rx) */
	SHIM_MSG_POST,       /* tx: ibv_post_send (rdma), the tail's release store (shm) */
	SHIM_MSG_COMPLETION, /* tx rdma: waiting for the tail's completion before a bell */
	SHIM_MSG_BELL,       /* whether the peer waits, and a bell on the line (shm: send(2)) */
	SHIM_MSG_FRAMES,     /* a shim frame (a bell) sent on TCP: send(2) */
	SHIM_MSG_SPIN,       /* the wait engine's looks at the channel */
	SHIM_MSG_YIELD,      /* sched_yield(2) between looks */
	SHIM_MSG_ARM,        /* arming for a bell (rdma: ibv_req_notify_cq, credits) */
	SHIM_MSG_SLEEP,      /* poll(2) on TCP and the bell line, from arm to wake */
	SHIM_MSG_DISARM,     /* disarming (rdma: the completion channel's events; shm: the line's bells) */
	SHIM_MSG_DRAIN,      /* bells read off TCP: recv(2) */
	SHIM_MSG_PUBLISH,    /* rx shm: the head's release store */
	SHIM_MSG_CREDIT,     /* rx: credits for the producer (rdma: a WRITE and its completion) */
	SHIM_MSG_RETURN,     /* the last mark to the wrapper's return */
	SHIM_MSG_PHASES,
};

/* Spans over a message, beside the phases (which add up to "total"). */
enum shim_msg_span {
	SHIM_MSG_TOTAL = SHIM_MSG_PHASES, /* the wrapper's entry to its return */
	SHIM_MSG_APP,   /* the program's own time: this thread's previous data call's return to this entry */
	SHIM_MSG_TO,    /* tx: entry to post done; rx: entry to data seen */
	SHIM_MSG_AFTER, /* tx: post done to return; rx: data seen to return */
	SHIM_MSG_WAKE,  /* rx after a sleep: the wake-up to data seen */
	SHIM_MSG_STATS,
};

/* How a receive found its data. */
enum shim_msg_found {
	SHIM_MSG_FOUND_NOW = 0, /* at its first look */
	SHIM_MSG_FOUND_SPIN,    /* by a look of the wait engine's spin */
	SHIM_MSG_FOUND_ARM,     /* by the re-check after an arm, with no sleep */
	SHIM_MSG_FOUND_SLEEP,   /* after a sleep */
	SHIM_MSG_FOUND_KINDS,
};

/* What the wait engine tells about the call (shim_msgstamp_note). */
enum shim_msg_note {
	SHIM_MSG_WAITED,   /* it entered the wait engine */
	SHIM_MSG_SPIN_HIT, /* a spin's look found the channel ready */
	SHIM_MSG_WOKE,     /* a sleep ended: now is the wake-up */
};

enum shim_msg_dir { SHIM_MSG_TX = 0, SHIM_MSG_RX, SHIM_MSG_DIRS };

/*
 * One figure's accumulator: count, sum and a histogram with 8 buckets per
 * power of two (the quantiles it gives are within 1/16 of the truth).
 */
#define SHIM_MSGSTAT_SUB 8
#define SHIM_MSGSTAT_OCTAVES 40 /* up to 2^43 ns, over two hours */
#define SHIM_MSGSTAT_BUCKETS (SHIM_MSGSTAT_SUB * (SHIM_MSGSTAT_OCTAVES + 1))
struct shim_msgstat {
	unsigned long long n, sum_ns;
	unsigned hist[SHIM_MSGSTAT_BUCKETS];
};

/* Adds one value (thread-safe: relaxed atomics). */
void shim_msgstat_add(struct shim_msgstat *st, unsigned long long ns);
/* The q-quantile (0 < q <= 1) in ns, from the histogram: the middle of
 * its bucket; 0 for an empty accumulator. */
unsigned long long shim_msgstat_quantile(const struct shim_msgstat *st, double q);
/* The bucket of a value, and the middle of a bucket (exposed for tests). */
unsigned shim_msgstat_bucket(unsigned long long ns);
unsigned long long shim_msgstat_bucket_mid(unsigned b);

/* The calls behind the macros below. */
void shim_msgstamp_begin(void);
void shim_msgstamp_op(enum shim_transport t, enum shim_msg_dir dir);
void shim_msgstamp_mark(enum shim_msg_phase ph);
void shim_msgstamp_posted(void);
void shim_msgstamp_seen(void);
void shim_msgstamp_note(enum shim_msg_note note);
void shim_msgstamp_end(long long rc);

/*
 * The marks. BEGIN and END are the exported wrappers' (interpose_io.c);
 * OP at the start of a channel's send or recv (the interval before it is
 * the shim's path; it says which transport and direction the call's
 * figures go to); MARK at the end of a phase; POSTED right after the post
 * of a send's bytes, SEEN where a receive finds its bytes, both after the
 * MARK that closes their phase (the transports mark where they see bytes;
 * io_rx.c's steps mark again for any receive that returns data, and the
 * first mark wins, so each such receive is counted once); NOTE from the
 * wait engine.
 */
#define SHIM_MSGSTAMP_BEGIN()                                     \
	do {                                                      \
		if (unlikely(shim_cfg.test_msgstamps))            \
			shim_msgstamp_begin();                    \
	} while (0)
#define SHIM_MSGSTAMP_OP(t, dir)                                  \
	do {                                                      \
		if (unlikely(shim_cfg.test_msgstamps))            \
			shim_msgstamp_op(t, dir);                 \
	} while (0)
#define SHIM_MSGSTAMP_MARK(ph)                                    \
	do {                                                      \
		if (unlikely(shim_cfg.test_msgstamps))            \
			shim_msgstamp_mark(ph);                   \
	} while (0)
#define SHIM_MSGSTAMP_POSTED()                                    \
	do {                                                      \
		if (unlikely(shim_cfg.test_msgstamps))            \
			shim_msgstamp_posted();                   \
	} while (0)
#define SHIM_MSGSTAMP_SEEN()                                      \
	do {                                                      \
		if (unlikely(shim_cfg.test_msgstamps))            \
			shim_msgstamp_seen();                     \
	} while (0)
#define SHIM_MSGSTAMP_NOTE(note)                                  \
	do {                                                      \
		if (unlikely(shim_cfg.test_msgstamps))            \
			shim_msgstamp_note(note);                 \
	} while (0)
#define SHIM_MSGSTAMP_END(rc)                                     \
	do {                                                      \
		if (unlikely(shim_cfg.test_msgstamps))            \
			shim_msgstamp_end(rc);                    \
	} while (0)

/*
 * Writes two "msg.stamps" lines per transport and direction that carried
 * messages (at exit): "part":"spans" (the spans, how receives found their
 * data, the clock's cost) and "part":"phases". Two, so that each fits the
 * trace's line whole with every figure at its widest.
 */
enum shim_msg_part { SHIM_MSG_PART_SPANS = 0, SHIM_MSG_PART_PHASES, SHIM_MSG_PARTS };
void shim_msgstamps_trace(void);

/* The body of one such line (without the trace's head), into buf; false
 * if there is nothing for that transport and direction. Stops at the last
 * whole member that fits. For the trace and the tests. */
bool shim_msgstamps_format(enum shim_transport t, enum shim_msg_dir dir, enum shim_msg_part part, char *buf,
			   size_t len);

/* Forgets every figure (tests). */
void shim_msgstamps_reset(void);

#endif
