/*
 * The fork handlers; see atfork.h. One place names every lock and the
 * order they are taken in, which is the shim's lock order:
 *
 *   epoll all_lock > each epoll set's lock > sock pool lock > each sock's
 *   lock > shm pairs > sock_diag's socket > port beacons > global breaker >
 *   RDMA PD table > RDMA link table > MR pool > the failover worker's
 *   queue > the kept epoll sets' marker > the reaper's set-up > the
 *   zero-copy registration cache
 *
 * A thread that holds one of them never waits for one earlier in the list.
 * The per-connection CQ spinlocks of RDMA are left out: a child never
 * touches its parent's RDMA objects (rdma_dev.c).
 */
#include "atfork.h"

#include <pthread.h>
#include <stdbool.h>

#include "beacon.h"
#include "breaker.h"
#include "diag.h"
#include "fo_worker.h"
#include "mr_cache.h"
#include "mr_watch.h"
#include "mrpool.h"
#include "owned.h"
#include "pair.h"
#include "rdma.h"
#include "reaper.h"
#include "self.h"
#include "statarea.h"
#include "statlink.h"
#include "sock.h"
#include "wait.h"

static void prepare(void)
{
	shim_epoll_atfork_prepare();
	shim_sock_atfork_prepare();
	shim_pair_atfork_prepare();
	shim_diag_atfork_prepare();
	shim_beacon_atfork_prepare();
	shim_breaker_atfork(true);
	shim_rdma_dev_atfork(true);
	shim_rdma_link_atfork(true);
	shim_mrpool_atfork(true);
	shim_fo_worker_atfork_prepare();
	shim_owned_atfork_prepare();
	shim_reap_atfork_prepare();
	shim_mr_cache_atfork_prepare();
}

static void parent(void)
{
	shim_mr_cache_atfork_parent();
	shim_reap_atfork_release();
	shim_owned_atfork_release();
	shim_fo_worker_atfork_parent();
	shim_mrpool_atfork(false);
	shim_rdma_link_atfork(false);
	shim_rdma_dev_atfork(false);
	shim_breaker_atfork(false);
	shim_beacon_atfork_release();
	shim_diag_atfork_parent();
	shim_pair_atfork_parent();
	shim_sock_atfork_parent();
	shim_epoll_atfork_release();
}

static void child(void)
{
	/* No registration of the parent's is used here (docs/ZEROCOPY.md). */
	shim_mr_watch_atfork_child();
	shim_mr_cache_atfork_child();
	shim_reap_atfork_child();
	shim_owned_atfork_release();
	shim_self_forget();
	shim_fo_worker_atfork_child();
	shim_mrpool_atfork(false);
	shim_rdma_link_atfork(false);
	shim_rdma_dev_atfork(false);
	shim_breaker_atfork(false);
	/* The child keeps none of its parent's pairs (pair.h), nor its
	 * sock_diag socket. */
	shim_beacon_atfork_release();
	shim_diag_atfork_child();
	shim_pair_atfork_child();
	shim_statarea_atfork_child();
	shim_statlink_atfork_child();
	shim_sock_atfork_child();
	shim_epoll_atfork_release();
	/* With every lock free again: what only the parent's other threads
	 * held is let go (it may take the locks above). */
	shim_sock_atfork_child_done();
	shim_reap_atfork_child_done();
}

void shim_atfork_register(void)
{
	pthread_atfork(prepare, parent, child);
}
