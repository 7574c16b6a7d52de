/* ready_rules: the stall detector (R6): no wait late past its timeout, no
 * bytes left unreported. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ready_rules.h"

/* How long this thread has waited for a CPU while runnable (schedstat's
 * run delay), in microseconds; 0 when the kernel does not say. R6 takes it
 * off the time it judges: on a loaded machine a thread woken in time may
 * still wait for a core, which is the scheduler's doing, not a late report.
 * A thread that sleeps through a wake-up is not runnable, so that time
 * counts in full. */
static uint64_t cpu_wait_us(struct loop *L)
{
	unsigned long long ran, delay;
	char b[128];
	ssize_t n;

	if (L->sched_fd == -2)
		L->sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (L->sched_fd < 0)
		return 0;
	n = pread(L->sched_fd, b, sizeof(b) - 1, 0);
	if (n <= 0)
		return 0;
	b[n] = 0;
	if (sscanf(b, "%llu %llu", &ran, &delay) != 2)
		return 0;
	return delay / 1000;
}

/* Before a wait: a connection the wait watches for reading, whose peer
 * wrote bytes it has not read, must not stay so past the slack. */
void stall_scan(struct loop *L)
{
	int n = atomic_load(&L->t->n);
	uint64_t now = now_us(), cpu = cpu_wait_us(L);

	for (int i = 0; i < n; i++) {
		struct conn *c = L->t->c[i];
		uint64_t got, gen, age;

		if (!c || atomic_load(&c->closed) || atomic_load(&c->eof) ||
		    !(atomic_load(&c->interest) & EPOLLIN) || (L->oneshot && !atomic_load(&c->armed))) {
			L->st[i].since = 0;
			continue;
		}
		got = atomic_load(&c->rcvd);
		gen = atomic_load(&c->armgen);
		if (c->id < 0 || peer_sent(c) <= got) {
			L->st[i].since = 0;
			continue;
		}
		if (!L->st[i].since || L->st[i].rcvd != got || L->st[i].gen != gen) {
			L->st[i] = (typeof(L->st[i])){ .since = now, .cpu_wait = cpu, .rcvd = got, .gen = gen };
			continue;
		}
		/* Clamped: in a make test run beside the VMs the run delay
		 * since read more than the wall time since, and the unsigned
		 * difference wrapped, flagging a plain TCP run. */
		uint64_t wall = now - L->st[i].since;
		uint64_t queued = cpu > L->st[i].cpu_wait ? cpu - L->st[i].cpu_wait : 0;

		age = wall > queued ? wall - queued : 0;
		atomic_max(&S->longest_pending_us, age);
		if (age > (WAIT_MS + SLACK_MS) * 1000ull && !L->st[i].flagged) {
			L->st[i].flagged = true;
			violation(6, L, c,
				  "%llu bytes the peer wrote unread for %llu ms (%llu ms more waiting for a CPU), "
				  "watched for %#x, never reported",
				  (unsigned long long)(peer_sent(c) - got), (unsigned long long)age / 1000,
				  (unsigned long long)queued / 1000, atomic_load(&c->interest));
		}
	}
}

void wait_begin(struct loop *L)
{
	L->wait_cpu0 = cpu_wait_us(L);
	L->wait_t0 = now_us();
}

void wait_done(struct loop *L, int n)
{
	uint64_t took = now_us() - L->wait_t0, cpu = cpu_wait_us(L) - L->wait_cpu0;

	atomic_fetch_add(&S->waits, 1);
	atomic_max(&S->longest_wait_us, took);
	if (took - (cpu < took ? cpu : took) > (WAIT_MS + SLACK_MS) * 1000ull)
		violation(6, L, NULL, "a wait with a %d ms timeout returned %d after %llu ms (%llu ms of it waiting for a CPU)",
			  WAIT_MS, n, (unsigned long long)took / 1000, (unsigned long long)cpu / 1000);
}
