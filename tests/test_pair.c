/*
 * Unit tests for the pair channels (shim/transport/shm/pair.c): what a kept
 * pair brings is found by the connection it names and by nothing else; the
 * pending table is bounded; a pair that sends anything but a well-formed
 * HINT is dropped, and closes the fds of the rest of the batch it read
 * (one recvmmsg); a pair fd that the program closed and whose number it
 * got back for a file of its own is never read, written or closed; and
 * the ring arena's slots: C hands a slot out again only when its own
 * channel on it went and S released that very use, S maps the arena once,
 * refuses a second one or a slot without one, and gives back every slot
 * it is done with (claimed or not).
 *
 * Each test runs in a process of its own (Check's fork mode), with fresh
 * tables. Pairs are socketpairs here: both ends are this process, of our
 * own user, as a pair must be.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "arena.h"
#include "config.h"
#include "pair.h"
#include "reaper.h"
#include "rendezvous.h"
#include "ring.h"
#include "shm.h"
#include "wire.h"
#include "check_run.h"

static struct shim_tuple tuple_of(uint16_t client_port)
{
	struct shim_tuple t;

	memset(&t, 0, sizeof(t));
	t.local.addr[10] = t.local.addr[11] = 0xff;
	t.local.addr[12] = 127;
	t.local.addr[15] = 1;
	t.local.port = 6379;
	t.peer = t.local;
	t.peer.port = client_port;
	return t;
}

/* A HINT naming t (S's view), as C builds it. */
static struct shim_msg_hint hint_for(const struct shim_tuple *t)
{
	struct shim_msg_hint h;

	memset(&h, 0, sizeof(h));
	shim_msg_init(&h.hdr, SHIM_MSG_HINT, sizeof(h));
	memcpy(h.client_addr, t->peer.addr, 16);
	memcpy(h.server_addr, t->local.addr, 16);
	h.client_port = t->peer.port;
	h.server_port = t->local.port;
	h.ring_bytes = 4096;
	h.tcp_fd = 3;
	h.slot = SHIM_SLOT_NONE;
	return h;
}

/* Sends msg with two fresh fds (a socketpair end and a memfd) on fd. */
static void send_with_two(int fd, const void *msg, size_t len)
{
	int sp[2], fds[2];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(fds))];
	} control;
	struct iovec iov = { (void *)msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	fds[0] = sp[1];
	fds[1] = memfd_create("test-ring", MFD_CLOEXEC);
	ck_assert_int_ge(fds[1], 0);
	memset(&control, 0, sizeof(control));
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	ck_assert_int_eq(sendmsg(fd, &mh, 0), (ssize_t)len);
	close(sp[0]);
	close(sp[1]);
	close(fds[1]);
}

