/* The rings: honest producing and consuming, the lies made after the switch, the data phase. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

void map_rings(int memfd, size_t len, uint32_t size, int we_are_client)
{
	st.map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (st.map == MAP_FAILED)
		fail_setup("mmap");
	st.map_len = len;
	struct ring c2s = { (struct ring_hdr *)st.map, st.map + RING_HDR, size };
	struct ring s2c = { (struct ring_hdr *)(st.map + RING_HDR + size), st.map + 2 * RING_HDR + size, size };

	st.tx = we_are_client ? c2s : s2c;
	st.rx = we_are_client ? s2c : c2s;
}

static void bell(char b)
{
	tcp_send(&b, 1);
}

/* Publishes tx's new tail and rings the victim if it was armed. */
static void publish_tail(uint64_t tail)
{
	/* Release pairs with the victim's acquire load of tail; the full
	 * fence with the one after its arm (the protocol's Dekker pair). */
	__atomic_store_n(&st.tx.h->tail, tail, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&st.tx.h->consumer_armed, 0, __ATOMIC_RELAXED))
		bell('D');
}

/* Produces honest letters (position-true) into tx; returns bytes written. */
static size_t produce(size_t max)
{
	uint64_t tail = st.tx.h->tail;
	uint64_t head = __atomic_load_n(&st.tx.h->head, __ATOMIC_ACQUIRE);
	uint64_t used = tail - head;
	size_t room = used > st.tx.size ? 0 : st.tx.size - (size_t)used, n = max < room ? max : room;

	/* Published a MiB at a time, so the victim starts at once. */
	if (n > (1u << 20))
		n = 1u << 20;

	for (size_t i = 0; i < n; i++) {
		uint8_t b = out_byte(st.sent + i);

		st.tx.data[(tail + i) & (st.tx.size - 1)] = b;
		if (st.shadow)
			st.shadow[(tail + i) & (st.tx.size - 1)] = b;
	}
	if (!n)
		return 0;
	if (!st.shadow)
		for (size_t i = 0; i < n; i++) {
			uint8_t b = out_byte(st.sent + i);

			expect_add(&b, 1);
		}
	st.sent += n;
	publish_tail(tail + n);
	return n;
}

/* Takes what rx holds (never more than one ring, whatever tail says). */
static size_t consume(uint8_t *out, size_t max)
{
	uint64_t head = st.rx.h->head;
	uint64_t tail = __atomic_load_n(&st.rx.h->tail, __ATOMIC_ACQUIRE);
	uint64_t avail = tail - head;
	size_t n;

	if (avail > st.rx.size)
		avail = st.rx.size;
	n = avail < max ? (size_t)avail : max;
	for (size_t i = 0; i < n; i++)
		out[i] = st.rx.data[(head + i) & (st.rx.size - 1)];
	if (!n)
		return 0;
	/* Release pairs with the victim's acquire load of head (our copies
	 * are done before it may overwrite); the full fence with the one
	 * after its producer arm. */
	__atomic_store_n(&st.rx.h->head, head + n, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_exchange_n(&st.rx.h->producer_wants_space, 0, __ATOMIC_RELAXED))
		bell('S');
	return n;
}

/* TCP after the victim's switch: bells only, or its end. */
static void read_tcp(void)
{
	uint8_t buf[4096];

	while (!st.eof && !st.reset) {
		ssize_t n = recv(st.tcp, buf, sizeof(buf), MSG_DONTWAIT);

		if (n == 0)
			st.eof = 1;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			st.reset = 1;
		if (n <= 0)
			return;
		if (st.tcp_app_left) {
			size_t app = (uint64_t)n < st.tcp_app_left ? (size_t)n : (size_t)st.tcp_app_left;

			classify(buf, app);
			st.tcp_app_left -= app;
		}
	}
}

static volatile int flipping;

#define SILENT_END_MS 300

