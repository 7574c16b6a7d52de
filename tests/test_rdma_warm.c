/*
 * Unit tests for the RDMA warm-up (shim/transport/rdma/rdma_dev.c) and the RDMA_WARMING
 * step of an upgrade (shim/transport/rdma/rdma_setup.c), without an RDMA device: the
 * warm-up's work is replaced (shim_rdma_warm_set_work) by one that waits on
 * a pipe, so the tests decide when it ends.
 *
 * What must hold: polling starts the warm-up once and never waits for it;
 * the thread takes none of the program's signals and is named; a process
 * forked after the warm-up started (finished or not) reports "inherited",
 * fails its upgrades with rdma_inherited and forgets its parent's attempts
 * without touching them; a child of a process that never warmed up warms
 * up by itself; the warm-up's time is not charged to a connection's upgrade
 * timeout, but its wait is bounded (rdma_warming).
 *
 * Check runs every test in a process of its own, so each starts cold.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "layers.h"
#include "rdma.h"
#include "sock.h"
#include "trace.h"
#include "transport.h"
#include "upgrade.h"
#include "check_run.h"

#define MS 1000000ull

/* ---- a warm-up whose end the test decides ---- */

static int gate[2] = { -1, -1 };
static volatile int work_runs;
/* What the work saw of its own thread. */
static volatile int work_sig_blocked = -1;
static char work_name[32];
static pthread_t work_thread;

static int gated_work(int *devices)
{
	sigset_t cur;
	char c;

	__atomic_add_fetch(&work_runs, 1, __ATOMIC_SEQ_CST);
	work_thread = pthread_self();
	pthread_sigmask(SIG_BLOCK, NULL, &cur);
	work_sig_blocked = sigismember(&cur, SIGINT) && sigismember(&cur, SIGTERM) && sigismember(&cur, SIGUSR1) &&
			   sigismember(&cur, SIGCHLD) && sigismember(&cur, SIGPIPE) && sigismember(&cur, SIGALRM);
	pthread_getname_np(pthread_self(), work_name, sizeof(work_name));
	while (read(gate[0], &c, 1) < 0 && errno == EINTR)
		;
	*devices = 1;
	return WARM_READY;
}

static unsigned long long ms_since(unsigned long long t0)
{
	return (shim_now_ns() - t0) / MS;
}

static void open_gate(void)
{
	ck_assert_int_eq(write(gate[1], "x", 1), 1);
}

static void setup(void)
{
	ck_assert_int_eq(pipe(gate), 0);
	shim_layers_register();
	shim_rdma_warm_set_work(gated_work);
	memset(&shim_cfg, 0, sizeof(shim_cfg));
	shim_cfg.enabled = true;
	shim_cfg.upgrade_timeout_ms = 3000;
	shim_cfg.cm_timeout_ms = 2000;
	shim_cfg.ring_kb = 64;
	shim_cfg.breaker_failures = 3;
	shim_cfg.breaker_cooldown_ms = 30000;
	shim_cfg.transports[0] = SHIM_TRANSPORT_SHM;
	shim_cfg.transports[1] = SHIM_TRANSPORT_RDMA;
	shim_cfg.n_transports = 2;
}

static void teardown(void)
{
	/* A warm-up this process started may still be in read(gate[0]): let it
	 * end before the fd goes (ThreadSanitizer saw the close race the read).
	 * The acquire in the poll pairs with the warm-up's release of its
	 * state, which comes after the read. */
	if (shim_rdma_owned()) {
		unsigned long long t0 = shim_now_ns();

		open_gate();
		while (shim_rdma_warm_poll() == WARM_RUNNING && ms_since(t0) < 5000)
			usleep(1000);
	}
	close(gate[0]);
	close(gate[1]);
}

/* Polls until the state is want (bounded): the polls never wait. */
static int wait_state(int want, unsigned timeout_ms)
{
	unsigned long long t0 = shim_now_ns();
	int st;

	while ((st = shim_rdma_warm_poll()) != want && ms_since(t0) < timeout_ms)
		usleep(1000);
	return st;
}