/* A pair kept at our S end; returns the C end to send on. */
static int server_pair(void)
{
	int sp[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
	shim_pair_keep_server(sp[1]);
	return sp[0];
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

START_TEST(a_hint_is_found_by_its_connection_only)
{
	int c = server_pair();
	struct shim_tuple mine = tuple_of(40000), other = tuple_of(40001);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;

	send_with_two(c, &h, sizeof(h));
	ck_assert(!shim_pair_claim(&other, &got, 1000));
	ck_assert(shim_pair_claim(&mine, &got, 1000));
	ck_assert_uint_eq(got.msg.client_port, 40000);
	ck_assert(fd_open(got.rv_fd) && fd_open(got.memfd));
	close(got.rv_fd);
	close(got.memfd);
	/* Taken once: it is the caller's now. */
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
}
END_TEST

START_TEST(pending_hints_are_bounded_oldest_first)
{
	int c = server_pair();
	struct shim_pair_hint got;
	unsigned long long t = 1000;

	/* One at a time, so that each drain finds one: 130 HINTs, 128 kept. */
	for (uint16_t i = 0; i < 130; i++) {
		struct shim_tuple ti = tuple_of((uint16_t)(41000 + i)), none = tuple_of(1);
		struct shim_msg_hint h = hint_for(&ti);

		send_with_two(c, &h, sizeof(h));
		ck_assert(!shim_pair_claim(&none, &got, ++t));
	}
	struct shim_tuple first = tuple_of(41000), second = tuple_of(41001), last = tuple_of(41129);

	ck_assert(!shim_pair_claim(&first, &got, t));
	ck_assert(!shim_pair_claim(&second, &got, t));
	ck_assert(shim_pair_claim(&last, &got, t));
	close(got.rv_fd);
	close(got.memfd);
}
END_TEST

START_TEST(pending_hints_expire)
{
	int c = server_pair();
	struct shim_tuple mine = tuple_of(40000), none = tuple_of(1);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;

	send_with_two(c, &h, sizeof(h));
	ck_assert(!shim_pair_claim(&none, &got, 1000)); /* read in at t=1000 */
	ck_assert(!shim_pair_claim(&mine, &got, 1000 + 2000000000ull));
}
END_TEST

/* A well-formed message that has no place on a pair (a SWITCH_AT). */
static void send_not_a_hint(int c)
{
	struct shim_msg_switch_at at;

	memset(&at, 0, sizeof(at));
	shim_msg_init(&at.hdr, SHIM_MSG_SWITCH_AT, sizeof(at));
	ck_assert_int_eq(send(c, &at, sizeof(at), 0), (ssize_t)sizeof(at));
}

START_TEST(a_pair_that_sends_anything_else_is_dropped)
{
	int c = server_pair();
	struct shim_tuple mine = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;

	send_not_a_hint(c);
	send_with_two(c, &h, sizeof(h));
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
	ck_assert(shim_reap_settled(5000));
	/* S closed its end: the next HINT can not even be sent. */
	ck_assert_int_lt(send(c, &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT), 0);
}
END_TEST

static int open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fd_open(fd);
	return n;
}

/* HINTs are read in batches (one recvmmsg): a pair dropped for a bad
 * message closes the fds of every message of that batch after it. */
START_TEST(a_dropped_pair_leaks_no_fd_of_its_batch)
{
	/* The reaper's own two fds first: they stay for the process's life. */
	shim_reap(dup(0));
	ck_assert(shim_reap_settled(5000));
	int before = open_fds(), c = server_pair(); /* c, S's end, the hub */
	struct shim_tuple mine = tuple_of(40000), other = tuple_of(40001);
	struct shim_msg_hint h = hint_for(&mine), h2 = hint_for(&other);
	struct shim_pair_hint got;

	send_not_a_hint(c);
	send_with_two(c, &h, sizeof(h));
	send_with_two(c, &h2, sizeof(h2));
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
	ck_assert(!shim_pair_claim(&other, &got, 1000));
	ck_assert(shim_reap_settled(5000));
	/* Only c is left: S's end, the hub and its marker (owned.h) went with
	 * the pair, and the four fds the two HINTs brought were closed unread. */
	ck_assert_int_eq(open_fds(), before + 1);
}
END_TEST

START_TEST(a_hint_without_its_two_fds_is_not_kept)
{
	int c = server_pair();
	struct shim_tuple mine = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;

	ck_assert_int_eq(send(c, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
}
END_TEST

/* The program closes the fd of our client pair and gets its number back
 * for a pipe of its own: a HINT must not be written into that pipe. */
START_TEST(a_reused_client_pair_number_is_never_written)
{
	struct shim_endpoint server = tuple_of(1).local;
	struct shim_tuple t = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&t);
	int sp[2], p[2], kept, rvp[2];
	struct shim_chan *chan;
	char byte;
	pid_t pid;
	int pidfd;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
	kept = sp[1];
	shim_pair_keep_client(kept, &server);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rvp), 0);
	/* Sent while the pair is ours. */
	ck_assert_int_eq(shim_pair_send_hint(&server, &h, rvp[1], 1000, &pid, &pidfd, &chan), 0);
	if (pidfd >= 0)
		close(pidfd);
	ck_assert_int_eq(pid, getpid());
	chan->ops->destroy(chan);
	/* Behind the shim's back: the number now names a pipe. */
	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(dup2(p[1], kept), kept);
	ck_assert_int_eq(shim_pair_send_hint(&server, &h, rvp[1], 2000, &pid, &pidfd, &chan), -ENOENT);
	ck_assert_int_lt(read(p[0], &byte, 1), 0); /* nothing was written into it */
	ck_assert(fd_open(kept));                  /* nor was it closed */
}
END_TEST

