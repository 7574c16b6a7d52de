/*
 * One copy on shared memory (shim/transport/shm/shm_zc.c): the offer's
 * protocol between a consumer and a producer on one ring, in one process
 * (process_vm_writev into ourselves), and what each side does with the
 * words a hostile peer writes into the offer: a bad address, length or
 * offset, a DONE that lies, a state word of no offer, a take never done;
 * and a writer that writes late: the buffer is never given back before.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "config.h"
#include "ring.h"
#include "shm_zc.h"

#define RING_SIZE (64u << 10)
#define MIN_KB 4u

struct rig {
	void *mem;
	struct shim_ring prod, cons;
	struct shm_zc ztx, zrx;
};

static int pidfd_of(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static void rig_init(struct rig *r, pid_t writer_peer)
{
	shim_cfg.zerocopy = SHIM_ZC_ON;
	shim_cfg.zerocopy_shm_min_kb = MIN_KB;
	r->mem = mmap(NULL, shim_ring_footprint(RING_SIZE), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(r->mem, MAP_FAILED);
	shim_ring_format(r->mem, RING_SIZE);
	ck_assert_int_eq(shim_ring_attach(&r->prod, r->mem, RING_SIZE), 0);
	ck_assert_int_eq(shim_ring_attach(&r->cons, r->mem, RING_SIZE), 0);
	shm_zc_init(&r->ztx);
	shm_zc_init(&r->zrx);
	/* shm_zc_bind refuses our own pid (a socketpair's maker): set the
	 * peer by hand, ourselves for the writer, writer_peer for the
	 * reader's liveness checks. */
	ck_assert_int_eq(shim_owned_take(&r->ztx.pidfd, pidfd_of(getpid())), 0);
	r->ztx.pid = getpid();
	r->ztx.tx_on = true;
	ck_assert_int_eq(shim_owned_take(&r->zrx.pidfd, pidfd_of(writer_peer)), 0);
	r->zrx.pid = writer_peer;
	r->zrx.rx_on = true;
}

static void rig_fini(struct rig *r)
{
	shm_zc_release(&r->ztx);
	shm_zc_release(&r->zrx);
	munmap(r->mem, shim_ring_footprint(RING_SIZE));
}

static size_t send_buf(struct rig *r, const void *buf, size_t len, size_t skip)
{
	struct iovec iov = { (void *)buf, len };

	return shm_zc_send(&r->ztx, &r->prod, &iov, 1, skip);
}

static void fill(uint8_t *b, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)(seed + i * 7);
}

START_TEST(taken_and_delivered)
{
	static uint8_t src[48 << 10], dst[32 << 10], rest[32 << 10];
	struct iovec riov = { rest, sizeof(rest) };
	struct rig r;
	size_t n;

	rig_init(&r, getpid());
	fill(src, sizeof(src), 3);
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), 0);
	n = send_buf(&r, src, sizeof(src), 0);
	ck_assert_uint_eq(n, sizeof(dst)); /* the offer's length bounds it */
	/* DONE: news for a sleeper (the arm says "do not sleep"), not ring
	 * bytes; the call takes them. */
	ck_assert_uint_eq(shim_ring_readable(&r.cons), 0);
	ck_assert(shim_ring_zc_news(&r.cons));
	ck_assert(!shim_ring_consumer_arm(&r.cons, 1));
	shim_ring_consumer_disarm(&r.cons);
	ck_assert_uint_eq(shm_zc_end(&r.zrx, &r.cons), sizeof(dst));
	ck_assert(!shim_ring_zc_news(&r.cons));
	ck_assert_mem_eq(dst, src, sizeof(dst));
	ck_assert_uint_eq(r.zrx.rx_total, sizeof(dst));
	/* The rest goes through the ring, at the offsets after. */
	{
		struct iovec iov = { src, sizeof(src) };

		ck_assert_uint_eq(shim_ring_write(&r.prod, &iov, 1, n), sizeof(src) - n);
	}
	ck_assert_uint_eq(shim_ring_read(&r.cons, &riov, 1, false), sizeof(src) - n);
	ck_assert_mem_eq(rest, src + n, sizeof(src) - n);
	ck_assert(!shim_ring_violated(&r.cons));
	/* The ring's cursors never counted them; the stream offsets do. */
	ck_assert_uint_eq(shim_ring_sent(&r.prod), sizeof(src) - n);
	ck_assert_uint_eq(r.ztx.tx_total, n);
	ck_assert_uint_eq(r.ztx.tx_floor, n);
	rig_fini(&r);
}
END_TEST

