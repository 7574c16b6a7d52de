/* Per-message stamps for the benchmarks; see msgstamps.h. */
#include "msgstamps.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "trace.h"

/* ---- the accumulator ---- */

unsigned shim_msgstat_bucket(unsigned long long ns)
{
	unsigned e, m;

	/* Below 2 * SUB: one bucket per nanosecond. */
	if (ns < 2 * SHIM_MSGSTAT_SUB)
		return (unsigned)ns;
	e = 63u - (unsigned)__builtin_clzll(ns); /* ns in [2^e, 2^(e+1)), e >= 4 */
	m = (unsigned)(ns >> (e - 3)) & (SHIM_MSGSTAT_SUB - 1);
	if (e - 3 >= SHIM_MSGSTAT_OCTAVES)
		return SHIM_MSGSTAT_BUCKETS - 1;
	return SHIM_MSGSTAT_SUB * (e - 3) + SHIM_MSGSTAT_SUB + m;
}

unsigned long long shim_msgstat_bucket_mid(unsigned b)
{
	unsigned e, m;
	unsigned long long width;

	if (b < 2 * SHIM_MSGSTAT_SUB)
		return b;
	e = (b - SHIM_MSGSTAT_SUB) / SHIM_MSGSTAT_SUB + 3;
	m = b % SHIM_MSGSTAT_SUB;
	width = 1ull << (e - 3);
	return ((unsigned long long)(SHIM_MSGSTAT_SUB + m) << (e - 3)) + width / 2;
}

void shim_msgstat_add(struct shim_msgstat *st, unsigned long long ns)
{
	/* Relaxed: counters read once, at exit, after the threads' calls. */
	__atomic_add_fetch(&st->n, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&st->sum_ns, ns, __ATOMIC_RELAXED);
	__atomic_add_fetch(&st->hist[shim_msgstat_bucket(ns)], 1, __ATOMIC_RELAXED);
}

unsigned long long shim_msgstat_quantile(const struct shim_msgstat *st, double q)
{
	unsigned long long n = __atomic_load_n(&st->n, __ATOMIC_RELAXED), seen = 0, want;

	if (!n)
		return 0;
	want = (unsigned long long)(q * (double)n + 0.999999);
	if (want < 1)
		want = 1;
	for (unsigned b = 0; b < SHIM_MSGSTAT_BUCKETS; b++) {
		seen += __atomic_load_n(&st->hist[b], __ATOMIC_RELAXED);
		if (seen >= want)
			return shim_msgstat_bucket_mid(b);
	}
	return shim_msgstat_bucket_mid(SHIM_MSGSTAT_BUCKETS - 1);
}

/* ---- the figures of the process ---- */

struct table {
	unsigned long long msgs, marks;
	unsigned long long found[SHIM_MSG_FOUND_KINDS];
	struct shim_msgstat st[SHIM_MSG_STATS];
};

/* In .bss: no page of it is touched unless the knob is on. */
static struct table tables[SHIM_TRANSPORT_COUNT][SHIM_MSG_DIRS];

static const char *const stat_names[SHIM_MSG_STATS] = {
	[SHIM_MSG_SHIM] = "shim",	  [SHIM_MSG_REAP] = "reap",	[SHIM_MSG_COPY] = "copy",
	[SHIM_MSG_POST] = "post",	  [SHIM_MSG_COMPLETION] = "completion",
	[SHIM_MSG_BELL] = "bell",	  [SHIM_MSG_FRAMES] = "frames", [SHIM_MSG_SPIN] = "spin",
	[SHIM_MSG_YIELD] = "yield",	  [SHIM_MSG_ARM] = "arm",	[SHIM_MSG_SLEEP] = "sleep",
	[SHIM_MSG_DISARM] = "disarm",	  [SHIM_MSG_DRAIN] = "drain",	[SHIM_MSG_PUBLISH] = "publish",
	[SHIM_MSG_CREDIT] = "credit",	  [SHIM_MSG_RETURN] = "return", [SHIM_MSG_TOTAL] = "total",
	[SHIM_MSG_APP] = "app",		  [SHIM_MSG_TO] = "to",		[SHIM_MSG_AFTER] = "after",
	[SHIM_MSG_WAKE] = "wake",
};
static const char *const found_names[SHIM_MSG_FOUND_KINDS] = { "now", "spin", "arm", "sleep" };

/* ---- one thread's call ---- */

#define FLAG_WAITED 1u
#define FLAG_SPIN_HIT 2u
#define FLAG_WOKE 4u

/* A gap between two calls longer than this is no program's time per
 * message (a pause, the end of a run): not counted as "app". */
