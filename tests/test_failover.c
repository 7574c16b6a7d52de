/*
 * Unit tests for where a failover's bytes start (shim/conn/failover.c,
 * the RESUME frame's tx_from: wire.h, SHIM_RESUME_F_TX_FROM) over a local
 * stream socket pair, with a failed channel of the test's own:
 *   - the peer's bytes behind its RESUME start past our count (a
 *     completion it had acknowledged never reached our count): the
 *     connection is reset before one of them is read, and they stay in
 *     the stream;
 *   - they start at our count: our receive side goes to TCP;
 *   - our RESUME says where our bytes start when the channel knows the
 *     count the peer will name, and the peer's RESUME naming another one
 *     resets;
 *   - a channel that does not know waits for the peer's RESUME, checks it
 *     against what it still holds before it sends a byte (nothing but the
 *     frame leaves for an offset out of range), and replays from it;
 *   - a RESUME with a flag this end does not know is a violation.
 */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "failover.h"
#include "layers.h"
#include "sock.h"
#include "transport.h"
#include "wire.h"
#include "check_run.h"
#include "failed_chan.h"

/* Our staging copy holds our stream's offsets [HELD_FROM, TX_TAIL). */
#define HELD_FROM 90
#define TX_TAIL 100
static const char held[] = "0123456789";

static int sv[2]; /* sv[0]: ours, sv[1]: the peer's */

static void setup(void)
{
	shim_layers_register();
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	/* The peer's count of ours, when the channel knows it: all of it. */
	failed_chan_is = (typeof(failed_chan_is)){ .peer_got = TX_TAIL, .held_from = HELD_FROM, .held = held };
}

static void teardown(void)
{
	close(sv[0]);
	close(sv[1]);
}

/* A connection switched both ways whose channel failed. */
static struct shim_sock *switched(void)
{
	struct shim_sock *s = shim_sock_alloc();

	ck_assert_ptr_nonnull(s);
	s->role = SHIM_ROLE_SERVER;
	s->intercept = true;
	s->phase = SHIM_PHASE_DONE;
	s->tx_dir = SHIM_DIR_CHAN;
	s->rx_dir = SHIM_DIR_CHAN;
	s->chan = &failed_chan;
	return s;
}

static void done(struct shim_sock *s)
{
	s->chan = NULL;
	shim_sock_unref_fd(s);
}

static void progress(struct shim_sock *s)
{
	pthread_mutex_lock(&s->lock);
	shim_failover_progress(s, sv[0]);
	pthread_mutex_unlock(&s->lock);
}

static void peer_resume(uint8_t flags, uint64_t rx, uint64_t from, const char *behind)
{
	struct shim_frame_resume r = { .type = SHIM_FRAME_RESUME, .flags = flags, .rx_offset = htobe64(rx),
				       .tx_from = htobe64(from) };

	ck_assert_int_eq(send(sv[1], &r, sizeof(r), 0), (ssize_t)sizeof(r));
	if (behind)
		ck_assert_int_eq(send(sv[1], behind, strlen(behind), 0), (ssize_t)strlen(behind));
}

/* Our RESUME, as the peer reads it; *after: the bytes behind it. */
static struct shim_frame_resume our_resume(char *after, size_t cap, ssize_t *n_after)
{
	struct shim_frame_resume r;

	ck_assert_int_eq(recv(sv[1], &r, sizeof(r), MSG_DONTWAIT), (ssize_t)sizeof(r));
	ck_assert_uint_eq(r.type, SHIM_FRAME_RESUME);
	*n_after = recv(sv[1], after, cap, MSG_DONTWAIT);
	return r;
}

START_TEST(bytes_past_our_count_reset_before_one_is_read)
{
	struct shim_sock *s = switched();
	char got[8];

	failed_chan_is.rx_count = 40;
	/* The peer's count of ours is right, but its own bytes start at 50:
	 * ten it had acknowledged never reached our count. */
	peer_resume(SHIM_RESUME_F_TX_FROM, TX_TAIL, 50, "plain");
	progress(s);
	ck_assert(s->aborted);
	ck_assert_int_ne(s->rx_dir, SHIM_DIR_TCP);
	/* Nothing behind the frame was taken as data. */
	ck_assert_int_eq(recv(sv[0], got, sizeof(got), MSG_DONTWAIT | MSG_PEEK), 5);
	done(s);
}
END_TEST

