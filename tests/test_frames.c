/*
 * Unit tests for the in-band frames (shim/conn/frames.c) over a local
 * stream socket pair: the outgoing queue (a waiting bell is not queued
 * twice, none where our direction carries plain bytes, what TCP does not
 * take waits), the drain of bells (early ones kept; what is no frame
 * ends the connection as a reset would), the peer's SWITCH
 * frame read in pieces and refused when its nonce is not ours (the bytes
 * stay in the stream), and what is absorbed past the switch offset; a
 * TCP reset after the peer ended the channel cleanly reads as EOF (it
 * answers a bell of ours), any other stays a reset. The RETURN frame:
 * its bytes taken as they come, whatever they look like, up to the RESUME
 * behind; refused out of bounds, late, or from a peer whose wire version
 * has none; ours leaves ahead of the frames queued after it.
 */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frames.h"
#include "transport.h"
#include "wire.h"
#include "check_run.h"

static int sv[2]; /* sv[0]: ours, sv[1]: the peer's */

static struct shim_sock *new_sock(void)
{
	struct shim_sock *s = calloc(1, sizeof(*s));

	ck_assert_ptr_nonnull(s);
	s->refs = 1;
	s->role = SHIM_ROLE_CLIENT;
	s->tcp_keep = -1;
	s->tx_dir = SHIM_DIR_CHAN; /* bells go only where our direction switched */
	for (int i = 0; i < SHIM_NONCE_LEN; i++)
		s->rx_nonce[i] = (uint8_t)(0xa0 + i);
	return s;
}

static void setup(void)
{
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
}

static void teardown(void)
{
	close(sv[0]);
	close(sv[1]);
}

static ssize_t peer_read(void *buf, size_t len)
{
	return recv(sv[1], buf, len, MSG_DONTWAIT);
}

static void peer_write(const void *buf, size_t len)
{
	ck_assert_int_eq(send(sv[1], buf, len, 0), (ssize_t)len);
}

static struct shim_frame_switch switch_frame(const struct shim_sock *s)
{
	struct shim_frame_switch f = { .type = SHIM_FRAME_SWITCH };