/* A child's exit status: 0 when every check in it held. */
static int child_status(pid_t pid)
{
	int status = 0;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static struct shim_sock *new_sock(enum shim_role role)
{
	struct shim_sock *s = calloc(1, sizeof(*s));

	ck_assert_ptr_nonnull(s);
	s->refs = 1;
	s->role = role;
	s->state = SHIM_STATE_TCP;
	s->eligible = true;
	s->tcp_keep = -1;
	s->xport = &shim_rdma_transport;
	s->rcv_timeout_ms = s->snd_timeout_ms = -1;
	/* 192.168.77.1:40000 -> 192.168.77.2:7100, v4-mapped */
	s->tuple.local.addr[10] = s->tuple.local.addr[11] = 0xff;
	s->tuple.local.addr[12] = 192;
	s->tuple.local.addr[13] = 168;
	s->tuple.local.addr[14] = 77;
	s->tuple.local.addr[15] = 1;
	s->tuple.local.port = 40000;
	s->tuple.peer = s->tuple.local;
	s->tuple.peer.addr[15] = 2;
	s->tuple.peer.port = 7100;
	pthread_mutex_init(&s->lock, NULL);
	return s;
}

static enum rdma_step step_of(const struct shim_sock *s)
{
	return ((const struct rdma_conn *)s->neg)->step;
}

/* ---- the warm-up itself ---- */

START_TEST(poll_starts_once_and_never_waits)
{
	unsigned long long t0 = shim_now_ns();
	int st = shim_rdma_warm_poll();

	/* The work is blocked on the gate: a poll that waited would hang here. */
	ck_assert(st == WARM_IDLE || st == WARM_RUNNING);
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(shim_rdma_warm_poll(), WARM_RUNNING);
	ck_assert_uint_lt(ms_since(t0), 1000);
	ck_assert(shim_rdma_owned());
	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
	ck_assert_int_eq(work_runs, 1);
	ck_assert_int_eq(shim_rdma_warm_verdict(WARM_READY), SHIM_REASON_NONE);
}
END_TEST

START_TEST(thread_blocks_signals_and_is_named)
{
	sigset_t mine;

	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
	ck_assert_int_eq(work_sig_blocked, 1);
	ck_assert_str_eq(work_name, "rdmashim-warm");
	ck_assert(!pthread_equal(work_thread, pthread_self()));
	/* The caller's own mask is as it was. */
	pthread_sigmask(SIG_BLOCK, NULL, &mine);
	ck_assert(!sigismember(&mine, SIGINT));
	ck_assert(!sigismember(&mine, SIGUSR1));
}
END_TEST

START_TEST(child_after_warm_up_is_inherited)
{
	pid_t pid;

	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int st = shim_rdma_warm_poll();

		_exit(st == WARM_INHERITED && !shim_rdma_owned() && shim_rdma_pd_for(NULL) == NULL &&
		      shim_rdma_warm_verdict(st) == SHIM_REASON_RDMA_INHERITED ? 0 : 1);
	}
	ck_assert_int_eq(child_status(pid), 0);
	ck_assert(shim_rdma_owned());
	ck_assert_int_eq(shim_rdma_warm_poll(), WARM_READY);
}
END_TEST

START_TEST(child_during_warm_up_is_inherited)
{
	pid_t pid;

	ck_assert_int_eq(wait_state(WARM_RUNNING, 5000), WARM_RUNNING);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The thread is not in the child: it must neither wait for it
		 * nor start its own (the parent's may hold libibverbs' locks). */
		int before = work_runs, st = shim_rdma_warm_poll();

		usleep(50 * 1000);
		_exit(st == WARM_INHERITED && work_runs == before ? 0 : 1);
	}
	ck_assert_int_eq(child_status(pid), 0);
	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
}
END_TEST

START_TEST(child_of_a_cold_process_warms_up_itself)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int st = shim_rdma_warm_poll();
		bool ok = st != WARM_INHERITED && shim_rdma_owned();

		open_gate();
		ok = ok && wait_state(WARM_READY, 5000) == WARM_READY;
		_exit(ok ? 0 : 1);
	}
	ck_assert_int_eq(child_status(pid), 0);
	/* The parent is still cold, and the child's warm-up is not its own. */
	ck_assert(!shim_rdma_owned());
}
END_TEST

