/*
 * Unit tests for the upgrade's state machine (shim/conn/upgrade.c) and the
 * transport registry (shim/conn/transport.c), driven by a fake transport
 * registered here, as init registers the real ones: the machine must pick
 * the first configured transport that fits, call only the table, move
 * between its phases only through the services a transport reports with,
 * and never name a transport.
 *
 * Check runs every test in a process of its own: each starts with an
 * empty registry.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "config.h"
#include "fdtable.h"
#include "io.h"
#include "rxswitch.h"
#include "sock.h"
#include "transport.h"
#include "upgrade.h"
#include "wire.h"
#include "check_run.h"

/* ---- the fake transport: counts its calls, does what the test says ---- */

enum fake_act { ACT_NONE, ACT_NEGOTIATE, ACT_COMMIT, ACT_DONE, ACT_FAIL, ACT_LEARN_RX };

static struct {
	enum shim_reason fits;
	enum fake_act on_start, on_progress;
	enum shim_reason fail_with;
	int starts, progresses, stops, commit_stops, abandons, releases, warms;
	int neg; /* what s->neg points to while it negotiates */
	int wait_fd;
	uint64_t learn_at; /* ACT_LEARN_RX: the peer's switch offset */
} fake;

static void act(struct shim_sock *s, int fd, enum fake_act a)
{
	switch (a) {
	case ACT_NONE:
		break;
	case ACT_NEGOTIATE:
		shim_upgrade_negotiating(s, &fake.neg);
		break;
	case ACT_COMMIT:
		shim_upgrade_committing(s);
		break;
	case ACT_DONE:
		shim_upgrade_done(s);
		break;
	case ACT_FAIL:
		shim_upgrade_fail(s, fd, fake.fail_with);
		break;
	case ACT_LEARN_RX: {
		/* Found only once the read took what was queued. */
		int queued = -1;

		if (!s->rx_switch_known && ioctl(fd, FIONREAD, &queued) == 0 && queued == 0)
			ck_assert_int_eq(shim_upgrade_learn_rx_switch(s, fd, fake.learn_at), 0);
		break;
	}
	}
}

static enum shim_reason fake_fits(const struct shim_tuple *t)
{
	(void)t;
	return fake.fits;
}

static void fake_warm(const struct shim_tuple *t)
{
	(void)t;
	fake.warms++;
}

static void fake_start(struct shim_sock *s, int fd, unsigned long long now)
{
	(void)now;
	fake.starts++;
	shim_upgrade_arm_deadline(s, now);
	act(s, fd, fake.on_start);
}

static void fake_progress(struct shim_sock *s, int fd, unsigned long long now)
{
	(void)now;
	fake.progresses++;
	act(s, fd, fake.on_progress);
}

static void fake_stop_peer(struct shim_sock *s, int fd)
{
	(void)s;
	(void)fd;
	fake.stops++;
}

static void fake_stop_commit(struct shim_sock *s, int fd)
{
	(void)s;
	(void)fd;
	fake.commit_stops++;
}

static void fake_abandon(struct shim_sock *s)
{
	fake.abandons++;
	s->neg = NULL;
}

static int fake_wait_fd(const struct shim_sock *s)
{
	(void)s;
	return fake.wait_fd;
}

static void fake_release(struct shim_sock *s)
{
	fake.releases++;
	s->neg = NULL;
}

static struct shim_transport_type fake_shm = {
	.kind = SHIM_TRANSPORT_SHM,
	.fits = fake_fits,
	.warm = fake_warm,
	.start = fake_start,
	.progress = fake_progress,
	.stop_peer = fake_stop_peer,
	.stop_commit = fake_stop_commit,
	.abandon = fake_abandon,
	.wait_fd = fake_wait_fd,
	.release = fake_release,
};

/* A second one that always fits and can not be stopped from outside. */
static int other_starts;

static enum shim_reason other_fits(const struct shim_tuple *t)
{
	(void)t;
	return SHIM_REASON_NONE;
}

static void other_start(struct shim_sock *s, int fd, unsigned long long now)
{
	(void)fd;
	(void)now;
	other_starts++;
	shim_upgrade_negotiating(s, &fake.neg);
	shim_upgrade_committing(s);
}