static void *flipper(void *arg)
{
	uint64_t tail = st.tx.h->tail, head = st.rx.h->head;

	(void)arg;
	for (unsigned long i = 0; flipping; i++) {
		uint64_t d = (i & 1) ? GIB : 0;

		__atomic_store_n(&st.tx.h->tail, tail + d, __ATOMIC_RELEASE);
		__atomic_store_n(&st.rx.h->head, head + d, __ATOMIC_RELEASE);
		if ((i & 1023) == 0)
			usleep(100);
	}
	st.tx.h->tail = tail;
	st.rx.h->head = head;
	return NULL;
}

static pthread_t flip_thread;

static void lie_after_switch(int memfd)
{
	if (is_mode("tail_far")) {
		st.tx.h->tail += GIB;
		bell('D');
	} else if (is_mode("tail_over")) {
		st.tx.h->tail = st.tx.h->head + st.tx.size + 1;
		bell('D');
	} else if (is_mode("head_ahead")) {
		st.rx.h->head = st.rx.h->tail + GIB;
		bell('S');
	} else if (is_mode("head_behind")) {
		st.rx.h->head = st.rx.h->tail - st.rx.size - 4096;
		bell('S');
	} else if (is_mode("flip")) {
		flipping = 1;
		if (pthread_create(&flip_thread, NULL, flipper, NULL))
			fail_setup("pthread_create");
	} else if (is_mode("resume")) {
		struct resume_frame f = { .type = 'R', .rx_offset_be = htobe64(st.echoed) };

		tcp_send(&f, sizeof(f));
	} else if (is_mode("garbage")) {
		tcp_send("X", 1);
	} else if (is_mode("hdr_after")) {
		/* The size and magic were checked at attach; now they lie. */
		st.tx.h->size = st.rx.h->size = 0x80000000u;
		st.tx.h->magic = st.rx.h->magic = 0;
	} else if (is_mode("silent_close")) {
		/* The rest is pump's: arms taken, no bell, then our end. */
	} else if (is_mode("noseal")) {
		if (ftruncate(memfd, 0) == 0)
			say("%s", "memfd shrunk to 0 bytes under the victim's mapping");
		else
			say("memfd could not be shrunk: %s", strerror(errno));
		bell('D');
		bell('S');
	} else {
		return;
	}
	st.lie_done = 1;
	say("lie %s sent", o.mode);
}

/* After noseal's lie our own mapping is gone too (SIGBUS on a touch). */
static int shrunk(void)
{
	return st.lie_done && is_mode("noseal");
}

int lie_in_ring(void)
{
	if (st.refused)
		return 0;
	static const char *const modes[] = { "tail_far", "tail_over", "head_ahead", "head_behind", "flip",
					     "resume", "garbage", "noseal", "hdr_after", "silent_close" };

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (is_mode(modes[i]))
			return 1;
	return 0;
}

/*
 * The data phase: honest payload first (and, in server role, an honest echo),
 * then the mode's lie, then o.seconds of watching what comes back. The bytes
 * sent after a head lie make the victim write (into a ring it thinks has
 * room); the ring's letters after a tail lie are what it must not take.
 */
