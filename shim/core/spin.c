/* Adaptive busy polling; see spin.h for the rules and why. */
#include "spin.h"

#include <sys/resource.h>
#include <unistd.h>

#include "config.h"
#include "clock.h"
#include "compiler.h"
#include "stats.h"
#include "trace.h"

static unsigned spinners;     /* threads in a spin now */
static unsigned spin_cpus;    /* 0: not read yet */
static unsigned crowded_seen; /* 1 after a crowded wait, until a spin starts */
static uint8_t prior_level;   /* the back-off level a new waiter starts at */
/* Contention (spin.h): no spin before contended_until; the hold that set
 * it, doubled while spins keep losing their core. */
static unsigned long long contended_until, contended_hold;
/* The process's spin count (runs) at the last slice a spin lost. */
static unsigned long steal_runs;
static bool watch_preemption = true;

#define CONTENDED_FIRST_NS (10ull * 1000 * 1000)
#define CONTENDED_MAX_NS (1000ull * 1000 * 1000)

/*
 * The cost of a wake-up, as this process sees it (spin.h, "slow wake"):
 * the shortest sleep that ended with data, over this window of WAKE_WINDOW
 * such sleeps and the one before (so a load that went is forgotten), and
 * never more than WAKE_MAX_NS (an idle peer's sleeps say nothing about
 * wake-ups). 0: none seen yet.
 */
#define WAKE_WINDOW 64
#define WAKE_MAX_NS (4ull * 1000 * 1000)
static unsigned long long wake_cur, wake_prev;
static unsigned wake_n;
/* When this thread last went to sleep in a wait (shim_spin_sleeping). */
static __thread unsigned long long sleep_start_ns;

void shim_spin_reset_prior(void)
{
	__atomic_store_n(&wake_cur, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&wake_prev, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&prior_level, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&contended_until, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&contended_hold, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&steal_runs, 0, __ATOMIC_RELAXED);
}

void shim_spin_watch_preemption(bool on)
{
	__atomic_store_n(&watch_preemption, on, __ATOMIC_RELAXED);
}

void shim_spin_set_cpus(unsigned cpus)
{
	__atomic_store_n(&spin_cpus, cpus, __ATOMIC_RELAXED);
}

unsigned shim_spin_spinners(void)
{
	return __atomic_load_n(&spinners, __ATOMIC_RELAXED);
}

static unsigned cpus(void)
{
	unsigned n = __atomic_load_n(&spin_cpus, __ATOMIC_RELAXED);

	if (!n) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);

		n = c > 0 ? (unsigned)c : 1;
		__atomic_store_n(&spin_cpus, n, __ATOMIC_RELAXED);
	}
	return n;
}

#define LOAD(f) __atomic_load_n(&(f), __ATOMIC_RELAXED)
#define STORE(f, v) __atomic_store_n(&(f), (v), __ATOMIC_RELAXED)

static unsigned long long budget_ns(void)
{
	return (unsigned long long)shim_cfg.spin_us * 1000ull;
}

/* A sleep of ns (from its start to its end with data). Threads race on
 * these relaxed words: the worst outcome is a sample lost. */
static void wake_sample(unsigned long long ns)
{
	unsigned long long cur = LOAD(wake_cur);

	if (ns > WAKE_MAX_NS)
		ns = WAKE_MAX_NS;
	if (!ns)
		ns = 1;
	if (!cur || ns < cur)
		STORE(wake_cur, ns);
	if (__atomic_add_fetch(&wake_n, 1, __ATOMIC_RELAXED) % WAKE_WINDOW == 0) {
		STORE(wake_prev, LOAD(wake_cur));
		STORE(wake_cur, 0);
	}
}

void shim_spin_sleeping(void)
{
	sleep_start_ns = shim_now_ns();
}

/* The wait ends with data: a wake-up's sample, if this thread slept since
 * from_ns. Only a sleep is one: a look that found the data before any
 * sleep (during an arm: an RDMA arm is a round trip) costs no wake-up,
 * and taking it for one made the estimate say "cheap" under emulation. */
static void wake_sample_since(unsigned long long from_ns, unsigned long long now)
{
	if (sleep_start_ns >= from_ns && sleep_start_ns <= now)
		wake_sample(now - sleep_start_ns);
}

unsigned long long shim_spin_wake_ns(void)
{
	unsigned long long cur = LOAD(wake_cur), prev = LOAD(wake_prev);

	if (!cur || (prev && prev < cur))
		return prev;
	return cur;
}

/* Waking costs more than the whole spin (spin.h, "slow wake"). */
static bool slow_wake(void)
{
	return shim_spin_wake_ns() > budget_ns();
}

