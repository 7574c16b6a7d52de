/*
 * Process-wide RDMA state: the device probe, one protection domain per
 * device, and the warm-up thread that prepares both (and the pool's first
 * chunk) off the program's data path. See rdma.h.
 */
#include "rdma.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "bgthread.h"
#include "rdma_port.h"
#include "self.h"
#include "trace.h"

size_t shim_rdma_slot_bytes(uint32_t ring_bytes)
{
	return SHIM_RDMA_CTL_BYTES + 2 * (size_t)ring_bytes;
}

/* ---- process-wide: device check and protection domains ---- */

static int device_state = -1; /* -1 unknown, 0 none, 1 present */
static pthread_once_t device_once = PTHREAD_ONCE_INIT;

static void device_check(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);

	if (list)
		ibv_free_device_list(list);
	device_state = n > 0 && access("/dev/infiniband/rdma_cm", R_OK | W_OK) == 0;
}

bool shim_rdma_device_present(void)
{
	pthread_once(&device_once, device_check);
	return device_state == 1;
}

#define MAX_PDS 8
static pthread_mutex_t pd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
} pds[MAX_PDS];

/* One PD per device, kept for the process: the pool's chunks are
 * registered against it once. librdmacm shares one context per device. */
struct ibv_pd *shim_rdma_pd_for(struct ibv_context *ctx)
{
	struct ibv_pd *pd = NULL;

	if (!shim_rdma_owned())
		return NULL; /* the PDs in pds[] are a forked parent's */
	pthread_mutex_lock(&pd_lock);
	for (int i = 0; i < MAX_PDS && !pd; i++) {
		if (pds[i].ctx == ctx) {
			pd = pds[i].pd;
		} else if (!pds[i].ctx) {
			pd = ibv_alloc_pd(ctx);
			if (pd) {
				pds[i].ctx = ctx;
				pds[i].pd = pd;
			}
			break;
		}
	}
	pthread_mutex_unlock(&pd_lock);
	return pd;
}

/*
 * Warm-up, once per process: the device probe (ibv_get_device_list loads
 * the providers), librdmacm's device contexts, the PD and the pool's first
 * chunk (ibv_reg_mr pins it), so that no connection's handshake registers
 * memory. 0.3-1 s in the TCG VM (3-6 s beside a saturating load), a few
 * ms on real hosts: so it runs on a thread of its own, and the call that
 * starts it only starts it (invariant 6: connect and the first send return
 * as fast as without the shim). Connections wait meanwhile in RDMA_WARMING, on TCP;
 * the warm-up's time is not charged to their upgrade timeout
 * (rdma_setup.c), which is what made an earlier thread attempt miss short
 * connections' upgrades.
 *
 * Fork: verbs objects and registered pages belong to the process that made
 * them. A child shares the parent's uverbs and rdma_cm file descriptions, so
 * destroying "its" copy of a QP, PD or MR would destroy the parent's; and
 * its copies of registered pages are not the pages the HCA reads and writes.
 * warm_pid names the process that started the warm-up: any other process
 * (a child forked after that, even while the thread ran and held
 * libibverbs' locks) gets WARM_INHERITED and never touches any of it. A
 * child of a process that never warmed up warms up on its own, which is
 * what prefork and fork-per-connection servers need: the warm-up is started
 * by the process that does the I/O (or connects), never at listen or accept.
 */
static int warm_state = WARM_IDLE;
static pid_t warm_pid; /* 0: nobody started the warm-up in this lineage */
/* Set in a fork child of a process whose warm-up started; covers what the
 * pid compare can not (a child in a new pid namespace may get the same pid). */
static bool warm_forked;

/* Where the warm-up's time went, for its trace line. */
static unsigned long long warm_probe_ns, warm_pool_ns;

/* The real work; returns the state to publish and the device count. */
static int warm_devices(int *devices)
{
	struct ibv_context **ctxs;
	unsigned long long t0 = shim_now_ns();
	int n = 0;

	if (!shim_rdma_device_present())
		return WARM_NO_DEVICE;
	ctxs = rdma_get_devices(&n);
	warm_probe_ns = shim_now_ns() - t0;
	if (ctxs)
		shim_rdma_port_watch_start(ctxs, n);
	for (int i = 0; ctxs && i < n; i++) {
		struct ibv_pd *pd = shim_rdma_pd_for(ctxs[i]);
		struct shim_mr_slot slot = { 0 };

		/* Take a slot and give it back: the chunk stays registered. */
		if (pd && shim_mrpool_get(pd, shim_rdma_slot_bytes(shim_cfg.ring_kb * 1024u), &slot) == 0)
			shim_mrpool_put(&slot);
	}
	if (ctxs)
		rdma_free_devices(ctxs);
	warm_pool_ns = shim_now_ns() - t0 - warm_probe_ns;
	*devices = n;
	return n > 0 ? WARM_READY : WARM_NO_DEVICE;
}

static int (*warm_work)(int *devices) = warm_devices;

void shim_rdma_warm_set_work(int (*work)(int *devices))
{
	warm_work = work ? work : warm_devices;
}

