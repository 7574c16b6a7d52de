/*
 * The port watch: the state of every RDMA port this process may use, and
 * its NIC's error counters (the field report's "watch link state and NIC
 * counters").
 *
 * Started by the warm-up of the process that owns RDMA (rdma_dev.c), it
 * runs on a thread of the shim's own (rdmashim-port) for the process's
 * life. It waits on each device's async event fd and looks at every port
 * once a second besides:
 *  - a port that leaves ACTIVE (IBV_EVENT_PORT_ERR, a fatal device, or a
 *    look that finds it so) is traced (rdma.port, state down), and every
 *    link of this process on it is broken: each connection on them fails
 *    over to its own TCP at its own offset at once, instead of when its
 *    QP's retries run out. New upgrades that would use it stay on TCP
 *    (reason rdma_port_down), and do not count toward the breaker: the
 *    peer is not at fault.
 *  - a port that comes back (IBV_EVENT_PORT_ACTIVE, or a look) is traced
 *    (state active); the next connections upgrade over it again.
 *  - fault counters that grew since the last look (nic_counters.h) are
 *    traced (rdma.counters, at warn, with the deltas); and the look is
 *    judged as `rdmashim health` judges its window, by the same code
 *    (fabric_health.h, shim_fh_watch_look) and default limits: a counter
 *    over its limit makes the port faulty (rdma.port, state faulty, with
 *    the counter, its growth and its limit), which opens the breaker for
 *    it: no new link is made over it, a connection that would need one
 *    stays on TCP (reason rdma_port_faulty), until a look finds no
 *    counter over its limit (state recovered). Links already on it are
 *    left alone, and still take new connections by OFFER (keeping them
 *    off would need both ends to agree): their QPs fail by their own
 *    errors if the fault reaches them.
 * Connections on QPs of their own (RDMASHIM_RDMA_LINKS=0) are not broken
 * by the watch: their QPs fail by their own errors, as before.
 */
#ifndef RDMASHIM_RDMA_PORT_H
#define RDMASHIM_RDMA_PORT_H

#include <stdbool.h>
#include <stdint.h>

struct ibv_context;

/* From the warm-up's thread, with librdmacm's device contexts: takes every
 * port's state and counters, then starts the watch's thread. Precondition:
 * called once per process (the warm-up runs once, rdma_dev.c). */
void shim_rdma_port_watch_start(struct ibv_context **ctxs, int n);

/* Whether port `port` of ctx is known not to be ACTIVE. Lock-free; false
 * for a port the watch does not know (no watch in this process). */
bool shim_rdma_port_down(const struct ibv_context *ctx, uint8_t port);

/* Whether the last look found a counter of port `port` of ctx over its
 * limit (the breaker is open for it). Lock-free; false when unknown. */
bool shim_rdma_port_faulty(const struct ibv_context *ctx, uint8_t port);

#endif
