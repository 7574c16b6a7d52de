/* One look at every stats area the caller may read; see stat_snap.h. */
#include "stat_snap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "statread.h"

/* Reads of a record whose count stays odd or moving: then "inconsistent". */
#define SNAP_TRIES 8

static struct snap_proc *add_proc(struct snap *s)
{
	if (s->nproc == s->proc_cap) {
		size_t cap = s->proc_cap ? s->proc_cap * 2 : 16;
		struct snap_proc *p = realloc(s->procs, cap * sizeof(*p));

		if (!p)
			return NULL;
		s->procs = p;
		s->proc_cap = cap;
	}
	memset(&s->procs[s->nproc], 0, sizeof(s->procs[0]));
	return &s->procs[s->nproc++];
}

static struct snap_conn *add_conn(struct snap *s)
{
	if (s->nconn == s->conn_cap) {
		size_t cap = s->conn_cap ? s->conn_cap * 2 : 64;
		struct snap_conn *c = realloc(s->conns, cap * sizeof(*c));

		if (!c)
			return NULL;
		s->conns = c;
		s->conn_cap = cap;
	}
	return &s->conns[s->nconn++];
}

static struct snap_link *add_link(struct snap *s)
{
	if (s->nlink == s->link_cap) {
		size_t cap = s->link_cap ? s->link_cap * 2 : 16;
		struct snap_link *l = realloc(s->links, cap * sizeof(*l));

		if (!l)
			return NULL;
		s->links = l;
		s->link_cap = cap;
	}
	return &s->links[s->nlink++];
}

static bool conn_passes(const struct shim_stat_rec *r, const struct snap_filter *f)
{
	if (f->port && r->d.local.port != f->port && r->d.peer.port != f->port)
		return false;
	if (f->path >= 0 && r->d.path != f->path)
		return false;
	return true;
}

/* The connections of one mapped area, and its process's sums. */
static int read_area(struct snap *s, struct shim_stat_view *v, const struct snap_filter *f)
{
	struct snap_proc *p = add_proc(s);
	size_t pi;

	if (!p)
		return -ENOMEM;
	pi = s->nproc - 1;
	p->hdr_inconsistent = shim_stat_read_hdr(v, &p->hdr, SNAP_TRIES) < 0;
	p->pid = p->hdr.pid;
	p->uid = p->hdr.uid;
	p->hdr.comm[sizeof(p->hdr.comm) - 1] = '\0';
	for (unsigned path = 0; path < SHIM_STAT_PATHS; path++) {
		for (unsigned w = 0; w < 2; w++) {
			p->bytes[path][w] = p->hdr.closed_bytes[path][w];
			p->msgs[path][w] = p->hdr.closed_msgs[path][w];
		}
		memcpy(p->rtt[path], p->hdr.closed_rtt[path], sizeof(p->rtt[path]));
	}
	if (f->ab) {
		p->ab = malloc(sizeof(*p->ab));
		if (!p->ab)
			return -ENOMEM;
		shim_stat_read_ab(v, p->ab, SNAP_TRIES);
	}
	for (uint64_t i = 0; i < v->nrec; i++) {
		struct snap_conn c = { .proc = pi, .slot = i };
		int rc = shim_stat_read_rec(v, i, &c.rec, SNAP_TRIES);
		struct snap_conn *slot;

		if (rc == -EAGAIN)
			c.inconsistent = true;
		else if (rc < 0)
			continue;
		if (c.rec.d.state == SHIM_STAT_LINK_REC && f->links) {
			struct snap_link *l = add_link(s);

			if (!l)
				return -ENOMEM;
			l->proc = pi;
			l->slot = i;
			l->inconsistent = c.inconsistent;
			memcpy(&l->rec, &c.rec, sizeof(l->rec));
			continue;
		}
		if (c.rec.d.state == SHIM_STAT_FREE || c.rec.d.state >= SHIM_STAT_STATE_COUNT ||
		    c.rec.d.path >= SHIM_STAT_PATHS)
			continue;
		p = &s->procs[pi];
		for (unsigned path = 0; path < SHIM_STAT_PATHS; path++)
			for (unsigned w = 0; w < 2; w++) {
				p->bytes[path][w] += c.rec.bytes[path][w];
				p->msgs[path][w] += c.rec.msgs[path][w];
			}
		if (c.rec.rtt_path < SHIM_STAT_PATHS)
			for (unsigned b = 0; b < SHIM_STAT_RTT_BUCKETS; b++)
				p->rtt[c.rec.rtt_path][b] += c.rec.rtt[b];
		p->live[c.rec.d.path]++;
		if (c.rec.d.arm >= SHIM_STAT_ARM_ACCEL && c.rec.d.arm <= SHIM_STAT_ARM_CONTROL) {
			unsigned a = c.rec.d.arm - 1u;

			p->arm_live[a]++;
			for (unsigned path = 0; path < SHIM_STAT_PATHS; path++)
				for (unsigned w = 0; w < 2; w++)
					p->arm_live_bytes[a][w] += c.rec.bytes[path][w];
		}
		if (!conn_passes(&c.rec, f))
			continue;
		slot = add_conn(s);
		if (!slot)
			return -ENOMEM;
		*slot = c;
	}
	return 0;
}

