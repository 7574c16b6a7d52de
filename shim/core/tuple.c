/* Endpoint conversion and the canonical tuple hash; see tuple.h. */
#include "tuple.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static const uint8_t v4_mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

int shim_endpoint_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct shim_endpoint *ep)
{
	memset(ep, 0, sizeof(*ep));
	if (!sa || len < sizeof(sa_family_t))
		return -EINVAL;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		if (len < sizeof(*in))
			return -EINVAL;
		memcpy(ep->addr, v4_mapped_prefix, sizeof(v4_mapped_prefix));
		memcpy(ep->addr + 12, &in->sin_addr, 4);
		ep->port = ntohs(in->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		if (len < sizeof(*in6))
			return -EINVAL;
		memcpy(ep->addr, &in6->sin6_addr, 16);
		ep->port = ntohs(in6->sin6_port);
		return 0;
	}
	return -EAFNOSUPPORT;
}

bool shim_endpoint_is_v4(const struct shim_endpoint *ep)
{
	return memcmp(ep->addr, v4_mapped_prefix, sizeof(v4_mapped_prefix)) == 0;
}

bool shim_endpoint_equal(const struct shim_endpoint *a, const struct shim_endpoint *b)
{
	return a->port == b->port && memcmp(a->addr, b->addr, 16) == 0;
}

void shim_endpoint_format(const struct shim_endpoint *ep, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN];

	if (shim_endpoint_is_v4(ep)) {
		inet_ntop(AF_INET, ep->addr + 12, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ep->port);
	} else {
		inet_ntop(AF_INET6, ep->addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ep->port);
	}
}

static int endpoint_compare(const struct shim_endpoint *a, const struct shim_endpoint *b)
{
	int c = memcmp(a->addr, b->addr, 16);

	if (c)
		return c;
	return (int)a->port - (int)b->port;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
	const uint8_t *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint64_t hash_endpoint(uint64_t h, const struct shim_endpoint *ep)
{
	uint8_t port[2] = { (uint8_t)(ep->port >> 8), (uint8_t)ep->port };

	h = fnv1a(h, ep->addr, sizeof(ep->addr));
	return fnv1a(h, port, sizeof(port));
}

uint64_t shim_tuple_hash(const struct shim_tuple *t)
{
	const struct shim_endpoint *lo = &t->local, *hi = &t->peer;
	uint64_t h = 0xcbf29ce484222325ull;

	if (endpoint_compare(lo, hi) > 0) {
		lo = &t->peer;
		hi = &t->local;
	}
	h = hash_endpoint(hash_endpoint(h, lo), hi);
	/* FNV's low bits are weak for short keys; finish with a 64-bit mixer. */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

bool shim_tuple_ab_selected(const struct shim_tuple *t, unsigned percent)
{
	if (percent >= 100)
		return true;
	return shim_tuple_hash(t) % 100 < percent;
}

bool shim_tuple_same_host(const struct shim_tuple *t)
{
	static const uint8_t v6_loopback[16] = { [15] = 1 };

	if (memcmp(t->peer.addr, t->local.addr, 16) == 0)
		return true;
	if (shim_endpoint_is_v4(&t->peer))
		return t->peer.addr[12] == 127;
	return memcmp(t->peer.addr, v6_loopback, 16) == 0;
}
