/*
 * Process-wide RDMA state: the device probe, one protection domain per
 * device, and the warm-up thread that prepares both (and the pool's first
 * chunk) off the program's data path. See rdma.h.
 */
#include "rdma.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

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
 * memory. It runs in the call of the first connection that wants RDMA
 * (about 1 s in the TCG VM, a few ms on real hosts); connections of other
 * threads meanwhile wait without blocking (RDMA_WARMING) and stay on TCP.
 * A thread of its own was tried: under load in the VM it took 3 s, longer
 * than the upgrade timeout, and short connections missed their upgrade.
 */
static int warm_state = WARM_IDLE;

static void *warm_main(void *arg)
{
	struct ibv_context **ctxs;
	int n = 0, st = WARM_NO_DEVICE;

	(void)arg;
	if (shim_rdma_device_present()) {
		ctxs = rdma_get_devices(&n);
		for (int i = 0; ctxs && i < n; i++) {
			struct ibv_pd *pd = shim_rdma_pd_for(ctxs[i]);
			struct shim_mr_slot slot = { 0 };

			/* Take a slot and give it back: the chunk stays registered. */
			if (pd && shim_mrpool_get(pd, shim_rdma_slot_bytes(shim_cfg.ring_kb * 1024u), &slot) == 0)
				shim_mrpool_put(&slot);
		}
		if (ctxs)
			rdma_free_devices(ctxs);
		st = n > 0 ? WARM_READY : WARM_NO_DEVICE;
	}
	/* Release: pairs with the acquire in shim_rdma_warm_poll(); the contexts, PD and
	 * chunk are set up before a connection uses them. */
	__atomic_store_n(&warm_state, st, __ATOMIC_RELEASE);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "rdma.warm", -1, NULL, SHIM_REASON_NONE, "\"devices\":%d", n);
	return NULL;
}

/* A fork from another thread during the warm-up: the child starts over. */
static void warm_after_fork(void)
{
	int running = WARM_RUNNING;

	__atomic_compare_exchange_n(&warm_state, &running, WARM_IDLE, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static void warm_register_atfork(void)
{
	pthread_atfork(NULL, NULL, warm_after_fork);
}

int shim_rdma_warm_poll(void)
{
	int idle = WARM_IDLE;

	if (__atomic_compare_exchange_n(&warm_state, &idle, WARM_RUNNING, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

		pthread_once(&atfork_once, warm_register_atfork);
		warm_main(NULL);
	}
	return __atomic_load_n(&warm_state, __ATOMIC_ACQUIRE);
}

