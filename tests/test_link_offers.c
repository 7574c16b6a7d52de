/*
 * Unit tests for the OFFERs a server keeps on a link
 * (shim/transport/rdma/rdma_link.c, shim_rdma_link_offers_scan): a claim
 * takes the OFFER that names its connection unless it is older than the
 * CM bound, and drops every OFFER older than that whichever connection it
 * names, owing the client a RELEASE for each. A kept OFFER counts as a
 * held place (rdma_link_table.c, usable()), so one that no claim would
 * ever take (its connection went to another process of the server's host)
 * made the link look full at both ends until a younger OFFER pushed it out.
 */
#include <check.h>
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_link.h"
#include "check_run.h"

#define MS 1000000ull
#define MAX_AGE (100 * MS)
#define NOW (10000 * MS)

static struct rdma_link *link_;

static struct shim_tuple tuple(uint16_t client_port)
{
	struct shim_tuple t;

	memset(&t, 0, sizeof(t));
	t.peer.addr[10] = t.peer.addr[11] = t.local.addr[10] = t.local.addr[11] = 0xff;
	t.peer.addr[12] = 10, t.peer.addr[15] = 2;  /* the client, 10.0.0.2 */
	t.local.addr[12] = 10, t.local.addr[15] = 1; /* the server, 10.0.0.1 */
	t.peer.port = client_port;
	t.local.port = 7000;
	return t;
}

/* Keeps in cell i an OFFER for the connection from client_port, made at
 * `at`, from the client's place id. */
static void keep(unsigned i, uint16_t client_port, unsigned long long at, uint32_t id)
{
	struct shim_tuple t = tuple(client_port);
	struct rdma_link_offer *o = &link_->offers[i];

	memset(o, 0, sizeof(*o));
	o->used = true;
	o->at_ns = at;
	o->msg.client_port = htobe16(t.peer.port);
	o->msg.server_port = htobe16(t.local.port);
	memcpy(o->msg.client_addr, t.peer.addr, 16);
	memcpy(o->msg.server_addr, t.local.addr, 16);
	o->msg.hello.conn_id = htobe32(id);
	link_->offers_kept++;
}

static void setup(void)
{
	link_ = calloc(1, sizeof(*link_));
	ck_assert_ptr_nonnull(link_);
}

static void teardown(void)
{
	free(link_);
}

START_TEST(a_claim_takes_its_own_young_offer)
{
	struct shim_tuple t = tuple(40001);
	struct shim_rdma_link_msg m;

	keep(0, 40000, NOW - MS, 1);
	keep(1, 40001, NOW - MS, 2);
	ck_assert(shim_rdma_link_offers_scan(link_, &t, MAX_AGE, NOW, &m));
	ck_assert_uint_eq(be32toh(m.hello.conn_id), 2);
	ck_assert_uint_eq(link_->offers_kept, 1);
	ck_assert(link_->offers[0].used);
	ck_assert_uint_eq(link_->n_owed, 0);
}
END_TEST

START_TEST(aged_offers_of_other_connections_go_with_a_release_each)
{
	struct shim_tuple t = tuple(40009);
	struct shim_rdma_link_msg m;

	keep(0, 40000, NOW - 2 * MAX_AGE, 7);
	keep(3, 40001, NOW - MS, 8);
	keep(5, 40002, NOW - MAX_AGE - 1, 9);
	ck_assert(!shim_rdma_link_offers_scan(link_, &t, MAX_AGE, NOW, &m));
	ck_assert_uint_eq(link_->offers_kept, 1);
	ck_assert(!link_->offers[0].used);
	ck_assert(link_->offers[3].used);
	ck_assert(!link_->offers[5].used);
	ck_assert_uint_eq(link_->n_owed, 2);
	ck_assert_uint_eq(link_->owed[0], 7);
	ck_assert_uint_eq(link_->owed[1], 9);
}
END_TEST

/* Its own OFFER, aged: released, not taken (the client stopped listening
 * for its ACCEPT). An OFFER stamped after the caller's now is young. */
START_TEST(its_own_aged_offer_is_released_not_taken)
{
	struct shim_tuple t = tuple(40001);
	struct shim_rdma_link_msg m;

	keep(0, 40001, NOW - 2 * MAX_AGE, 3);
	keep(1, 40002, NOW + MS, 4);
	ck_assert(!shim_rdma_link_offers_scan(link_, &t, MAX_AGE, NOW, &m));
	ck_assert_uint_eq(link_->n_owed, 1);
	ck_assert_uint_eq(link_->owed[0], 3);
	ck_assert(link_->offers[1].used);
	ck_assert_uint_eq(link_->offers_kept, 1);
}
END_TEST

/* Past the taken one the scan still ages the rest, and leaves a second
 * young OFFER alone. */
START_TEST(aging_goes_on_past_the_taken_offer)
{
	struct shim_tuple t = tuple(40001);
	struct shim_rdma_link_msg m;

	keep(0, 40001, NOW - MS, 5);
	keep(1, 40003, NOW - 2 * MAX_AGE, 6);
	keep(2, 40004, NOW - MS, 10);
	ck_assert(shim_rdma_link_offers_scan(link_, &t, MAX_AGE, NOW, &m));
	ck_assert_uint_eq(be32toh(m.hello.conn_id), 5);
	ck_assert(!link_->offers[1].used);
	ck_assert(link_->offers[2].used);
	ck_assert_uint_eq(link_->n_owed, 1);
	ck_assert_uint_eq(link_->owed[0], 6);
	ck_assert_uint_eq(link_->offers_kept, 1);
}
END_TEST

/* The sweeper's look (no connection of its own): the aged OFFERs go, a
 * RELEASE owed for each, and no young one is taken, whatever it names. */
START_TEST(with_no_connection_the_scan_only_ages)
{
	struct shim_rdma_link_msg m;

	keep(0, 40001, NOW - 2 * MAX_AGE, 11);
	keep(1, 0, NOW - MS, 12);
	ck_assert(!shim_rdma_link_offers_scan(link_, NULL, MAX_AGE, NOW, &m));
	ck_assert(!link_->offers[0].used);
	ck_assert(link_->offers[1].used);
	ck_assert_uint_eq(link_->n_owed, 1);
	ck_assert_uint_eq(link_->owed[0], 11);
	ck_assert_uint_eq(link_->offers_kept, 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("link_offers");
	TCase *tc = tcase_create("link_offers");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, a_claim_takes_its_own_young_offer);
	tcase_add_test(tc, aged_offers_of_other_connections_go_with_a_release_each);
	tcase_add_test(tc, its_own_aged_offer_is_released_not_taken);
	tcase_add_test(tc, aging_goes_on_past_the_taken_offer);
	tcase_add_test(tc, with_no_connection_the_scan_only_ages);
	suite_add_tcase(s, tc);
	return shim_check_run(s);
}