/* Another call's read settles the offer's DONE (shm_recv): the ring and
 * its word say nothing any more, so the offering call's wait must end on
 * the offer being settled (shm_zc_out, the transport's rx_offer_out). */
START_TEST(settled_by_another_call)
{
	static uint8_t src[16 << 10], dst[16 << 10];
	struct rig r;

	rig_init(&r, getpid());
	fill(src, sizeof(src), 5);
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), 0);
	ck_assert(shm_zc_out(&r.zrx));
	ck_assert_uint_eq(send_buf(&r, src, sizeof(src), 0), sizeof(dst));
	shm_zc_settle(&r.zrx, &r.cons, false);
	ck_assert(!shm_zc_out(&r.zrx));
	ck_assert(!shim_ring_zc_news(&r.cons));
	ck_assert(shim_ring_consumer_arm(&r.cons, 1)); /* the ring alone would let it sleep */
	shim_ring_consumer_disarm(&r.cons);
	ck_assert_uint_eq(shm_zc_end(&r.zrx, &r.cons), sizeof(dst));
	ck_assert_mem_eq(dst, src, sizeof(dst));
	rig_fini(&r);
}
END_TEST

START_TEST(withdrawn_is_never_written)
{
	static uint8_t src[16 << 10], dst[16 << 10];
	struct rig r;

	rig_init(&r, getpid());
	fill(src, sizeof(src), 9);
	memset(dst, 0xee, sizeof(dst));
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), 0);
	ck_assert_uint_eq(shm_zc_end(&r.zrx, &r.cons), 0);
	/* The word says IDLE now: the sender copies into the ring. */
	ck_assert_uint_eq(send_buf(&r, src, sizeof(src), 0), 0);
	for (size_t i = 0; i < sizeof(dst); i++)
		ck_assert_uint_eq(dst[i], 0xee);
	/* Small sends never look at offers. */
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), 0);
	ck_assert_uint_eq(send_buf(&r, src, 100, 0), 0);
	ck_assert_uint_eq(shm_zc_end(&r.zrx, &r.cons), 0);
	/* A receive below the threshold offers nothing. */
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, 100), -EMSGSIZE);
	rig_fini(&r);
}
END_TEST

/* An open offer whose fields the (hostile) consumer wrote by hand. */
static void hostile_offer(struct rig *r, uint64_t gen, uint64_t off, uint64_t addr, uint64_t len)
{
	r->prod.hdr->zc_off = off;
	r->prod.hdr->zc_addr = addr;
	r->prod.hdr->zc_len = len;
	__atomic_store_n(&r->prod.hdr->zc_state, shm_zc_word(gen, SHM_ZC_OPEN), __ATOMIC_RELEASE);
}

START_TEST(hostile_offers_cost_the_sender_nothing)
{
	static uint8_t src[32 << 10];
	struct rig r;

	rig_init(&r, getpid());
	fill(src, sizeof(src), 1);
	/* Not where our next byte is: not taken. */
	hostile_offer(&r, 5, 12345, (uint64_t)(uintptr_t)src, sizeof(src));
	ck_assert_uint_eq(send_buf(&r, src, sizeof(src), 0), 0);
	ck_assert_uint_eq(r.prod.hdr->zc_state & SHM_ZC_STATE_MASK, SHM_ZC_OPEN);
	/* An address that is no memory of the peer's: EFAULT, DONE with 0,
	 * and the sender still takes later offers (this one only failed). */
	hostile_offer(&r, 6, 0, 4096, sizeof(src));
	ck_assert_uint_eq(send_buf(&r, src, sizeof(src), 0), 0);
	ck_assert_uint_eq(r.prod.hdr->zc_state, shm_zc_word(6, SHM_ZC_DONE));
	ck_assert_uint_eq(r.prod.hdr->zc_done, 0);
	ck_assert(r.ztx.tx_on);
	ck_assert_uint_eq(r.ztx.tx_total, 0);
	/* A length beyond anything: the sender writes at most its send. */
	{
		uint8_t *big = mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		static uint8_t huge[256 << 10];

		fill(huge, sizeof(huge), 4);
		hostile_offer(&r, 7, 0, (uint64_t)(uintptr_t)big, UINT64_MAX);
		ck_assert_uint_eq(send_buf(&r, huge, sizeof(huge), 0), sizeof(huge));
		ck_assert_mem_eq(big, huge, sizeof(huge));
		ck_assert_uint_eq(big[sizeof(huge)], 0); /* nothing past what it counted */
		munmap(big, 1u << 20);
	}
	/* A process the kernel will not let us write into: no more takes,
	 * and the consumer is told (zc_refused). */
	rig_fini(&r);
	rig_init(&r, getpid());
	{
		/* A number that names no process any more (ESRCH), as a
		 * kernel's refusal (EPERM: another user, Yama) does. */
		pid_t gone = fork();
		int st;

		if (gone == 0)
			_exit(0);
		waitpid(gone, &st, 0);
		r.ztx.pid = gone;
	}
	hostile_offer(&r, 8, 0, 4096, sizeof(src));
	ck_assert_uint_eq(send_buf(&r, src, sizeof(src), 0), 0);
	ck_assert(!r.ztx.tx_on);
	ck_assert(shm_zc_peer_refused(&r.cons));
	rig_fini(&r);
}
END_TEST

