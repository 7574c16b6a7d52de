/*
 * Unit tests for shim/transport/rdma/mr_cache.c, mr_watch.c and
 * mr_events.c with a fake registrar (no RDMA device here): every change
 * of the memory under a cached registration that the cache alone can show
 * makes the next lookup miss (docs/ZEROCOPY.md, "Never stale"), through
 * the real userfaultfd watcher (what glibc does inside free() included)
 * and through the hooks' policy alone; the cap holds; a registration that
 * fails, or races a change of its range, makes the caller copy.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "mr_cache.h"
#include "mr_events.h"
#include "mr_watch.h"
#include "config.h"
#include "statarea.h"
#include "statread.h"
#include "stats.h"

static size_t page;

/* ---- the fake registrar ---- */

struct fake_reg {
	unsigned regs, deregs;
	int fail;            /* 0, or the errno every registration fails with */
	bool inval_in_reg;   /* the range's mapping changes during the registration */
	uint32_t next_lkey;
};

static struct fake_reg fake;

static void *fake_reg_fn(void *ctx, void *addr, size_t len, uint32_t *lkey, int *err)
{
	struct fake_reg *f = ctx;

	if (f->fail) {
		*err = -f->fail;
		return NULL;
	}
	if (f->inval_in_reg)
		shim_mr_cache_invalidate((uintptr_t)addr, len, SHIM_MR_INVAL_REMOVE);
	f->regs++;
	*lkey = ++f->next_lkey;
	return (void *)(uintptr_t)*lkey;
}

static void fake_dereg_fn(void *ctx, void *handle)
{
	(void)handle;
	((struct fake_reg *)ctx)->deregs++;
}

static const struct shim_mr_registrar reg = { .reg = fake_reg_fn, .dereg = fake_dereg_fn, .ctx = &fake };

/* ---- a watcher that sees nothing: the hooks' policy alone ---- */

static unsigned watched, unwatched;
static int watch_fail;

static int blind_watch(uintptr_t s, uintptr_t e)
{
	(void)s;
	(void)e;
	if (watch_fail)
		return -watch_fail;
	watched++;
	return 0;
}

static void blind_unwatch(uintptr_t s, uintptr_t e)
{
	(void)s;
	(void)e;
	unwatched++;
}

static void blind_drain(void)
{
}

static const struct shim_mr_watcher blind = { .watch = blind_watch, .unwatch = blind_unwatch, .drain = blind_drain };

static void setup_common(void)
{
	page = (size_t)sysconf(_SC_PAGESIZE);
	memset(&fake, 0, sizeof(fake));
	watched = unwatched = 0;
	watch_fail = 0;
	memset(shim_stats_zc, 0, sizeof(shim_stats_zc));
}

static void setup_blind(void)
{
	setup_common();
	shim_mr_cache_setup(&blind, 64 * page);
}

static void setup_uffd(void)
{
	const struct shim_mr_watcher *w;

	setup_common();
	w = shim_mr_watch_get();
	/* Never a silent pass: without a userfaultfd nothing is cached
	 * (every lookup copies), which the suite checks apart. */
	ck_assert_msg(w != NULL, "no userfaultfd watcher: the kernel or a sandbox refused one");
	shim_mr_cache_setup(w, 1u << 30);
}

static void teardown(void)
{
	shim_mr_cache_reset_for_test();
}

/* A lookup: 'H' hit, 'M' miss (registered now), or the error. */
static int lookup(const void *p, size_t len)
{
	struct shim_mr_ref ref;
	unsigned before = fake.regs;
	int rc = shim_mr_cache_get(&reg, p, len, &ref);

	if (rc)
		return rc;
	shim_mr_cache_put(&ref);
	return fake.regs > before ? 'M' : 'H';
}

static void *map_anon(void *at, size_t len, int extra)
{
	void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);

	ck_assert_ptr_ne(p, MAP_FAILED);
	memset(p, 0x5a, len);
	return p;
}

/* Through the lock: the watcher counts under it, and an unmap returns
 * once the event was read, perhaps before it was counted. */
static unsigned long invalidations(void)
{
	struct shim_mr_cache_stats st;

	shim_mr_cache_stats(&st);
	return __atomic_load_n(&shim_stats_zc[SHIM_ZC_MR_INVALIDATIONS], __ATOMIC_RELAXED);
}

/* ---- the cache itself ---- */