	memcpy(f.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	return f;
}

/* Fills our send side until the kernel takes no more. */
static void fill_ours(void)
{
	char junk[4096] = { 0 };

	ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
	while (send(sv[0], junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
	ck_assert_int_eq(fcntl(sv[0], F_SETFL, 0), 0);
}

START_TEST(queued_frames_leave_in_order)
{
	struct shim_sock *s = new_sock();
	uint8_t bell = SHIM_FRAME_DATA_BELL, got[8];

	ck_assert_int_eq(shim_frames_queue(s, sv[0], &bell, 1), 0);
	bell = SHIM_FRAME_SPACE_BELL;
	ck_assert_int_eq(shim_frames_queue(s, sv[0], &bell, 1), 0);
	ck_assert_uint_eq(s->tcp_out_len, 0);
	ck_assert_int_eq(peer_read(got, sizeof(got)), 2);
	ck_assert_int_eq(got[0], SHIM_FRAME_DATA_BELL);
	ck_assert_int_eq(got[1], SHIM_FRAME_SPACE_BELL);
	free(s);
}
END_TEST

START_TEST(a_waiting_bell_is_not_queued_twice)
{
	struct shim_sock *s = new_sock();
	uint8_t bell = SHIM_FRAME_DATA_BELL;
	struct shim_frame_switch f = switch_frame(s);

	fill_ours();
	ck_assert_int_eq(shim_frames_queue(s, sv[0], &f, sizeof(f)), -EAGAIN);
	ck_assert_int_eq(shim_frames_queue(s, sv[0], &bell, 1), -EAGAIN);
	ck_assert_int_eq(shim_frames_queue(s, sv[0], &bell, 1), -EAGAIN);
	ck_assert_uint_eq(s->tcp_out_len, sizeof(f) + 1);
	/* A full queue refuses rather than overflow. */
	while (shim_frames_queue(s, sv[0], &f, sizeof(f)) == -EAGAIN)
		;
	ck_assert_uint_le(s->tcp_out_len, sizeof(s->tcp_out));
	free(s);
}
END_TEST

START_TEST(no_bell_where_our_direction_carries_plain_bytes)
{
	struct shim_sock *s = new_sock();
	uint8_t bell = SHIM_FRAME_DATA_BELL, got[4];

	s->tx_dir = SHIM_DIR_TCP;
	ck_assert_int_eq(shim_frames_queue(s, sv[0], &bell, 1), 0);
	s->tx_dir = SHIM_DIR_CHAN;
	s->fo_started = true; /* behind our RESUME the bytes are plain again */
	ck_assert_int_eq(shim_frames_queue(s, sv[0], &bell, 1), 0);
	ck_assert_uint_eq(s->tcp_out_len, 0);
	ck_assert_int_eq(peer_read(got, sizeof(got)), -1);
	free(s);
}
END_TEST

START_TEST(drain_takes_bells_and_counts_them)
{
	struct shim_sock *s = new_sock();
	uint8_t bells[3] = { SHIM_FRAME_DATA_BELL, SHIM_FRAME_SPACE_BELL, SHIM_FRAME_DATA_BELL };

	s->bells_owed = 2;
	peer_write(bells, sizeof(bells));
	shim_frames_drain(s, sv[0]);
	ck_assert_uint_eq(s->bells_owed, 0);
	/* The third came before the disarm that will owe it: early. */
	ck_assert_uint_eq(s->bells_early, 1);
	ck_assert(!s->rx_tcp_eof);
	ck_assert(!s->aborted);
	/* Nothing left in the stream. */
	ck_assert_int_eq(recv(sv[0], bells, 1, MSG_DONTWAIT), -1);
	ck_assert_int_eq(errno, EAGAIN);
	free(s);
}
END_TEST

START_TEST(drain_sees_eof)
{
	struct shim_sock *s = new_sock();

	s->bells_owed = 1;
	shutdown(sv[1], SHUT_WR);
	shim_frames_drain(s, sv[0]);
	ck_assert(s->rx_tcp_eof);
	ck_assert_uint_eq(s->bells_owed, 0);
	free(s);
}
END_TEST

START_TEST(no_frame_where_one_must_start_aborts)
{
	struct shim_sock *s = new_sock();
	uint8_t bytes[2] = { SHIM_FRAME_DATA_BELL, 'x' };

	peer_write(bytes, sizeof(bytes));
	shim_frames_drain(s, sv[0]);
	ck_assert(s->aborted);
	ck_assert(s->rx_tcp_eof);
	free(s);
}
END_TEST

START_TEST(resume_on_a_channel_that_can_not_fail_is_a_lie)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_resume r = { .type = SHIM_FRAME_RESUME, .rx_offset = htobe64(5) };

	/* No channel (or one without fail): RESUME is no frame of ours. */
	peer_write(&r, sizeof(r));
	shim_frames_drain(s, sv[0]);
	ck_assert(!s->fo_peer_known);
	ck_assert(s->aborted);
	free(s);
}
END_TEST

/* ---- RETURN (wire version 4) ---- */

static void fake_fail(struct shim_chan *ch)
{
	(void)ch;
}

static const struct shim_transport_ops return_ops = { .fail = fake_fail, .takes_return = true };
static const struct shim_transport_ops no_return_ops = { .fail = fake_fail };
static struct shim_chan return_chan = { .ops = &return_ops }, no_return_chan = { .ops = &no_return_ops };

static struct shim_frame_return return_frame(uint64_t len)
{
	return (struct shim_frame_return){ .type = SHIM_FRAME_RETURN, .length = htobe64(len) };
}

START_TEST(return_read_in_pieces_then_resume)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_return r = return_frame(10);
	struct shim_frame_resume res = { .type = SHIM_FRAME_RESUME, .rx_offset = htobe64(3) };
	const uint8_t *h = (const uint8_t *)&r;
	uint8_t bell = SHIM_FRAME_DATA_BELL, plain = 'p';

	s->rx_dir = SHIM_DIR_CHAN;
	s->chan = &return_chan;
	peer_write(&bell, 1);
	peer_write(h, 5); /* half a header: nothing taken yet */
	shim_frames_drain(s, sv[0]);
	ck_assert_ptr_null(s->fo_back);
	peer_write(h + 5, sizeof(r) - 5);
	peer_write("0123", 4);
	shim_frames_drain(s, sv[0]);
	ck_assert_ptr_nonnull(s->fo_back);
	ck_assert_uint_eq(s->fo_back_len, 10);
	ck_assert_uint_eq(s->fo_back_got, 4);
	/* Bytes that look like frames are the payload's. */
	peer_write("RRRRRR", 6);
	peer_write(&bell, 1);
	peer_write(&res, sizeof(res));
	peer_write(&plain, 1);
	shim_frames_drain(s, sv[0]);
	ck_assert(!s->aborted);
	ck_assert_uint_eq(s->fo_back_got, 10);
	ck_assert_mem_eq(s->fo_back, "0123RRRRRR", 10);
	ck_assert(s->fo_peer_known);
	ck_assert_uint_eq(s->fo_peer_rx_offset, 3);
	/* The plain byte behind the RESUME is the program's. */
	ck_assert_int_eq(recv(sv[0], &plain, 1, MSG_DONTWAIT), 1);
	ck_assert_int_eq(plain, 'p');
	free(s->fo_back);
	free(s);
}
END_TEST

START_TEST(a_return_out_of_bounds_or_late_aborts)
{
	const uint64_t lens[] = { 0, SHIM_FRAME_RETURN_MAX + 1ull, 4 };

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		struct shim_sock *s = new_sock();
		struct shim_frame_return r = return_frame(lens[i]);

		s->rx_dir = SHIM_DIR_CHAN;
		s->chan = &return_chan;
		s->fo_started = i == 2; /* our replay may be out already */
		peer_write(&r, sizeof(r));
		shim_frames_drain(s, sv[0]);
		ck_assert_msg(s->aborted, "length %llu", (unsigned long long)lens[i]);
		ck_assert_ptr_null(s->fo_back);
		free(s);
		teardown();
		setup();
	}
}
END_TEST