static struct shim_transport_type fake_rdma = {
	.kind = SHIM_TRANSPORT_RDMA,
	.fits = other_fits,
	.start = other_start,
	.progress = fake_progress,
	.neg_is_chan = true,
};

static struct shim_sock *new_sock(void)
{
	struct shim_sock *s = calloc(1, sizeof(*s));

	ck_assert_ptr_nonnull(s);
	s->refs = 1;
	s->role = SHIM_ROLE_CLIENT;
	s->state = SHIM_STATE_TCP;
	s->eligible = true;
	s->intercept = true;
	s->tcp_keep = -1;
	s->tuple.local.port = 40000;
	s->tuple.peer.port = 7100;
	return s;
}

static void setup(void)
{
	memset(&fake, 0, sizeof(fake));
	fake.fits = SHIM_REASON_NONE;
	fake.wait_fd = -1;
	other_starts = 0;
	memset(&shim_cfg, 0, sizeof(shim_cfg));
	shim_cfg.enabled = true;
	shim_cfg.upgrade_timeout_ms = 3000;
	shim_cfg.upgrade_after_ms = 0;
	shim_cfg.transports[0] = SHIM_TRANSPORT_SHM;
	shim_cfg.n_transports = 1;
	shim_transport_register(&fake_shm);
}

/* ---- picking ---- */

START_TEST(idle_progress_starts_the_fitting_transport)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.starts, 1);
	ck_assert_ptr_eq(s->xport, &fake_shm);
	ck_assert_int_eq(s->phase, SHIM_PHASE_NEGOTIATING);
	ck_assert_ptr_eq(s->neg, &fake.neg);
	/* From here on each step is the transport's. */
	shim_upgrade_progress(s, 5);
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.starts, 1);
	ck_assert_int_eq(fake.progresses, 2);
	free(s);
}
END_TEST

/* Another thread in the kernel's own read of the connection (io_rx.c,
 * recv_raw) would take a frame as data: no handshake starts meanwhile. */
START_TEST(no_start_while_a_raw_read_runs)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	s->raw_reads = 1;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.starts, 0);
	ck_assert_int_eq(s->phase, SHIM_PHASE_IDLE);
	s->raw_reads = 0;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.starts, 1);
	free(s);
}
END_TEST

/* A fork settles a handshake first: one nobody committed to ends (no
 * second attempt), one the peer may be committing is stopped. */
START_TEST(fork_settles_the_handshake)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	shim_upgrade_progress(s, 5);
	shim_upgrade_settle_for_fork(s, 5);
	ck_assert_int_eq(s->phase, SHIM_PHASE_FAILED);
	ck_assert_int_eq(s->reason, SHIM_REASON_FORKED);
	ck_assert_int_eq(fake.abandons, 1);
	ck_assert(s->await_bytes_used);
	free(s);

	s = new_sock();
	shim_upgrade_progress(s, 5);
	shim_upgrade_committing(s);
	shim_upgrade_settle_for_fork(s, 5);
	ck_assert_int_eq(fake.stops, 1);
	free(s);
}
END_TEST

START_TEST(first_configured_that_fits_wins)
{
	struct shim_sock *s = new_sock();

	shim_transport_register(&fake_rdma);
	shim_cfg.transports[0] = SHIM_TRANSPORT_SHM;
	shim_cfg.transports[1] = SHIM_TRANSPORT_RDMA;
	shim_cfg.n_transports = 2;
	/* shm listed first but does not fit this peer: rdma. */
	fake.fits = SHIM_REASON_NOT_SAME_HOST;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.starts, 0);
	ck_assert_int_eq(other_starts, 1);
	ck_assert_ptr_eq(s->xport, &fake_rdma);
	free(s);

	/* Fits: shm, the first listed. */
	s = new_sock();
	fake.fits = SHIM_REASON_NONE;
	fake.on_start = ACT_NEGOTIATE;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.starts, 1);
	ck_assert_int_eq(other_starts, 1);
	free(s);
}
END_TEST