/*
 * A sleep that ended with data this soon after the spin (or the skipped
 * spin) would have begun: spinning there nearly paid. With cheap wake-ups,
 * the budget itself. With slow ones the data may come a chain of wake-ups
 * late: ours, and the peer's own when it slept too, each up to a scheduler
 * tick under emulation (WAKE_MAX_NS); a bound tied to the shortest sleep
 * seen was crossed whenever both ends slept at once, and then held them
 * there (the VM's speed guard: 1.9 ms round trips in one round of three).
 * Only data later than that says the peer was idle.
 */
static unsigned long long near_ns(void)
{
	return slow_wake() ? budget_ns() + 2 * WAKE_MAX_NS : budget_ns();
}

/*
 * How long this spin may run (spin.h, slow wake): the budget, or, where a
 * wake-up costs more than the whole budget, as long as a wake-up costs
 * (at most SLOW_SPIN_MAX_NS): a spin that stops before the data comes then
 * pays a wake-up on top of the wait, so polling up to that cost never
 * takes longer than sleeping would have. The estimate is the shortest
 * wake-up seen; a typical one costs several times that (SLOW_SPIN_WAKES):
 * spins as long as the shortest still ran out often under emulation, and
 * each such sleep slowed the peer's next post (docs/BENCHMARKS.md).
 */
#define SLOW_SPIN_MAX_NS (1000ull * 1000)
#define SLOW_SPIN_WAKES 4
/*
 * And never more than SLOW_SPIN_BUDGETS budgets: the estimate is the
 * shortest sleep that ended with data, which holds the peer's own time as
 * well as the wake-up, and spins that find the data take no new sample.
 * A peer that thinks longer than the budget would otherwise have every
 * waiter of the process poll through its whole think time, for good. The
 * bound keeps a spin within a stated multiple of RDMASHIM_SPIN_US.
 */
#define SLOW_SPIN_BUDGETS 4
static unsigned long long run_ns(void)
{
	unsigned long long b = budget_ns(), w;

	if (!shim_cfg.spin_adapt || !slow_wake())
		return b;
	w = SLOW_SPIN_WAKES * shim_spin_wake_ns();
	if (w > SLOW_SPIN_MAX_NS)
		w = SLOW_SPIN_MAX_NS;
	if (w > SLOW_SPIN_BUDGETS * b)
		w = SLOW_SPIN_BUDGETS * b;
	return w > b ? w : b;
}

static void resume(struct shim_spin_hist *h, unsigned level, int fd)
{
	STORE(h->misses, 0);
	if (!level)
		return;
	STORE(h->level, 0);
	STORE(h->skip, 0);
	if (!LOAD(h->apart))
		STORE(prior_level, 0);
	shim_stats_spin_count(SHIM_SPIN_STAT_RESUME);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "spin.resume", fd, NULL, SHIM_REASON_NONE, "\"level\":%u", level);
}

static void judge(struct shim_spin_hist *h, bool hit, int fd);

/* The budget is over or the wait ended: did the spin pay? */
static void spin_finish(struct shim_spin_run *run, struct shim_spin_hist *h, bool hit, int fd)
{
	__atomic_sub_fetch(&spinners, 1, __ATOMIC_RELAXED);
	run->state = SHIM_SPIN_DONE;
	/* Data found only in the second half of the budget did not pay for
	 * the core burnt on it, when a sleep and a wake-up cost less: for the
	 * history it is a miss. Where waking costs more than the whole spin,
	 * any hit saved more than it burnt. */
	if (hit && !LOAD(h->apart) && shim_now_ns() - run->start_ns > budget_ns() / 2 && !slow_wake())
		hit = false;
	judge(h, hit, fd);
}

/* The spin ran out; the wait that followed ended (hit: with data) after
 * slept_ns. Judged here rather than when the spin ran out: with wake-ups
 * that cost more than the budget, a round trip just over the budget makes
 * the data come during the sleep every time, and counting each such spin
 * as a miss backed both ends off for good, each one's late answers making
 * the other's spins miss in turn. A near miss is no miss: it leaves the
 * count as it was, and a probe that nearly paid ends the back-off. */
static void ran_out_finish(struct shim_spin_hist *h, bool hit, unsigned long long slept_ns, int fd)
{
	if (hit && slow_wake() && slept_ns <= near_ns()) {
		shim_stats_spin_count(SHIM_SPIN_STAT_NEAR);
		resume(h, LOAD(h->level), fd);
		return;
	}
	judge(h, false, fd);
}