#define APP_MAX_NS 1000000000ull

struct call {
	bool open;
	int transport; /* -1 until the call's first channel op */
	enum shim_msg_dir dir;
	unsigned flags, marks;
	enum shim_msg_found found;
	unsigned long long start_ns, last_ns, app_ns, posted_ns, seen_ns, wake_ns;
	unsigned long long ph[SHIM_MSG_PHASES];
};

static SHIM_TLS struct call cur;
static SHIM_TLS unsigned long long last_return_ns;

void shim_msgstamp_begin(void)
{
	unsigned long long now = shim_now_ns();

	memset(&cur, 0, sizeof(cur));
	cur.open = true;
	cur.transport = -1;
	cur.start_ns = cur.last_ns = now;
	if (last_return_ns && now - last_return_ns < APP_MAX_NS)
		cur.app_ns = now - last_return_ns;
}

void shim_msgstamp_mark(enum shim_msg_phase ph)
{
	unsigned long long now;

	if (!cur.open)
		return;
	now = shim_now_ns();
	cur.ph[ph] += now - cur.last_ns;
	cur.last_ns = now;
	cur.marks++;
}

void shim_msgstamp_op(enum shim_transport t, enum shim_msg_dir dir)
{
	if (!cur.open)
		return;
	shim_msgstamp_mark(SHIM_MSG_SHIM);
	if (cur.transport < 0) {
		cur.transport = (int)t;
		cur.dir = dir;
	}
}

void shim_msgstamp_posted(void)
{
	if (cur.open && !cur.posted_ns)
		cur.posted_ns = cur.last_ns;
}

void shim_msgstamp_seen(void)
{
	if (!cur.open || cur.seen_ns)
		return;
	cur.seen_ns = cur.last_ns;
	cur.found = (cur.flags & FLAG_WOKE)       ? SHIM_MSG_FOUND_SLEEP
		    : (cur.flags & FLAG_SPIN_HIT) ? SHIM_MSG_FOUND_SPIN
		    : (cur.flags & FLAG_WAITED)   ? SHIM_MSG_FOUND_ARM
						  : SHIM_MSG_FOUND_NOW;
}

void shim_msgstamp_note(enum shim_msg_note note)
{
	if (!cur.open)
		return;
	switch (note) {
	case SHIM_MSG_WAITED:
		cur.flags |= FLAG_WAITED;
		break;
	case SHIM_MSG_SPIN_HIT:
		cur.flags |= FLAG_SPIN_HIT;
		break;
	case SHIM_MSG_WOKE:
		cur.flags |= FLAG_WOKE;
		cur.wake_ns = cur.last_ns;
		break;
	}
}