START_TEST(trace_reports_duration)
{
	char path[] = "/tmp/test_rdma_warm.XXXXXX";
	char buf[4096] = "";
	int fd = mkstemp(path);
	ssize_t n = 0;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(shim_trace_open(path, SHIM_TRACE_INFO, NULL, 0), 0);
	ck_assert_int_eq(wait_state(WARM_RUNNING, 5000), WARM_RUNNING);
	/* The thread's clock starts when it runs, which under load (or a
	 * sanitizer) can be well after the poll: wait until the work began. */
	for (int i = 0; i < 5000 && !__atomic_load_n(&work_runs, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	ck_assert_int_eq(work_runs, 1);
	usleep(20 * 1000);
	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
	/* The line follows the state's store: wait for it (bounded). */
	for (int i = 0; i < 2000 && !strstr(buf, "\n"); i++) {
		n = pread(fd, buf, sizeof(buf) - 1, 0);
		buf[n > 0 ? n : 0] = '\0';
		usleep(1000);
	}
	close(fd);
	unlink(path);
	ck_assert_ptr_nonnull(strstr(buf, "\"event\":\"rdma.warm\""));
	ck_assert_ptr_nonnull(strstr(buf, "\"state\":\"ready\""));
	ck_assert_ptr_nonnull(strstr(buf, "\"devices\":1"));
	char *ms = strstr(buf, "\"ms\":");

	ck_assert_ptr_nonnull(ms);
	ck_assert_double_ge(strtod(ms + 5, NULL), 15.0); /* the gate stayed shut 20 ms */
}
END_TEST

START_TEST(kick_only_when_rdma_may_be_picked)
{
	struct shim_sock *s = new_sock(SHIM_ROLE_CLIENT);
	struct shim_tuple loop = s->tuple;

	memset(loop.local.addr + 12, 0, 4);
	loop.local.addr[12] = 127;
	loop.local.addr[15] = 1;
	loop.peer = loop.local;
	/* shm,rdma: a peer on this host gets shm, no warm-up. */
	shim_transport_warm(&loop);
	ck_assert(!shim_rdma_owned());
	/* The same addresses on both ends: this host too. */
	struct shim_tuple same = s->tuple;

	same.peer.addr[15] = same.local.addr[15];
	shim_transport_warm(&same);
	ck_assert(!shim_rdma_owned());
	/* Another host: rdma. */
	shim_transport_warm(&s->tuple);
	ck_assert(shim_rdma_owned());
	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
	free(s);
}
END_TEST

START_TEST(kick_when_rdma_comes_first)
{
	struct shim_sock *s = new_sock(SHIM_ROLE_CLIENT);
	struct shim_tuple loop = s->tuple;

	shim_cfg.transports[0] = SHIM_TRANSPORT_RDMA;
	shim_cfg.transports[1] = SHIM_TRANSPORT_SHM;
	loop.peer = loop.local;
	shim_transport_warm(&loop);
	ck_assert(shim_rdma_owned());
	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
	free(s);
}
END_TEST

START_TEST(real_warm_up_without_device_ends)
{
	unsigned long long t0;
	int st;

	shim_rdma_warm_set_work(NULL);
	t0 = shim_now_ns();
	st = shim_rdma_warm_poll();
	ck_assert(st == WARM_RUNNING || st == WARM_NO_DEVICE || st == WARM_READY);
	ck_assert_uint_lt(ms_since(t0), 1000);
	while ((st = shim_rdma_warm_poll()) == WARM_RUNNING && ms_since(t0) < 20000)
		usleep(1000);
	/* This machine may or may not have a device; either way it ends. */
	ck_assert(st == WARM_NO_DEVICE || st == WARM_READY);
}
END_TEST

/* ---- a connection waiting for it (rdma_setup.c) ---- */

START_TEST(warming_is_not_charged_to_the_upgrade_timeout)
{
	struct shim_sock *s = new_sock(SHIM_ROLE_CLIENT);
	unsigned long long t0 = shim_now_ns(), later = t0 + 2 * shim_cfg.upgrade_timeout_ms * MS;

	shim_rdma_start(s, 5, t0);
	ck_assert_int_eq(s->phase, SHIM_PHASE_COMMITTING);
	ck_assert_int_eq(step_of(s), RDMA_WARMING);
	/* Twice the upgrade timeout later the warm-up still runs: wait on. */
	shim_rdma_progress(s, 5, later);
	ck_assert_int_eq(s->phase, SHIM_PHASE_COMMITTING);
	ck_assert_int_eq(step_of(s), RDMA_WARMING);
	/* Ready: the upgrade's own timeout starts now. begin() then goes on
	 * (a device) or fails for want of one, never for time. */
	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
	shim_rdma_progress(s, 5, later);
	ck_assert_uint_eq(s->deadline_ns, later + shim_cfg.upgrade_timeout_ms * MS);
	if (s->phase == SHIM_PHASE_FAILED)
		ck_assert_int_eq(s->reason, SHIM_REASON_NO_RDMA_DEVICE);
	else
		ck_assert_int_ne(step_of(s), RDMA_WARMING);
	shim_rdma_release(s);
	free(s);
}
END_TEST

START_TEST(warming_wait_is_bounded)
{
	struct shim_sock *s = new_sock(SHIM_ROLE_SERVER);
	unsigned long long t0 = shim_now_ns(), bound = shim_rdma_warm_wait_ns();

	ck_assert_uint_ge(bound, 10ull * shim_cfg.upgrade_timeout_ms * MS);
	ck_assert_uint_ge(bound, 30000ull * MS);
	shim_rdma_start(s, 5, t0);
	ck_assert_int_eq(step_of(s), RDMA_WARMING);
	shim_rdma_progress(s, 5, t0 + bound - MS);
	ck_assert_int_eq(s->phase, SHIM_PHASE_COMMITTING);
	shim_rdma_progress(s, 5, t0 + bound);
	ck_assert_int_eq(s->phase, SHIM_PHASE_FAILED);
	ck_assert_int_eq(s->reason, SHIM_REASON_RDMA_WARMING);
	ck_assert_ptr_null(s->neg);
	open_gate();
	free(s);
}
END_TEST

START_TEST(upgrade_in_inherited_child_fails_with_reason)
{
	pid_t pid;

	open_gate();
	ck_assert_int_eq(wait_state(WARM_READY, 5000), WARM_READY);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct shim_sock *s = new_sock(SHIM_ROLE_SERVER);

		shim_rdma_start(s, 5, shim_now_ns());
		_exit(s->phase == SHIM_PHASE_FAILED && s->reason == SHIM_REASON_RDMA_INHERITED && !s->neg ? 0 : 1);
	}
	ck_assert_int_eq(child_status(pid), 0);
}
END_TEST

START_TEST(child_forgets_the_parents_attempt)
{
	struct shim_sock *s = new_sock(SHIM_ROLE_CLIENT);
	pid_t pid;

	shim_rdma_start(s, 5, shim_now_ns());
	ck_assert_int_eq(step_of(s), RDMA_WARMING);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Progress in the child ends its copy on TCP, touching nothing. */
		shim_rdma_progress(s, 5, shim_now_ns());
		_exit(s->phase == SHIM_PHASE_FAILED && s->reason == SHIM_REASON_RDMA_INHERITED && !s->neg ? 0 : 1);
	}
	ck_assert_int_eq(child_status(pid), 0);
	/* The parent's attempt goes on. */
	ck_assert_int_eq(s->phase, SHIM_PHASE_COMMITTING);
	ck_assert_ptr_nonnull(s->neg);
	open_gate();
	shim_rdma_release(s);
	free(s);
}
END_TEST