static const char *warm_name(int st)
{
	static const char *const names[] = { "idle", "running", "ready", "no_device", "failed", "inherited" };

	return st >= 0 && st < (int)(sizeof(names) / sizeof(names[0])) ? names[st] : "unknown";
}

static void *warm_main(void *arg)
{
	unsigned long long t0 = shim_now_ns();
	int n = 0, st;

	(void)arg;
	/* By itself: a detached thread's pthread_t may be gone (and reused)
	 * by the time its creator could name it. */
	pthread_setname_np(pthread_self(), "rdmashim-warm");
	st = warm_work(&n);
	/* Release: pairs with the acquire in shim_rdma_warm_poll(); the contexts,
	 * PD and chunk are set up before a connection uses them. */
	__atomic_store_n(&warm_state, st, __ATOMIC_RELEASE);
	/* ms: the whole warm-up; probe_ms: device list and contexts; pool_ms:
	 * the PDs and the pool's first chunk (registration). */
	SHIM_TRACE(SHIM_TRACE_INFO, "rdma.warm", -1, NULL, SHIM_REASON_NONE,
		   "\"state\":\"%s\",\"devices\":%d,\"ms\":%.1f,\"probe_ms\":%.1f,\"pool_ms\":%.1f", warm_name(st), n,
		   (double)(shim_now_ns() - t0) / 1e6, (double)warm_probe_ns / 1e6, (double)warm_pool_ns / 1e6);
	return NULL;
}

static void warm_after_fork(void)
{
	if (__atomic_load_n(&warm_pid, __ATOMIC_RELAXED))
		warm_forked = true;
}

static void warm_register_atfork(void)
{
	pthread_atfork(NULL, NULL, warm_after_fork);
}

/* 0 or -errno (bgthread.h: every signal blocked in it). */
static int warm_launch(void)
{
	return shim_bgthread_start(warm_main, NULL);
}

bool shim_rdma_owned(void)
{
	pid_t owner = __atomic_load_n(&warm_pid, __ATOMIC_ACQUIRE);

	return owner && owner == shim_self_pid() && !warm_forked;
}

int shim_rdma_warm_poll(void)
{
	pid_t me = shim_self_pid(), owner = 0;

	/* Ownership first, by one compare-and-swap on the pid: a fork between
	 * it and the state's store still leaves the child inherited. */
	if (__atomic_compare_exchange_n(&warm_pid, &owner, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
		int rc;

		pthread_once(&atfork_once, warm_register_atfork);
		__atomic_store_n(&warm_state, WARM_RUNNING, __ATOMIC_RELEASE);
		rc = warm_launch();
		if (rc < 0) {
			__atomic_store_n(&warm_state, WARM_FAILED, __ATOMIC_RELEASE);
			SHIM_TRACE(SHIM_TRACE_WARN, "rdma.warm", -1, NULL, SHIM_REASON_INTERNAL_ERROR,
				   "\"state\":\"failed\",\"errno\":%d", -rc);
		}
	} else if (owner != me || warm_forked) {
		return WARM_INHERITED;
	}
	return __atomic_load_n(&warm_state, __ATOMIC_ACQUIRE);
}

/* The transport's warm op: called only for a connection that will pick
 * RDMA (shim_transport_warm()). One that will use shm must not start the
 * warm-up: it would pin memory for nothing, and a child forked later could
 * no longer use RDMA. */
void shim_rdma_warm_kick(const struct shim_tuple *tuple)
{
	(void)tuple;
	shim_rdma_warm_poll();
}

/*
 * A connection's wait in RDMA_WARMING is bounded apart from its upgrade
 * timeout: the warm-up's time is the process's, not the connection's (up
 * to 1 s in the TCG VM, 3-6 s there under load, longer on a host
 * registering a big pool), and charging it to the first connections made
 * them miss their upgrade. Ten upgrade timeouts, and never less than 30 s,
 * still ends the wait of a process whose warm-up hangs (a stuck driver)
 * with a reason of its own (rdma_warming).
 */
#define WARM_WAIT_FACTOR 10ull
#define WARM_WAIT_MIN_NS (30000ull * 1000000ull)

unsigned long long shim_rdma_warm_wait_ns(void)
{
	unsigned long long ns = WARM_WAIT_FACTOR * shim_cfg.upgrade_timeout_ms * 1000000ull;

	return ns > WARM_WAIT_MIN_NS ? ns : WARM_WAIT_MIN_NS;
}

enum shim_reason shim_rdma_warm_verdict(int st)
{
	switch (st) {
	case WARM_NO_DEVICE: return SHIM_REASON_NO_RDMA_DEVICE;
	case WARM_INHERITED: return SHIM_REASON_RDMA_INHERITED;
	case WARM_FAILED: return SHIM_REASON_INTERNAL_ERROR;
	default: return SHIM_REASON_NONE;
	}
}

/* fork (atfork.c): the child must not inherit the lock held. */
void shim_rdma_dev_atfork(bool prepare)
{
	if (prepare)
		pthread_mutex_lock(&pd_lock);
	else
		pthread_mutex_unlock(&pd_lock);
}
