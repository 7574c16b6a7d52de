/*
 * Unit tests for the waits of a young connection (shim/io/epoll_young.c,
 * shim/io/wait.c): its epoll registration stays the kernel's, under the
 * program's own data, until the upgrade is due; then it becomes an item
 * whose kernel registration is tagged, and the program still sees its own
 * data. A poll or select over it is the kernel's alone. The connection is one
 * end of a socketpair published as an intercepted client (no transport is
 * registered: nothing here starts a handshake).
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "fdtable.h"
#include "io.h"
#include "layers.h"
#include "real.h"
#include "sock.h"
#include "upgrade.h"
#include "wait.h"
#include "check_run.h"

#define PROGRAM_DATA 0x1234567ull

static int sv[2], epfd;
static struct shim_sock *conn;

/* The kernel's own wait on the set, as the program would call it with the
 * shim's fast path: what it reports for our end, 0 when nothing. */
static uint64_t kernel_reports(bool *got)
{
	struct epoll_event ev[4];
	int n = REAL(epoll_wait)(epfd, ev, 4, 0);

	*got = n > 0;
	ck_assert_int_le(n, 1);
	return n > 0 ? ev[0].data.u64 : 0;
}

/* What a program's epoll_wait returns through the shim: the wrapper's
 * dispatch (shim_epoll_wait, or the kernel's wait mapped back). */
static int program_wait(struct epoll_event *ev, int max)
{
	int rc = 0;

	if (shim_epoll_wait(epfd, ev, max, 0, NULL, &rc))
		return rc;
	return shim_epoll_fixup(epfd, ev, REAL(epoll_wait)(epfd, ev, max, 0));
}

static void setup(void)
{
	memset(&shim_cfg, 0, sizeof(shim_cfg));
	shim_cfg.enabled = true;
	shim_cfg.upgrade_timeout_ms = 3000;
	shim_cfg.upgrade_after_ms = 60000; /* young for the whole test */
	shim_cfg.upgrade_after_rounds = 1;
	shim_layers_register();
	ck_assert_int_eq(shim_fdtable_init(1024), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	epfd = epoll_create1(0);
	ck_assert_int_ge(epfd, 0);

	int err;

	conn = shim_sock_alloc();
	ck_assert_ptr_nonnull(conn);
	conn->role = SHIM_ROLE_CLIENT;
	conn->state = SHIM_STATE_TCP;
	conn->eligible = true;
	conn->intercept = true;
	conn->born_ns = shim_now_ns();
	ck_assert_ptr_null(shim_fd_publish(sv[0], conn, &err));
	ck_assert_int_eq(err, 0);
	/* Readable from the start: the level-triggered registration reports. */
	ck_assert_int_eq(write(sv[1], "x", 1), 1);
}

static void add(uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = PROGRAM_DATA };

	ck_assert_int_eq(shim_epoll_ctl(epfd, EPOLL_CTL_ADD, sv[0], &ev), 0);
}

static void make_due(void)
{
	shim_cfg.upgrade_after_ms = 0;
}

START_TEST(a_young_registration_is_the_kernels)
{
	struct epoll_event ev[4];
	bool got;

	add(EPOLLIN);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) != 0);
	ck_assert_uint_eq(conn->ep_items, 0);
	/* The kernel holds the program's own data. */
	ck_assert_uint_eq(kernel_reports(&got), PROGRAM_DATA);
	ck_assert(got);
	/* A wait on a set with no item is the kernel's alone. */
	int rc = 0;

	ck_assert_int_eq(shim_epoll_wait(epfd, ev, 4, 0, NULL, &rc), 0);
	ck_assert_int_eq(program_wait(ev, 4), 1);
	ck_assert_uint_eq(ev[0].data.u64, PROGRAM_DATA);
	/* MOD reaches the kernel and the record. */
	struct epoll_event mod = { .events = EPOLLIN, .data.u64 = PROGRAM_DATA + 1 };

	ck_assert_int_eq(shim_epoll_ctl(epfd, EPOLL_CTL_MOD, sv[0], &mod), 0);
	ck_assert_uint_eq(kernel_reports(&got), PROGRAM_DATA + 1);
	ck_assert_uint_eq(conn->ep_young_data, PROGRAM_DATA + 1);
	/* ADD again is the kernel's EEXIST; DEL ends the record. */
	ck_assert_int_eq(shim_epoll_ctl(epfd, EPOLL_CTL_ADD, sv[0], &mod), -EEXIST);
	ck_assert_int_eq(shim_epoll_ctl(epfd, EPOLL_CTL_DEL, sv[0], NULL), 0);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) == 0);
	kernel_reports(&got);
	ck_assert(!got);
}
END_TEST