static void judge(struct shim_spin_hist *h, bool hit, int fd)
{
	unsigned level = LOAD(h->level);

	shim_stats_spin_count(hit ? SHIM_SPIN_STAT_HIT : SHIM_SPIN_STAT_MISS);
	if (hit) {
		resume(h, level, fd);
		return;
	}
	if (level) {
		/* A probe found nothing either: back off twice as long. */
		if (level < SHIM_SPIN_MAX_LEVEL)
			level++;
		STORE(h->level, level);
		STORE(h->skip, 1u << level);
		if (!LOAD(h->apart))
			STORE(prior_level, level);
		return;
	}
	if (LOAD(h->misses) + 1 < SHIM_SPIN_MISS_LIMIT) {
		STORE(h->misses, LOAD(h->misses) + 1);
		return;
	}
	STORE(h->misses, 0);
	STORE(h->level, 1);
	STORE(h->skip, 2);
	if (!LOAD(h->apart))
		STORE(prior_level, 1);
	shim_stats_spin_count(SHIM_SPIN_STAT_BACKOFF);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "spin.backoff", fd, NULL, SHIM_REASON_NONE, "\"misses\":%u,\"spin_us\":%u",
		   SHIM_SPIN_MISS_LIMIT, shim_cfg.spin_us);
}

/* A new waiter starts where the process's last verdict stands (spin.h). */
static void seed(struct shim_spin_hist *h)
{
	unsigned level = LOAD(prior_level);

	STORE(h->seeded, 1);
	if (level && !LOAD(h->level)) {
		STORE(h->level, level);
		STORE(h->skip, 1u << level);
	}
}

/*
 * The spin lost its core: hold every spin of the process. A hold that ends
 * and is followed by another within four holds' time doubles; one long
 * after starts again at the first. Threads race on these relaxed words:
 * the worst outcome is a hold a little shorter or longer.
 */
static void spin_preempted(unsigned long long now, unsigned long long gap_ns, int fd)
{
	unsigned long long hold = LOAD(contended_hold), until = LOAD(contended_until);
	unsigned long runs = __atomic_load_n(&shim_stats_spin[SHIM_SPIN_STAT_RUN], __ATOMIC_RELAXED);
	unsigned long last = __atomic_exchange_n(&steal_runs, runs, __ATOMIC_RELAXED);

	shim_stats_spin_count(SHIM_SPIN_STAT_PREEMPTED);
	/* A slice lost now and then, among many spins, is a machine busy
	 * with our own peers (pgbench's backends: spinning pays there, 1.02x
	 * TCP with it, 0.93x without); slices lost spin after spin are
	 * threads that compete and never answer (CPU hogs). */
	if (runs - last > SHIM_SPIN_STEAL_WINDOW)
		return;
	if (!hold || now > until + 4 * hold)
		hold = CONTENDED_FIRST_NS;
	else if (hold < CONTENDED_MAX_NS)
		hold *= 2;
	STORE(contended_hold, hold);
	STORE(contended_until, now + hold);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "spin.preempted", fd, NULL, SHIM_REASON_NONE,
		   "\"gap_us\":%llu,\"hold_ms\":%llu", gap_ns / 1000, hold / 1000000);
}

/* A spin's switch count before its first read (lost_core: unknown). */
#define SWITCHES_UNREAD (-2L)
/* How long a spin runs before it reads its thread's switch count. */
#define SWITCHES_AFTER_NS (5ull * 1000)

/* The calling thread's context switches so far, voluntary or not (a
 * yield that handed the core over counts), -1 if unknown. */
static long thread_switches(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru))
		return -1;
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

/*
 * Did the spin lose its core since its last look? Then the spins hold.
 * Only if the thread was switched out meanwhile: a gap with no switch is
 * the CPU itself stalled (a hypervisor running its host's other work on
 * our virtual CPU, a long interrupt), which a sleep would not have spared
 * us, and which no thread of this machine took (spin.h, contention).
 */
static bool lost_core(struct shim_spin_run *run, unsigned long long now, int fd)
{
	unsigned long long gap = now - run->last_ns;
	long sw;

	if (gap < SHIM_SPIN_PREEMPTED_US * 1000ull || !shim_cfg.spin_adapt || !LOAD(watch_preemption))
		return false;
	sw = thread_switches();
	if (sw >= 0 && run->switches >= 0 && sw == run->switches) {
		shim_stats_spin_count(SHIM_SPIN_STAT_STALLED);
		return false;
	}
	run->switches = sw;
	spin_preempted(now, gap, fd);
	return true;
}

/* Backed off, and this wait is not the probe: skip the spin. */
static bool backed_off(struct shim_spin_hist *h)
{
	unsigned skip;

	if (unlikely(!LOAD(h->seeded)) && !LOAD(h->apart))
		seed(h);
	if (!LOAD(h->level))
		return false;
	skip = LOAD(h->skip);
	if (!skip)
		return false; /* the probe */
	STORE(h->skip, skip - 1);
	return true;
}