START_TEST(child_release_leaves_the_parents_channel)
{
	struct shim_sock *s = new_sock(SHIM_ROLE_CLIENT);
	struct rdma_conn *c;
	pid_t pid;

	shim_rdma_start(s, 5, shim_now_ns());
	c = s->neg;
	ck_assert_ptr_nonnull(c);
	/* As if the channel were installed (C after its accept). */
	c->installed = true;
	s->chan = &c->chan;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The last fd closes in the child: upgrade.c would destroy
		 * s->chan next, so release must take it away. */
		shim_rdma_release(s);
		_exit(!s->chan && !s->neg ? 0 : 1);
	}
	ck_assert_int_eq(child_status(pid), 0);
	ck_assert_ptr_eq(s->chan, &c->chan);
	c->installed = false;
	s->chan = NULL;
	open_gate();
	shim_rdma_release(s);
	free(s);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("rdma_warm");
	TCase *tc = tcase_create("warm");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, poll_starts_once_and_never_waits);
	tcase_add_test(tc, thread_blocks_signals_and_is_named);
	tcase_add_test(tc, child_after_warm_up_is_inherited);
	tcase_add_test(tc, child_during_warm_up_is_inherited);
	tcase_add_test(tc, child_of_a_cold_process_warms_up_itself);
	tcase_add_test(tc, trace_reports_duration);
	tcase_add_test(tc, kick_only_when_rdma_may_be_picked);
	tcase_add_test(tc, kick_when_rdma_comes_first);
	tcase_add_test(tc, real_warm_up_without_device_ends);
	suite_add_tcase(s, tc);
	tc = tcase_create("warming_step");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, warming_is_not_charged_to_the_upgrade_timeout);
	tcase_add_test(tc, warming_wait_is_bounded);
	tcase_add_test(tc, upgrade_in_inherited_child_fails_with_reason);
	tcase_add_test(tc, child_forgets_the_parents_attempt);
	tcase_add_test(tc, child_release_leaves_the_parents_channel);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return shim_check_run(suite());
}