START_TEST(nothing_fits_fails_with_the_reason)
{
	struct shim_sock *s = new_sock();

	fake.fits = SHIM_REASON_NOT_SAME_HOST;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(s->phase, SHIM_PHASE_FAILED);
	ck_assert_int_eq(s->reason, SHIM_REASON_NOT_SAME_HOST);
	ck_assert_int_eq(fake.starts, 0);
	/* Nothing moved: the data path goes straight to the kernel again. */
	ck_assert(!s->intercept);
	free(s);
}
END_TEST

START_TEST(unregistered_transport_is_no_transport)
{
	struct shim_sock *s = new_sock();

	shim_cfg.transports[0] = SHIM_TRANSPORT_RDMA; /* not registered here */
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(s->phase, SHIM_PHASE_FAILED);
	ck_assert_int_eq(s->reason, SHIM_REASON_NO_TRANSPORT);
	free(s);
}
END_TEST

START_TEST(warm_goes_to_the_transport_picked)
{
	struct shim_tuple t = { 0 };

	shim_transport_warm(&t);
	ck_assert_int_eq(fake.warms, 1);
	fake.fits = SHIM_REASON_NOT_SAME_HOST;
	shim_transport_warm(&t);
	ck_assert_int_eq(fake.warms, 1);
}
END_TEST

/* ---- outcomes reported through the services ---- */

START_TEST(fail_abandons_and_settles)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	fake.on_progress = ACT_FAIL;
	fake.fail_with = SHIM_REASON_PEER_CLOSED;
	shim_upgrade_progress(s, 5);
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(s->phase, SHIM_PHASE_FAILED);
	ck_assert_int_eq(s->reason, SHIM_REASON_PEER_CLOSED);
	ck_assert_int_eq(fake.abandons, 1);
	ck_assert_ptr_null(s->neg);
	ck_assert(shim_upgrade_settled(s));
	/* Settled: no step reaches the transport any more. */
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.progresses, 1);
	free(s);
}
END_TEST

START_TEST(quiet_timeout_is_retried_once_when_bytes_move)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_FAIL;
	fake.fail_with = SHIM_REASON_TIMEOUT;
	shim_upgrade_progress(s, 5);
	/* A connection that carried nothing: back to idle, once. */
	ck_assert_int_eq(s->phase, SHIM_PHASE_IDLE);
	ck_assert(s->await_bytes_used);
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.starts, 1); /* waits for the first byte */
	s->tx_tcp_bytes = 1;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(fake.starts, 2);
	ck_assert_int_eq(s->phase, SHIM_PHASE_FAILED);
	ck_assert_int_eq(s->reason, SHIM_REASON_TIMEOUT);
	free(s);
}
END_TEST

START_TEST(committing_means_rx_pending)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	fake.on_progress = ACT_COMMIT;
	shim_upgrade_progress(s, 5);
	ck_assert(!shim_upgrade_rx_pending(s));
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(s->phase, SHIM_PHASE_COMMITTING);
	ck_assert(shim_upgrade_rx_pending(s));
	s->rx_switch_known = true;
	ck_assert(!shim_upgrade_rx_pending(s));
	fake.on_progress = ACT_DONE;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(s->phase, SHIM_PHASE_DONE);
	ck_assert(shim_upgrade_settled(s));
	free(s);
}
END_TEST

START_TEST(close_stops_only_a_stoppable_peer)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	shim_upgrade_progress(s, 5);
	/* Nobody committed: the release ends it; nothing to stop. */
	ck_assert(shim_upgrade_stoppable(s));
	shim_upgrade_stop_for_close(s, 5);
	ck_assert(s->closing);
	ck_assert_int_eq(fake.stops, 0);
	shim_upgrade_committing(s);
	shim_upgrade_stop_for_close(s, 5);
	ck_assert_int_eq(fake.stops, 1);
	free(s);

	/* A transport without stop_peer is left to its release. */
	s = new_sock();
	shim_transport_register(&fake_rdma);
	shim_cfg.transports[0] = SHIM_TRANSPORT_RDMA;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(s->phase, SHIM_PHASE_COMMITTING);
	ck_assert(!shim_upgrade_stoppable(s));
	ck_assert(shim_upgrade_holds_chan(s));
	shim_upgrade_stop_for_close(s, 5);
	ck_assert_int_eq(s->phase, SHIM_PHASE_COMMITTING);
	free(s);
}
END_TEST