START_TEST(same_range_hits)
{
	char *p = map_anon(NULL, 8 * page, 0);

	ck_assert_int_eq(lookup(p, 8 * page), 'M');
	ck_assert_int_eq(lookup(p, 8 * page), 'H');
	/* Inside a live entry: a hit, not a second registration. */
	ck_assert_int_eq(lookup(p + page + 10, 2 * page), 'H');
	ck_assert_uint_eq(shim_stats_zc[SHIM_ZC_MR_HITS], 2);
	ck_assert_uint_eq(shim_stats_zc[SHIM_ZC_MR_MISSES], 1);
	munmap(p, 8 * page);
}
END_TEST

START_TEST(cap_holds)
{
	char *p = map_anon(NULL, 200 * page, 0);
	struct shim_mr_cache_stats st;

	/* Cap 64 pages; 100 ranges of 4 pages each. */
	for (int i = 0; i < 50; i++) {
		ck_assert_int_eq(lookup(p + (size_t)i * 4 * page, 4 * page), 'M');
		shim_mr_cache_stats(&st);
		ck_assert_uint_le(st.bytes, 64 * page);
	}
	shim_mr_cache_stats(&st);
	ck_assert_uint_eq(st.bytes, 64 * page);
	ck_assert_uint_eq(st.entries, 16);
	ck_assert_uint_eq(fake.deregs, 50 - 16);
	/* The most recent stay, the oldest went. */
	ck_assert_int_eq(lookup(p + 49 * 4 * page, 4 * page), 'H');
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	/* Larger than the whole cache: never cached. */
	ck_assert_int_eq(lookup(p, 65 * page), -E2BIG);
	munmap(p, 200 * page);
}
END_TEST

START_TEST(held_entries_stay_until_put)
{
	char *p = map_anon(NULL, 128 * page, 0);
	struct shim_mr_ref a, b;

	ck_assert_int_eq(shim_mr_cache_get(&reg, p, 40 * page, &a), 0);
	/* The rest of the cap is 24 pages: 40 more do not fit while a is held. */
	ck_assert_int_eq(shim_mr_cache_get(&reg, p + 64 * page, 40 * page, &b), -ENOSPC);
	/* Invalidated while held: deregistered at the put, not before. */
	shim_mr_cache_invalidate((uintptr_t)p, page, SHIM_MR_INVAL_UNMAP);
	ck_assert_uint_eq(fake.deregs, 0);
	shim_mr_cache_put(&a);
	ck_assert_uint_eq(fake.deregs, 1);
	ck_assert_int_eq(shim_mr_cache_get(&reg, p + 64 * page, 40 * page, &b), 0);
	shim_mr_cache_put(&b);
	munmap(p, 128 * page);
}
END_TEST

START_TEST(failed_registration_copies)
{
	char *p = map_anon(NULL, 4 * page, 0);

	fake.fail = ENOMEM; /* what a low RLIMIT_MEMLOCK gives */
	ck_assert_int_eq(lookup(p, 4 * page), -ENOMEM);
	fake.fail = 0;
	/* Nothing was kept of it: the next lookup registers. */
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	munmap(p, 4 * page);
}
END_TEST

START_TEST(unwatchable_copies)
{
	char *p = map_anon(NULL, 4 * page, 0);

	watch_fail = EINVAL; /* a file-backed mapping, another monitor */
	ck_assert_int_eq(lookup(p, 4 * page), -EXDEV);
	ck_assert_uint_eq(fake.regs, 0);
	munmap(p, 4 * page);
}
END_TEST

START_TEST(change_during_registration_copies)
{
	char *p = map_anon(NULL, 4 * page, 0);

	fake.inval_in_reg = true;
	ck_assert_int_eq(lookup(p, 4 * page), -EAGAIN);
	ck_assert_uint_eq(fake.deregs, 1);
	fake.inval_in_reg = false;
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	munmap(p, 4 * page);
}
END_TEST

START_TEST(no_watcher_copies)
{
	char *p = map_anon(NULL, 4 * page, 0);

	shim_mr_cache_setup(NULL, 64 * page);
	ck_assert_int_eq(lookup(p, 4 * page), -EXDEV);
	munmap(p, 4 * page);
}
END_TEST

/* ---- the hooks' policy, with a watcher that sees nothing ---- */

