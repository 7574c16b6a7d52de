/*
 * pvm_cost: what one process_vm_writev costs against memcpy, per GiB, on
 * this machine (docs/BENCHMARKS.md, "One copy on shared memory"). A child
 * holds a buffer of SIZE KiB; the parent writes 1 GiB into it in SIZE
 * pieces with process_vm_writev, then copies 1 GiB in its own memory the
 * two ways a shm ring does (into a 1 MiB ring and out of it) and with one
 * memcpy. One line: seconds per GiB of each.
 *
 *   pvm_cost SIZE_KIB
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING (1u << 20)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? (size_t)atoi(argv[1]) << 10 : 4u << 20;
	int reps, p[2];
	char *dst, *src, *ring, x = 0;
	double t0, t1, t2, t3;
	pid_t c;

	if (n < 4096 || n > (1u << 30))
		return 2;
	reps = (int)((1ull << 30) / n);
	dst = malloc(n);
	src = malloc(n);
	ring = malloc(RING);
	if (!dst || !src || !ring || pipe(p) < 0)
		return 2;
	memset(dst, 1, n);
	memset(src, 2, n);
	memset(ring, 3, RING);
	c = fork();
	if (c == 0) {
		/* dst is the child's copy: the parent writes into it. */
		if (read(p[0], &x, 1) < 0)
			_exit(1);
		_exit(0);
	}
	t0 = now();
	for (int i = 0; i < reps; i++) {
		struct iovec l = { src, n }, r = { dst, n };

		if (process_vm_writev(c, &l, 1, &r, 1, 0) != (ssize_t)n) {
			perror("pvm_cost: process_vm_writev");
			return 1;
		}
	}
	t1 = now();
	for (int i = 0; i < reps; i++) {
		for (size_t o = 0; o < n; o += RING) {
			size_t k = n - o < RING ? n - o : RING;

			memcpy(ring, src + o, k);
			memcpy(dst + o, ring, k);
		}
	}
	t2 = now();
	for (int i = 0; i < reps; i++)
		memcpy(dst, src, n);
	t3 = now();
	printf("{\"size_kib\":%zu,\"pvm_writev_s_per_gib\":%.3f,\"two_memcpy_s_per_gib\":%.3f,"
	       "\"one_memcpy_s_per_gib\":%.3f}\n",
	       n >> 10, t1 - t0, t2 - t1, t3 - t2);
	if (write(p[1], &x, 1) < 0)
		return 1;
	wait(NULL);
	return 0;
}