START_TEST(a_hand_off_stops_only_a_commit)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	shim_upgrade_progress(s, 5);
	/* Nobody may commit yet: nothing to stop (the hand-off gives the
	 * negotiation up itself). */
	shim_upgrade_stop_commit(s, 5);
	ck_assert_int_eq(fake.commit_stops, 0);
	shim_upgrade_committing(s);
	shim_upgrade_stop_commit(s, 5);
	ck_assert_int_eq(fake.commit_stops, 1);
	ck_assert_int_eq(fake.stops, 0);
	ck_assert(!s->closing && !s->pinned); /* a commit is followed, not refused */
	shim_upgrade_done(s);
	shim_upgrade_stop_commit(s, 5);
	ck_assert_int_eq(fake.commit_stops, 1);
	free(s);
}
END_TEST

START_TEST(pin_fails_a_negotiation_and_stops_a_commit)
{
	struct shim_sock *s = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(shim_upgrade_pin_tcp(s, 5, SHIM_REASON_BYPASS), 0);
	ck_assert(s->pinned);
	ck_assert_int_eq(s->phase, SHIM_PHASE_FAILED);
	ck_assert_int_eq(s->reason, SHIM_REASON_BYPASS);
	free(s);

	s = new_sock();
	fake.on_progress = ACT_COMMIT;
	shim_upgrade_progress(s, 5);
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(shim_upgrade_pin_tcp(s, 5, SHIM_REASON_BYPASS), 0);
	ck_assert_int_eq(fake.stops, 1);
	/* The peer's direction already announced: too late for TCP only. */
	s->rx_switch_known = true;
	ck_assert_int_eq(shim_upgrade_pin_tcp(s, 5, SHIM_REASON_BYPASS), -EBUSY);
	free(s);
}
END_TEST

START_TEST(barred_ends_what_nobody_committed)
{
	struct shim_sock *s = new_sock(), *t = new_sock();

	fake.on_start = ACT_NEGOTIATE;
	shim_upgrade_progress(s, 5);
	shim_upgrade_progress(t, 6);
	shim_upgrade_committing(t);
	shim_upgrade_bar(SHIM_REASON_SANDBOXED);
	shim_upgrade_progress(s, 5);
	shim_upgrade_progress(t, 6);
	ck_assert_int_eq(s->phase, SHIM_PHASE_FAILED);
	ck_assert_int_eq(s->reason, SHIM_REASON_SANDBOXED);
	/* A peer that may have committed is still heard. */
	ck_assert_int_eq(t->phase, SHIM_PHASE_COMMITTING);
	ck_assert_int_eq(fake.progresses, 1);
	free(s);
	free(t);
}
END_TEST

START_TEST(release_and_wait_fd_are_the_transports)
{
	struct shim_sock *s = new_sock();

	ck_assert_int_eq(shim_upgrade_wait_fd(s), -1);
	fake.on_start = ACT_NEGOTIATE;
	fake.wait_fd = 42;
	shim_upgrade_progress(s, 5);
	ck_assert_int_eq(shim_upgrade_wait_fd(s), 42);
	ck_assert(!shim_upgrade_holds_chan(s));
	shim_upgrade_release(s);
	ck_assert_int_eq(fake.releases, 1);
	ck_assert_ptr_null(s->neg);
	ck_assert_int_eq(shim_upgrade_wait_fd(s), -1);
	free(s);
}
END_TEST

START_TEST(retry_later_backs_off_until_the_deadline)
{
	struct shim_sock *s = new_sock();
	unsigned long long now = 1000000000ull, prev = 0;

	shim_upgrade_arm_deadline(s, now);
	for (int i = 0; i < 12; i++) {
		ck_assert(shim_upgrade_retry_later(s, now));
		ck_assert_uint_gt(s->next_try_ns, now);
		ck_assert_uint_ge(s->retry_delay_ns, prev); /* doubling, then capped */
		ck_assert_uint_le(s->retry_delay_ns, 200ull * 1000 * 1000);
		prev = s->retry_delay_ns;
	}
	ck_assert_uint_eq(prev, 200ull * 1000 * 1000);
	ck_assert(!shim_upgrade_retry_later(s, s->deadline_ns));
	free(s);
}
END_TEST

