/*
 * The SPSC ring (shim/transport/ring.c), and above all what it does with cursors a
 * hostile peer writes into the shared header. Each ring sits between two
 * inaccessible pages, so an access outside the data area kills the test
 * instead of passing unnoticed.
 */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ring.h"
#include "check_run.h"

#define RING_SIZE 4096u

struct guarded {
	uint8_t *map;
	size_t map_len;
	void *mem; /* header + data, between the guards */
};

static struct guarded guarded_ring(uint32_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = shim_ring_footprint(size);
	struct guarded g = { .map_len = len + 2 * page };

	g.map = mmap(NULL, g.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(g.map, MAP_FAILED);
	ck_assert_int_eq(mprotect(g.map, page, PROT_NONE), 0);
	ck_assert_int_eq(mprotect(g.map + page + len, page, PROT_NONE), 0);
	g.mem = g.map + page;
	shim_ring_format(g.mem, size);
	return g;
}

/* The producer's and the consumer's views of one ring. */
struct pair {
	struct guarded g;
	struct shim_ring prod, cons;
};

static void pair_init(struct pair *p)
{
	p->g = guarded_ring(RING_SIZE);
	ck_assert_int_eq(shim_ring_attach(&p->prod, p->g.mem, RING_SIZE), 0);
	ck_assert_int_eq(shim_ring_attach(&p->cons, p->g.mem, RING_SIZE), 0);
}

static void pair_fini(struct pair *p)
{
	munmap(p->g.map, p->g.map_len);
}

static size_t put(struct shim_ring *r, const void *buf, size_t len)
{
	struct iovec iov = { (void *)buf, len };

	return shim_ring_write(r, &iov, 1, 0);
}

static size_t get(struct shim_ring *r, void *buf, size_t len)
{
	struct iovec iov = { buf, len };

	return shim_ring_read(r, &iov, 1, false);
}

/* What a peer does: write a cursor straight into the shared header. */
static void peer_sets_tail(struct pair *p, uint64_t tail)
{
	__atomic_store_n(&p->cons.hdr->tail, tail, __ATOMIC_RELEASE);
}

static void peer_sets_head(struct pair *p, uint64_t head)
{
	__atomic_store_n(&p->prod.hdr->head, head, __ATOMIC_RELEASE);
}

START_TEST(bytes_cross_and_wrap)
{
	struct pair p;
	uint8_t out[RING_SIZE], in[RING_SIZE];

	pair_init(&p);
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = (uint8_t)(i * 7 + 3);
	/* Misalign the cursors so that the full-ring write wraps. */
	ck_assert_uint_eq(put(&p.prod, out, 1000), 1000);
	ck_assert_uint_eq(get(&p.cons, in, 1000), 1000);
	ck_assert_uint_eq(put(&p.prod, out, sizeof(out) + 10), RING_SIZE);
	ck_assert_uint_eq(shim_ring_writable(&p.prod), 0);
	ck_assert_uint_eq(shim_ring_readable(&p.cons), RING_SIZE);
	ck_assert_uint_eq(get(&p.cons, in, sizeof(in)), RING_SIZE);
	ck_assert_mem_eq(in, out, sizeof(out));
	ck_assert(!shim_ring_violated(&p.cons) && !shim_ring_violated(&p.prod));
	pair_fini(&p);
}
END_TEST

START_TEST(tail_far_ahead_reads_nothing)
{
	struct pair p;
	uint8_t in[RING_SIZE];

	pair_init(&p);
	peer_sets_tail(&p, 1ull << 30); /* 1 GiB ahead: once a memory disclosure */
	ck_assert_uint_eq(shim_ring_readable(&p.cons), 0);
	ck_assert_uint_eq(get(&p.cons, in, sizeof(in)), 0);
	ck_assert(shim_ring_violated(&p.cons));
	/* Sticky: a peer that puts the cursor back is not believed again. */
	peer_sets_tail(&p, 10);
	ck_assert_uint_eq(get(&p.cons, in, sizeof(in)), 0);
	ck_assert(!shim_ring_consumer_arm(&p.cons, 1)); /* no sleep on a dead ring */
	pair_fini(&p);
}
END_TEST

/* The armed word says how each sleeper wants its bell: the producer gets
 * every kind asked for since the last take, once; a disarm tells what was
 * left (0: taken). */
START_TEST(arms_carry_their_bell_kinds)
{
	struct pair p;
	uint8_t byte = 7;

	pair_init(&p);
	ck_assert(shim_ring_consumer_arm(&p.cons, 2));
	ck_assert(shim_ring_consumer_arm(&p.cons, 1));
	ck_assert_uint_eq(put(&p.prod, &byte, 1), 1);
	ck_assert_uint_eq(shim_ring_producer_should_bell(&p.prod), 3);
	ck_assert_uint_eq(shim_ring_producer_should_bell(&p.prod), 0); /* one bell per arm */
	ck_assert_uint_eq(shim_ring_consumer_disarm(&p.cons), 0);       /* taken */
	ck_assert(!shim_ring_consumer_arm(&p.cons, 2));                 /* data is there */
	ck_assert_uint_eq(shim_ring_consumer_disarm(&p.cons), 2);       /* not taken */
	pair_fini(&p);
}
END_TEST

START_TEST(tail_one_past_a_ring_is_a_violation)
{
	struct pair p;
	uint8_t in[RING_SIZE];

	pair_init(&p);
	peer_sets_tail(&p, RING_SIZE); /* exactly full: allowed */
	ck_assert_uint_eq(shim_ring_readable(&p.cons), RING_SIZE);
	ck_assert(!shim_ring_violated(&p.cons));
	ck_assert_uint_eq(get(&p.cons, in, 100), 100);
	peer_sets_tail(&p, 100 + RING_SIZE + 1); /* one byte too many */
	ck_assert_uint_eq(get(&p.cons, in, sizeof(in)), 0);
	ck_assert(shim_ring_violated(&p.cons));
	pair_fini(&p);
}
END_TEST

START_TEST(tail_behind_head_is_a_violation)
{
	struct pair p;
	uint8_t buf[64] = { 0 };

	pair_init(&p);
	ck_assert_uint_eq(put(&p.prod, buf, sizeof(buf)), sizeof(buf));
	ck_assert_uint_eq(get(&p.cons, buf, sizeof(buf)), sizeof(buf));
	peer_sets_tail(&p, 10); /* moved back behind what we consumed */
	ck_assert_uint_eq(shim_ring_readable(&p.cons), 0);
	ck_assert(shim_ring_violated(&p.cons));
	pair_fini(&p);
}
END_TEST

START_TEST(head_ahead_of_tail_writes_nothing)
{
	struct pair p;
	uint8_t out[RING_SIZE] = { 0 };

	pair_init(&p);
	peer_sets_head(&p, 1ull << 20); /* "consumed" bytes never written */
	ck_assert_uint_eq(shim_ring_writable(&p.prod), 0);
	ck_assert_uint_eq(put(&p.prod, out, sizeof(out)), 0);
	ck_assert(shim_ring_violated(&p.prod));
	ck_assert(!shim_ring_producer_arm(&p.prod, 1));
	pair_fini(&p);
}
END_TEST

START_TEST(head_more_than_a_ring_behind_writes_nothing)
{
	struct pair p;
	uint8_t out[RING_SIZE] = { 0 };

	pair_init(&p);
	ck_assert_uint_eq(put(&p.prod, out, RING_SIZE), RING_SIZE);
	ck_assert_uint_eq(get(&p.cons, out, RING_SIZE), RING_SIZE);
	ck_assert_uint_eq(put(&p.prod, out, 10), 10);
	/* tail is RING_SIZE + 10: a head of 0 claims more than a ring in use. */
	peer_sets_head(&p, 0);
	ck_assert_uint_eq(put(&p.prod, out, sizeof(out)), 0);
	ck_assert(shim_ring_violated(&p.prod));
	pair_fini(&p);
}
END_TEST

START_TEST(own_cursor_is_never_read_back)
{
	struct pair p;
	uint8_t out[100], in[100];

	pair_init(&p);
	memset(out, 'x', sizeof(out));
	ck_assert_uint_eq(put(&p.prod, out, sizeof(out)), sizeof(out));
	/* The peer (here: the producer side) scribbles over the consumer's own
	 * head and the producer's own tail; each side trusts its private copy. */
	__atomic_store_n(&p.cons.hdr->head, 1ull << 40, __ATOMIC_RELAXED);
	ck_assert_uint_eq(shim_ring_readable(&p.cons), sizeof(out));
	ck_assert_uint_eq(get(&p.cons, in, sizeof(in)), sizeof(in));
	ck_assert_mem_eq(in, out, sizeof(out));
	__atomic_store_n(&p.prod.hdr->tail, 5, __ATOMIC_RELAXED);
	ck_assert_uint_eq(shim_ring_writable(&p.prod), RING_SIZE);
	ck_assert(!shim_ring_violated(&p.cons) && !shim_ring_violated(&p.prod));
	pair_fini(&p);
}
END_TEST

START_TEST(changed_size_in_header_is_ignored_after_attach)
{
	struct pair p;
	uint8_t in[RING_SIZE];

	pair_init(&p);
	p.cons.hdr->size = 1u << 30; /* our mask was fixed at attach */
	peer_sets_tail(&p, RING_SIZE);
	ck_assert_uint_eq(get(&p.cons, in, sizeof(in)), RING_SIZE);
	ck_assert(!shim_ring_violated(&p.cons));
	pair_fini(&p);
}
END_TEST

START_TEST(attach_checks_the_header)
{
	struct guarded g = guarded_ring(RING_SIZE);
	struct shim_ring r;

	ck_assert_int_eq(shim_ring_attach(&r, g.mem, RING_SIZE * 2), -EPROTO);
	ck_assert_int_eq(shim_ring_attach(&r, g.mem, 3000), -EPROTO);
	((struct shim_ring_hdr *)g.mem)->magic = 0;
	ck_assert_int_eq(shim_ring_attach(&r, g.mem, RING_SIZE), -EPROTO);
	munmap(g.map, g.map_len);
}
END_TEST

/* A consumer stopped for a failover sees the tail of the moment it stopped,
 * whatever is written after; with drop_unread, only what it read. */
START_TEST(stopped_consumer_sees_the_frozen_tail)
{
	struct pair p;
	uint8_t buf[64];

	pair_init(&p);
	ck_assert_uint_eq(put(&p.prod, "abcdefgh", 8), 8);
	ck_assert_uint_eq(get(&p.cons, buf, 3), 3);
	shim_ring_consumer_stop(&p.cons, false);
	ck_assert_uint_eq(put(&p.prod, "ijkl", 4), 4);
	peer_sets_tail(&p, 1u << 30); /* a lie after the stop is not even seen */
	ck_assert_uint_eq(shim_ring_received(&p.cons), 8);
	ck_assert_uint_eq(shim_ring_readable(&p.cons), 5);
	ck_assert(!shim_ring_violated(&p.cons));
	shim_ring_consumer_stop(&p.cons, true);
	ck_assert_uint_eq(shim_ring_received(&p.cons), 3);
	ck_assert_uint_eq(get(&p.cons, buf, sizeof(buf)), 0);
	pair_fini(&p);
}
END_TEST

START_TEST(stopped_producer_writes_nothing)
{
	struct pair p;

	pair_init(&p);
	shim_ring_producer_stop(&p.prod);
	ck_assert_uint_eq(shim_ring_writable(&p.prod), 0);
	ck_assert_uint_eq(put(&p.prod, "abcd", 4), 0);
	pair_fini(&p);
}
END_TEST

/* What the peer did not receive comes out of our own ring, and only from
 * an offset within one ring of our tail. */
START_TEST(unreceived_bytes_come_from_the_ring_within_bounds)
{
	struct pair p;
	uint8_t chunk[1000], out[RING_SIZE];
	struct iovec part[2];
	uint64_t tail = 0;
	size_t len;
	int n;

	pair_init(&p);
	for (int i = 0; i < 10; i++) { /* wrap the ring a few times */
		memset(chunk, 'a' + i, sizeof(chunk));
		ck_assert_uint_eq(put(&p.prod, chunk, sizeof(chunk)), sizeof(chunk));
		ck_assert_uint_eq(get(&p.cons, out, sizeof(chunk)), sizeof(chunk));
		tail += sizeof(chunk);
	}
	n = shim_ring_unreceived(&p.prod, tail - 1500, part);
	ck_assert_int_ge(n, 1);
	len = part[0].iov_len + (n > 1 ? part[1].iov_len : 0);
	ck_assert_uint_eq(len, 1500);
	memcpy(out, part[0].iov_base, part[0].iov_len);
	if (n > 1)
		memcpy(out + part[0].iov_len, part[1].iov_base, part[1].iov_len);
	ck_assert_int_eq(out[0], 'i');
	ck_assert_int_eq(out[499], 'i');
	ck_assert_int_eq(out[500], 'j');
	ck_assert_int_eq(out[1499], 'j');
	ck_assert_int_eq(shim_ring_unreceived(&p.prod, tail, part), 1);
	ck_assert_uint_eq(part[0].iov_len, 0);
	ck_assert_int_eq(shim_ring_unreceived(&p.prod, tail + 1, part), -ERANGE);
	ck_assert_int_eq(shim_ring_unreceived(&p.prod, tail - RING_SIZE - 1, part), -ERANGE);
	ck_assert_int_eq(shim_ring_unreceived(&p.prod, 0, part), -ERANGE);
	pair_fini(&p);
}
END_TEST

/* After a fork both processes hold a copy of the ring's private state: the
 * one that moves second must start where the first stopped. */
START_TEST(shared_cursors_follow_the_other_process)
{
	struct pair p;
	struct shim_ring prod_copy, cons_copy;
	uint8_t buf[64];

	pair_init(&p);
	ck_assert_uint_eq(put(&p.prod, "0123", 4), 4);
	ck_assert_uint_eq(get(&p.cons, buf, 2), 2);
	shim_ring_share_cursors(&p.prod, true);
	shim_ring_share_cursors(&p.cons, false);
	prod_copy = p.prod; /* the fork */
	cons_copy = p.cons;
	ck_assert_uint_eq(put(&prod_copy, "4567", 4), 4);
	ck_assert_uint_eq(get(&cons_copy, buf, 4), 4);
	ck_assert(!memcmp(buf, "2345", 4));
	ck_assert_uint_eq(put(&p.prod, "89", 2), 2);
	ck_assert_uint_eq(get(&p.cons, buf, sizeof(buf)), 4);
	ck_assert(!memcmp(buf, "6789", 4));
	ck_assert(!shim_ring_violated(&p.cons) && !shim_ring_violated(&p.prod));
	pair_fini(&p);
}
END_TEST

/* Each end learns that the other one is shared (io_tx.c keeps such a
 * connection from an unpaid hand-back), and only the other one's word
 * counts: its own sharing is not the peer's. */
START_TEST(each_end_sees_the_other_shared)
{
	struct pair p;

	pair_init(&p);
	ck_assert(!shim_ring_peer_shared(&p.prod, true) && !shim_ring_peer_shared(&p.cons, false));
	shim_ring_share_cursors(&p.prod, true);
	ck_assert(shim_ring_peer_shared(&p.cons, false));
	ck_assert(!shim_ring_peer_shared(&p.prod, true));
	shim_ring_share_cursors(&p.cons, false);
	ck_assert(shim_ring_peer_shared(&p.prod, true));
	pair_fini(&p);
}
END_TEST

/* The Dekker pair of ring.h: a RESUME goes only to a consumer that had not
 * closed, a close waits only for an announced one, and the consumer sees
 * the announcement (io_ready.c reads the RESUME on it). */
START_TEST(resume_and_close_do_not_cross)
{
	struct pair p;

	pair_init(&p);
	ck_assert(!shim_ring_producer_resuming(&p.cons));
	ck_assert(shim_ring_resume_announce(&p.prod));
	ck_assert(shim_ring_producer_resuming(&p.cons));
	ck_assert(shim_ring_close_before_resume(&p.cons));
	pair_fini(&p);

	pair_init(&p);
	ck_assert(!shim_ring_close_before_resume(&p.cons));
	ck_assert(!shim_ring_resume_announce(&p.prod));
	pair_fini(&p);
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("ring");

	tcase_add_test(tc, bytes_cross_and_wrap);
	tcase_add_test(tc, arms_carry_their_bell_kinds);
	tcase_add_test(tc, each_end_sees_the_other_shared);
	tcase_add_test(tc, resume_and_close_do_not_cross);
	tcase_add_test(tc, tail_far_ahead_reads_nothing);
	tcase_add_test(tc, tail_one_past_a_ring_is_a_violation);
	tcase_add_test(tc, tail_behind_head_is_a_violation);
	tcase_add_test(tc, head_ahead_of_tail_writes_nothing);
	tcase_add_test(tc, head_more_than_a_ring_behind_writes_nothing);
	tcase_add_test(tc, own_cursor_is_never_read_back);
	tcase_add_test(tc, changed_size_in_header_is_ignored_after_attach);
	tcase_add_test(tc, attach_checks_the_header);
	tcase_add_test(tc, stopped_consumer_sees_the_frozen_tail);
	tcase_add_test(tc, stopped_producer_writes_nothing);
	tcase_add_test(tc, unreceived_bytes_come_from_the_ring_within_bounds);
	tcase_add_test(tc, shared_cursors_follow_the_other_process);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(ring_suite());
}
