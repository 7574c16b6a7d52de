/*
 * The trace log: one JSON object per line, written with one write(2) to a
 * file opened O_APPEND, so lines from threads and processes never interleave.
 *
 * Fields, in order: ts (RFC 3339, UTC, microseconds), pid, tid, level, event,
 * fd, local, peer, reason, then any event-specific fields.
 */
#ifndef RDMASHIM_TRACE_H
#define RDMASHIM_TRACE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "compiler.h"
#include "config.h"
#include "reason.h"
#include "tuple.h"

#define SHIM_TRACE_LINE_MAX 1024

struct shim_trace_record {
	enum shim_trace_level level;
	const char *event;
	int fd;                        /* -1: none */
	const struct shim_tuple *tuple; /* NULL: no addresses */
	enum shim_reason reason;
	struct timespec ts;
	pid_t pid, tid;
};

/* The active level; OFF until shim_trace_open() succeeds. */
extern enum shim_trace_level shim_trace_level;

static inline int shim_trace_enabled(enum shim_trace_level level)
{
	return level <= shim_trace_level;
}

/*
 * Formats one line, newline included, into buf. extra_fmt (may be NULL)
 * expands to further ,"key":value pairs without a leading comma. Returns the
 * line length; a line that does not fit is cut and closed so it still parses.
 */
size_t shim_trace_format(char *buf, size_t len, const struct shim_trace_record *rec,
			 const char *extra_fmt, va_list ap);

/*
 * Copies src into dst as the inside of a JSON string (quotes not included),
 * escaping what JSON requires. Always terminates dst.
 */
void shim_json_escape(char *dst, size_t len, const char *src);

/* Expands %p in pattern to pid. Returns -ENAMETOOLONG if it does not fit. */
int shim_trace_expand_path(char *out, size_t len, const char *pattern, pid_t pid);

/*
 * Opens the destination for level (an empty pattern: stderr); returns 0 or
 * -errno, and then tracing stays off and err (may be NULL) holds the
 * clause for the line on stderr: the variable, the path and why.
 */
int shim_trace_open(const char *pattern, enum shim_trace_level level, char *err, size_t errlen);
/* In a fork child: reopens a per-pid file (a refusal: one line on stderr,
 * tracing off in this process) and forgets the parent's tid. */
void shim_trace_after_fork(void);
/* Writes a last line (trace.end, with why) and stops tracing in this
 * process: for a process that is about to restrict the system calls it may
 * make, where even a trace line's fstat could be refused by killing it. */
void shim_trace_end(const char *why);

/*
 * A trace file must be a regular file of the caller's euid that neither
 * its group nor others may write, with no other hard link, reached without
 * a symbolic link (trace.c says why). shim_trace_open_file() opens or
 * creates (0600) path so, without ever blocking: the fd, or -errno with
 * *why a phrase that follows the path in a message ("is a symbolic link").
 */
int shim_trace_open_file(const char *path, const char **why);
/* The same check of a file already open at fd: NULL when it may take a
 * trace, else why not. */
const char *shim_trace_file_refusal(int fd);
/* The phrase for an open() of a trace file that failed with rc (-errno). */
const char *shim_trace_open_failure(int rc);

void shim_trace_emit(enum shim_trace_level level, const char *event, int fd,
		     const struct shim_tuple *tuple, enum shim_reason reason, const char *extra_fmt, ...)
	__attribute__((format(printf, 6, 7)));

/*
 * A budget for lines another user can make us write (a refused rendezvous
 * attempt, say): at most `burst` lines, refilled at `per_sec` a second.
 * shim_trace_budget_take() returns true when this line may go out; the
 * lines it held back are counted in *held and reported by the next line
 * that goes out (its caller adds the count). Lock-free; a race between
 * threads costs a line more or less, never a spin.
 */
struct shim_trace_budget {
	unsigned burst, per_sec;
	unsigned long long last_ns; /* when tokens were last refilled */
	unsigned tokens;
	unsigned held; /* lines held back since the last one that went out */
};
bool shim_trace_budget_take(struct shim_trace_budget *b, unsigned long long now_ns, unsigned *held);

#define SHIM_TRACE(level, event, fd, tuple, reason, ...)                                   \
	do {                                                                                \
		if (unlikely(shim_trace_enabled(level)))                                    \
			shim_trace_emit(level, event, fd, tuple, reason, __VA_ARGS__);       \
	} while (0)

/* Appends printf-style text to buf at *off (buf holds len bytes). False
 * when it does not fit whole: the text then ends again where it ended
 * before, since a member cut short would leave a JSON line invalid. */
bool shim_trace_put(char *buf, size_t len, size_t *off, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