START_TEST(nonces_differ)
{
	uint8_t a[16], b[16];

	ck_assert_int_eq(shim_upgrade_new_nonce(a), 0);
	ck_assert_int_eq(shim_upgrade_new_nonce(b), 0);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
}
END_TEST

/* ---- a peer's switch offset learned only after the read that crossed it ---- */

/*
 * The channel's peer (a squatter that took the client's rdma_cm
 * rendezvous) announces offset 0, and the announcement is found right
 * after a read took the TCP peer's first plain bytes (the offset is looked
 * for after every read while rx is pending). Those bytes are not a frame
 * with our nonce and our direction is on TCP: they go to the program and
 * the switch is refused. (They were taken as the frame, found not to
 * match, and the connection was shut: the program got ECONNRESET and its
 * peer EOF.)
 */
START_TEST(plain_bytes_past_an_offset_learned_late_are_delivered)
{
	struct shim_sock *s = new_sock();
	const char msg[] = "plain bytes of the program, not a SWITCH frame";
	char got[128] = { 0 };
	struct iovec iov = { got, sizeof(got) };
	int sv[2];

	int err = 0;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(shim_fdtable_init(1024), 0);
	ck_assert_ptr_null(shim_fd_publish(sv[0], s, &err));
	s->role = SHIM_ROLE_SERVER;
	fake.on_start = ACT_NEGOTIATE;
	fake.on_progress = ACT_COMMIT;
	shim_upgrade_progress(s, sv[0]);
	shim_upgrade_progress(s, sv[0]);
	ck_assert(shim_upgrade_rx_pending(s));
	fake.on_progress = ACT_LEARN_RX;
	fake.learn_at = 0;
	ck_assert_int_eq(send(sv[1], msg, sizeof(msg), 0), (ssize_t)sizeof(msg));
	ck_assert_int_eq(shim_io_recv(s, sv[0], &iov, 1, MSG_DONTWAIT), (ssize_t)sizeof(msg));
	ck_assert_mem_eq(got, msg, sizeof(msg));
	fake.on_progress = ACT_NONE;
	ck_assert_int_eq(s->reason, SHIM_REASON_SWITCH_MISMATCH);
	ck_assert_int_eq(s->rx_dir, SHIM_DIR_TCP);
	ck_assert(!s->rx_switch_known);
	ck_assert_int_eq(s->rx_tcp_bytes, sizeof(msg));
	ck_assert(shim_upgrade_settled(s));
	/* Nothing was shut: the stream goes on both ways. */
	ck_assert_int_eq(send(sv[1], "x", 1, 0), 1);
	ck_assert_int_eq(shim_io_recv(s, sv[0], &iov, 1, MSG_DONTWAIT), 1);
	ck_assert_int_eq(send(sv[0], "y", 1, MSG_DONTWAIT), 1);
	ck_assert_ptr_eq(shim_fd_clear(sv[0]), s);
	close(sv[0]);
	close(sv[1]);
	free(s);
}
END_TEST

/* A blocking MSG_WAITALL read that reaches the peer's switch before its
 * frame is all here waits for the frame, as the kernel's read waits for
 * bytes (here until SO_RCVTIMEO), instead of returning the TCP bytes short
 * at once (a sendfile switched between its 64 KiB chunks showed it). */