void shim_msgstamp_end(long long rc)
{
	unsigned long long now = shim_now_ns();
	unsigned long long mark;
	struct table *tb;

	if (!cur.open)
		return;
	cur.open = false;
	last_return_ns = now;
	if (cur.transport < 0 || rc <= 0)
		return;
	tb = &tables[cur.transport][cur.dir];
	cur.ph[SHIM_MSG_RETURN] += now - cur.last_ns;
	for (unsigned p = 0; p < SHIM_MSG_PHASES; p++)
		if (cur.ph[p])
			shim_msgstat_add(&tb->st[p], cur.ph[p]);
	shim_msgstat_add(&tb->st[SHIM_MSG_TOTAL], now - cur.start_ns);
	if (cur.app_ns)
		shim_msgstat_add(&tb->st[SHIM_MSG_APP], cur.app_ns);
	mark = cur.dir == SHIM_MSG_TX ? cur.posted_ns : cur.seen_ns;
	if (mark) {
		shim_msgstat_add(&tb->st[SHIM_MSG_TO], mark - cur.start_ns);
		shim_msgstat_add(&tb->st[SHIM_MSG_AFTER], now - mark);
	}
	if (cur.dir == SHIM_MSG_RX && mark) {
		if (cur.wake_ns && cur.wake_ns <= mark)
			shim_msgstat_add(&tb->st[SHIM_MSG_WAKE], mark - cur.wake_ns);
		__atomic_add_fetch(&tb->found[cur.found], 1, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&tb->marks, cur.marks, __ATOMIC_RELAXED);
	__atomic_add_fetch(&tb->msgs, 1, __ATOMIC_RELAXED);
}

/* ---- the trace ---- */

/* What one clock read costs here, in ns: a mark is one. */
static unsigned long long clock_cost_ns(void)
{
	unsigned long long t0 = shim_now_ns(), t1;

	for (int i = 0; i < 1000; i++)
		t1 = shim_now_ns();
	return (t1 - t0) / 1000;
}

bool shim_msgstamps_format(enum shim_transport t, enum shim_msg_dir dir, enum shim_msg_part part, char *buf,
			   size_t len)
{
	const struct table *tb = &tables[t][dir];
	unsigned long long msgs = __atomic_load_n(&tb->msgs, __ATOMIC_RELAXED);
	size_t off = 0;
	static const unsigned spans[] = { SHIM_MSG_TOTAL, SHIM_MSG_TO, SHIM_MSG_AFTER, SHIM_MSG_WAKE, SHIM_MSG_APP };
	/* In the order of a message's life. */
	static const unsigned phases[] = {
		SHIM_MSG_SHIM,	SHIM_MSG_REAP,	 SHIM_MSG_COPY,	  SHIM_MSG_POST,  SHIM_MSG_PUBLISH, SHIM_MSG_CREDIT,
		SHIM_MSG_COMPLETION, SHIM_MSG_BELL, SHIM_MSG_FRAMES, SHIM_MSG_SPIN, SHIM_MSG_YIELD, SHIM_MSG_ARM,
		SHIM_MSG_SLEEP, SHIM_MSG_DISARM, SHIM_MSG_DRAIN, SHIM_MSG_RETURN,
	};
	const unsigned *order = part == SHIM_MSG_PART_SPANS ? spans : phases;
	unsigned count = part == SHIM_MSG_PART_SPANS ? ARRAY_SIZE(spans) : ARRAY_SIZE(phases);

	if (!len)
		return false;
	buf[0] = '\0';
	if (!msgs)
		return false;
	shim_trace_put(buf, len, &off, "\"transport\":\"%s\",\"dir\":\"%s\",\"part\":\"%s\",\"msgs\":%llu",
	    shim_transport_name(t), dir == SHIM_MSG_TX ? "tx" : "rx",
	    part == SHIM_MSG_PART_SPANS ? "spans" : "phases", msgs);
	if (part == SHIM_MSG_PART_SPANS) {
		shim_trace_put(buf, len, &off, ",\"marks\":%.1f,\"clock_ns\":%llu",
		    (double)__atomic_load_n(&tb->marks, __ATOMIC_RELAXED) / (double)msgs, clock_cost_ns());
		if (dir == SHIM_MSG_RX) {
			const char *sep = ",\"found\":{";

			for (unsigned k = 0; k < SHIM_MSG_FOUND_KINDS; k++) {
				if (!shim_trace_put(buf, len, &off, "%s\"%s\":%llu", sep, found_names[k],
					 __atomic_load_n(&tb->found[k], __ATOMIC_RELAXED)))
					return true;
				sep = ",";
			}
			if (!shim_trace_put(buf, len, &off, "}"))
				return true;
		}
	}
	/* Each figure: [messages that had it, mean ns over them, p50 ns]. */
	const char *sep = ",\"ns\":{";
	size_t before = off;

	for (unsigned i = 0; i < count; i++) {
		const struct shim_msgstat *st = &tb->st[order[i]];
		unsigned long long n = __atomic_load_n(&st->n, __ATOMIC_RELAXED);

		if (!n)
			continue;
		/* Room kept for the closing brace. */
		if (!shim_trace_put(buf, len - 1, &off, "%s\"%s\":[%llu,%llu,%llu]", sep, stat_names[order[i]], n,
			 __atomic_load_n(&st->sum_ns, __ATOMIC_RELAXED) / n, shim_msgstat_quantile(st, 0.5)))
			break;
		sep = ",";
	}
	if (off != before)
		shim_trace_put(buf, len, &off, "}");
	return true;
}

void shim_msgstamps_trace(void)
{
	/* The line's head (time, pid, level, event) takes the rest. */
	char body[SHIM_TRACE_LINE_MAX - 160];

	for (unsigned t = 0; t < SHIM_TRANSPORT_COUNT; t++)
		for (unsigned d = 0; d < SHIM_MSG_DIRS; d++)
			for (unsigned p = 0; p < SHIM_MSG_PARTS; p++)
				if (shim_msgstamps_format((enum shim_transport)t, (enum shim_msg_dir)d,
							  (enum shim_msg_part)p, body, sizeof(body)))
					SHIM_TRACE(SHIM_TRACE_WARN, "msg.stamps", -1, NULL, SHIM_REASON_NONE, "%s",
						   body);
}

void shim_msgstamps_reset(void)
{
	memset(tables, 0, sizeof(tables));
	memset(&cur, 0, sizeof(cur));
	last_return_ns = 0;
}