START_TEST(hooks_invalidate)
{
	char *p = map_anon(NULL, 16 * page, 0);

	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_before_munmap(p + 3 * page, page);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_before_mmap(p + page, page, MAP_FIXED | MAP_PRIVATE);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	/* A mapping's hint is no change; its result's range is dropped. */
	shim_mr_before_mmap(p, page, MAP_PRIVATE);
	ck_assert_int_eq(lookup(p, 4 * page), 'H');
	shim_mr_after_mmap(p + 2 * page, page);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_before_madvise(p, page, MADV_WILLNEED);
	ck_assert_int_eq(lookup(p, 4 * page), 'H');
	shim_mr_before_madvise(p + page, page, MADV_DONTNEED);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_before_madvise(p + page, page, MADV_FREE);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_before_madvise(p + page, page, MADV_REMOVE);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_before_mremap(p, 4 * page, 8 * page, MREMAP_MAYMOVE, NULL);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_before_mremap(p + 8 * page, page, page, MREMAP_MAYMOVE | MREMAP_FIXED, p + 2 * page);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_before_shmdt(p + 12 * page);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	/* Changes elsewhere keep it. */
	shim_mr_before_munmap(p + 4 * page, 4 * page);
	ck_assert_int_eq(lookup(p, 4 * page), 'H');
	ck_assert_uint_ge(invalidations(), 8);
	munmap(p, 16 * page);
}
END_TEST

START_TEST(hooks_brk_shrink)
{
	char *top = sbrk(0);
	char *p;

	ck_assert_ptr_ne(sbrk((intptr_t)(8 * page)), (void *)-1);
	p = top;
	memset(p, 1, 8 * page);
	ck_assert_int_eq(lookup(p + 4 * page, 4 * page), 'M');
	shim_mr_before_sbrk(-(intptr_t)(2 * page));
	ck_assert_int_eq(lookup(p + 4 * page, 4 * page), 'M');
	shim_mr_before_brk(p + 6 * page);
	ck_assert_int_eq(lookup(p + 4 * page, 4 * page), 'M');
	shim_mr_before_brk(p + 9 * page); /* growing drops nothing */
	ck_assert_int_eq(lookup(p + 4 * page, 4 * page), 'H');
	shim_mr_cache_purge();
	ck_assert_ptr_ne(sbrk(-(intptr_t)(8 * page)), (void *)-1);
}
END_TEST

/* ---- the real watcher: the kernel's events, no hook involved ---- */

START_TEST(uffd_munmap_then_mmap_fixed)
{
	char *p = map_anon(NULL, 4 * page, 0);
	unsigned long inv = invalidations();

	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	ck_assert_int_eq(lookup(p, 4 * page), 'H');
	/* MAP_FIXED over it, with no munmap first (openucx/ucx#2732). */
	ck_assert_ptr_eq(map_anon(p, 4 * page, MAP_FIXED), p);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	ck_assert_uint_gt(invalidations(), inv);
	munmap(p, 4 * page);
}
END_TEST

START_TEST(uffd_munmap_then_mmap_same_address)
{
	char *p = map_anon(NULL, 4 * page, 0), *q;

	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	ck_assert_int_eq(munmap(p, 4 * page), 0);
	q = map_anon(p, 4 * page, 0); /* a hint: the kernel may reuse it */
	ck_assert_int_eq(lookup(q, 4 * page), 'M');
	ck_assert_uint_ge(invalidations(), 1);
	munmap(q, 4 * page);
}
END_TEST

START_TEST(uffd_free_malloc_above_mmap_threshold)
{
	/* Above glibc's mmap threshold: free() unmaps it with libc's own
	 * munmap, which no hook sees. */
	size_t n = 4u << 20;
	char *p = malloc(n), *q;
	unsigned long inv;

	ck_assert_ptr_nonnull(p);
	memset(p, 1, n);
	ck_assert_int_eq(lookup(p, n), 'M');
	inv = invalidations();
	volatile uintptr_t was = (uintptr_t)p;
	free(p);
	/* glibc's free() unmapped it (ASan's allocator keeps it mapped,
	 * in quarantine: then nothing changed under the entry). */
	unsigned char vec[1];
	if (mincore((void *)was, (size_t)page, vec) == -1 && errno == ENOMEM)
		ck_assert_uint_gt(invalidations(), inv);
	q = malloc(n);
	ck_assert_ptr_nonnull(q);
	memset(q, 2, n);
	ck_assert_int_eq(lookup(q, n), 'M');
	free(q);
}
END_TEST

START_TEST(uffd_madvise_dontneed_all_and_part)
{
	char *p = map_anon(NULL, 8 * page, 0);

	ck_assert_int_eq(lookup(p, 8 * page), 'M');
	ck_assert_int_eq(madvise(p, 8 * page, MADV_DONTNEED), 0);
	ck_assert_int_eq(lookup(p, 8 * page), 'M');
	ck_assert_int_eq(madvise(p + 3 * page, page, MADV_DONTNEED), 0);
	ck_assert_int_eq(lookup(p, 8 * page), 'M');
	ck_assert_int_eq(madvise(p + 5 * page, page, MADV_FREE), 0);
	ck_assert_int_eq(lookup(p, 8 * page), 'M');
	ck_assert_int_eq(lookup(p, 8 * page), 'H');
	munmap(p, 8 * page);
}
END_TEST

