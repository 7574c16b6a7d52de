/*
 * Adaptive busy polling: whether a blocking wait spins before it arms and
 * sleeps, and for how long.
 *
 * A spin pays when the peer answers within RDMASHIM_SPIN_US and has a core
 * of its own to answer on. It costs the core it burns otherwise: with more
 * runnable threads than cores, a spinner takes the time the peer needs to
 * make the very data it waits for (a multi-process server on a full
 * machine ran well below TCP with every wait spinning). Two rules, like a
 * hybrid mutex:
 *
 *   crowding  a process-wide count of threads spinning right now; a wait
 *             that finds as many as there are online CPUs already spinning
 *             does not spin. (The threads of other processes are not
 *             counted: a machine-wide count from /proc/loadavg was tried,
 *             and stopped spins that paid whenever anything else ran.)
 *   history   per waiter (a socket for send/recv, an epoll set, a thread
 *             for poll/select): after SHIM_SPIN_MISS_LIMIT spins in a row
 *             that found nothing within the first half of the budget (what
 *             comes later cost more core than a sleep and a wake-up would
 *             have), the waiter backs off:
 *             its next 2, 4, 8 ... 256 waits skip the spin, then one spin
 *             probes; a probe that pays ends the back-off (a sleep that
 *             ended within the budget, where a spin would have paid,
 *             brings the probe forward to the next wait). This is
 *             what helps a multi-process server: under outside load it
 *             runs faster adaptive than with every wait spinning or with
 *             none.
 *   contention  a spin that lost its core for a scheduler slice (two
 *             looks at the clock SHIM_SPIN_PREEMPTED_US apart, whether the
 *             data came meanwhile or not, and the thread switched out
 *             between them: a gap with no switch is the CPU itself
 *             stalled, a hypervisor that ran its host's other work on our
 *             virtual CPU or a long interrupt, which no thread of ours or
 *             of this machine took, and a sleep would not have spared;
 *             counted "stalled" and held nothing, since under emulation
 *             on a busy host it came spin after spin and held even an
 *             explicit RDMASHIM_SPIN_US off), a second time within
 *             SHIM_SPIN_STEAL_WINDOW spins of the process, shows runnable
 *             threads other than its peers competing for the cores: its
 *             yield handed the core to one of them, or the kernel switched
 *             it out. (A slice lost now and then, among many spins that
 *             pay, is a machine busy with our own peers.) The peer's
 *             answer then waits for the spinner's next turn, a scheduler
 *             slice, where a sleeper is woken at once. No wait of the process
 *             spins for a hold of 10 ms after that, doubled while it recurs
 *             (at most 1 s), and the first spin after a hold probes again.
 *             (A yield to a peer on the same core costs only the peer's
 *             work, and pays.) Without this rule, short connections on a
 *             machine whose every core runs other work took many times
 *             TCP's time.
 *   slow wake where a wake-up costs more than the whole budget (Soft-RoCE
 *             under emulation, whose round trips come near the default
 *             budget), the history above locked in: a round
 *             trip just over the budget made each spin run out and the
 *             data come during the sleep, four of those backed one end
 *             off, its answers came a wake-up late, the other end's spins
 *             ran out too, and both climbed to the longest back-off (the
 *             short-sleep rule never fired: no sleep ends within the
 *             budget). So a spin that ran out is judged when its wait
 *             ends: if the process's wake-ups are slow (the shortest
 *             sleep that ended with data, over the last 64 to 128 of
 *             them, is longer than the budget) and this sleep ended
 *             within two scheduler ticks (a chain of wake-ups: ours and
 *             the peer's), the spin nearly paid: not a miss, and a probe that nearly paid ends the
 *             back-off; a skipped spin whose sleep ended that soon brings
 *             the probe forward; and a hit anywhere in the budget pays,
 *             since it saved more than it burnt. And the spin itself
 *             runs as long as a wake-up costs (a few times the shortest
 *             seen, at most four budgets and a millisecond) rather than
 *             stopping at the budget: a spin
 *             that stops before the data comes adds a whole wake-up to
 *             the wait, so polling up to a wake-up's cost is never slower
 *             than sleeping at once, and a round trip just over the
 *             budget (rxe's post alone under emulation) no longer turns
 *             every wait into a sleep. With wake-ups cheaper
 *             than the budget (a native host, a full one included) the
 *             rules are the ones above, unchanged.
 *   prior     a waiter's history starts from the process's latest verdict:
 *             the back-off level the last waiter to change its own reached
 *             (0 once one resumed). A connection per request otherwise
 *             pays SHIM_SPIN_MISS_LIMIT misses on each new socket, and
 *             under load a miss costs far more than its spin: the core it
 *             burnt counts against the thread's share, so its wake-up no
 *             longer preempts the load (without the prior, the short
 *             connections on a full machine of the contention rule took
 *             several times TCP's time).
 *
 * The figures behind each rule, and how to repeat them: docs/BENCHMARKS.md,
 * "Busy polling".
 *
 * Counted in shim_stats_spin (stats.h); each back-off and each return to
 * spinning is traced at debug level ("spin.backoff", "spin.resume"), as is
 * the process's first crowded wait after an uncrowded one ("spin.crowded").
 */
