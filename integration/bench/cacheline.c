/*
 * cacheline: the floor of any same-host transport that hands a message
 * over through memory: two processes (fork) pass a counter back and forth
 * in one shared cache line, each spinning on it, on CPUs 0 and 1 when
 * there are two. Nothing above this (a ring, a wake-up, a system call) can
 * make a round trip shorter.
 *
 *   cacheline [--secs S]       (default 1)
 *
 * Round trips are timed in batches (a clock read per round trip would cost
 * as much as the round trip); prints one JSON object with the half round
 * trip's median and p99 over the batches, in nanoseconds, and the round
 * trips made. Time-bounded on both sides: on a loaded machine a spinning
 * side may wait a time slice for the other, and the batches show it.
 */
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCH 200
#define MAX_BATCHES 100000

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void pin(int cpu)
{
	cpu_set_t set;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	double secs = argc > 2 && !strcmp(argv[1], "--secs") ? atof(argv[2]) : 1;
	/* One line the two sides share, the next one kept apart from it. */
	volatile int64_t *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	static double ns[MAX_BATCHES];
	size_t nb = 0, trips = 0;
	int64_t v = 0;
	pid_t child;

	if (line == MAP_FAILED)
		return 1;
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		double end = now() + secs + 5;
		int64_t seen = 0;
		pin(1);
		for (unsigned spins = 0;; spins++) {
			/* acquire: pairs with the parent's release store of an odd value */
			int64_t c = __atomic_load_n(line, __ATOMIC_ACQUIRE);
			if (c < 0)
				_exit(0);
			if (c != seen && (c & 1)) {
				seen = c + 1;
				/* release: pairs with the parent's acquire load below */
				__atomic_store_n(line, seen, __ATOMIC_RELEASE);
			}
			__builtin_ia32_pause();
			if (!(spins & 0xfffff) && now() > end)
				_exit(1);
		}
	}
	pin(0);
	double end = now() + secs;
	while (nb < MAX_BATCHES) {
		double t0 = now();
		int i;
		for (i = 0; i < BATCH; i++) {
			/* A side that waits for a time slice makes a batch last as
			 * long as BATCH slices: past the deadline, a batch ends early. */
			if ((i & 7) == 7 && nb > 0 && now() >= end)
				break;
			/* release: pairs with the child's acquire load */
			__atomic_store_n(line, ++v, __ATOMIC_RELEASE);
			/* acquire: pairs with the child's release store of v + 1 */
			while (__atomic_load_n(line, __ATOMIC_ACQUIRE) != v + 1)
				__builtin_ia32_pause();
			v++;
		}
		double t1 = now();
		ns[nb++] = (t1 - t0) * 1e9 / i / 2;
		trips += i;
		if (t1 >= end)
			break;
	}
	__atomic_store_n(line, -1, __ATOMIC_RELEASE);
	waitpid(child, NULL, 0);
	double sum = 0;
	for (size_t i = 0; i < nb; i++)
		sum += ns[i];
	qsort(ns, nb, sizeof(double), cmp);
	printf("{\"round_trips\":%zu,\"p50_ns\":%.2f,\"p99_ns\":%.2f,\"mean_ns\":%.2f,\"cpus\":%ld}\n", trips,
	       ns[nb / 2], ns[(size_t)(nb * 0.99)], sum / nb, sysconf(_SC_NPROCESSORS_ONLN) < 2 ? 1L : 2L);
	return 0;
}