/* No upgrade starts while the kernel holds the registration: a wait could
 * not tell the channel's readiness from it. */
START_TEST(no_upgrade_starts_while_the_kernel_holds_it)
{
	add(EPOLLIN);
	make_due();
	pthread_mutex_lock(&conn->lock);
	shim_upgrade_progress(conn, sv[0]);
	pthread_mutex_unlock(&conn->lock);
	ck_assert_int_eq(conn->phase, SHIM_PHASE_IDLE);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) != 0);
}
END_TEST

START_TEST(not_taken_over_before_due)
{
	add(EPOLLIN);
	shim_io_young_take_over(conn);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) != 0);
	ck_assert_uint_eq(conn->ep_items, 0);
}
END_TEST

START_TEST(due_takes_it_over_and_the_program_keeps_its_data)
{
	struct epoll_event ev[4];
	bool got;

	add(EPOLLIN);
	make_due();
	shim_io_young_take_over(conn);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) == 0);
	ck_assert_uint_eq(conn->ep_items, 1);
	/* The kernel's registration is ours now (tagged)... */
	ck_assert_uint_ne(kernel_reports(&got), PROGRAM_DATA);
	ck_assert(got);
	/* ... and the program sees its own data, through the shim's wait. */
	ck_assert_int_eq(program_wait(ev, 4), 1);
	ck_assert_uint_eq(ev[0].data.u64, PROGRAM_DATA);
	ck_assert_uint_eq(ev[0].events & EPOLLIN, EPOLLIN);
	/* Registration changes go the item's way from here. */
	struct epoll_event mod = { .events = EPOLLIN, .data.u64 = 7 };

	ck_assert_int_eq(shim_epoll_ctl(epfd, EPOLL_CTL_MOD, sv[0], &mod), 0);
	ck_assert_int_eq(program_wait(ev, 4), 1);
	ck_assert_uint_eq(ev[0].data.u64, 7);
}
END_TEST

/* A connection that left interception for good (a peer without the shim:
 * shim_upgrade_fail()) gives its taken-over registration back at the next
 * wait: the kernel holds the program's data again and the item goes, so
 * that the set's waits and the fd's changes cost the shim nothing. */
START_TEST(a_connection_on_tcp_for_good_gives_its_registration_back)
{
	struct epoll_event ev[4];
	bool got;

	add(EPOLLIN);
	make_due();
	shim_io_young_take_over(conn);
	ck_assert_uint_eq(conn->ep_items, 1);
	ck_assert_uint_ne(kernel_reports(&got), PROGRAM_DATA);
	__atomic_store_n(&conn->intercept, false, __ATOMIC_RELAXED);
	ck_assert_int_eq(program_wait(ev, 4), 1);
	ck_assert_uint_eq(ev[0].data.u64, PROGRAM_DATA);
	ck_assert_uint_eq(conn->ep_items, 0);
	ck_assert_uint_eq(kernel_reports(&got), PROGRAM_DATA);
	ck_assert(got);
	/* With no item left, a wait is the kernel's alone. */
	int rc = 0;

	ck_assert_int_eq(shim_epoll_wait(epfd, ev, 4, 0, NULL, &rc), 0);
}
END_TEST

/* An edge-triggered item stays ours: a MOD would report an edge that did
 * not happen. */
START_TEST(an_edge_item_on_tcp_for_good_stays)
{
	struct epoll_event ev[4];
	bool got;

	add(EPOLLIN | EPOLLET);
	ck_assert_uint_eq(conn->ep_items, 1);
	__atomic_store_n(&conn->intercept, false, __ATOMIC_RELAXED);
	ck_assert_int_eq(program_wait(ev, 4), 1);
	ck_assert_uint_eq(ev[0].data.u64, PROGRAM_DATA);
	ck_assert_uint_eq(conn->ep_items, 1);
	ck_assert_uint_ne(kernel_reports(&got), PROGRAM_DATA);
}
END_TEST

