/* Link records in the live stats area; see statlink.h. */
#include "statlink.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

static const char *const qp_names[SHIM_STAT_QP_COUNT] = { "none", "RESET", "INIT", "RTR", "RTS", "ERR" };

const char *shim_stat_qp_name(unsigned st)
{
	return st < SHIM_STAT_QP_COUNT ? qp_names[st] : "?";
}

/* The records of gone links kept to be seen, oldest first. A record is
 * named with its gen: a fork's child frees the parent's link records
 * (statarea.c), and one of them may be another's by now. */
static struct {
	pthread_mutex_t lock;
	struct shim_stat_link *rec[SHIM_STAT_LINKS_KEPT];
	uint64_t gen[SHIM_STAT_LINKS_KEPT];
	unsigned n;
} kept = { .lock = PTHREAD_MUTEX_INITIALIZER };

uint64_t shim_stat_now_unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void give_back_if_ours(struct shim_stat_link *r, uint64_t gen)
{
	if (__atomic_load_n(&r->gen, __ATOMIC_RELAXED) == gen && r->d.state == SHIM_STAT_LINK_REC)
		shim_stat_rec_give_back((struct shim_stat_rec *)r);
}

/* Drops the kept records older than SHIM_STAT_LINK_KEPT_S, and the oldest
 * ones while more than room remain. Under kept.lock. */
static void sweep_locked(uint64_t now, unsigned room)
{
	unsigned drop = 0;

	while (drop < kept.n && (kept.n - drop > room ||
				 kept.rec[drop]->l.gone_unix_ns + SHIM_STAT_LINK_KEPT_S * 1000000000ull < now))
		drop++;
	for (unsigned i = 0; i < drop; i++)
		give_back_if_ours(kept.rec[i], kept.gen[i]);
	memmove(kept.rec, kept.rec + drop, (kept.n - drop) * sizeof(kept.rec[0]));
	memmove(kept.gen, kept.gen + drop, (kept.n - drop) * sizeof(kept.gen[0]));
	kept.n -= drop;
}

struct shim_stat_link *shim_stat_link_new(const struct shim_stat_desc *d, const struct shim_stat_link_desc *l)
{
	struct shim_stat_link *r;

	pthread_mutex_lock(&kept.lock);
	sweep_locked(shim_stat_now_unix_ns(), SHIM_STAT_LINKS_KEPT);
	pthread_mutex_unlock(&kept.lock);
	r = (struct shim_stat_link *)shim_stat_rec_take();
	if (!r)
		return NULL;
	shim_stat_seq_begin(&r->seq);
	r->d = *d;
	r->d.state = SHIM_STAT_LINK_REC;
	r->l = *l;
	__atomic_store_n(&r->conns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&r->held, 0, __ATOMIC_RELAXED);
	shim_stat_seq_end(&r->seq);
	return r;
}

void shim_stat_link_describe(struct shim_stat_link *r, const struct shim_stat_link_desc *l)
{
	shim_stat_seq_begin(&r->seq);
	r->l = *l;
	shim_stat_seq_end(&r->seq);
}

void shim_stat_link_conns(struct shim_stat_link *r, unsigned live, unsigned held)
{
	__atomic_store_n(&r->conns, live, __ATOMIC_RELAXED);
	__atomic_store_n(&r->held, held, __ATOMIC_RELAXED);
}

void shim_stat_link_end(struct shim_stat_link *r, bool keep)
{
	uint64_t now = shim_stat_now_unix_ns();

	if (!r)
		return;
	if (!keep) {
		shim_stat_rec_give_back((struct shim_stat_rec *)r);
		return;
	}
	shim_stat_seq_begin(&r->seq);
	r->l.gone = 1;
	r->l.gone_unix_ns = now;
	shim_stat_seq_end(&r->seq);
	shim_stat_link_conns(r, 0, 0);
	pthread_mutex_lock(&kept.lock);
	sweep_locked(now, SHIM_STAT_LINKS_KEPT - 1);
	kept.rec[kept.n] = r;
	kept.gen[kept.n++] = r->gen;
	pthread_mutex_unlock(&kept.lock);
}

void shim_statlink_atfork_child(void)
{
	/* The parent's link records are free in the child's copy (statarea.c):
	 * none is kept here. Only the forking thread lives on. */
	pthread_mutex_init(&kept.lock, NULL);
	kept.n = 0;
}