START_TEST(a_return_where_the_peer_has_none_aborts)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_return r = return_frame(1);

	s->rx_dir = SHIM_DIR_CHAN;
	s->chan = &no_return_chan;
	peer_write(&r, sizeof(r));
	shim_frames_drain(s, sv[0]);
	ck_assert(s->aborted);
	free(s);
}
END_TEST

START_TEST(our_return_leaves_ahead_of_the_queue)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_resume res = { .type = SHIM_FRAME_RESUME };
	uint8_t got[64];
	size_t n = 0;

	fill_ours();
	s->fo_ret = malloc(20);
	ck_assert_ptr_nonnull(s->fo_ret);
	memset(s->fo_ret, 'T', 20);
	s->fo_ret_len = s->fo_ret_got = 20;
	s->fo_ret_queued = true;
	ck_assert_int_eq(shim_frames_queue(s, sv[0], &res, sizeof(res)), -EAGAIN);
	/* The peer reads everything: first our filler, then the frames. */
	for (;;) {
		char junk[4096];
		ssize_t r = peer_read(junk, sizeof(junk));

		if (r <= 0)
			break;
	}
	ck_assert_int_eq(shim_frames_flush(s, sv[0]), 0);
	ck_assert_ptr_null(s->fo_ret);
	ck_assert(!s->fo_ret_queued);
	for (ssize_t r; (r = peer_read(got + n, sizeof(got) - n)) > 0;)
		n += (size_t)r;
	ck_assert_uint_eq(n, 20 + sizeof(res));
	ck_assert_int_eq(got[0], 'T');
	ck_assert_int_eq(got[19], 'T');
	ck_assert_int_eq(got[20], SHIM_FRAME_RESUME);
	free(s);
}
END_TEST

START_TEST(switch_frame_read_in_pieces)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_switch f = switch_frame(s);
	const uint8_t *b = (const uint8_t *)&f;

	peer_write(b, 10);
	ck_assert_int_eq(shim_frames_read_switch(s, sv[0]), 0);
	ck_assert_uint_eq(s->rx_frame_len, 10);
	peer_write(b + 10, sizeof(f) - 10);
	ck_assert_int_eq(shim_frames_read_switch(s, sv[0]), 1);
	ck_assert_uint_eq(s->rx_frame_len, sizeof(f));
	free(s);
}
END_TEST

START_TEST(a_foreign_nonce_stays_in_the_stream)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_switch f = switch_frame(s);
	uint8_t got[sizeof(f)];

	f.nonce[3] ^= 1;
	peer_write(&f, sizeof(f));
	ck_assert_int_eq(shim_frames_read_switch(s, sv[0]), -EPROTO);
	/* Only the matching prefix was taken; the rest is the stream's. */
	ck_assert_uint_eq(s->rx_frame_len, 0);
	ck_assert_int_eq(recv(sv[0], got, sizeof(got), MSG_DONTWAIT), (ssize_t)sizeof(got));
	ck_assert_mem_eq(got, &f, sizeof(f));
	free(s);
}
END_TEST

START_TEST(eof_inside_the_switch_frame_is_a_reset)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_switch f = switch_frame(s);

	peer_write(&f, 5);
	shutdown(sv[1], SHUT_WR);
	ck_assert_int_eq(shim_frames_read_switch(s, sv[0]), -ECONNRESET);
	free(s);
}
END_TEST

