/* A tracked connection's stats record; see sockstat.h. */
#include "sockstat.h"

#include "transport.h"
#include "upgrade.h"

static enum shim_stat_state stat_state_of(const struct shim_sock *s)
{
	bool tx = s->tx_dir == SHIM_DIR_CHAN, rx = s->rx_dir == SHIM_DIR_CHAN;

	if (s->state == SHIM_STATE_CONNECTING)
		return SHIM_STAT_CONNECTING;
	if (s->shadowed)
		return SHIM_STAT_SHADOW;
	if (s->fo_started)
		return SHIM_STAT_FALLBACK;
	if (tx && rx)
		return SHIM_STAT_SWITCHED;
	if (tx || rx || s->rx_dir == SHIM_DIR_SWITCHING)
		return SHIM_STAT_SWITCHING;
	if (s->phase == SHIM_PHASE_NEGOTIATING || s->phase == SHIM_PHASE_COMMITTING)
		return SHIM_STAT_UPGRADING;
	if (!__atomic_load_n(&s->intercept, __ATOMIC_RELAXED))
		return SHIM_STAT_KERNEL;
	return SHIM_STAT_TCP;
}

static enum shim_reason stat_reason_of(const struct shim_sock *s)
{
	if (s->fo_started)
		return s->fo_why != SHIM_REASON_NONE ? s->fo_why : SHIM_REASON_CHAN_FAILED;
	if (s->tx_dir == SHIM_DIR_CHAN || s->rx_dir == SHIM_DIR_CHAN)
		return SHIM_REASON_UPGRADED;
	return s->reason;
}

static void stat_describe(const struct shim_sock *s, struct shim_stat_desc *d)
{
	d->fd = s->stat_fd;
	d->state = (uint8_t)stat_state_of(s);
	d->path = (uint8_t)(s->tx_dir == SHIM_DIR_CHAN || s->rx_dir == SHIM_DIR_CHAN ? s->stat_chan : 0);
	d->role = s->role == SHIM_ROLE_SERVER;
	d->arm = s->ab_arm;
	d->reason = (uint16_t)stat_reason_of(s);
	d->qpn = s->chan && s->chan->ops->qpn ? s->chan->ops->qpn(s->chan) : 0;
	d->local = s->tuple.local;
	d->peer = s->tuple.peer;
}

void shim_sockstat_track(struct shim_sock *s, int fd)
{
	struct shim_stat_desc d = { 0 };

	s->stat_fd = fd;
	stat_describe(s, &d);
	s->stat = shim_stat_rec_new(&d);
	if (s->stat)
		shim_stat_ab_conn(s->ab_arm);
}

/* Reasons that count as an error of the connection's arm: the shim reset
 * it, or its upgrade met a local fault (not a peer without the shim, not a
 * timeout: those only keep it on TCP). */
static bool reason_is_error(enum shim_reason r)
{
	switch (r) {
	case SHIM_REASON_RESUME_FAILED:
	case SHIM_REASON_HANDED_OFF:
	case SHIM_REASON_PEER_VIOLATION:
	case SHIM_REASON_INTERNAL_ERROR:
	case SHIM_REASON_RING_ALLOC_FAILED:
	case SHIM_REASON_HANDSHAKE_MALFORMED:
	case SHIM_REASON_SWITCH_MISMATCH:
		return true;
	default:
		return false;
	}
}

void shim_sockstat_sync(struct shim_sock *s)
{
	struct shim_stat_desc d = { 0 };

	if (!s->stat)
		return;
	/* The channel's kind is kept once known: bytes that went on it stay
	 * counted under it after a fallback. */
	if (s->chan)
		s->stat_chan = (uint8_t)s->chan->ops->kind;
	stat_describe(s, &d);
	shim_stat_rec_describe(s->stat, &d);
	if (s->ab_arm && s->fo_started && !s->ab_fell_back) {
		s->ab_fell_back = true;
		shim_stat_ab_fallback(s->ab_arm);
	}
	if (s->ab_arm && !s->ab_erred && reason_is_error((enum shim_reason)d.reason)) {
		s->ab_erred = true;
		shim_stat_ab_error(s->ab_arm);
	}
}

void shim_sockstat_release(struct shim_sock *s)
{
	shim_stat_rec_free(s->stat);
	s->stat = NULL;
}
