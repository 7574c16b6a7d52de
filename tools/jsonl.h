/*
 * Reading JSON-lines files for the rdmashim command (trace files): a line
 * reader that takes plain or gzip-compressed files alike, and a strict
 * parser for one line holding one JSON object. And the one writer the
 * commands' --json outputs share: a string.
 *
 * A trace file may be cut (a disk full, a copy taken while the program ran)
 * or damaged, so nothing here trusts its input: lines longer than
 * JL_LINE_MAX are reported, not grown into; NUL bytes and invalid UTF-8 are
 * errors; nesting is bounded.
 */
#ifndef RDMASHIM_TOOLS_JSONL_H
#define RDMASHIM_TOOLS_JSONL_H

#include <stdbool.h>
#include <stddef.h>

/* Far above the shim's own line cap (SHIM_TRACE_LINE_MAX), so that only a
 * damaged line meets it. */
#define JL_LINE_MAX 65536
/* A trace line has a dozen top-level members; a line with more is kept,
 * its members past this many unreadable by name. */
#define JL_FIELDS_MAX 64

enum jl_type { JL_STRING, JL_NUMBER, JL_TRUE, JL_FALSE, JL_NULL, JL_OBJECT, JL_ARRAY };

struct jl_field {
	const char *key; /* raw text between the quotes (trace keys have no escapes) */
	size_t klen;
	enum jl_type type;
	const char *val; /* raw JSON text of the value, quotes included for strings */
	size_t vlen;
};

struct jl_obj {
	struct jl_field f[JL_FIELDS_MAX];
	unsigned n;
};

/*
 * Checks that line[0, len) is exactly one JSON object (whitespace around it
 * allowed) and fills o with its top-level members. Returns NULL when it is,
 * else a phrase saying what is wrong, and *at the byte offset where.
 */
const char *jl_parse(const char *line, size_t len, struct jl_obj *o, size_t *at);

/* The member named key, or NULL. */
const struct jl_field *jl_get(const struct jl_obj *o, const char *key);

/* The string value of key, unescaped into out (cut to outlen - 1 bytes;
 * \u escapes become UTF-8). Returns false (out empty) when key is absent
 * or not a string. */
bool jl_str(const struct jl_obj *o, const char *key, char *out, size_t outlen);

/* The integer value of key, or def when absent or not an integer. */
long long jl_int(const struct jl_obj *o, const char *key, long long def);

/* Unescapes the string value f into out as jl_str does. */
void jl_unescape(const struct jl_field *f, char *out, size_t outlen);

/* ---- line reader ---- */

struct jl_reader;

/*
 * Opens path for reading, as gzip when its first two bytes are gzip's
 * magic, else as plain text. Returns NULL with errno set when it can not
 * be opened.
 */
struct jl_reader *jl_open(const char *path);

/*
 * The next line, without its newline, in *line and *len (valid until the
 * next call), its number in *lineno. *what is NULL for a whole line, else
 * why the line is not whole: too long (its first JL_LINE_MAX bytes are
 * given, the rest skipped) or cut by the end of a damaged gzip stream.
 * Returns 1 with a line, 0 at the end, -1 on a read error (*what says).
 */
int jl_next(struct jl_reader *r, const char **line, size_t *len, unsigned long *lineno, const char **what);

bool jl_is_gzip(const struct jl_reader *r);
void jl_close(struct jl_reader *r);

/* Checks s[0, len) is valid UTF-8 without NUL bytes: NULL, or what is
 * wrong and *at where. */
const char *jl_check_text(const char *s, size_t len, size_t *at);

/* ---- writing ---- */

/* Prints s to stdout as a JSON string. Every byte outside printable ASCII
 * is written as a \u escape of its own, so the output is ASCII whatever s
 * holds (a file name, a process name, text read from sysfs): shown, not
 * trusted. */
void jl_put_str(const char *s);

#endif
