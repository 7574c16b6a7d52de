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

static int open_destination(const char *pattern)
{
	char path[PATH_MAX];
	int fd, rc;

	if (!*pattern)
		return 2;
	rc = shim_trace_expand_path(path, sizeof(path), pattern, shim_self_pid());
	if (rc < 0)
		return rc;
	/* O_NOFOLLOW: a symbolic link planted at the path (in a shared
	 * directory such as /tmp) must not redirect our lines into a file the
	 * link's owner chose. */
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0640);
	return fd < 0 ? -errno : fd;
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

int shim_trace_open(const char *pattern, enum shim_trace_level level)
{
	int fd, rc;

	if (level == SHIM_TRACE_OFF)
		return 0;
	fd = open_destination(pattern);
	if (fd < 0)
		return fd;
	rc = remember_identity(fd);
	if (rc < 0) {
		if (*pattern)
			REAL(close)(fd);
		return rc;
	}
	snprintf(trace_pattern, sizeof(trace_pattern), "%s", pattern);
	trace_fd = fd;
	trace_fd_owned = *pattern != '\0';
	shim_trace_level = level;
	return 0;
}

void shim_trace_after_fork(void)
{
	cached_tid = 0;
	if (!trace_fd_owned || !strstr(trace_pattern, "%p"))
		return;
	int fd = open_destination(trace_pattern);
	struct stat st;

	if (still_ours(trace_fd, &st))
		REAL(close)(trace_fd);
	trace_fd = fd;
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
