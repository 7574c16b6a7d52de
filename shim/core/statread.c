/* Reading other processes' stats areas; see statread.h. */
#include "statread.h"

#include "real.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int shim_stat_view_open(int dirfd, const char *name, struct shim_stat_view *v)
{
	struct stat st;
	void *p;
	int fd, rc = 0;

	memset(v, 0, sizeof(*v));
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
	} else if (!S_ISREG(st.st_mode) || (size_t)st.st_size < SHIM_STAT_HDR_SIZE) {
		rc = -EPROTO;
	} else {
		/* What fstat says now: the file only grows, so every byte of
		 * this length stays mapped-valid (no SIGBUS). */
		p = REAL(mmap)(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			rc = -errno;
		} else {
			v->hdr = p;
			v->len = (size_t)st.st_size;
		}
	}
	REAL(close)(fd);
	if (rc < 0)
		return rc;
	if (memcmp(v->hdr->magic, SHIM_STAT_MAGIC, 8) || v->hdr->version != SHIM_STAT_VERSION ||
	    v->hdr->hdr_size != SHIM_STAT_HDR_SIZE || v->hdr->rec_size != SHIM_STAT_REC_SIZE) {
		shim_stat_view_close(v);
		return -EPROTO;
	}
	/* acquire: pairs with the release store of nrec in grow() (statarea.c):
	 * the records it counts were in the file before it. */
	uint64_t n = __atomic_load_n(&v->hdr->nrec, __ATOMIC_ACQUIRE);
	uint64_t fit = (v->len - SHIM_STAT_HDR_SIZE) / SHIM_STAT_REC_SIZE;

	v->nrec = n < fit ? n : fit;
	return 0;
}

void shim_stat_view_close(struct shim_stat_view *v)
{
	if (v->hdr)
		REAL(munmap)((void *)v->hdr, v->len);
	memset(v, 0, sizeof(*v));
}

/* Copies len bytes as whole 64-bit words, each one load: no word torn. */
static void copy_words(void *dst, const void *src, size_t len)
{
	const uint64_t *s = src;
	uint64_t *d = dst;

	for (size_t i = 0; i < len / 8; i++)
		d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

/* The seqlock's read side over len bytes at src whose count is *seq. */
static int read_seq(const uint64_t *seq, const void *src, void *out, size_t len, unsigned tries)
{
	if (!tries)
		tries = 1;
	for (unsigned t = 0; t < tries; t++) {
		/* acquire: pairs with the release store that ends a write in
		 * seq_end() (statarea.c): an even count means its fields are
		 * all in place. */
		uint64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);

		copy_words(out, src, len);
		/* acquire fence: the loads above are done before the count is
		 * read again; pairs with the release fence in seq_begin()
		 * (statarea.c): a write begun meanwhile shows as a new count. */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		uint64_t s2 = __atomic_load_n(seq, __ATOMIC_RELAXED);

		if (s1 == s2 && !(s1 & 1))
			return 0;
		if (t + 1 < tries)
			usleep(t < 3 ? 0 : 1000);
	}
	return -EAGAIN;
}

int shim_stat_read_rec(const struct shim_stat_view *v, uint64_t i, struct shim_stat_rec *out, unsigned tries)
{
	const struct shim_stat_rec *r;

	if (i >= v->nrec)
		return -ERANGE;
	r = (const struct shim_stat_rec *)((const char *)v->hdr + SHIM_STAT_HDR_SIZE + i * SHIM_STAT_REC_SIZE);
	return read_seq(&r->seq, r, out, sizeof(*out), tries);
}

int shim_stat_read_hdr(const struct shim_stat_view *v, struct shim_stat_hdr *out, unsigned tries)
{
	int rc = read_seq(&v->hdr->seq, v->hdr, out, sizeof(*out), tries);

	/* Set again after the copy: it may have grown while copying. */
	out->nrec = v->nrec;
	return rc;
}

void shim_stat_read_ab(const struct shim_stat_view *v, struct shim_stat_ab *out, unsigned tries)
{
	const struct shim_stat_ab *ab = (const struct shim_stat_ab *)((const char *)v->hdr + SHIM_STAT_AB_OFF);

	copy_words(out, ab, offsetof(struct shim_stat_ab, slot));
	for (unsigned i = 0; i < SHIM_STAT_AB_INTERVALS; i++)
		/* The same seqlock read side: its acquire load and fence pair
		 * with the release fence and store of a slot's reuse in
		 * shim_stat_ab_rtt() (statarea.c). */
		if (read_seq(&ab->slot[i].seq, &ab->slot[i], &out->slot[i], sizeof(out->slot[i]), tries) < 0)
			out->slot[i].sec = 0;
}

uint64_t shim_stat_quantile_ns(const uint64_t hist[SHIM_STAT_RTT_BUCKETS], double q)
{
	uint64_t total = 0, seen = 0, want;

	for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
		total += hist[b];
	if (!total)
		return 0;
	want = (uint64_t)(q * (double)total + 0.999999);
	if (want < 1)
		want = 1;
	for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++) {
		seen += hist[b];
		if (seen >= want)
			return shim_stat_rtt_upper_ns(b);
	}
	return shim_stat_rtt_upper_ns(SHIM_STAT_RTT_BUCKETS - 1);
}

int shim_stat_name_alive(const char *name, int *pid, uint64_t *start)
{
	char *end;
	long p;
	unsigned long long st;

	p = strtol(name, &end, 10);
	if (p <= 0 || *end != '-')
		return -EINVAL;
	st = strtoull(end + 1, &end, 10);
	if (strcmp(end, ".stat"))
		return -EINVAL;
	*pid = (int)p;
	*start = st;
	/* Dead: no such pid, or a later process that took its number. */
	return shim_stat_start_ticks((pid_t)p) == st ? 1 : 0;
}