START_TEST(uffd_mremap_move)
{
	char *p = map_anon(NULL, 4 * page, 0);
	char *far = map_anon(NULL, 4 * page, 0), *q;

	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	q = mremap(p, 4 * page, 4 * page, MREMAP_MAYMOVE | MREMAP_FIXED, far);
	ck_assert_ptr_eq(q, far);
	ck_assert_ptr_eq(map_anon(p, 4 * page, MAP_FIXED), p);
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	ck_assert_int_eq(lookup(q, 4 * page), 'M');
	munmap(p, 4 * page);
	munmap(q, 4 * page);
}
END_TEST

START_TEST(uffd_brk_shrink_regrow)
{
	char *top = sbrk(0), *p = top;
	unsigned long inv;

	ck_assert_ptr_ne(sbrk((intptr_t)(8 * page)), (void *)-1);
	memset(p, 1, 8 * page);
	ck_assert_int_eq(lookup(p + 4 * page, 4 * page), 'M');
	inv = invalidations();
	/* REAL sbrk: the test has no hook; the watcher alone sees it. */
	ck_assert_ptr_ne(sbrk(-(intptr_t)(4 * page)), (void *)-1);
	ck_assert_uint_gt(invalidations(), inv);
	ck_assert_ptr_ne(sbrk((intptr_t)(4 * page)), (void *)-1);
	memset(p + 4 * page, 2, 4 * page);
	ck_assert_int_eq(lookup(p + 4 * page, 4 * page), 'M');
	shim_mr_cache_purge();
	ck_assert_ptr_ne(sbrk(-(intptr_t)(8 * page)), (void *)-1);
}
END_TEST

START_TEST(uffd_memfd_mapping_replaced)
{
	int a = memfd_create("zc-a", MFD_CLOEXEC), b = memfd_create("zc-b", MFD_CLOEXEC);
	char *p, *q;
	int rc;

	ck_assert_int_ge(a, 0);
	ck_assert_int_ge(b, 0);
	ck_assert_int_eq(ftruncate(a, (off_t)(4 * page)), 0);
	ck_assert_int_eq(ftruncate(b, (off_t)(4 * page)), 0);
	p = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	memset(p, 1, 4 * page);
	rc = lookup(p, 4 * page);
	/* shmem is watchable where the kernel has write-protect markers;
	 * where not, the lookup says copy, which is never stale either. */
	ck_assert(rc == 'M' || rc == -EXDEV);
	q = mmap(p, 4 * page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, b, 0);
	ck_assert_ptr_eq(q, p);
	rc = lookup(p, 4 * page);
	ck_assert(rc == 'M' || rc == -EXDEV);
	munmap(p, 4 * page);
	close(a);
	close(b);
}
END_TEST

START_TEST(uffd_partly_unmapped_and_remapped)
{
	char *p = map_anon(NULL, 8 * page, 0);

	ck_assert_int_eq(lookup(p, 8 * page), 'M');
	ck_assert_int_eq(munmap(p + 2 * page, 2 * page), 0);
	ck_assert_ptr_eq(map_anon(p + 2 * page, 2 * page, MAP_FIXED), p + 2 * page);
	ck_assert_int_eq(lookup(p, 8 * page), 'M');
	/* Inside the new entry. */
	ck_assert_int_eq(lookup(p + 6 * page, 2 * page), 'H');
	munmap(p, 8 * page);
}
END_TEST

START_TEST(uffd_file_mapping_not_watched)
{
	char path[] = "/tmp/zc-fileXXXXXX";
	int fd = mkstemp(path);
	char *p;

	ck_assert_int_ge(fd, 0);
	unlink(path);
	ck_assert_int_eq(ftruncate(fd, (off_t)(4 * page)), 0);
	p = mmap(NULL, 4 * page, PROT_READ, MAP_PRIVATE, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	ck_assert_int_eq(lookup(p, 4 * page), -EXDEV);
	munmap(p, 4 * page);
	close(fd);
}
END_TEST

START_TEST(uffd_fork_purges)
{
	char *p = map_anon(NULL, 4 * page, 0);
	pid_t pid;
	int status;

	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	shim_mr_cache_atfork_prepare();
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		shim_mr_watch_atfork_child();
		shim_mr_cache_atfork_child();
		/* The child never uses its parent's registrations, nor
		 * caches without a watcher of its own. */
		_exit(lookup(p, 4 * page) == -EXDEV && fake.deregs == 0 ? 0 : 1);
	}
	shim_mr_cache_atfork_parent();
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Copy-on-write in the parent: nothing of before the fork is used. */
	p[0] = 7;
	ck_assert_int_eq(lookup(p, 4 * page), 'M');
	munmap(p, 4 * page);
}
END_TEST