/* The producer's words, as a hostile one writes them, for the offer the
 * consumer made (generation g). */
static void hostile_done(struct rig *r, uint64_t word, uint64_t done, uint64_t tail)
{
	r->prod.hdr->zc_done = done;
	__atomic_store_n(&r->prod.hdr->tail, tail, __ATOMIC_RELEASE);
	__atomic_store_n(&r->prod.hdr->zc_state, word, __ATOMIC_RELEASE);
}

START_TEST(hostile_done_is_a_violation)
{
	static uint8_t dst[16 << 10];
	struct rig r;

	/* More than the offer's length. */
	rig_init(&r, getpid());
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), 0);
	hostile_done(&r, shm_zc_word(r.zrx.gen, SHM_ZC_DONE), sizeof(dst) + 1, sizeof(dst) + 1);
	ck_assert_uint_eq(shm_zc_end(&r.zrx, &r.cons), 0);
	ck_assert(shim_ring_violated(&r.cons));
	rig_fini(&r);
	/* A word of no state of this offer's (another generation). */
	rig_init(&r, getpid());
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), 0);
	hostile_done(&r, shm_zc_word(r.zrx.gen + 9, SHM_ZC_DONE), 10, 10);
	ck_assert_uint_eq(shm_zc_end(&r.zrx, &r.cons), 0);
	ck_assert(shim_ring_violated(&r.cons));
	rig_fini(&r);
}
END_TEST

/* The word, once the consumer's offer opened (at most 5 s). */
static bool wait_word(struct rig *r, uint64_t word)
{
	for (int i = 0; i < 5000; i++) {
		if (__atomic_load_n(&r->prod.hdr->zc_state, __ATOMIC_ACQUIRE) == word)
			return true;
		usleep(1000);
	}
	return false;
}

static double secs_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/*
 * A writer that took the offer and writes only after the bound (stopped,
 * descheduled): the buffer must not go back to the program before that
 * write, or the write lands in memory the program reuses. The reader is
 * a child (its parent may write into it whatever Yama says); it exits 0
 * when its receive returned after the write, with the connection reset
 * and none of those bytes counted.
 */