/* The same at S: a number reused for a pipe is neither read nor closed. */
START_TEST(a_reused_server_pair_number_is_never_read)
{
	int c = server_pair(), p[2], kept;
	struct shim_tuple mine = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&mine);
	struct shim_pair_hint got;
	char byte = 'x';

	/* The kept end is the lowest free number after c, as socketpair made it. */
	kept = c + 1;
	ck_assert(fd_open(kept));
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	send_with_two(c, &h, sizeof(h));
	ck_assert_int_eq(dup2(p[0], kept), kept);
	ck_assert_int_eq(write(p[1], &byte, 1), 1);
	ck_assert(!shim_pair_claim(&mine, &got, 1000));
	ck_assert(fd_open(kept));
	ck_assert_int_eq(read(kept, &byte, 1), 1); /* its byte is still there */
	/* A fork's child lets every pair go: not this number, which is no pair. */
	shim_pair_atfork_prepare();
	shim_pair_atfork_child();
	ck_assert(fd_open(kept));
}
END_TEST

/* ---- the ring arena ---- */

/* C's side: our client pair for server, its S end returned. */
static int client_pair(const struct shim_endpoint *server)
{
	int sp[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
	shim_pair_keep_client(sp[1], server);
	return sp[0];
}

/* C sends a HINT; S's end reads it: its slot, and whether the arena came. */
static struct shim_chan *hint_out(const struct shim_endpoint *server, int s_end, uint32_t *slot, uint32_t *gen,
				  bool *with_fd)
{
	struct shim_tuple t = tuple_of(40000);
	struct shim_msg_hint h = hint_for(&t), got;
	struct shim_chan *chan;
	int rvp[2], fds[2];
	pid_t pid;
	int pidfd;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rvp), 0);
	ck_assert_int_eq(shim_pair_send_hint(server, &h, rvp[1], 1000, &pid, &pidfd, &chan), 0);
	if (pidfd >= 0)
		close(pidfd);
	ck_assert_int_eq(shim_rv_recv_fds(s_end, &got, sizeof(got), fds, 2), (ssize_t)sizeof(got));
	ck_assert_int_eq(shim_msg_check(&got, sizeof(got)), SHIM_MSG_HINT);
	ck_assert_int_ge(fds[0], 0);
	*slot = got.slot;
	*gen = got.slot_gen;
	/* The arena, once, or a ring of its own: the memfd comes along. */
	*with_fd = fds[1] >= 0;
	ck_assert_int_eq(*with_fd, got.arena_slots != 0 || got.slot == SHIM_SLOT_NONE);
	close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	close(rvp[0]);
	close(rvp[1]);
	return chan;
}

static void release_in(int s_end, uint32_t slot, uint32_t gen)
{
	struct shim_msg_release rel;

	memset(&rel, 0, sizeof(rel));
	shim_msg_init(&rel.hdr, SHIM_MSG_RELEASE, sizeof(rel));
	rel.slot = slot;
	rel.slot_gen = gen;
	ck_assert_int_eq(send(s_end, &rel, sizeof(rel), 0), (ssize_t)sizeof(rel));
}