START_TEST(absorb_keeps_the_frame_and_flags_what_is_no_bell)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_switch f = switch_frame(s);
	uint8_t bytes[sizeof(f) + 2];

	memcpy(bytes, &f, sizeof(f));
	bytes[sizeof(f)] = SHIM_FRAME_DATA_BELL;
	bytes[sizeof(f) + 1] = SHIM_FRAME_SPACE_BELL;
	shim_frames_absorb(s, bytes, 7);
	shim_frames_absorb(s, bytes + 7, sizeof(bytes) - 7);
	ck_assert_uint_eq(s->rx_frame_len, sizeof(f));
	ck_assert_mem_eq(s->rx_frame, &f, sizeof(f));
	ck_assert(!s->fo_absorb_bad);
	/* The frame is complete: read_switch agrees without reading. */
	ck_assert_int_eq(shim_frames_read_switch(s, sv[0]), 1);
	bytes[0] = 'p';
	shim_frames_absorb(s, bytes, 1);
	ck_assert(s->fo_absorb_bad);
	free(s);
}
END_TEST

/* ---- a reset behind the peer's clean end (TCP: loopback) ---- */

static bool peer_clean;

static bool fake_peer_ended_clean(struct shim_chan *ch)
{
	(void)ch;
	return peer_clean;
}

static const struct shim_transport_ops clean_end_ops = { .peer_ended_clean = fake_peer_ended_clean };
static struct shim_chan clean_end_chan = { .ops = &clean_end_ops };

/* A loopback TCP pair whose peer end then resets: *ours stays open. */
static void tcp_pair_reset_by_peer(int *ours)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	struct linger abortive = { .l_onoff = 1, .l_linger = 0 };
	struct pollfd p;
	int l = socket(AF_INET, SOCK_STREAM, 0), peer;

	ck_assert_int_ge(l, 0);
	ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(l, 1), 0);
	ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
	*ours = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(*ours, (struct sockaddr *)&a, sizeof(a)), 0);
	peer = accept(l, NULL, NULL);
	ck_assert_int_ge(peer, 0);
	close(l);
	ck_assert_int_eq(setsockopt(peer, SOL_SOCKET, SO_LINGER, &abortive, sizeof(abortive)), 0);
	close(peer);
	p = (struct pollfd){ .fd = *ours, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 5000), 1);
}

static struct shim_sock *switched_sock(void)
{
	struct shim_sock *s = new_sock();

	s->rx_dir = SHIM_DIR_CHAN;
	s->chan = &clean_end_chan;
	return s;
}

START_TEST(a_reset_after_the_peers_clean_end_reads_as_eof)
{
	struct shim_sock *s = switched_sock();
	int fd;

	peer_clean = true;
	tcp_pair_reset_by_peer(&fd);
	shim_frames_drain(s, fd);
	ck_assert(s->rx_tcp_eof);
	ck_assert(!s->rx_tcp_reset);
	ck_assert(!s->rx_reset_seen);
	close(fd);
	free(s);
}
END_TEST

START_TEST(any_other_reset_stays_a_reset)
{
	struct shim_sock *s = switched_sock();
	int fd;

	/* The peer did not end cleanly (no end of its stream, or bytes of
	 * ours unread, or its program's own SO_LINGER 0: close.c). */
	peer_clean = false;
	tcp_pair_reset_by_peer(&fd);
	shim_frames_drain(s, fd);
	ck_assert(s->rx_tcp_eof);
	ck_assert(s->rx_tcp_reset);
	ck_assert(s->rx_reset_seen);
	close(fd);
	/* A failover under way: the channel's word no longer counts. */
	free(s);
	s = switched_sock();
	s->fo_started = true;
	peer_clean = true;
	tcp_pair_reset_by_peer(&fd);
	shim_frames_drain(s, fd);
	ck_assert(s->rx_tcp_reset);
	close(fd);
	free(s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("frames");
	TCase *tc = tcase_create("frames");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, queued_frames_leave_in_order);
	tcase_add_test(tc, a_waiting_bell_is_not_queued_twice);
	tcase_add_test(tc, no_bell_where_our_direction_carries_plain_bytes);
	tcase_add_test(tc, drain_takes_bells_and_counts_them);
	tcase_add_test(tc, drain_sees_eof);
	tcase_add_test(tc, no_frame_where_one_must_start_aborts);
	tcase_add_test(tc, resume_on_a_channel_that_can_not_fail_is_a_lie);
	tcase_add_test(tc, return_read_in_pieces_then_resume);
	tcase_add_test(tc, a_return_out_of_bounds_or_late_aborts);
	tcase_add_test(tc, a_return_where_the_peer_has_none_aborts);
	tcase_add_test(tc, our_return_leaves_ahead_of_the_queue);
	tcase_add_test(tc, switch_frame_read_in_pieces);
	tcase_add_test(tc, a_foreign_nonce_stays_in_the_stream);
	tcase_add_test(tc, eof_inside_the_switch_frame_is_a_reset);
	tcase_add_test(tc, absorb_keeps_the_frame_and_flags_what_is_no_bell);
	tcase_add_test(tc, a_reset_after_the_peers_clean_end_reads_as_eof);
	tcase_add_test(tc, any_other_reset_stays_a_reset);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
