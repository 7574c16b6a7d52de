/* The writer of this process's live stats area; see statarea.h. */
#include "statarea.h"

#include "real.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "config.h"
#include "faults.h"
#include "stats.h"
#include "trace.h"

extern char *program_invocation_short_name;

_Static_assert(SHIM_REASON_COUNT <= SHIM_STAT_REASONS, "every reason has a counter in the header");

static const char *const state_names[SHIM_STAT_STATE_COUNT] = {
	"free", "connecting", "tcp", "upgrading", "switching", "switched", "fallback", "kernel", "shadow",
};

const char *shim_stat_state_name(unsigned state)
{
	return state < SHIM_STAT_STATE_COUNT ? state_names[state] : "?";
}

/*
 * The area. lock guards everything here but hdr, which is read without it
 * (shim_stat_reason). Records never move: each segment is mapped once and
 * stays until exit, so a connection's record pointer is good for its life.
 */
static struct {
	pthread_mutex_t lock;
	struct shim_stat_hdr *hdr; /* published with a release store, read with acquire */
	/* No fd is held between calls: a process near its fd limit has
	 * every number for its own (t_shm_fd_limit). The file is opened by
	 * name, under the checked directory, when it grows, and checked to
	 * be the one made (ino). */
	char base[400]; /* the areas' directory (RDMASHIM_STATS_DIR) */
	ino_t ino;
	bool tried;              /* made or failed once: never again (a failure stays off) */
	bool left;               /* the file is gone for good (sandboxed): nothing more on disk */
	char name[64];
	char path[400];
	struct shim_stat_rec *seg[SHIM_STAT_MAX_SEGS];
	size_t seg_recs[SHIM_STAT_MAX_SEGS];
	unsigned nseg;
	uint64_t nrec;
	struct shim_stat_rec **free; /* records free for reuse */
	size_t nfree, free_cap;
	uint64_t next_gen;
	struct shim_stat_ab *ab;  /* in hdr's mapping, at SHIM_STAT_AB_OFF */
	int64_t real_minus_mono_ns; /* CLOCK_REALTIME - CLOCK_MONOTONIC when the area was made */
} area = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Our directory, checked again (statread.c's rules), or -errno. */
static int dir_open(void)
{
	return shim_stat_dir_open(area.base, geteuid(), false);
}

/* Our file, opened by name and checked to be the one made, or -errno. */
static int file_open(void)
{
	struct stat st;
	int dfd = dir_open(), fd;

	if (dfd < 0)
		return dfd;
	fd = openat(dfd, area.name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	REAL(close)(dfd);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_ino != area.ino || !S_ISREG(st.st_mode)) {
		REAL(close)(fd);
		return -ESTALE;
	}
	return fd;
}

uint64_t shim_stat_start_ticks(pid_t pid)
{
	char path[64], buf[1024];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = REAL(read)(fd, buf, sizeof(buf) - 1);
	REAL(close)(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The command name may hold spaces and parentheses: fields count from
	 * the last ')'. Field 22 is the 20th after it. */
	char *p = strrchr(buf, ')');

	if (!p)
		return 0;
	for (int field = 2; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

static int dir_checked(int fd, uid_t uid)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 077))
		return -EPERM;
	return 0;
}

int shim_stat_dir_open(const char *base, uid_t uid, bool create)
{
	char name[32];
	struct stat st;
	int bfd, fd, rc;

	/* The base: made world-writable and sticky (as /tmp) by its first
	 * user when its parent lets them; followed only if it is a real
	 * directory that nobody else can swap entries in unseen. */
	if (create && mkdir(base, 01777) == 0)
		chmod(base, 01777); /* the umask took bits off */
	bfd = open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (bfd < 0)
		return -errno;
	if (fstat(bfd, &st) < 0 || (st.st_uid != 0 && st.st_uid != uid) ||
	    ((st.st_mode & 0022) && !(st.st_mode & S_ISVTX))) {
		REAL(close)(bfd);
		return -EPERM;
	}
	snprintf(name, sizeof(name), "%u", (unsigned)uid);
	if (create && mkdirat(bfd, name, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		REAL(close)(bfd);
		return rc;
	}
	/* O_NOFOLLOW: a link planted at our name is refused, not followed. */
	fd = openat(bfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	rc = fd < 0 ? -errno : 0;
	REAL(close)(bfd);
	if (rc < 0)
		return rc == -ELOOP || rc == -ENOTDIR ? -EPERM : rc; /* a link, or not a directory */
	rc = dir_checked(fd, uid);
	if (rc < 0) {
		REAL(close)(fd);
		return rc;
	}
	return fd;
}

static uint64_t unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Maps segment k (the file already long enough): records base..base+n. */
static int map_segment(int fd, unsigned k, uint64_t base, size_t n)
{
	void *p = REAL(mmap)(NULL, n * SHIM_STAT_REC_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       (off_t)(SHIM_STAT_HDR_SIZE + base * SHIM_STAT_REC_SIZE));

	if (p == MAP_FAILED)
		return -errno;
	area.seg[k] = p;
	area.seg_recs[k] = n;
	return 0;
}

/* One more segment, as large as all before it. Under area.lock. */
static int grow(void)
{
	size_t n = area.nseg ? (size_t)area.nrec : SHIM_STAT_FIRST_SEG;
	struct shim_stat_rec **fr;
	int rc, fd;

	if (area.nseg == SHIM_STAT_MAX_SEGS)
		return -ENOSPC;
	if (area.left)
		return -EPERM;
	if (area.free_cap < area.nrec + n) {
		fr = realloc(area.free, (area.nrec + n) * sizeof(*fr));
		if (!fr)
			return -ENOMEM;
		area.free = fr;
		area.free_cap = area.nrec + n;
	}
	fd = file_open();
	if (fd < 0)
		return fd;
	/* Readers map what fstat says; they never see records past nrec. */
	rc = ftruncate(fd, (off_t)(SHIM_STAT_HDR_SIZE + (area.nrec + n) * SHIM_STAT_REC_SIZE)) < 0
		     ? -errno
		     : map_segment(fd, area.nseg, area.nrec, n);
	REAL(close)(fd);
	if (rc < 0)
		return rc;
	for (size_t i = n; i-- > 0;)
		area.free[area.nfree++] = &area.seg[area.nseg][i];
	area.nseg++;
	area.nrec += n;
	/* release: the file is this long before a reader learns nrec; pairs
	 * with the acquire load of nrec in shim_stat_view_open() (statread.c). */
	__atomic_store_n(&area.hdr->nrec, area.nrec, __ATOMIC_RELEASE);
	return 0;
}

static void fill_identity(struct shim_stat_hdr *h)
{
	shim_stat_seq_begin(&h->seq);
	h->pid = (int32_t)getpid();
	h->uid = (uint32_t)geteuid();
	h->start_ticks = shim_stat_start_ticks(getpid());
	h->started_unix_ns = unix_ns();
	snprintf(h->comm, sizeof(h->comm), "%s",
		 program_invocation_short_name ? program_invocation_short_name : "?");
	shim_stat_seq_end(&h->seq);
}

/* The file for this process: created, never opened if it exists (our
 * own, left by this pid's image before an exec that failed to unlink it,
 * is the only entry that can hold our name; a link there is refused). */
static int create_file(int dirfd, char *name, size_t len)
{
	int fd;

	snprintf(name, len, "%d-%llu.stat", (int)getpid(), (unsigned long long)shim_stat_start_ticks(getpid()));
	fd = openat(dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

static int open_locked(const char *dir)
{
	struct shim_stat_hdr *h;
	struct stat st;
	int dfd, fd, rc;

	if (strlen(dir) >= sizeof(area.base))
		return -ENAMETOOLONG;
	dfd = shim_stat_dir_open(dir, geteuid(), true);
	if (dfd < 0)
		return dfd;
	fd = create_file(dfd, area.name, sizeof(area.name));
	if (fd < 0) {
		REAL(close)(dfd);
		return fd;
	}
	if (fchmod(fd, 0600) < 0 || ftruncate(fd, SHIM_STAT_HDR_SIZE) < 0 || fstat(fd, &st) < 0) {
		rc = -errno;
		goto fail;
	}
	h = REAL(mmap)(NULL, SHIM_STAT_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		rc = -errno;
		goto fail;
	}
	memcpy(h->magic, SHIM_STAT_MAGIC, sizeof(h->magic));
	h->version = SHIM_STAT_VERSION;
	h->hdr_size = SHIM_STAT_HDR_SIZE;
	h->rec_size = SHIM_STAT_REC_SIZE;
	fill_identity(h);
	/* What was counted before the area existed. */
	for (unsigned r = 0; r < SHIM_REASON_COUNT; r++)
		h->reasons[r] = __atomic_load_n(&shim_stats_reason[r], __ATOMIC_RELAXED);
	for (unsigned z = 0; z < SHIM_ZC_STAT_COUNT && z < SHIM_STAT_ZC; z++)
		h->zc[z] = __atomic_load_n(&shim_stats_zc[z], __ATOMIC_RELAXED);
	area.ab = (struct shim_stat_ab *)((char *)h + SHIM_STAT_AB_OFF);
	area.ab->percent = shim_cfg.ab_percent;
	area.ab->active = shim_cfg.ab_percent < 100;
	area.real_minus_mono_ns = (int64_t)(unix_ns() - (uint64_t)shim_now_ns());
	snprintf(area.base, sizeof(area.base), "%s", dir);
	area.ino = st.st_ino;
	REAL(close)(fd);
	REAL(close)(dfd);
	snprintf(area.path, sizeof(area.path), "%s/%u/%s", dir, (unsigned)geteuid(), area.name);
	/* release: the header is filled before shim_stat_reason() adds to it;
	 * pairs with its acquire load of area.hdr. */
	__atomic_store_n(&area.hdr, h, __ATOMIC_RELEASE);
	return 0;
fail:
	unlinkat(dfd, area.name, 0);
	REAL(close)(fd);
	REAL(close)(dfd);
	return rc;
}

int shim_statarea_open_in(const char *dir)
{
	int rc;

	pthread_mutex_lock(&area.lock);
	area.tried = true;
	rc = area.hdr ? 0 : open_locked(dir);
	pthread_mutex_unlock(&area.lock);
	return rc;
}

const char *shim_statarea_path(void)
{
	return area.hdr ? area.path : NULL;
}

/* A free record, its gen and birth set, or NULL (stats off, no area, no
 * room). Makes the area at the first call. Under area.lock. */
static struct shim_stat_rec *take_locked(void)
{
	struct shim_stat_rec *r;
	int rc;

	if (!area.hdr && !area.tried) {
		area.tried = true;
		rc = open_locked(shim_cfg.stats_dir);
		if (rc < 0)
			SHIM_TRACE(SHIM_TRACE_WARN, "stats.off", -1, NULL, SHIM_REASON_NONE,
				   "\"dir\":\"%s\",\"errno\":%d", shim_cfg.stats_dir, -rc);
	}
	if (!area.hdr || (!area.nfree && grow() < 0))
		return NULL;
	r = area.free[--area.nfree];
	shim_stat_seq_begin(&r->seq);
	r->gen = ++area.next_gen;
	r->born_unix_ns = unix_ns();
	shim_stat_seq_end(&r->seq);
	return r;
}

struct shim_stat_rec *shim_stat_rec_new(const struct shim_stat_desc *d)
{
	struct shim_stat_rec *r;

	if (!shim_cfg.stats && !area.hdr)
		return NULL;
	pthread_mutex_lock(&area.lock);
	r = take_locked();
	if (r) {
		shim_stat_seq_begin(&r->seq);
		r->d = *d;
		memset(r->bytes, 0, sizeof(r->bytes));
		memset(r->msgs, 0, sizeof(r->msgs));
		memset(r->rtt, 0, sizeof(r->rtt));
		r->rtt_path = d->path;
		shim_stat_seq_end(&r->seq);
		__atomic_add_fetch(&area.hdr->conns, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&area.lock);
	return r;
}

struct shim_stat_rec *shim_stat_rec_take(void)
{
	struct shim_stat_rec *r;

	if (!shim_cfg.stats && !area.hdr)
		return NULL;
	pthread_mutex_lock(&area.lock);
	r = take_locked();
	pthread_mutex_unlock(&area.lock);
	return r;
}

void shim_stat_rec_give_back(struct shim_stat_rec *r)
{
	shim_stat_seq_begin(&r->seq);
	r->d.state = SHIM_STAT_FREE;
	shim_stat_seq_end(&r->seq);
	pthread_mutex_lock(&area.lock);
	area.free[area.nfree++] = r;
	pthread_mutex_unlock(&area.lock);
}

void shim_stat_rec_describe(struct shim_stat_rec *r, const struct shim_stat_desc *d)
{
	shim_stat_seq_begin(&r->seq);
	r->d = *d;
	/* The test of a process killed mid-update (t_stat): dies here, the
	 * count odd, half of what it meant to write in place. */
	if (unlikely(shim_fault_hit(SHIM_FAULT_STAT_KILL, d->fd, NULL, "stat_describe")))
		raise(SIGKILL);
	shim_stat_seq_end(&r->seq);
}

/* The record's samples go to the header's, by their path. Under the
 * connection's lock: no sample is added meanwhile. */
static void fold_rtt(struct shim_stat_rec *r)
{
	unsigned p = r->rtt_path < SHIM_STAT_PATHS ? (unsigned)r->rtt_path : 0;

	for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++) {
		uint64_t n = __atomic_load_n(&r->rtt[b], __ATOMIC_RELAXED);

		if (n) {
			__atomic_add_fetch(&area.hdr->closed_rtt[p][b], n, __ATOMIC_RELAXED);
			__atomic_store_n(&r->rtt[b], 0, __ATOMIC_RELAXED);
		}
	}
}

void shim_stat_rec_rtt(struct shim_stat_rec *r, unsigned path, uint64_t ns)
{
	if (path >= SHIM_STAT_PATHS)
		return;
	if (__atomic_load_n(&r->rtt_path, __ATOMIC_RELAXED) != path) {
		fold_rtt(r);
		__atomic_store_n(&r->rtt_path, path, __ATOMIC_RELAXED);
	}
	shim_stat_add(&r->rtt[shim_stat_rtt_bucket(ns)], 1);
}

void shim_stat_rec_free(struct shim_stat_rec *r)
{
	if (!r)
		return;
	for (unsigned p = 0; p < SHIM_STAT_PATHS; p++)
		for (unsigned w = 0; w < 2; w++) {
			__atomic_add_fetch(&area.hdr->closed_bytes[p][w], r->bytes[p][w], __ATOMIC_RELAXED);
			__atomic_add_fetch(&area.hdr->closed_msgs[p][w], r->msgs[p][w], __ATOMIC_RELAXED);
		}
	fold_rtt(r);
	if (r->d.arm >= SHIM_STAT_ARM_ACCEL && r->d.arm <= SHIM_STAT_ARM_CONTROL)
		for (unsigned w = 0; w < 2; w++) {
			uint64_t n = 0;

			for (unsigned p = 0; p < SHIM_STAT_PATHS; p++)
				n += r->bytes[p][w];
			__atomic_add_fetch(&area.ab->arm[r->d.arm - 1].closed_bytes[w], n, __ATOMIC_RELAXED);
		}
	/* A reader that saw the record live and reads it again finds it free
	 * (or a later connection, told apart by gen): not a mix. */
	shim_stat_seq_begin(&r->seq);
	r->d.state = SHIM_STAT_FREE;
	memset(r->bytes, 0, sizeof(r->bytes));
	memset(r->msgs, 0, sizeof(r->msgs));
	shim_stat_seq_end(&r->seq);
	pthread_mutex_lock(&area.lock);
	area.free[area.nfree++] = r;
	pthread_mutex_unlock(&area.lock);
}

/* The arm's counters, when the area exists and holds an A/B test. */
static struct shim_stat_arm *ab_arm(unsigned arm)
{
	/* acquire: pairs with the release store of area.hdr in open_locked():
	 * area.ab and its percent are set before it. */
	if (!__atomic_load_n(&area.hdr, __ATOMIC_ACQUIRE) || !area.ab->active || arm < SHIM_STAT_ARM_ACCEL ||
	    arm > SHIM_STAT_ARM_CONTROL)
		return NULL;
	return &area.ab->arm[arm - 1];
}

void shim_stat_ab_conn(unsigned arm)
{
	struct shim_stat_arm *a = ab_arm(arm);

	if (a)
		__atomic_add_fetch(&a->conns, 1, __ATOMIC_RELAXED);
}

void shim_stat_ab_fallback(unsigned arm)
{
	struct shim_stat_arm *a = ab_arm(arm);

	if (a)
		__atomic_add_fetch(&a->fallbacks, 1, __ATOMIC_RELAXED);
}

void shim_stat_ab_error(unsigned arm)
{
	struct shim_stat_arm *a = ab_arm(arm);

	if (a)
		__atomic_add_fetch(&a->errors, 1, __ATOMIC_RELAXED);
}

/*
 * One round trip into the interval of the second it ended in. The slot of
 * that second is taken over from an older second by the writer whose
 * compare-and-swap makes its count odd; a writer that finds it odd (the
 * zeroing is a few hundred stores, but that thread may lose its CPU)
 * drops its sample and counts the drop rather than wait.
 */
void shim_stat_ab_rtt(unsigned arm, uint64_t now_ns, uint64_t ns)
{
	struct shim_stat_arm *a = ab_arm(arm);
	struct shim_stat_ab_slot *sl;
	uint64_t sec, seq, had;

	if (!a)
		return;
	sec = (uint64_t)((int64_t)now_ns + area.real_minus_mono_ns) / 1000000000ull;
	sl = &area.ab->slot[sec % SHIM_STAT_AB_INTERVALS];
	for (int tries = 0; tries < 4; tries++) {
		seq = __atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE);
		if (seq & 1)
			break;
		had = __atomic_load_n(&sl->sec, __ATOMIC_RELAXED);
		if (had == sec) {
			__atomic_add_fetch(&sl->hist[arm - 1][shim_stat_rtt_bucket(ns)], 1, __ATOMIC_RELAXED);
			return;
		}
		if (had > sec)
			break; /* a sample a whole ring late: its second is gone */
		if (!__atomic_compare_exchange_n(&sl->seq, &seq, seq + 1, false, __ATOMIC_RELAXED,
						 __ATOMIC_RELAXED))
			continue;
		/* release fence: the odd count is visible before the zeroing;
		 * pairs with the acquire fence in shim_stat_read_ab_slot()
		 * (statread.c) between its copy and its second count load. */
		__atomic_thread_fence(__ATOMIC_RELEASE);
		for (unsigned k = 0; k < SHIM_STAT_ARMS; k++)
			for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
				__atomic_store_n(&sl->hist[k][b], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&sl->sec, sec, __ATOMIC_RELAXED);
		/* release: the zeroed slot and its second are in place before
		 * the count is even again; pairs with the acquire load of the
		 * first count in shim_stat_read_ab_slot(), and with the acquire
		 * load above in other writers, which then add to this second. */
		__atomic_store_n(&sl->seq, seq + 2, __ATOMIC_RELEASE);
	}
	__atomic_add_fetch(&a->dropped, 1, __ATOMIC_RELAXED);
}

void shim_stat_reason(unsigned reason)
{
	/* acquire: pairs with the release store of area.hdr in open_locked(). */
	struct shim_stat_hdr *h = __atomic_load_n(&area.hdr, __ATOMIC_ACQUIRE);

	if (h && reason < SHIM_STAT_REASONS)
		__atomic_add_fetch(&h->reasons[reason], 1, __ATOMIC_RELAXED);
}

void shim_stat_zc(unsigned what, uint64_t n)
{
	/* acquire: pairs with the release store of area.hdr in open_locked(). */
	struct shim_stat_hdr *h = __atomic_load_n(&area.hdr, __ATOMIC_ACQUIRE);

	if (h && what < SHIM_STAT_ZC)
		__atomic_add_fetch(&h->zc[what], n, __ATOMIC_RELAXED);
}

static void remove_file(void)
{
	int dfd;

	if (!area.hdr || area.left || (dfd = dir_open()) < 0)
		return;
	unlinkat(dfd, area.name, 0);
	REAL(close)(dfd);
}

void shim_statarea_leave(void)
{
	/* The sandbox to come may refuse any call on the file: it goes now,
	 * and the records stay memory of ours (the mapping outlives it). */
	pthread_mutex_lock(&area.lock);
	remove_file();
	area.left = true;
	pthread_mutex_unlock(&area.lock);
}

void shim_statarea_exit(void)
{
	remove_file();
}

void shim_statarea_before_exec(void)
{
	/* The new image is another program (its own file if it runs the
	 * shim: the same pid and start time, so this name must be free). If
	 * the exec fails, this image goes on unseen by `rdmashim stat`. */
	remove_file();
}

/* Copies len bytes at p into fd at off. */
static int write_all_at(int fd, const void *p, size_t len, off_t off)
{
	const char *c = p;

	while (len) {
		ssize_t n = pwrite(fd, c, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		c += n;
		len -= (size_t)n;
		off += n;
	}
	return 0;
}

/* Copies the 4 KiB pages at p that are not all zero into fd at off (the
 * file was just made and truncated: the rest reads as zero, and a sparse
 * A/B area an idle test never touched stays unallocated in the copy). */
static int write_nonzero_at(int fd, const void *p, size_t len, off_t off)
{
	static const char zero[4096];
	const char *c = p;

	for (size_t at = 0; at < len; at += sizeof(zero)) {
		size_t n = len - at < sizeof(zero) ? len - at : sizeof(zero);
		int rc;

		if (!memcmp(c + at, zero, n))
			continue;
		rc = write_all_at(fd, c + at, n, off + (off_t)at);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Puts fd's [off, off+len) where p is mapped; anonymous memory if fd < 0. */
static int remap_at(void *p, size_t len, int fd, off_t off)
{
	void *q = fd >= 0 ? REAL(mmap)(p, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off)
			  : REAL(mmap)(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);

	return q == MAP_FAILED ? -errno : 0;
}

static int child_file(void)
{
	size_t total = SHIM_STAT_HDR_SIZE + area.nrec * SHIM_STAT_REC_SIZE;
	uint64_t base = 0;
	struct stat st;
	int fd, dfd, rc;

	if (area.left || (dfd = dir_open()) < 0)
		return -EPERM;
	fd = create_file(dfd, area.name, sizeof(area.name));
	if (fd < 0) {
		REAL(close)(dfd);
		return fd;
	}
	rc = ftruncate(fd, (off_t)total) < 0 || fstat(fd, &st) < 0 ? -errno
								  : write_nonzero_at(fd, area.hdr, SHIM_STAT_HDR_SIZE, 0);
	for (unsigned k = 0; k < area.nseg && rc == 0; k++) {
		rc = write_all_at(fd, area.seg[k], area.seg_recs[k] * SHIM_STAT_REC_SIZE,
			      (off_t)(SHIM_STAT_HDR_SIZE + base * SHIM_STAT_REC_SIZE));
		base += area.seg_recs[k];
	}
	base = 0;
	/* Each mapping now shows the child's file, with the same contents. */
	if (rc == 0)
		rc = remap_at(area.hdr, SHIM_STAT_HDR_SIZE, fd, 0);
	for (unsigned k = 0; k < area.nseg && rc == 0; k++) {
		rc = remap_at(area.seg[k], area.seg_recs[k] * SHIM_STAT_REC_SIZE, fd,
			      (off_t)(SHIM_STAT_HDR_SIZE + base * SHIM_STAT_REC_SIZE));
		base += area.seg_recs[k];
	}
	if (rc < 0)
		unlinkat(dfd, area.name, 0);
	else
		area.ino = st.st_ino;
	REAL(close)(fd);
	REAL(close)(dfd);
	return rc;
}

void shim_statarea_atfork_child(void)
{
	/* Only the forking thread lives on: no other writer is mid-way. */
	pthread_mutex_init(&area.lock, NULL);
	if (!area.hdr)
		return;
	if (child_file() < 0) {
		/* Never write into the parent's file: private memory at the
		 * same places, so that record pointers stay good, unpublished. */
		remap_at(area.hdr, SHIM_STAT_HDR_SIZE, -1, 0);
		for (unsigned k = 0; k < area.nseg; k++)
			remap_at(area.seg[k], area.seg_recs[k] * SHIM_STAT_REC_SIZE, -1, 0);
		area.left = true;
		area.hdr->nrec = area.nrec;
		return;
	}
	fill_identity(area.hdr);
	/* A record some parent thread was describing at the fork stays odd
	 * in the copy: make it even, its writer is gone. Records that are
	 * not a connection's (a queue pair's, statlink.h) describe what is
	 * the parent's alone: free in the child. */
	for (unsigned k = 0; k < area.nseg; k++)
		for (size_t i = 0; i < area.seg_recs[k]; i++) {
			struct shim_stat_rec *r = &area.seg[k][i];

			if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) & 1)
				shim_stat_seq_end(&r->seq);
			if (r->d.state >= SHIM_STAT_STATE_COUNT) {
				shim_stat_seq_begin(&r->seq);
				r->d.state = SHIM_STAT_FREE;
				shim_stat_seq_end(&r->seq);
				area.free[area.nfree++] = r;
			}
		}
	snprintf(area.path, sizeof(area.path), "%s/%u/%s", shim_cfg.stats_dir, (unsigned)geteuid(), area.name);
}

void shim_statarea_reset_for_test(void)
{
	pthread_mutex_lock(&area.lock);
	remove_file();
	if (area.hdr)
		REAL(munmap)(area.hdr, SHIM_STAT_HDR_SIZE);
	for (unsigned k = 0; k < area.nseg; k++)
		REAL(munmap)(area.seg[k], area.seg_recs[k] * SHIM_STAT_REC_SIZE);
	free(area.free);
	__atomic_store_n(&area.hdr, NULL, __ATOMIC_RELEASE);
	area.ab = NULL;
	area.left = false;
	area.tried = false;
	area.nseg = 0;
	area.nrec = area.nfree = area.free_cap = 0;
	area.free = NULL;
	pthread_mutex_unlock(&area.lock);
}