/* Kinds whose kernel state a take-over would change get an item at once. */
START_TEST(edge_oneshot_and_exclusive_are_items_at_once)
{
	static const uint32_t kinds[] = { EPOLLIN | EPOLLET, EPOLLIN | EPOLLONESHOT, EPOLLIN | EPOLLEXCLUSIVE };

	for (unsigned i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		add(kinds[i]);
		ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) == 0);
		ck_assert_uint_eq(conn->ep_items, 1);
		ck_assert_int_eq(shim_epoll_ctl(epfd, EPOLL_CTL_DEL, sv[0], NULL), 0);
		ck_assert_uint_eq(conn->ep_items, 0);
	}
	/* A young one that becomes edge-triggered becomes an item then. */
	struct epoll_event et = { .events = EPOLLIN | EPOLLET, .data.u64 = 9 };
	struct epoll_event ev[4];

	add(EPOLLIN);
	ck_assert_int_eq(shim_epoll_ctl(epfd, EPOLL_CTL_MOD, sv[0], &et), 0);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) == 0);
	ck_assert_uint_eq(conn->ep_items, 1);
	ck_assert_int_eq(program_wait(ev, 4), 1);
	ck_assert_uint_eq(ev[0].data.u64, 9);
}
END_TEST

/* The recorded number closes while a dup keeps the file: the kernel keeps
 * the registration, which becomes an item (then an orphan, as any). */
START_TEST(close_with_a_dup_left_takes_it_over)
{
	struct epoll_event ev[4];
	int dupfd = dup(sv[0]);

	ck_assert_int_ge(dupfd, 0);
	shim_sock_on_dup(sv[0], dupfd);
	add(EPOLLIN);
	shim_sock_on_close(sv[0]);
	close(sv[0]);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) == 0);
	ck_assert_uint_eq(conn->ep_items, 1);
	ck_assert_int_eq(program_wait(ev, 4), 1);
	ck_assert_uint_eq(ev[0].data.u64, PROGRAM_DATA);
}
END_TEST

START_TEST(close_of_the_last_fd_forgets_it)
{
	bool got;

	add(EPOLLIN);
	pthread_mutex_lock(&conn->lock);
	conn->refs++; /* looked at after the close */
	pthread_mutex_unlock(&conn->lock);
	shim_sock_on_close(sv[0]);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) == 0);
	ck_assert_uint_eq(conn->ep_items, 0);
	close(sv[0]);
	kernel_reports(&got);
	ck_assert(!got);
}
END_TEST

/* The set closed: its registrations went with it, and the upgrade may go. */
START_TEST(a_closed_set_lets_the_upgrade_go)
{
	add(EPOLLIN);
	shim_sock_on_close(epfd);
	close(epfd);
	make_due();
	shim_io_young_take_over(conn);
	ck_assert(__atomic_load_n(&conn->ep_young_set, __ATOMIC_RELAXED) == 0);
	ck_assert_uint_eq(conn->ep_items, 0);
}
END_TEST

/* poll and select: a young fd is the kernel's to report (one system call,
 * as without the shim); one whose handshake began needs the shim's round. */
START_TEST(a_young_fd_is_the_kernels_to_poll)
{
	struct pollfd p = { .fd = sv[0], .events = POLLIN };
	fd_set r;

	FD_ZERO(&r);
	FD_SET(sv[0], &r);
	ck_assert(!shim_wait_poll_needed(&p, 1));
	ck_assert(!shim_wait_select_needed(sv[0] + 1, &r, NULL));
	pthread_mutex_lock(&conn->lock);
	conn->phase = SHIM_PHASE_NEGOTIATING;
	pthread_mutex_unlock(&conn->lock);
	ck_assert(shim_wait_poll_needed(&p, 1));
	ck_assert(shim_wait_select_needed(sv[0] + 1, &r, NULL));
	pthread_mutex_lock(&conn->lock);
	conn->phase = SHIM_PHASE_IDLE;
	conn->tx_dir = SHIM_DIR_CHAN;
	pthread_mutex_unlock(&conn->lock);
	ck_assert(shim_wait_poll_needed(&p, 1));
}
END_TEST

static Suite *epoll_young_suite(void)
{
	Suite *s = suite_create("epoll_young");
	TCase *tc = tcase_create("young");

	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_add_test(tc, a_young_registration_is_the_kernels);
	tcase_add_test(tc, no_upgrade_starts_while_the_kernel_holds_it);
	tcase_add_test(tc, not_taken_over_before_due);
	tcase_add_test(tc, due_takes_it_over_and_the_program_keeps_its_data);
	tcase_add_test(tc, a_connection_on_tcp_for_good_gives_its_registration_back);
	tcase_add_test(tc, an_edge_item_on_tcp_for_good_stays);
	tcase_add_test(tc, edge_oneshot_and_exclusive_are_items_at_once);
	tcase_add_test(tc, close_with_a_dup_left_takes_it_over);
	tcase_add_test(tc, close_of_the_last_fd_forgets_it);
	tcase_add_test(tc, a_closed_set_lets_the_upgrade_go);
	tcase_add_test(tc, a_young_fd_is_the_kernels_to_poll);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(epoll_young_suite());
}