void pump(int memfd, int echo)
{
	uint8_t buf[65536];
	long long start = now_ms(), lie_at = 0, end = 0;
	int head_lie = is_mode("head_ahead") || is_mode("head_behind");

	for (;;) {
		long long t = now_ms();

		read_tcp();
		if (!is_mode("flip") || !flipping) {
			if (echo && !(st.lie_done && head_lie)) {
				/* Server role: echo rx into tx (the shadow keeps
				 * what the victim must find there); after a tail
				 * lie, only drain. */
				int stop_tx = st.lie_done && lie_in_ring() && !is_mode("hdr_after");
				uint64_t used = st.tx.h->tail - st.tx.h->head;
				size_t room = stop_tx ? sizeof(buf) : used > st.tx.size ? 0 : st.tx.size - (size_t)used;
				size_t n;

				/* C's bytes from before its switch go first. */
				if (st.pending_off < st.pending.len) {
					n = st.pending.len - st.pending_off;
					if (n > sizeof(buf))
						n = sizeof(buf);
					if (!stop_tx && n > room)
						n = room;
					memcpy(buf, st.pending.b + st.pending_off, n);
					st.pending_off += n;
				} else {
					n = consume(buf, room < sizeof(buf) ? room : sizeof(buf));
				}

				for (size_t i = 0; i < n && !stop_tx; i++) {
					uint64_t tail = st.tx.h->tail + i;

					st.tx.data[tail & (st.tx.size - 1)] = buf[i];
					st.shadow[tail & (st.tx.size - 1)] = buf[i];
				}
				if (n && !stop_tx) {
					st.sent += n;
					publish_tail(st.tx.h->tail + n);
				}
			} else if (!echo) {
				/* idle is silent once switched; hdr_after lies in no
				 * cursor, so its exchange goes on. */
				if ((!st.lie_done || head_lie || !lie_in_ring() || is_mode("hdr_after")) && !is_mode("idle") && !is_mode("line_hup"))
					if (st.sent < out_target(st.lie_done))
						produce(out_target(st.lie_done) - st.sent);
				/* ring_huge leaves the echo where the victim put it. */
				if ((!st.lie_done || !head_lie) && !is_mode("ring_huge") && !shrunk())
					classify(buf, consume(buf, sizeof(buf)));
			}
		}
		if (lie_in_ring() && !lie_at &&
		    ((!echo && st.echoed >= (o.resp ? 5 : o.payload)) || (echo && st.sent >= o.payload) || t - start > 1500)) {
			lie_after_switch(memfd);
			lie_at = t;
			end = t + o.seconds * 1000LL;
			if (is_mode("flip"))
				end = t + 1000;
		}
		/* An honest fake server echoes until its client is done. */
		if (!lie_in_ring() && !lie_at && !end)
			end = t + (echo && is_mode("honest") ? 15000 : o.seconds * 1000LL);
		if (is_mode("flip") && flipping && t >= end) {
			flipping = 0;
			pthread_join(flip_thread, NULL);
			end = t + o.seconds * 1000LL;
		}
		/* silent_close: every arm of the victim's taken (a bell promised)
		 * and none rung; after SILENT_END_MS our stream ends too, with
		 * TCP kept open and silent: the victim closes owing itself bells. */
		if (is_mode("silent_close") && st.lie_done) {
			__atomic_exchange_n(&st.tx.h->consumer_armed, 0, __ATOMIC_SEQ_CST);
			if (t - lie_at > SILENT_END_MS && !st.tx.h->producer_closed) {
				__atomic_store_n(&st.tx.h->producer_closed, 1, __ATOMIC_RELEASE);
				say("%s", "stream ended, arms taken, no bell");
			}
		}
		if (is_mode("flip") && flipping && (t & 7) == 0) {
			bell('D');
			bell('S');
		}
		if ((end && t >= end) || st.eof || st.reset)
			break;
		/* ring_huge: until the victim echoed all of it (however slow a
		 * loaded machine makes it), or 15 s. */
		if (is_mode("ring_huge") && !st.refused) {
			uint64_t held = __atomic_load_n(&st.rx.h->tail, __ATOMIC_ACQUIRE) - st.rx.h->head;

			end = held + 64 >= o.payload || t - start > 15000 ? t : 0;
		}
		wait_fd(st.tcp, POLLIN, 1);
	}
	/* The victim may end the connection while the cursors still flip: the
	 * true ones must be back before the last look, or that look reads
	 * with a head 1 GiB off and counts old echo as never sent. */
	if (is_mode("flip") && flipping) {
		flipping = 0;
		pthread_join(flip_thread, NULL);
	}
	if (!echo && !(st.lie_done && head_lie) && !shrunk()) {
		st.parked = __atomic_load_n(&st.rx.h->tail, __ATOMIC_ACQUIRE) - st.rx.h->head;
		/* Last look at what the victim left in the ring. */
		if (!is_mode("ring_huge"))
			classify(buf, consume(buf, sizeof(buf)));
	}
}
