/* The JSON-lines trace log; see trace.h. */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compiler.h"
#include "flimit.h"
#include "real.h"
#include "self.h"

enum shim_trace_level shim_trace_level = SHIM_TRACE_OFF;

static int trace_fd = -1;
static int trace_fd_owned;
/* What trace_fd was when opened: the program may close that number and reuse
 * it for one of its own sockets, and a trace line must never land there. */
static dev_t trace_dev;
static ino_t trace_ino;
static char trace_pattern[PATH_MAX];
static SHIM_TLS pid_t cached_tid;

void shim_json_escape(char *dst, size_t len, const char *src)
{
	size_t o = 0;

	if (!len)
		return;
	for (; *src; src++) {
		unsigned char c = (unsigned char)*src;
		char esc[8];
		size_t n;

		if (c == '"' || c == '\\')
			n = (size_t)snprintf(esc, sizeof(esc), "\\%c", c);
		else if (c < 0x20)
			n = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", c);
		else
			esc[0] = (char)c, n = 1;
		if (o + n >= len)
			break;
		memcpy(dst + o, esc, n);
		o += n;
	}
	dst[o] = '\0';
}

int shim_trace_expand_path(char *out, size_t len, const char *pattern, pid_t pid)
{
	size_t o = 0;

	for (const char *p = pattern; *p; p++) {
		char piece[24];
		size_t n;

		if (p[0] == '%' && p[1] == 'p') {
			n = (size_t)snprintf(piece, sizeof(piece), "%d", (int)pid);
			p++;
		} else {
			piece[0] = *p;
			n = 1;
		}
		if (o + n >= len)
			return -ENAMETOOLONG;
		memcpy(out + o, piece, n);
		o += n;
	}
	if (!len)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return 0;
}