START_TEST(waitall_waits_for_a_frame_not_all_here)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_switch f = { .type = SHIM_FRAME_SWITCH };
	const char msg[] = "the bytes before the switch";
	char got[128] = { 0 };
	struct iovec iov = { got, sizeof(msg) + 10 };
	unsigned long long t0;
	int sv[2], err = 0;

	for (int i = 0; i < SHIM_NONCE_LEN; i++)
		s->rx_nonce[i] = (uint8_t)(0x30 + i);
	memcpy(f.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(shim_fdtable_init(1024), 0);
	ck_assert_ptr_null(shim_fd_publish(sv[0], s, &err));
	s->role = SHIM_ROLE_SERVER;
	s->rcv_timeout_ms = 200;
	s->snd_timeout_ms = -1;
	fake.on_start = ACT_NEGOTIATE;
	fake.on_progress = ACT_COMMIT;
	shim_upgrade_progress(s, sv[0]);
	shim_upgrade_progress(s, sv[0]);
	fake.on_progress = ACT_LEARN_RX;
	fake.learn_at = sizeof(msg);
	ck_assert_int_eq(send(sv[1], msg, sizeof(msg), 0), (ssize_t)sizeof(msg));
	ck_assert_int_eq(send(sv[1], &f, 5, 0), 5);
	t0 = shim_now_ns();
	ck_assert_int_eq(shim_io_recv(s, sv[0], &iov, 1, MSG_WAITALL), (ssize_t)sizeof(msg));
	ck_assert_uint_ge(shim_now_ns() - t0, 150000000ull);
	ck_assert_mem_eq(got, msg, sizeof(msg));
	fake.on_progress = ACT_NONE;
	ck_assert_ptr_eq(shim_fd_clear(sv[0]), s);
	close(sv[0]);
	close(sv[1]);
	free(s);
}
END_TEST

/* The same crossing from an honest peer: its frame's start is taken as the
 * frame (and only the bytes before the offset are the program's). */
START_TEST(a_frame_past_an_offset_learned_late_is_absorbed)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_switch f = { .type = SHIM_FRAME_SWITCH };
	struct iovec past[2];

	for (int i = 0; i < SHIM_NONCE_LEN; i++)
		s->rx_nonce[i] = (uint8_t)(0x30 + i);
	memcpy(f.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	s->rx_switch_known = true;
	/* Split as a read may split it. */
	past[0] = (struct iovec){ &f, 5 };
	past[1] = (struct iovec){ (uint8_t *)&f + 5, 7 };
	ck_assert(!shim_rxswitch_crossed(s, 3, past, 2));
	ck_assert_uint_eq(s->rx_frame_len, 12);
	ck_assert(s->rx_switch_known);
	free(s);
}
END_TEST

/* A connected TCP pair on loopback: sv[0] the accepted end, sv[1] the
 * client's. MSG_TRUNC discards only on TCP (a unix socket copies). */
static void tcp_pair(int sv[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	ck_assert_int_ge(l, 0);
	ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(l, 1), 0);
	ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
	sv[1] = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(sv[1], (struct sockaddr *)&a, sizeof(a)), 0);
	sv[0] = accept(l, NULL, NULL);
	ck_assert_int_ge(sv[0], 0);
	close(l);
}

/* Waits until fd has n bytes queued (loopback delivers at once, but the
 * test must not depend on when). */
static void wait_queued(int fd, int n)
{
	int queued = 0;

	for (int i = 0; i < 2000 && (ioctl(fd, FIONREAD, &queued) != 0 || queued < n); i++)
		usleep(1000);
	ck_assert_int_eq(queued, n);
}

/*
 * lighttpd's lingering close (recv with MSG_TRUNC, which TCP answers by
 * discarding the bytes, never writing the buffer) read the peer's SWITCH
 * frame right behind the last request, its offset learned only after that
 * read: the peer sent its offset and its frame between this call's look
 * at the handshake and its read (the server preempted there). The part
 * past the offset was taken from the program's buffer, which held none of
 * it: rx.switch_mismatch, and the connection reset under a server whose
 * answer had gone out on the ring. The frame's bytes must be the ones the
 * stream carried, whatever the call's flags (shim_io_recv with
 * MSG_TRUNC, as the wrappers called it, failed here with ECONNRESET).
 */