bool shim_spin_more(struct shim_spin_run *run, struct shim_spin_hist *h, int fd)
{
	unsigned long long now;

	if (run->state == SHIM_SPIN_ON) {
		now = shim_now_ns();
		if (unlikely(lost_core(run, now, fd))) {
			spin_finish(run, h, false, fd);
			return false;
		}
		run->last_ns = now;
		/* Read once the spin has run SWITCHES_AFTER_NS, not at its
		 * start: a system call there came before the first look, and
		 * on shm the data is often there sooner than it returns. A
		 * gap before it is judged as before (a lost core). */
		if (run->switches == SWITCHES_UNREAD && now - run->start_ns >= SWITCHES_AFTER_NS &&
		    shim_cfg.spin_adapt && LOAD(watch_preemption))
			run->switches = thread_switches();
		if (now < run->end_ns)
			return true;
		/* Judged when the wait ends (ran_out_finish). */
		__atomic_sub_fetch(&spinners, 1, __ATOMIC_RELAXED);
		run->state = SHIM_SPIN_RAN_OUT;
		return false;
	}
	if (run->state != SHIM_SPIN_IDLE || !shim_cfg.spin_us) {
		/* The wait loop asks again after each sleep that ended
		 * empty (a slice, RDMA's first short sleep after an arm):
		 * a spin that ran out or was skipped keeps its judgment for
		 * the wait's end. */
		if (run->state == SHIM_SPIN_IDLE)
			run->state = SHIM_SPIN_DONE;
		return false;
	}
	now = shim_now_ns();
	if (shim_cfg.spin_adapt && now < LOAD(contended_until)) {
		run->state = SHIM_SPIN_DONE;
		shim_stats_spin_count(SHIM_SPIN_STAT_SKIP_CONTENDED);
		return false;
	}
	if (shim_cfg.spin_adapt && backed_off(h)) {
		run->state = SHIM_SPIN_SKIPPED;
		run->start_ns = now;
		shim_stats_spin_count(SHIM_SPIN_STAT_SKIP_BACKOFF);
		return false;
	}
	if (__atomic_fetch_add(&spinners, 1, __ATOMIC_RELAXED) >= cpus() && shim_cfg.spin_adapt) {
		/* Every core already has a spinner of ours: a spin here would
		 * only take a core from the threads that make data. */
		__atomic_sub_fetch(&spinners, 1, __ATOMIC_RELAXED);
		run->state = SHIM_SPIN_DONE;
		shim_stats_spin_count(SHIM_SPIN_STAT_SKIP_CROWDED);
		if (!__atomic_exchange_n(&crowded_seen, 1, __ATOMIC_RELAXED))
			SHIM_TRACE(SHIM_TRACE_DEBUG, "spin.crowded", fd, NULL, SHIM_REASON_NONE,
				   "\"spinners\":%u,\"cpus\":%u", shim_spin_spinners(), cpus());
		return false;
	}
	if (LOAD(crowded_seen) && __atomic_exchange_n(&crowded_seen, 0, __ATOMIC_RELAXED))
		SHIM_TRACE(SHIM_TRACE_DEBUG, "spin.uncrowded", fd, NULL, SHIM_REASON_NONE, "\"cpus\":%u", cpus());
	run->state = SHIM_SPIN_ON;
	run->switches = SWITCHES_UNREAD;
	run->start_ns = now;
	run->last_ns = now;
	run->end_ns = now + run_ns();
	shim_stats_spin_count(SHIM_SPIN_STAT_RUN);
	return true;
}

void shim_spin_end(struct shim_spin_run *run, struct shim_spin_hist *h, bool hit, int fd)
{
	if (run->state == SHIM_SPIN_ON) {
		/* Data that came while another thread held our core paid for
		 * nothing: the answer waited a slice. */
		if (lost_core(run, shim_now_ns(), fd))
			hit = false;
		spin_finish(run, h, hit, fd);
	} else if (run->state == SHIM_SPIN_RAN_OUT) {
		unsigned long long now = shim_now_ns();

		if (hit)
			wake_sample_since(run->last_ns, now);
		ran_out_finish(h, hit, now - run->last_ns, fd);
	} else if (run->state == SHIM_SPIN_SKIPPED && hit) {
		unsigned long long now = shim_now_ns(), slept = now - run->start_ns;

		wake_sample_since(run->start_ns, now);
		/* The sleep ended about when a spin would have found the
		 * data, so a spin would have paid: probe at the next wait
		 * rather than after the back-off. With wake-ups that cost
		 * more than the budget, "within the budget" never happens:
		 * the wake-up's cost counts in (near_ns). */
		if (slept <= near_ns())
			STORE(h->skip, 0);
	}
	run->state = SHIM_SPIN_DONE;
}
