/*
 * memcpy_bw: what one core copies per second with memcpy, at each message
 * size the suite uses (buffers that stay in the caches) and for a buffer
 * far larger than them (memory): the ceiling of a copying transport, which
 * copies each byte into a ring and out of it again.
 *
 *   memcpy_bw [--secs S] SIZE...     (S per size, default 0.2; SIZE in bytes)
 *
 * Prints one JSON object: for each size the bytes copied per second
 * (median of ten slices of the size's time), and "large" for 64 MiB.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LARGE (64u << 20)
#define SLICES 10

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Bytes per second copying SIZE-byte blocks for SECS, median of the slices. */
static double rate(char *dst, const char *src, size_t size, double secs)
{
	double r[SLICES];
	/* Small blocks walk through a 256 KiB window, as a ring's slots would. */
	size_t span = size >= LARGE ? size : 256 * 1024, off = 0;
	/* About a MiB between clock reads: a large block is one copy. */
	int per = size >= (1u << 20) ? 1 : (1 << 20) / size;
	for (int s = 0; s < SLICES; s++) {
		double t0 = now(), t1;
		size_t bytes = 0;
		do {
			for (int i = 0; i < per; i++) {
				memcpy(dst + off, src + off, size);
				/* keeps the copies the compiler can not see used */
				__asm__ volatile("" : : "r"(dst) : "memory");
				bytes += size;
				off += size;
				if (off + size > span)
					off = 0;
			}
			t1 = now();
		} while (t1 - t0 < secs / SLICES);
		r[s] = bytes / (t1 - t0);
	}
	qsort(r, SLICES, sizeof(double), cmp);
	return (r[SLICES / 2 - 1] + r[SLICES / 2]) / 2;
}

int main(int argc, char **argv)
{
	double secs = 0.2;
	int i = 1;
	char *src = malloc(LARGE), *dst = malloc(LARGE);

	if (!src || !dst)
		return 1;
	memset(src, 1, LARGE);
	memset(dst, 2, LARGE);
	if (argc > 2 && !strcmp(argv[1], "--secs")) {
		secs = atof(argv[2]);
		i = 3;
	}
	printf("{\"bytes_per_sec\":{");
	for (int first = 1; i < argc; i++, first = 0) {
		size_t size = strtoul(argv[i], NULL, 0);
		if (size == 0 || size > 256 * 1024)
			return 2;
		printf("%s\"%zu\":%.1f", first ? "" : ",", size, rate(dst, src, size, secs));
	}
	printf("},\"large_bytes\":%u,\"large_bytes_per_sec\":%.1f}\n", LARGE, rate(dst, src, LARGE, secs * 2));
	return 0;
}
