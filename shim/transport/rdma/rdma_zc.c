/* Zero-copy sends over an RDMA channel; see rdma_zc.h. */
#include "rdma_zc.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "mr_cache.h"
#include "mr_watch.h"
#include "rdma_post.h"
#include "ring.h"
#include "stats.h"
#include "trace.h"

/* ---- one registrar per protection domain (the cache's key) ---- */

#define ZC_PDS 8

static struct shim_mr_registrar registrars[ZC_PDS];
static unsigned n_registrars;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void *verbs_reg(void *ctx, void *addr, size_t len, uint32_t *lkey, int *err)
{
	/* Local read only: the NIC only reads a WRITE's source; but before
	 * Linux 6.2 a read-only pin may take a page copy-on-write shares
	 * (mr_watch.h), and LOCAL_WRITE makes the pin break that first. */
	int access = shim_mr_watch_ro_pins_reliable() ? 0 : IBV_ACCESS_LOCAL_WRITE;
	struct ibv_mr *mr = ibv_reg_mr(ctx, addr, len, access);

	if (!mr) {
		*err = errno ? -errno : -EIO;
		return NULL;
	}
	*lkey = mr->lkey;
	return mr;
}

static void verbs_dereg(void *ctx, void *handle)
{
	(void)ctx;
	ibv_dereg_mr(handle);
}

static const struct shim_mr_registrar *registrar_for(struct ibv_pd *pd)
{
	const struct shim_mr_registrar *r = NULL;

	pthread_mutex_lock(&reg_lock);
	for (unsigned i = 0; i < n_registrars && !r; i++)
		if (registrars[i].ctx == pd)
			r = &registrars[i];
	if (!r && n_registrars < ZC_PDS) {
		registrars[n_registrars] = (struct shim_mr_registrar){ .reg = verbs_reg, .dereg = verbs_dereg, .ctx = pd };
		r = &registrars[n_registrars++];
	}
	pthread_mutex_unlock(&reg_lock);
	return r;
}

static void setup(void)
{
	shim_mr_cache_setup(shim_mr_watch_get(), (size_t)shim_cfg.mr_cache_mb << 20);
}

/* ---- the send ---- */

/* The iovec's element at skip: its bytes from there. */
static bool locate(const struct iovec *iov, int iovcnt, size_t skip, const uint8_t **at, size_t *left)
{
	for (int i = 0; i < iovcnt; i++) {
		if (skip < iov[i].iov_len) {
			*at = (const uint8_t *)iov[i].iov_base + skip;
			*left = iov[i].iov_len - skip;
			return true;
		}
		skip -= iov[i].iov_len;
	}
	return false;
}

static size_t fallback(struct rdma_conn *c, enum shim_zc_stat why, int err)
{
	shim_stats_zc_add(why, 1);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "zc.fallback", c->fd, c->sock ? &c->sock->tuple : NULL, SHIM_REASON_NONE,
		   "\"why\":\"%s\",\"errno\":%d", shim_zc_stat_name(why), -err);
	return 0;
}

static enum shim_zc_stat zc_reason_of(int rc)
{
	switch (rc) {
	case -EXDEV:
		return SHIM_ZC_FB_UNWATCHED;
	case -E2BIG:
		return SHIM_ZC_FB_TOO_BIG;
	case -ENOSPC:
		return SHIM_ZC_FB_CACHE_FULL;
	case -EAGAIN:
		return SHIM_ZC_FB_RACED;
	default:
		return SHIM_ZC_FB_REG_FAILED;
	}
}

/* Appends the WRITEs of n bytes at src to the peer's ring at our tail (two
 * when the ring wraps), from the registration lkey. */
static bool chain_data(struct rdma_conn *c, struct wr_chain *wrs, const uint8_t *src, size_t n, uint32_t lkey)
{
	size_t off = (size_t)(c->tx_tail & c->mask), first = c->ring_bytes - off < n ? c->ring_bytes - off : n;
	unsigned i = wrs->n;

	shim_rdma_chain_write(c, wrs, src, first, SHIM_RDMA_CTL_BYTES + off, false);
	if (n > first)
		shim_rdma_chain_write(c, wrs, src + first, n - first, SHIM_RDMA_CTL_BYTES, false);
	for (; i < wrs->n; i++)
		wrs->sge[i].lkey = lkey;
	return n > first;
}

