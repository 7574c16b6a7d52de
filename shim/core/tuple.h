/*
 * Connection endpoints and the canonical 4-tuple.
 *
 * IPv4 addresses are held as v4-mapped IPv6 (::ffff:a.b.c.d), so an IPv4
 * socket and a v4-mapped IPv6 socket name the same endpoint. The tuple hash
 * does not depend on which end computes it: both ends of a connection make
 * the same A/B decision without talking.
 */
#ifndef RDMASHIM_TUPLE_H
#define RDMASHIM_TUPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct shim_endpoint {
	uint8_t addr[16]; /* network order; IPv4 as v4-mapped */
	uint16_t port;    /* host order */
};

struct shim_tuple {
	struct shim_endpoint local;
	struct shim_endpoint peer;
};

/* "a.b.c.d:port" or "[v6]:port"; fits in SHIM_ENDPOINT_STRLEN. */
#define SHIM_ENDPOINT_STRLEN 56

/* Returns 0, or -EAFNOSUPPORT for anything but AF_INET/AF_INET6, -EINVAL if short. */
int shim_endpoint_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct shim_endpoint *ep);
bool shim_endpoint_is_v4(const struct shim_endpoint *ep);
bool shim_endpoint_equal(const struct shim_endpoint *a, const struct shim_endpoint *b);
void shim_endpoint_format(const struct shim_endpoint *ep, char *buf, size_t len);

uint64_t shim_tuple_hash(const struct shim_tuple *t);
/* True when the tuple falls under percent (0-100) of the hash space. */
/* The peer runs on this host: a loopback peer, or the same address at both ends. */
bool shim_tuple_same_host(const struct shim_tuple *t);
bool shim_tuple_ab_selected(const struct shim_tuple *t, unsigned percent);

#endif