START_TEST(late_writer_lands_before_the_buffer_goes_back)
{
	static uint8_t src[16 << 10], dst[16 << 10];
	struct iovec local = { src, sizeof(src) }, remote = { dst, sizeof(dst) };
	struct rig r;
	pid_t child;
	uint64_t word;
	ssize_t w;
	int st;

	rig_init(&r, getpid());
	fill(src, sizeof(src), 11);
	memset(dst, 0xee, sizeof(dst));
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		struct timespec t0;
		size_t n;
		double took;

		shim_owned_close(&r.zrx.pidfd);
		if (shim_owned_take(&r.zrx.pidfd, pidfd_of(getppid())) < 0)
			_exit(10);
		r.zrx.pid = getppid();
		if (shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)) != 0)
			_exit(11);
		/* The wait of the receive, until the take. */
		if (!wait_word(&r, shm_zc_word(r.zrx.gen, SHM_ZC_TAKEN)))
			_exit(16);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		n = shm_zc_end(&r.zrx, &r.cons);
		took = secs_since(&t0);
		if (memcmp(dst, src, sizeof(dst)) != 0)
			_exit(12); /* back to the program before the write */
		if (n != 0 || r.zrx.rx_total != 0)
			_exit(13);
		if (!shim_ring_violated(&r.cons))
			_exit(14);
		_exit(took * 1000 >= SHM_ZC_TAKEN_WAIT_MS ? 0 : 15);
	}
	word = shm_zc_word(1, SHM_ZC_OPEN);
	if (!wait_word(&r, word)) {
		kill(child, SIGKILL);
		waitpid(child, &st, 0);
		ck_abort_msg("no offer: the reader's status %#x", st);
	}
	ck_assert(__atomic_compare_exchange_n(&r.prod.hdr->zc_state, &word, shm_zc_word(1, SHM_ZC_TAKEN), false,
					      __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
	usleep((SHM_ZC_TAKEN_WAIT_MS + 1000) * 1000);
	/* The write fails where the reader already gave up and exited. */
	w = process_vm_writev(child, &local, 1, &remote, 1, 0);
	r.prod.hdr->zc_done = sizeof(dst);
	__atomic_store_n(&r.prod.hdr->zc_state, shm_zc_word(1, SHM_ZC_DONE), __ATOMIC_RELEASE);
	ck_assert_int_eq(waitpid(child, &st, 0), child);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the reader's status %#x (12: its buffer came back before the write)", st);
	ck_assert_int_eq(w, (ssize_t)sizeof(dst));
	rig_fini(&r);
}
END_TEST

START_TEST(taken_is_waited_for_in_bounds)
{
	static uint8_t dst[16 << 10];
	struct timespec t0;
	struct rig r;
	pid_t child;
	int st;

	/* A living writer that can not write into us (another user, no
	 * CAP_SYS_PTRACE) takes and never says DONE: no write of its can
	 * land, so after the bound the ring is violated and the buffer goes
	 * back. Root only (the writer drops to nobody). */
	if (getuid() == 0) {
		rig_init(&r, getpid());
		ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), 0);
		child = fork();
		ck_assert_int_ge(child, 0);
		if (child == 0) {
			uint64_t word = shm_zc_word(r.zrx.gen, SHM_ZC_OPEN);

			if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
				_exit(1);
			__atomic_compare_exchange_n(&r.prod.hdr->zc_state, &word, shm_zc_word(r.zrx.gen, SHM_ZC_TAKEN),
						    false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
			pause();
			_exit(0);
		}
		shim_owned_close(&r.zrx.pidfd);
		ck_assert_int_eq(shim_owned_take(&r.zrx.pidfd, pidfd_of(child)), 0);
		r.zrx.pid = child;
		ck_assert(wait_word(&r, shm_zc_word(r.zrx.gen, SHM_ZC_TAKEN)));
		clock_gettime(CLOCK_MONOTONIC, &t0);
		ck_assert_uint_eq(shm_zc_end(&r.zrx, &r.cons), 0);
		ck_assert(secs_since(&t0) < SHM_ZC_TAKEN_WAIT_MS / 1000.0 + 2);
		ck_assert(shim_ring_violated(&r.cons));
		kill(child, SIGKILL);
		waitpid(child, &st, 0);
		rig_fini(&r);
	} else {
		fprintf(stderr, "taken_is_waited_for_in_bounds: another user's writer needs root: that part skipped\n");
	}
	/* A writer that died while it held the offer: no violation (its
	 * stream ends at TCP's end), none of its bytes counted, no more
	 * offers. */
	child = fork();
	if (child == 0)
		_exit(0);
	rig_init(&r, child);
	waitpid(child, &st, 0);
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), 0);
	hostile_done(&r, shm_zc_word(r.zrx.gen, SHM_ZC_TAKEN), 0, 0);
	ck_assert(!shim_ring_zc_news(&r.cons));
	ck_assert_uint_eq(shm_zc_end(&r.zrx, &r.cons), 0);
	ck_assert(!shim_ring_violated(&r.cons));
	ck_assert_uint_eq(r.zrx.rx_total, 0);
	ck_assert_int_eq(shm_zc_offer(&r.zrx, &r.cons, dst, sizeof(dst)), -EBUSY);
	rig_fini(&r);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("shm_zc");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 20);
	tcase_add_test(tc, taken_and_delivered);
	tcase_add_test(tc, withdrawn_is_never_written);
	tcase_add_test(tc, settled_by_another_call);
	tcase_add_test(tc, hostile_offers_cost_the_sender_nothing);
	tcase_add_test(tc, hostile_done_is_a_violation);
	tcase_add_test(tc, taken_is_waited_for_in_bounds);
	tcase_add_test(tc, late_writer_lands_before_the_buffer_goes_back);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(suite());
}