#ifndef RDMASHIM_SPIN_H
#define RDMASHIM_SPIN_H

#include <stdbool.h>
#include <stdint.h>

#define SHIM_SPIN_MISS_LIMIT 4
#define SHIM_SPIN_MAX_LEVEL 8 /* back-off of at most 2^8 waits */

/* One waiter's history; zero is "spins pay". Fields are read and written
 * with relaxed atomics: threads sharing a waiter race on a heuristic, the
 * worst outcome is one spin more or less. */
struct shim_spin_hist {
	uint8_t misses; /* spins in a row that found nothing */
	uint8_t level;  /* back-off level, 0: not backed off */
	uint16_t skip;  /* waits left to skip before the next probe */
	uint8_t seeded; /* taken the process's prior (zero: a new waiter) */
	/* Not zero: a history apart (the handshake waits of the process,
	 * io_sleep.c), which neither starts from the process's prior nor
	 * sets it, and for which a hit anywhere within the budget pays: such
	 * a wait comes once or twice a connection, and a spin that ends it
	 * saves the wake-up the upgrade would wait for. */
	uint8_t apart;
};

/* One wait's spin, on the stack of the waiting thread. */
struct shim_spin_run {
	unsigned long long end_ns; /* 0: not started */
	unsigned long long start_ns;
	unsigned long long last_ns; /* the spin's last look at the clock */
	uint8_t state; /* SHIM_SPIN_* below */
	/* The thread's context switches after the spin's first looks (or at
	 * its last lost slice); negative: not known (a gap is contention). */
	long switches;
};

/* RAN_OUT: the budget ended with nothing; the spin is judged when the
 * wait ends (slow wake). */
enum { SHIM_SPIN_IDLE = 0, SHIM_SPIN_ON, SHIM_SPIN_SKIPPED, SHIM_SPIN_DONE, SHIM_SPIN_RAN_OUT };

#define SHIM_SPIN_RUN_INIT { 0, 0, 0, SHIM_SPIN_IDLE, 0 }

/* A gap between two looks of one spin this long: the thread lost its core
 * for a scheduler slice (a yield to the peer, or a round over many fds,
 * takes far less). */
#define SHIM_SPIN_PREEMPTED_US 1000
/* Two lost slices within this many spins of the process: contention. */
#define SHIM_SPIN_STEAL_WINDOW 8

/*
 * The wait found nothing ready: true while it should go on polling, false
 * once it should arm and sleep (the spin is over, or was never to be).
 * The first call decides (crowding, history) and starts the clock; fd is
 * for the trace only.
 */
bool shim_spin_more(struct shim_spin_run *run, struct shim_spin_hist *h, int fd);

/*
 * The wait ends, ready (hit) or not. Closes a spin still running (it paid
 * when hit) and, for a wait that skipped its spin to back off, a hit
 * within the budget counts as a probe that paid. Safe on any state.
 */
void shim_spin_end(struct shim_spin_run *run, struct shim_spin_hist *h, bool hit, int fd);

/* Test hook: forget the process's prior (new waiters start spinning) and
 * any contention hold. */
void shim_spin_reset_prior(void);
/* Test hook: whether a spin that lost its core holds the spins (default
 * true; unit tests under sanitizers turn it off, as their loops stall). */
void shim_spin_watch_preemption(bool on);
/* Test hook: the CPU count the crowding rule uses (0: sysconf again). */
void shim_spin_set_cpus(unsigned cpus);
/* Threads spinning right now in this process. */
unsigned shim_spin_spinners(void);
/* The calling thread goes to sleep in a wait now (waitloop.c): what the
 * wait's end then measures is a wake-up's cost (slow wake). */
void shim_spin_sleeping(void);
/* The process's estimate of a wake-up's cost (slow wake), 0: none yet. */
unsigned long long shim_spin_wake_ns(void);

#endif