START_TEST(bytes_behind_our_count_reset_too)
{
	struct shim_sock *s = switched();

	failed_chan_is.rx_count = 60;
	peer_resume(SHIM_RESUME_F_TX_FROM, TX_TAIL, 50, "plain");
	progress(s);
	ck_assert(s->aborted);
	done(s);
}
END_TEST

START_TEST(bytes_at_our_count_are_read_on_tcp)
{
	struct shim_sock *s = switched();
	char got[8];

	failed_chan_is.rx_count = 50;
	peer_resume(SHIM_RESUME_F_TX_FROM, TX_TAIL, 50, "plain");
	progress(s);
	ck_assert(!s->aborted);
	ck_assert_int_eq(s->rx_dir, SHIM_DIR_TCP);
	ck_assert_int_eq(recv(sv[0], got, sizeof(got), MSG_DONTWAIT), 5);
	done(s);
}
END_TEST

START_TEST(our_resume_says_where_our_bytes_start)
{
	struct shim_sock *s = switched();
	struct shim_frame_resume r;
	char after[32];
	ssize_t n;

	failed_chan_is.tx_known = true;
	failed_chan_is.rx_count = 7;
	progress(s);
	r = our_resume(after, sizeof(after), &n);
	ck_assert_uint_eq(r.flags, SHIM_RESUME_F_TX_FROM);
	ck_assert_uint_eq(be64toh(r.rx_offset), 7);
	ck_assert_uint_eq(be64toh(r.tx_from), TX_TAIL);
	ck_assert_int_eq(s->tx_dir, SHIM_DIR_TCP);
	/* The peer's RESUME names less than we said: reset. */
	peer_resume(0, 95, 0, NULL);
	progress(s);
	ck_assert(s->aborted);
	done(s);
}
END_TEST

START_TEST(an_unknown_count_waits_and_checks_before_a_byte_leaves)
{
	struct shim_sock *s = switched();
	struct shim_frame_resume r;
	char after[32];
	ssize_t n;

	progress(s);
	r = our_resume(after, sizeof(after), &n);
	ck_assert_uint_eq(r.flags, 0);
	ck_assert_int_eq(n, -1); /* nothing behind it yet */
	ck_assert_int_eq(s->tx_dir, SHIM_DIR_CHAN);
	/* Past what we hold: reset, and not a byte behind our RESUME. */
	peer_resume(0, TX_TAIL + 5, 0, NULL);
	progress(s);
	ck_assert(s->aborted);
	ck_assert_int_le(recv(sv[1], after, sizeof(after), MSG_DONTWAIT), 0);
	done(s);
}
END_TEST

START_TEST(an_unknown_count_replays_from_the_peers)
{
	struct shim_sock *s = switched();
	char after[32];
	ssize_t n;

	progress(s);
	(void)our_resume(after, sizeof(after), &n);
	peer_resume(0, 95, 0, NULL);
	progress(s);
	ck_assert(!s->aborted);
	ck_assert_int_eq(s->tx_dir, SHIM_DIR_TCP);
	n = recv(sv[1], after, sizeof(after), MSG_DONTWAIT);
	ck_assert_int_eq(n, 5);
	ck_assert_mem_eq(after, "56789", 5);
	done(s);
}
END_TEST

START_TEST(an_unknown_resume_flag_is_a_violation)
{
	struct shim_sock *s = switched();

	peer_resume(0x80, 0, 0, NULL);
	progress(s);
	ck_assert(s->aborted);
	ck_assert(!s->fo_peer_known);
	done(s);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("failover");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, bytes_past_our_count_reset_before_one_is_read);
	tcase_add_test(tc, bytes_behind_our_count_reset_too);
	tcase_add_test(tc, bytes_at_our_count_are_read_on_tcp);
	tcase_add_test(tc, our_resume_says_where_our_bytes_start);
	tcase_add_test(tc, an_unknown_count_waits_and_checks_before_a_byte_leaves);
	tcase_add_test(tc, an_unknown_count_replays_from_the_peers);
	tcase_add_test(tc, an_unknown_resume_flag_is_a_violation);
	suite_add_tcase(su, tc);
	return shim_check_run(su);
}
