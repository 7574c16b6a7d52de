/*
 * util.c — small helpers of the stress tool: the monotonic clock, the fatal
 * error that ends the run, allocation that cannot fail.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "stress.h"

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

long long now_ms(void)
{
	return (long long)(now_s() * 1000);
}

void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("stress: FAIL reason=", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	fflush(stdout);
	_exit(1);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p)
		die("out of memory (%zu bytes)", n);
	return p;
}