START_TEST(a_slot_is_handed_out_again_only_when_both_ends_are_done)
{
	struct shim_endpoint server = tuple_of(1).local;
	int s_end = client_pair(&server);
	struct shim_chan *c0, *c1, *c;
	uint32_t slot, gen0, gen1, gen;
	bool arena;

	c0 = hint_out(&server, s_end, &slot, &gen0, &arena);
	ck_assert(arena); /* the first HINT brings the arena */
	ck_assert_uint_eq(slot, 0);
	c1 = hint_out(&server, s_end, &slot, &gen1, &arena);
	ck_assert(!arena); /* once */
	ck_assert_uint_eq(slot, 1);
	/* Our channel on slot 0 went, S still holds it: not handed out. */
	c0->ops->destroy(c0);
	c = hint_out(&server, s_end, &slot, &gen, &arena);
	ck_assert_uint_eq(slot, 2);
	c->ops->destroy(c);
	/* A RELEASE of another use of slot 0 changes nothing. */
	release_in(s_end, 0, gen0 + 1);
	c = hint_out(&server, s_end, &slot, &gen, &arena);
	ck_assert_uint_eq(slot, 3);
	c->ops->destroy(c);
	/* S releases slot 1 while our channel on it lives (a lie, or S done
	 * early): it is not ours to hand out while we use it. */
	release_in(s_end, 1, gen1);
	release_in(s_end, 0, gen0);
	c = hint_out(&server, s_end, &slot, &gen, &arena);
	ck_assert_uint_eq(slot, 0); /* both done with its last use */
	ck_assert_uint_ne(gen, gen0);
	c->ops->destroy(c);
	c = hint_out(&server, s_end, &slot, &gen, &arena);
	ck_assert_uint_ne(slot, 1);
	c->ops->destroy(c);
	c1->ops->destroy(c1);
}
END_TEST

START_TEST(a_full_arena_sends_rings_of_their_own)
{
	struct shim_endpoint server = tuple_of(1).local;
	int s_end = client_pair(&server);
	struct shim_chan *live[SHIM_ARENA_SLOTS_MAX];
	uint32_t slot, gen;
	bool arena;

	for (unsigned i = 0; i < SHIM_ARENA_SLOTS_MAX; i++) {
		live[i] = hint_out(&server, s_end, &slot, &gen, &arena);
		ck_assert_uint_eq(slot, i);
	}
	struct shim_chan *own = hint_out(&server, s_end, &slot, &gen, &arena);

	ck_assert_uint_eq(slot, SHIM_SLOT_NONE);
	ck_assert(arena); /* its own memfd */
	own->ops->destroy(own);
	for (unsigned i = 0; i < SHIM_ARENA_SLOTS_MAX; i++)
		live[i]->ops->destroy(live[i]);
}
END_TEST

/* What S sent back on the pair: true with the RELEASE's slot and gen. */
static bool release_out(int c, uint32_t *slot, uint32_t *gen)
{
	struct shim_msg_release rel;

	if (recv(c, &rel, sizeof(rel), MSG_DONTWAIT) != (ssize_t)sizeof(rel) ||
	    shim_msg_check(&rel, sizeof(rel)) != SHIM_MSG_RELEASE)
		return false;
	*slot = rel.slot;
	*gen = rel.slot_gen;
	return true;
}

/* Sends a slot HINT on c, with an arena memfd of slots when arena_slots. */
static void slot_hint_in(int c, const struct shim_tuple *t, uint32_t slot, uint32_t gen, uint16_t arena_slots)
{
	struct shim_msg_hint h = hint_for(t);
	int sp[2], fds[2] = { -1, -1 };

	h.slot = slot;
	h.slot_gen = gen;
	h.arena_slots = arena_slots;
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	fds[0] = sp[1];
	if (arena_slots) {
		struct shim_arena a;

		ck_assert_int_eq(shim_arena_make(h.ring_bytes, arena_slots, &a, &fds[1]), 0);
		for (unsigned k = 0; k < arena_slots; k++) {
			shim_ring_format(shim_arena_slot(&a, k), h.ring_bytes);
			shim_ring_format(shim_arena_slot(&a, k) + shim_ring_footprint(h.ring_bytes), h.ring_bytes);
		}
		shim_arena_unmap(&a);
	}
	ck_assert_int_eq(shim_rv_send_fds(c, &h, sizeof(h), fds, arena_slots ? 2 : 1), 0);
	close(sp[0]);
	close(sp[1]);
	if (fds[1] >= 0)
		close(fds[1]);
}

