/* The transport registry; see transport.h. */
#include "transport.h"

#include "config.h"
#include "tuple.h"

static const struct shim_transport_type *registered[SHIM_TRANSPORT_COUNT];

void shim_transport_register(const struct shim_transport_type *t)
{
	if ((unsigned)t->kind < SHIM_TRANSPORT_COUNT)
		registered[t->kind] = t;
}

const struct shim_transport_type *shim_transport_find(enum shim_transport kind)
{
	return (unsigned)kind < SHIM_TRANSPORT_COUNT ? registered[kind] : NULL;
}

const struct shim_transport_type *shim_transport_pick(const struct shim_tuple *t, enum shim_reason *why)
{
	enum shim_reason first_unfit = SHIM_REASON_NONE;

	/* The first configured transport that fits the peer: both ends see
	 * the same facts, so they pick the same one. */
	for (unsigned i = 0; i < shim_cfg.n_transports; i++) {
		const struct shim_transport_type *x = shim_transport_find(shim_cfg.transports[i]);
		enum shim_reason r;

		if (!x)
			continue;
		r = x->fits(t);
		if (r == SHIM_REASON_NONE)
			return x;
		if (first_unfit == SHIM_REASON_NONE)
			first_unfit = r;
	}
	if (why)
		*why = first_unfit != SHIM_REASON_NONE ? first_unfit : SHIM_REASON_NO_TRANSPORT;
	return NULL;
}

void shim_transport_serving(const struct shim_tuple *t)
{
	for (unsigned i = 0; i < shim_cfg.n_transports; i++) {
		const struct shim_transport_type *x = shim_transport_find(shim_cfg.transports[i]);

		if (x && x->serving)
			x->serving(t);
	}
}

void shim_transport_warm(const struct shim_tuple *t)
{
	const struct shim_transport_type *x = shim_transport_pick(t, NULL);

	if (x && x->warm)
		x->warm(t);
}