/* The owner of /proc/<pid>, or -1 when there is no such process. */
static long proc_uid(int pid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", pid);
	return stat(path, &st) < 0 ? -1 : (long)st.st_uid;
}

static int proc_error(struct snap *s, int pid, unsigned uid, const char *error)
{
	struct snap_proc *p = add_proc(s);

	if (!p)
		return -ENOMEM;
	p->pid = pid;
	p->uid = uid;
	p->error = error;
	return 0;
}

static int denied(struct snap *s, int pid, unsigned uid)
{
	return proc_error(s, pid, uid, "permission denied");
}

static int read_user_dir(struct snap *s, int basefd, const char *uidname, const struct snap_filter *f)
{
	unsigned uid = (unsigned)strtoul(uidname, NULL, 10);
	struct dirent *de;
	DIR *d;
	int fd = openat(basefd, uidname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	bool found_pid = false;

	if (fd < 0) {
		if (errno != EACCES)
			return 0;
		/* A user's directory is theirs alone (0700): their processes
		 * are there, unreadable. One line for the user, or for the
		 * process asked for when it is theirs. */
		if (f->pid && proc_uid(f->pid) != (long)uid)
			return 0;
		return denied(s, f->pid, uid);
	}
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		struct shim_stat_view v;
		uint64_t start;
		int pid, alive, rc;

		alive = shim_stat_name_alive(de->d_name, &pid, &start);
		if (alive < 0 || (f->pid && pid != f->pid))
			continue;
		found_pid = true;
		if (!alive && !f->keep_dead) {
			/* Its process is gone (killed, or exited without its
			 * destructor): ours to clean, not another user's. */
			if (uid == (unsigned)geteuid() && unlinkat(dirfd(d), de->d_name, 0) == 0)
				s->removed++;
			continue;
		}
		rc = shim_stat_view_open(dirfd(d), de->d_name, &v);
		if (rc == -EACCES || rc == -EPERM) {
			rc = denied(s, pid, uid);
		} else if (rc == 0) {
			rc = read_area(s, &v, f);
			shim_stat_view_close(&v);
			if (rc == 0)
				s->procs[s->nproc - 1].dead = !alive;
		} else if (rc == -EPROTO) {
			/* A live process's file that is no area of this version
			 * (damaged, or another build's): said, not skipped. */
			rc = proc_error(s, pid, uid, "unreadable area (not a stats area of this version)");
		} else {
			rc = 0; /* gone meanwhile */
		}
		if (rc < 0) {
			closedir(d);
			return rc;
		}
	}
	(void)found_pid;
	closedir(d);
	return 0;
}

int snap_take(struct snap *s, const char *base, const struct snap_filter *f)
{
	struct timespec ts;
	struct dirent *de;
	DIR *d;
	int rc = 0;

	memset(s, 0, sizeof(*s));
	clock_gettime(CLOCK_REALTIME, &ts);
	s->now_unix_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	d = opendir(base);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d)) && rc == 0) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		rc = read_user_dir(s, dirfd(d), de->d_name, f);
	}
	closedir(d);
	return rc;
}

void snap_free(struct snap *s)
{
	for (size_t i = 0; i < s->nproc; i++)
		free(s->procs[i].ab);
	free(s->procs);
	free(s->conns);
	free(s->links);
	memset(s, 0, sizeof(*s));
}