START_TEST(the_server_maps_the_arena_once_and_releases_every_slot)
{
	int c = server_pair();
	struct shim_tuple t0 = tuple_of(40000), t1 = tuple_of(40001), t2 = tuple_of(40002), none = tuple_of(1);
	struct shim_pair_hint got;
	struct shim_chan *chan;
	uint32_t slot, gen;

	shim_cfg.ring_kb = 4;
	slot_hint_in(c, &t0, 0, 7, SHIM_ARENA_SLOTS_MAX);
	slot_hint_in(c, &t1, 1, 8, 0);
	slot_hint_in(c, &t2, 2, 9, 0);
	ck_assert(shim_pair_claim(&t0, &got, 1000));
	ck_assert_int_eq(got.memfd, -1);
	ck_assert_int_eq(shim_pair_hint_ring(&got, &chan), 0);
	close(got.rv_fd);
	ck_assert(!release_out(c, &slot, &gen)); /* in use */
	/* Claimed, then not used (a stranger's, say): given back at once. */
	ck_assert(shim_pair_claim(&t1, &got, 1000));
	shim_pair_hint_drop_ring(&got);
	close(got.rv_fd);
	ck_assert(release_out(c, &slot, &gen));
	ck_assert_uint_eq(slot, 1);
	ck_assert_uint_eq(gen, 8);
	/* Never claimed: given back when it expires. */
	ck_assert(!shim_pair_claim(&none, &got, 1000 + 2000000000ull));
	ck_assert(release_out(c, &slot, &gen));
	ck_assert_uint_eq(slot, 2);
	/* The channel ends: its slot goes back too. */
	chan->ops->destroy(chan);
	ck_assert(release_out(c, &slot, &gen));
	ck_assert_uint_eq(slot, 0);
	ck_assert_uint_eq(gen, 7);
}
END_TEST

START_TEST(a_second_arena_or_a_slot_without_one_drops_the_pair)
{
	struct shim_tuple t0 = tuple_of(40000), t1 = tuple_of(40001), t2 = tuple_of(40002);
	struct shim_pair_hint got;
	int c;

	shim_cfg.ring_kb = 4;
	/* A slot before any arena came. */
	c = server_pair();
	slot_hint_in(c, &t0, 0, 1, 0);
	ck_assert(!shim_pair_claim(&t0, &got, 1000));
	ck_assert(shim_reap_settled(5000));
	ck_assert_int_lt(send(c, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT), 0);
	/* A second arena on one pair. */
	c = server_pair();
	slot_hint_in(c, &t0, 0, 1, 2);
	slot_hint_in(c, &t1, 1, 1, 2);
	ck_assert(!shim_pair_claim(&t1, &got, 1000));
	ck_assert(shim_reap_settled(5000));
	ck_assert_int_lt(send(c, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT), 0);
	/* Rings larger than ours. */
	c = server_pair();
	shim_cfg.ring_kb = 4;
	{
		struct shim_msg_hint h = hint_for(&t2);
		int sp[2], fds[2];
		struct shim_arena a;

		h.ring_bytes = 8192;
		h.slot = 0;
		h.arena_slots = 1;
		ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
		fds[0] = sp[1];
		ck_assert_int_eq(shim_arena_make(8192, 1, &a, &fds[1]), 0);
		ck_assert_int_eq(shim_rv_send_fds(c, &h, sizeof(h), fds, 2), 0);
		ck_assert(!shim_pair_claim(&t2, &got, 1000));
		ck_assert(shim_reap_settled(5000));
		ck_assert_int_lt(send(c, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT), 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("pair");
	TCase *tc = tcase_create("pair");

	tcase_add_test(tc, a_hint_is_found_by_its_connection_only);
	tcase_add_test(tc, pending_hints_are_bounded_oldest_first);
	tcase_add_test(tc, pending_hints_expire);
	tcase_add_test(tc, a_pair_that_sends_anything_else_is_dropped);
	tcase_add_test(tc, a_hint_without_its_two_fds_is_not_kept);
	tcase_add_test(tc, a_dropped_pair_leaks_no_fd_of_its_batch);
	tcase_add_test(tc, a_reused_client_pair_number_is_never_written);
	tcase_add_test(tc, a_reused_server_pair_number_is_never_read);
	tcase_add_test(tc, a_slot_is_handed_out_again_only_when_both_ends_are_done);
	tcase_add_test(tc, a_full_arena_sends_rings_of_their_own);
	tcase_add_test(tc, the_server_maps_the_arena_once_and_releases_every_slot);
	tcase_add_test(tc, a_second_arena_or_a_slot_without_one_drops_the_pair);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
