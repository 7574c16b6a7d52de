/* ready_rules: the clock and the lines the processes write (violations,
 * errors), counted in the shared memory. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "ready_rules.h"

uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void atomic_max(_Atomic uint64_t *p, uint64_t v)
{
	uint64_t cur = atomic_load(p);

	while (v > cur && !atomic_compare_exchange_weak(p, &cur, v))
		;
}

/* One line to stdout in one write(2): the processes share it and none
 * uses stdio before the summary, so lines never interleave. */
void say(const char *fmt, ...)
{
	char b[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(b, sizeof(b) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(b) - 2)
		n = (int)sizeof(b) - 2;
	b[n++] = '\n';
	if (write(1, b, (size_t)n) < 0)
		return;
}

void violation(int rule, struct loop *L, struct conn *c, const char *fmt, ...)
{
	char d[400];
	va_list ap;

	atomic_fetch_add(&S->viol[rule], 1);
	if (atomic_fetch_add(&S->lines, 1) >= MAX_DETAILS)
		return;
	va_start(ap, fmt);
	vsnprintf(d, sizeof(d), fmt, ap);
	va_end(ap);
	say("VIOLATION R%d side=%s mode=%s pid=%d who=%s conn=%d fd=%d: %s", rule, L->side == CLIENT ? "client" : "server",
	    mode_names[mode], (int)getpid(), L->who, c ? c->id : -1, c ? c->fd : -1, d);
}

void error_line(struct loop *L, struct conn *c, const char *fmt, ...)
{
	char d[400];
	va_list ap;

	atomic_fetch_add(&S->errors, 1);
	if (atomic_fetch_add(&S->lines, 1) >= MAX_DETAILS)
		return;
	va_start(ap, fmt);
	vsnprintf(d, sizeof(d), fmt, ap);
	va_end(ap);
	say("ERROR side=%s mode=%s pid=%d who=%s conn=%d: %s", L && L->side == CLIENT ? "client" : "server",
	    mode_names[mode], (int)getpid(), L ? L->who : "main", c ? c->id : -1, d);
}