START_TEST(uffd_stack_buffer_reused)
{
	/* The same pages with new bytes: no change of mapping, a hit is
	 * right (the registration sees the new bytes). */
	char buf[16384];

	memset(buf, 1, sizeof(buf));
	ck_assert_int_eq(lookup(buf, sizeof(buf)), 'M');
	memset(buf, 2, sizeof(buf));
	ck_assert_int_eq(lookup(buf, sizeof(buf)), 'H');
}
END_TEST

/* ---- the counters in the stats area (statarea.h's zc[]) ---- */

START_TEST(counters_reach_the_stats_area)
{
	char base[] = "/tmp/zc-statXXXXXX", udir[64];
	struct shim_stat_view v;
	struct shim_stat_hdr h;
	int dfd;

	ck_assert_ptr_nonnull(mkdtemp(base));
	snprintf(udir, sizeof(udir), "%s/%u", base, (unsigned)geteuid());
	shim_cfg.stats = 1;
	/* Counted before the area exists: the area takes it when made. */
	shim_stats_zc_add(SHIM_ZC_FB_UNWATCHED, 2);
	ck_assert_int_eq(shim_statarea_open_in(base), 0);
	shim_stats_zc_add(SHIM_ZC_SENDS, 3);
	shim_stats_zc_add(SHIM_ZC_BYTES, 3u << 20);
	dfd = open(udir, O_RDONLY | O_DIRECTORY);
	ck_assert_int_ge(dfd, 0);
	ck_assert_int_eq(shim_stat_view_open(dfd, strrchr(shim_statarea_path(), '/') + 1, &v), 0);
	close(dfd);
	ck_assert_int_eq(shim_stat_read_hdr(&v, &h, 10), 0);
	ck_assert_uint_eq(h.zc[SHIM_ZC_SENDS], 3);
	ck_assert_uint_eq(h.zc[SHIM_ZC_BYTES], 3u << 20);
	ck_assert_uint_eq(h.zc[SHIM_ZC_FB_UNWATCHED], 2);
	shim_stat_view_close(&v);
	shim_statarea_reset_for_test();
	rmdir(udir);
	rmdir(base);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("mr_cache");
	TCase *c = tcase_create("cache");
	TCase *h = tcase_create("hooks");
	TCase *u = tcase_create("userfaultfd");

	tcase_add_checked_fixture(c, setup_blind, teardown);
	tcase_add_test(c, same_range_hits);
	tcase_add_test(c, cap_holds);
	tcase_add_test(c, held_entries_stay_until_put);
	tcase_add_test(c, failed_registration_copies);
	tcase_add_test(c, unwatchable_copies);
	tcase_add_test(c, change_during_registration_copies);
	tcase_add_test(c, no_watcher_copies);
	tcase_add_test(c, counters_reach_the_stats_area);
	suite_add_tcase(s, c);

	tcase_add_checked_fixture(h, setup_blind, teardown);
	tcase_add_test(h, hooks_invalidate);
	tcase_add_test(h, hooks_brk_shrink);
	suite_add_tcase(s, h);

	tcase_add_checked_fixture(u, setup_uffd, teardown);
	tcase_add_test(u, uffd_munmap_then_mmap_fixed);
	tcase_add_test(u, uffd_munmap_then_mmap_same_address);
	tcase_add_test(u, uffd_free_malloc_above_mmap_threshold);
	tcase_add_test(u, uffd_madvise_dontneed_all_and_part);
	tcase_add_test(u, uffd_mremap_move);
	tcase_add_test(u, uffd_brk_shrink_regrow);
	tcase_add_test(u, uffd_memfd_mapping_replaced);
	tcase_add_test(u, uffd_partly_unmapped_and_remapped);
	tcase_add_test(u, uffd_file_mapping_not_watched);
	tcase_add_test(u, uffd_fork_purges);
	tcase_add_test(u, uffd_stack_buffer_reused);
	suite_add_tcase(s, u);
	return s;
}

int main(void)
{
	return shim_check_run(suite());
}
