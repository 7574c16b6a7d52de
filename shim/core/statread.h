/*
 * Reading stats areas (statarea.h) of other processes: for `rdmashim
 * stat` and the tests. Never writes to an area; never waits on one.
 */
#ifndef RDMASHIM_STATREAD_H
#define RDMASHIM_STATREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "statarea.h"

struct shim_stat_view {
	const struct shim_stat_hdr *hdr; /* the file, mapped read-only */
	size_t len;
	uint64_t nrec; /* records below both hdr->nrec and the mapped length */
};

/* Maps dirfd/name. A negative errno: -EACCES (not ours to read),
 * -ENOENT (gone meanwhile), -EPROTO (not an area of this version). */
int shim_stat_view_open(int dirfd, const char *name, struct shim_stat_view *v);
void shim_stat_view_close(struct shim_stat_view *v);

/* A consistent copy of record i into out: 0; -EAGAIN when its count
 * stayed odd or kept moving over tries attempts (a writer killed in the
 * middle): out then holds the values last seen. */
int shim_stat_read_rec(const struct shim_stat_view *v, uint64_t i, struct shim_stat_rec *out, unsigned tries);
/* The same for the header (out: a copy of it all). */
int shim_stat_read_hdr(const struct shim_stat_view *v, struct shim_stat_hdr *out, unsigned tries);

/* The A/B area of v into out: every slot copied under its own count (a
 * slot whose count stayed odd or moving over tries reads as unused,
 * sec 0), the rest word by word. */
void shim_stat_read_ab(const struct shim_stat_view *v, struct shim_stat_ab *out, unsigned tries);

/* The upper bound of the bucket holding the q-th quantile (0 < q <= 1)
 * of hist's samples, in ns; 0 with no sample. */
uint64_t shim_stat_quantile_ns(const uint64_t hist[SHIM_STAT_RTT_BUCKETS], double q);

/* Whether the area named name (<pid>-<start>.stat) belongs to a process
 * that still lives: 1 alive, 0 dead, a negative errno for a name that is
 * not an area's. pid and start are filled from the name. */
int shim_stat_name_alive(const char *name, int *pid, uint64_t *start);

#endif