static size_t append(char *buf, size_t len, size_t off, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * Appends one whole member at off, or nothing when it would not leave room
 * for the closing "}\n" and the NUL (a member cut in half may not parse);
 * returns the new offset.
 */
static size_t append(char *buf, size_t len, size_t off, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (off + 3 >= len)
		return off;
	va_start(ap, fmt);
	n = vsnprintf(buf + off, len - 2 - off, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= len - 2 - off) {
		buf[off] = '\0';
		return off;
	}
	return off + (size_t)n;
}

size_t shim_trace_format(char *buf, size_t len, const struct shim_trace_record *rec,
			 const char *extra_fmt, va_list ap)
{
	struct tm tm;
	char when[32], event[128];
	size_t off = 0;

	if (len < 8)
		return 0;
	gmtime_r(&rec->ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	shim_json_escape(event, sizeof(event), rec->event);
	off = append(buf, len, off, "{\"ts\":\"%s.%06ldZ\",\"pid\":%d,\"tid\":%d,\"level\":\"%s\",\"event\":\"%s\"",
		     when, rec->ts.tv_nsec / 1000, (int)rec->pid, (int)rec->tid,
		     shim_trace_level_name(rec->level), event);
	if (off == 0) { /* not even the head fits: an empty object still parses */
		memcpy(buf, "{}\n", 4);
		return 3;
	}
	if (rec->fd >= 0)
		off = append(buf, len, off, ",\"fd\":%d", rec->fd);
	if (rec->tuple) {
		char local[SHIM_ENDPOINT_STRLEN], peer[SHIM_ENDPOINT_STRLEN];

		shim_endpoint_format(&rec->tuple->local, local, sizeof(local));
		off = append(buf, len, off, ",\"local\":\"%s\"", local);
		/* A listener has no peer yet: port 0 stands for "none". */
		if (rec->tuple->peer.port) {
			shim_endpoint_format(&rec->tuple->peer, peer, sizeof(peer));
			off = append(buf, len, off, ",\"peer\":\"%s\"", peer);
		}
	}
	if (rec->reason != SHIM_REASON_NONE)
		off = append(buf, len, off, ",\"reason\":\"%s\"", shim_reason_name(rec->reason));
	if (extra_fmt && *extra_fmt && off + 3 < len) {
		size_t mark = off;
		int n;

		buf[off++] = ',';
		n = vsnprintf(buf + off, len - 2 - off, extra_fmt, ap);
		/* An extra part that does not fit is dropped whole: a cut one may not parse. */
		off = (n < 0 || (size_t)n >= len - 2 - off) ? mark : off + (size_t)n;
	}
	buf[off++] = '}';
	buf[off++] = '\n';
	buf[off] = '\0';
	return off;
}

const char *shim_trace_file_refusal(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return "can not be examined (fstat failed)";
	if (!S_ISREG(st.st_mode))
		return "is not a regular file";
	if (st.st_uid != geteuid())
		return "is owned by another user";
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return "is writable by its group or by others";
	/* A hard link another user made to a file of ours (where the
	 * system lets them: fs.protected_hardlinks=0) would have us append
	 * to that file; a trace file has one name. */
	if (st.st_nlink > 1)
		return "has other hard links";
	return NULL;
}

const char *shim_trace_open_failure(int rc)
{
	static SHIM_TLS char buf[96];

	switch (rc) {
	case -ELOOP:
		return "is a symbolic link";
	case -ENXIO:
		return "is a FIFO or a socket, not a regular file";
	default:
		snprintf(buf, sizeof(buf), "can not be opened (%s)", strerror(-rc));
		return buf;
	}
}

int shim_trace_open_file(const char *path, const char **why)
{
	int fd;

	/*
	 * The path may be in a shared directory such as /tmp, where another
	 * user can have put something at it first. O_NOFOLLOW: a symbolic
	 * link would redirect our lines into a file of the link owner's
	 * choosing. O_NONBLOCK: a FIFO would block the open until a reader
	 * came, at the load of every process started with this setting; with
	 * it, one with no reader fails (ENXIO) and one with a reader opens and
	 * fails the check below. O_NONBLOCK stays set: writes to a regular
	 * file never wait on it either way. The checks refuse a file another
	 * user made (it would receive our trace, and its owner could read or
	 * truncate it) and one others may write. Created 0600: the trace names
	 * the program's peers and ports, which its user alone needs to read.
	 */
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
	if (fd < 0) {
		int rc = -errno;

		*why = shim_trace_open_failure(rc);
		return rc;
	}
	*why = shim_trace_file_refusal(fd);
	if (*why) {
		REAL(close)(fd);
		return -EPERM;
	}
	return fd;
}

/* fd 2 for an empty pattern (the program's own stderr: nothing to check),
 * else the expanded path opened as shim_trace_open_file does; on failure,
 * the clause for the line on stderr in err. */
static int open_destination(const char *pattern, char *err, size_t errlen)
{
	char path[PATH_MAX];
	const char *why;
	int fd;

	if (!*pattern)
		return 2;
	fd = shim_trace_expand_path(path, sizeof(path), pattern, shim_self_pid());
	if (fd < 0) {
		snprintf(path, sizeof(path), "%s", pattern);
		why = "is too long once %p is expanded";
	} else {
		fd = shim_trace_open_file(path, &why);
	}
	if (fd < 0 && err && errlen)
		snprintf(err, errlen, "RDMASHIM_TRACE_FILE=\"%s\" refused: %s %s", pattern, path, why);
	return fd;
}

static int remember_identity(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	trace_dev = st.st_dev;
	trace_ino = st.st_ino;
	return 0;
}

/* True while fd still names the file the trace opened; *st is its state. */
static int still_ours(int fd, struct stat *st)
{
	return fstat(fd, st) == 0 && st->st_dev == trace_dev && st->st_ino == trace_ino;
}

int shim_trace_open(const char *pattern, enum shim_trace_level level, char *err, size_t errlen)
{
	int fd, rc;

	if (level == SHIM_TRACE_OFF)
		return 0;
	fd = open_destination(pattern, err, errlen);
	if (fd < 0)
		return fd;
	rc = remember_identity(fd);
	if (rc < 0) {
		if (*pattern)
			REAL(close)(fd);
		if (err && errlen)
			snprintf(err, errlen, "RDMASHIM_TRACE_FILE=\"%s\" refused: %s", pattern, strerror(-rc));
		return rc;
	}
	snprintf(trace_pattern, sizeof(trace_pattern), "%s", pattern);
	trace_fd = fd;
	trace_fd_owned = *pattern != '\0';
	shim_trace_level = level;
	return 0;
}

/* A fork's child re-opens its own %p file under the same rules; refused,
 * it says so once and runs on without a trace (its connections are the
 * parent's, already tracked: it can not go inert). */
void shim_trace_after_fork(void)
{
	static const char prefix[] = "rdmashim: ", suffix[] = "; this process runs on without a trace\n";
	/* Static: a fork's child has one thread, and the forking thread's
	 * stack may be small. */
	static char line[2 * PATH_MAX];
	size_t room = sizeof(line) - sizeof(suffix);

	cached_tid = 0;
	if (!trace_fd_owned || !strstr(trace_pattern, "%p"))
		return;
	memcpy(line, prefix, sizeof(prefix));
	int fd = open_destination(trace_pattern, line + strlen(prefix), room - strlen(prefix));
	struct stat st;

	if (still_ours(trace_fd, &st))
		REAL(close)(trace_fd);
	trace_fd = fd;
	if (fd < 0) {
		size_t n = strlen(line);

		memcpy(line + n, suffix, sizeof(suffix));
		/* One write: a line of its own among the program's. */
		if (REAL(write)(2, line, n + strlen(suffix)) < 0) {
			/* stderr closed: nothing more to say it with */
		}
	}
	if (fd < 0 || remember_identity(fd) < 0)
		shim_trace_level = SHIM_TRACE_OFF;
}

static pid_t current_tid(void)
{
	if (!cached_tid)
		cached_tid = (pid_t)REAL(syscall)(SYS_gettid);
	return cached_tid;
}

void shim_trace_emit(enum shim_trace_level level, const char *event, int fd,
		     const struct shim_tuple *tuple, enum shim_reason reason, const char *extra_fmt, ...)
{
	struct shim_trace_record rec = {
		.level = level, .event = event, .fd = fd, .tuple = tuple, .reason = reason,
		.pid = shim_self_pid(), .tid = current_tid(),
	};
	char line[SHIM_TRACE_LINE_MAX];
	int saved_errno = errno;
	struct stat st;
	va_list ap;
	size_t n;

	clock_gettime(CLOCK_REALTIME, &rec.ts);
	va_start(ap, extra_fmt);
	n = shim_trace_format(line, sizeof(line), &rec, extra_fmt, ap);
	va_end(ap);
	if (trace_fd < 0 || !still_ours(trace_fd, &st)) {
		/* The program closed or reused our fd: stop, never write into its files. */
		shim_trace_level = SHIM_TRACE_OFF;
	} else if (S_ISREG(st.st_mode) && !shim_flimit_allows((unsigned long long)st.st_size + n)) {
		/* The line would pass RLIMIT_FSIZE, whose SIGXFSZ kills the
		 * program (sshd's pre-auth child sets it to 0): it is lost
		 * instead. Another process appending to the same file between
		 * the look and the write could still push it past; a limit
		 * that close to a shared trace file's size is not met in use. */
	} else if (REAL(write)(trace_fd, line, n) < 0) {
		/* Nothing sensible to do: the trace must never hurt the program. */
	}
	errno = saved_errno;
}

bool shim_trace_budget_take(struct shim_trace_budget *b, unsigned long long now_ns, unsigned *held)
{
	unsigned long long last = __atomic_load_n(&b->last_ns, __ATOMIC_RELAXED);
	unsigned long long refill = b->per_sec ? (now_ns - last) / (1000000000ull / b->per_sec) : 0;
	unsigned tokens;

	if (!last || refill) {
		/* Relaxed throughout: the budget guards volume, not memory. */
		unsigned long long cap = b->burst;

		tokens = __atomic_load_n(&b->tokens, __ATOMIC_RELAXED);
		tokens = !last || tokens + refill > cap ? (unsigned)cap : tokens + (unsigned)refill;
		__atomic_store_n(&b->tokens, tokens, __ATOMIC_RELAXED);
		__atomic_store_n(&b->last_ns, now_ns, __ATOMIC_RELAXED);
	}
	tokens = __atomic_load_n(&b->tokens, __ATOMIC_RELAXED);
	if (!tokens) {
		__atomic_add_fetch(&b->held, 1, __ATOMIC_RELAXED);
		return false;
	}
	__atomic_store_n(&b->tokens, tokens - 1, __ATOMIC_RELAXED);
	*held = __atomic_exchange_n(&b->held, 0, __ATOMIC_RELAXED);
	return true;
}

void shim_trace_end(const char *why)
{
	SHIM_TRACE(SHIM_TRACE_ERROR, "trace.end", -1, NULL, SHIM_REASON_NONE, "\"why\":\"%s\"", why);
	/* Relaxed: a line another thread has begun still goes out, with the
	 * calls it would have made anyway a moment before. */
	__atomic_store_n(&shim_trace_level, SHIM_TRACE_OFF, __ATOMIC_RELAXED);
}

bool shim_trace_put(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
	va_list ap;
	int w;

	if (*off >= len)
		return false;
	va_start(ap, fmt);
	w = vsnprintf(buf + *off, len - *off, fmt, ap);
	va_end(ap);
	if (w < 0 || (size_t)w >= len - *off) {
		buf[*off] = '\0';
		return false;
	}
	*off += (size_t)w;
	return true;
}
