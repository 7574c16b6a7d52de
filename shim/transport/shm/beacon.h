/*
 * Port beacons: whether a process with the shim serves a TCP port on this
 * host, known to a client before it waits for an answer.
 *
 * A shm upgrade is C's offer (its rendezvous, or a HINT on a pair) that S
 * takes up from its own data calls. A server without the shim never does,
 * and C could only tell by waiting (RDMASHIM_PLAIN_PEER_MS) while every
 * call paid for the offer. A process that serves a whitelisted port with
 * the shim (shm among its transports) holds the abstract unix datagram name
 * "\0rdmashim1/port/" + four hex digits of the port: C looks for it once,
 * when its upgrade starts, and with no name there the connection stays on
 * TCP at once. PROTOCOL.md "Port beacon" has the argument that a beacon can
 * only make C try (as it did before), never skip an upgrade a present shim
 * would take, except when the beacon's holder is gone (then C loses the
 * upgrade, not a byte).
 */
#ifndef RDMASHIM_BEACON_H
#define RDMASHIM_BEACON_H

#include <stdbool.h>
#include <stdint.h>

/* S: this process serves port (a tracked listener, or a connection
 * accepted from one). Makes sure the port's beacon exists, held by this
 * process unless another holds it. After the first call, a table look;
 * about once a second, an fstat (is our beacon still ours) or a bind
 * (is somebody else's still there). Never blocks. */
void shim_beacon_serve(uint16_t port);

/* C: whether the port's beacon exists on this host (true when the look
 * itself failed: in doubt, C offers). One socket, connect and close. */
bool shim_beacon_seen(uint16_t port);

/* Fork handlers (atfork.c): the table's lock. A child keeps the beacons,
 * which it shares with its parent. */
void shim_beacon_atfork_prepare(void);
void shim_beacon_atfork_release(void);

#endif
