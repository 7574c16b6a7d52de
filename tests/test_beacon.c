/*
 * Unit tests for port beacons (shim/transport/shm/beacon.c): a port nobody
 * serves is not seen; serving one makes it seen, and that port only; a name
 * another socket holds reads as served, and when that holder goes this
 * process takes the name within a second; a beacon number the program
 * closed and got back for a file of its own is never touched, and the
 * beacon comes back; nobody can queue bytes on a beacon.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "beacon.h"
#include "check_run.h"

#define RECHECK_WAIT_US 1100000

/* A port no other test or process of this run uses (names are host-wide). */
static uint16_t test_port(int which)
{
	return (uint16_t)(20000 + (getpid() % 8000) * 5 + which);
}

static socklen_t name_of(struct sockaddr_un *sun, uint16_t port)
{
	int n;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1, "rdmashim1/port/%04x", port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Another socket holding the port's name, as another process's beacon. */
static int hold_name(uint16_t port)
{
	struct sockaddr_un sun;
	socklen_t len = name_of(&sun, port);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sun, len), 0);
	return fd;
}

/* The fd bound to the port's name in this process (-1: none). */
static int beacon_fd(uint16_t port)
{
	struct sockaddr_un want, got;
	socklen_t want_len = name_of(&want, port);

	for (int fd = 0; fd < 1024; fd++) {
		socklen_t len = sizeof(got);

		if (getsockname(fd, (struct sockaddr *)&got, &len) == 0 && len == want_len &&
		    memcmp(&got, &want, len) == 0)
			return fd;
	}
	return -1;
}

START_TEST(an_unserved_port_is_not_seen)
{
	ck_assert(!shim_beacon_seen(test_port(0)));
}
END_TEST

START_TEST(serving_a_port_makes_that_port_seen)
{
	uint16_t port = test_port(1);

	shim_beacon_serve(port);
	ck_assert(shim_beacon_seen(port));
	ck_assert(!shim_beacon_seen((uint16_t)(port + 1)));
	/* Again: a table look, still seen, the same socket. */
	int held = beacon_fd(port);

	ck_assert_int_ge(held, 0);
	shim_beacon_serve(port);
	ck_assert(shim_beacon_seen(port));
	ck_assert_int_eq(beacon_fd(port), held);
}
END_TEST

START_TEST(another_holder_counts_and_is_taken_over_when_gone)
{
	uint16_t port = test_port(2);
	int other = hold_name(port);

	shim_beacon_serve(port);
	ck_assert(shim_beacon_seen(port));
	close(other);
	ck_assert(!shim_beacon_seen(port));
	usleep(RECHECK_WAIT_US);
	shim_beacon_serve(port);
	ck_assert(shim_beacon_seen(port));
}
END_TEST

START_TEST(a_reused_beacon_number_is_never_touched)
{
	uint16_t port = test_port(3);
	int kept, p[2];
	char byte = 'x';

	shim_beacon_serve(port);
	kept = beacon_fd(port);
	ck_assert_int_ge(kept, 0);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	/* The program closes the beacon's number and gets it back. */
	ck_assert_int_eq(dup2(p[0], kept), kept);
	ck_assert(!shim_beacon_seen(port));
	ck_assert_int_eq(write(p[1], &byte, 1), 1);
	usleep(RECHECK_WAIT_US);
	shim_beacon_serve(port);
	ck_assert(shim_beacon_seen(port));
	ck_assert(fcntl(kept, F_GETFD) >= 0);       /* not closed */
	ck_assert_int_eq(read(kept, &byte, 1), 1); /* nor read */
}
END_TEST

START_TEST(nobody_can_queue_bytes_on_a_beacon)
{
	uint16_t port = test_port(4);
	struct sockaddr_un sun;
	socklen_t len = name_of(&sun, port);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	shim_beacon_serve(port);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_lt(sendto(fd, "junk", 4, 0, (struct sockaddr *)&sun, len), 0);
	ck_assert_int_eq(errno, EPIPE);
	close(fd);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("beacon");
	TCase *tc = tcase_create("beacon");

	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, an_unserved_port_is_not_seen);
	tcase_add_test(tc, serving_a_port_makes_that_port_seen);
	tcase_add_test(tc, another_holder_counts_and_is_taken_over_when_gone);
	tcase_add_test(tc, a_reused_beacon_number_is_never_touched);
	tcase_add_test(tc, nobody_can_queue_bytes_on_a_beacon);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