START_TEST(a_frame_read_with_msg_trunc_is_the_streams)
{
	struct shim_sock *s = new_sock();
	struct shim_frame_switch f = { .type = SHIM_FRAME_SWITCH };
	const char req[] = "GET /small.txt HTTP/1.0\r\n\r\n";
	char got[256];
	struct iovec iov = { got, sizeof(got) };
	int sv[2], err = 0;

	for (int i = 0; i < SHIM_NONCE_LEN; i++)
		s->rx_nonce[i] = (uint8_t)(0x30 + i);
	memcpy(f.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	tcp_pair(sv);
	ck_assert_int_eq(shim_fdtable_init(1024), 0);
	ck_assert_ptr_null(shim_fd_publish(sv[0], s, &err));
	s->role = SHIM_ROLE_SERVER;
	s->rcv_timeout_ms = -1;
	s->snd_timeout_ms = -1;
	fake.on_start = ACT_NEGOTIATE;
	fake.on_progress = ACT_COMMIT;
	shim_upgrade_progress(s, sv[0]);
	shim_upgrade_progress(s, sv[0]);
	ck_assert(shim_upgrade_rx_pending(s));
	/* The server committed: its answer goes on the channel. */
	s->tx_dir = SHIM_DIR_CHAN;
	fake.on_progress = ACT_NONE;
	ck_assert_int_eq(send(sv[1], req, sizeof(req), 0), (ssize_t)sizeof(req));
	wait_queued(sv[0], (int)sizeof(req));
	ck_assert_int_eq(shim_io_recv(s, sv[0], &iov, 1, MSG_DONTWAIT), (ssize_t)sizeof(req));
	/* Half of the frame: the rest is on its way. */
	fake.on_progress = ACT_LEARN_RX;
	fake.learn_at = sizeof(req);
	ck_assert_int_eq(send(sv[1], &f, sizeof(f) / 2, 0), (ssize_t)(sizeof(f) / 2));
	wait_queued(sv[0], (int)(sizeof(f) / 2));
	memset(got, 'G', sizeof(got)); /* what the program's buffer held */
	/* The wrappers' way for a read with MSG_TRUNC (interpose_io.c). */
	ck_assert_int_eq(shim_io_recv_discard(s, sv[0], sizeof(got), MSG_DONTWAIT | MSG_TRUNC), -EAGAIN);
	fake.on_progress = ACT_NONE;
	ck_assert(s->rx_switch_known);
	ck_assert_int_eq(s->rx_dir, SHIM_DIR_SWITCHING);
	ck_assert_uint_eq(s->rx_frame_len, sizeof(f) / 2);
	ck_assert_uint_eq(s->rx_tcp_bytes, sizeof(req));
	ck_assert_int_eq(got[0], 'G'); /* TCP's MSG_TRUNC writes no byte */
	ck_assert_ptr_eq(shim_fd_clear(sv[0]), s);
	close(sv[0]);
	close(sv[1]);
	free(s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("upgrade");
	TCase *tc = tcase_create("machine");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, idle_progress_starts_the_fitting_transport);
	tcase_add_test(tc, first_configured_that_fits_wins);
	tcase_add_test(tc, nothing_fits_fails_with_the_reason);
	tcase_add_test(tc, unregistered_transport_is_no_transport);
	tcase_add_test(tc, warm_goes_to_the_transport_picked);
	tcase_add_test(tc, fail_abandons_and_settles);
	tcase_add_test(tc, quiet_timeout_is_retried_once_when_bytes_move);
	tcase_add_test(tc, committing_means_rx_pending);
	tcase_add_test(tc, close_stops_only_a_stoppable_peer);
	tcase_add_test(tc, a_hand_off_stops_only_a_commit);
	tcase_add_test(tc, pin_fails_a_negotiation_and_stops_a_commit);
	tcase_add_test(tc, barred_ends_what_nobody_committed);
	tcase_add_test(tc, release_and_wait_fd_are_the_transports);
	tcase_add_test(tc, retry_later_backs_off_until_the_deadline);
	tcase_add_test(tc, nonces_differ);
	tcase_add_test(tc, no_start_while_a_raw_read_runs);
	tcase_add_test(tc, fork_settles_the_handshake);
	tcase_add_test(tc, plain_bytes_past_an_offset_learned_late_are_delivered);
	tcase_add_test(tc, a_frame_past_an_offset_learned_late_is_absorbed);
	tcase_add_test(tc, waitall_waits_for_a_frame_not_all_here);
	tcase_add_test(tc, a_frame_read_with_msg_trunc_is_the_streams);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