size_t shim_rdma_zc_send(struct rdma_conn *c, const struct iovec *iov, int iovcnt, size_t skip, size_t room)
{
	struct wr_chain wrs = { .n = 0 };
	struct shim_mr_ref ref;
	const uint8_t *src;
	size_t left, n, reg_len;
	uint64_t to, seq;
	bool die, done, data_imm, wrapped;
	int rc;

	if (shim_cfg.zerocopy != SHIM_ZC_ON || !locate(iov, iovcnt, skip, &src, &left) ||
	    left < (size_t)shim_cfg.zerocopy_min_kb * 1024u)
		return 0;
	/* No room: the copying path finds none either, and the caller waits. */
	if (!room)
		return 0;
	if (c->sock && (c->sock->nonblocking || c->sock->tx_dontwait))
		return fallback(c, SHIM_ZC_FB_NONBLOCKING, 0);
	/* Bytes staged (an unproven peer's, or a release pending) go first,
	 * in order, from the staging copy. */
	if (!c->proved || c->tx_posted != c->tx_tail || c->close_pending || c->broken || !c->link)
		return fallback(c, SHIM_ZC_FB_CHANNEL, 0);
	pthread_once(&setup_once, setup);
	n = left < room ? left : room;
	/* The whole element where the cache has room for it, so that the
	 * rest of this send and the next one from the same buffer hit. */
	reg_len = left <= ((size_t)shim_cfg.mr_cache_mb << 20) / 4 ? left : n;
	const struct shim_mr_registrar *r = registrar_for(c->link->pd);

	if (!r)
		return fallback(c, SHIM_ZC_FB_REG_FAILED, -ENOSPC);
	rc = shim_mr_cache_get(r, src, reg_len, &ref);
	if (rc)
		return fallback(c, zc_reason_of(rc), rc);
	to = c->tx_tail + n;
	/* Testing only (RDMASHIM_TEST_FAIL_RDMA_KB), as in post_staged(). */
	die = shim_cfg.test_fail_rdma_kb && to >= (uint64_t)shim_cfg.test_fail_rdma_kb * 1024u;
	data_imm = !die && shim_rdma_data_imm_begin(c, &wrs);
	wrapped = chain_data(c, &wrs, src, n, ref.lkey);
	if (data_imm) {
		shim_rdma_chain_data_imm(c, &wrs, wrapped);
	} else if (!die) {
		shim_rdma_chain_tail(c, &wrs, to);
		shim_rdma_chain_imm(&wrs, c->peer_id);
	}
	seq = shim_rdma_chain_post(c, &wrs);
	if (!seq) {
		/* Nothing posted: the channel broke; the copying path says so. */
		shim_mr_cache_put(&ref);
		return 0;
	}
	if (!die) {
		c->peer_recvs_used++;
		/* Release: pairs with the acquire in the post of a lazy
		 * tail word (shim_rdma_chain_tail_word), on any thread. */
		__atomic_store_n(&c->tx_announced, to, __ATOMIC_RELEASE);
		c->tx_imm_seq = seq;
	} else {
		shim_rdma_mark_broken(c, "injected", (int)shim_cfg.test_fail_rdma_kb);
		shim_rdma_qp_error(c);
	}
	/* The completion is the peer's ACK of the tail, placed after the
	 * data: the NIC is done with the program's buffer. */
	done = !die && shim_rdma_wait_seq(c, seq);
	if (!done) {
		/* The QP failed in the middle: the peer may or may not count
		 * these bytes (its RESUME says); the staging copy gets them
		 * while the program's buffer is still ours, and they count as
		 * sent. */
		struct iovec one = { .iov_base = (void *)src, .iov_len = n };

		shim_ring_copy_iov_in(c->tx_shadow, c->mask, c->tx_tail, &one, 1, 0, n);
	} else {
		c->zc_end = to;
	}
	shim_mr_cache_put(&ref);
	c->tx_tail = c->tx_posted = to;
	if (done) {
		shim_stats_zc_add(SHIM_ZC_SENDS, 1);
		shim_stats_zc_add(SHIM_ZC_BYTES, n);
	}
	return n;
}
