/*
 * Unit tests for the failover worker (shim/conn/fo_worker.c) over a local
 * stream socket pair. A channel of the test's own has failed holding bytes
 * the peer never got; nothing calls on the connection:
 *   - a kick alone sends our RESUME frame and then those bytes, on TCP;
 *   - a kick for a fd that names another socket by now sends nothing;
 *   - without a kick nothing leaves (the control: the bytes wait for the
 *     program's next call, which is what hung a server that answered on
 *     one connection and then waited in another one's read).
 */
#include <check.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fdtable.h"
#include "fo_worker.h"
#include "layers.h"
#include "sock.h"
#include "transport.h"
#include "wire.h"
#include "check_run.h"
#include "failed_chan.h"

#define TABLE_FDS 1024
#define PEER_RX 7 /* what the failed channel brought us: our RESUME names it */

static const char owed[] = "the answer the channel lost";
static int sv[2]; /* sv[0]: ours, sv[1]: the peer's */

static void setup(void)
{
	shim_layers_register();
	ck_assert_int_eq(shim_fdtable_init(TABLE_FDS), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(fcntl(sv[1], F_SETFL, O_NONBLOCK), 0);
	/* The peer got our first 100 bytes; owed follows them. */
	failed_chan_is = (typeof(failed_chan_is)){ .peer_got = 100, .tx_known = true, .rx_count = PEER_RX,
						    .held_from = 100, .held = owed };
}

static void teardown(void)
{
	close(sv[0]);
	close(sv[1]);
}

/* A switched connection at fd whose channel failed. */
static struct shim_sock *broken_at(int fd)
{
	struct shim_sock *s = shim_sock_alloc();
	int err;

	ck_assert_ptr_nonnull(s);
	s->role = SHIM_ROLE_SERVER;
	s->intercept = true;
	s->phase = SHIM_PHASE_DONE;
	s->tx_dir = SHIM_DIR_CHAN;
	s->rx_dir = SHIM_DIR_TCP;
	s->chan = &failed_chan;
	ck_assert_ptr_null(shim_fd_publish(fd, s, &err));
	ck_assert_int_eq(err, 0);
	return s;
}

static void forget(int fd)
{
	struct shim_sock *s = shim_fd_clear(fd);

	if (s) {
		s->chan = NULL;
		shim_sock_unref_fd(s);
	}
}

/* What the peer can read within ms (a first wait, then what follows). */
static size_t peer_read_for(uint8_t *buf, size_t cap, int ms)
{
	struct pollfd p = { .fd = sv[1], .events = POLLIN };
	size_t got = 0;
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ssize_t n = recv(sv[1], buf + got, cap - got, MSG_DONTWAIT);

		if (n > 0)
			got += (size_t)n;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long waited = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;

		if (got == cap || waited >= ms)
			return got;
		poll(&p, 1, 10);
	}
}

START_TEST(a_kick_alone_sends_resume_then_the_lost_bytes)
{
	struct shim_sock *s = broken_at(sv[0]);
	uint8_t buf[sizeof(struct shim_frame_resume) + sizeof(owed) - 1];
	struct shim_frame_resume r;

	ck_assert_uint_eq(peer_read_for(buf, sizeof(buf), 50), 0); /* nothing leaves by itself */
	shim_failover_kick(s, sv[0]);
	ck_assert_uint_eq(peer_read_for(buf, sizeof(buf), 3000), sizeof(buf));
	memcpy(&r, buf, sizeof(r));
	ck_assert_uint_eq(r.type, SHIM_FRAME_RESUME);
	ck_assert_uint_eq(be64toh(r.rx_offset), PEER_RX);
	ck_assert_mem_eq(buf + sizeof(r), owed, sizeof(owed) - 1);
	pthread_mutex_lock(&s->lock);
	ck_assert(s->fo_started);
	ck_assert(s->fo_tx_done);
	ck_assert_int_eq(s->tx_dir, SHIM_DIR_TCP);
	pthread_mutex_unlock(&s->lock);
	ck_assert_uint_eq(peer_read_for(buf, sizeof(buf), 50), 0); /* and nothing twice */
	forget(sv[0]);
}
END_TEST

START_TEST(a_kick_for_a_fd_that_names_another_socket_sends_nothing)
{
	struct shim_sock *s = broken_at(sv[0]), *held, *other;
	uint8_t buf[64];

	/* The program closed it (a reference of ours keeps its memory from
	 * being the next sock), and the number names another broken socket:
	 * a worker that stepped on either would send a RESUME. */
	held = shim_sock_get(sv[0]);
	ck_assert_ptr_eq(held, s);
	shim_sock_unref_fd(shim_fd_clear(sv[0]));
	other = broken_at(sv[0]);
	ck_assert_ptr_ne(other, s);
	shim_failover_kick(s, sv[0]);
	ck_assert_uint_eq(peer_read_for(buf, sizeof(buf), 300), 0);
	pthread_mutex_lock(&s->lock);
	ck_assert(!s->fo_started);
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_lock(&other->lock);
	ck_assert(!other->fo_started);
	pthread_mutex_unlock(&other->lock);
	forget(sv[0]);
	s->chan = NULL;
	shim_sock_put(held);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("fo_worker");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, a_kick_alone_sends_resume_then_the_lost_bytes);
	tcase_add_test(tc, a_kick_for_a_fd_that_names_another_socket_sends_nothing);
	suite_add_tcase(su, tc);
	return shim_check_run(su);
}
