/* JSON-lines reading (and a string writer) for the rdmashim command; see jsonl.h. */
#include "jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

/* Deeper nesting than any trace line has; the bound keeps the recursion's
 * stack small whatever a damaged line holds. */
#define JL_DEPTH_MAX 32

/* ---- text checks ---- */

const char *jl_check_text(const char *s, size_t len, size_t *at)
{
	const unsigned char *p = (const unsigned char *)s;

	for (size_t i = 0; i < len;) {
		unsigned c = p[i], need, cp;

		*at = i;
		if (c == 0)
			return "NUL byte";
		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			need = 1, cp = c & 0x1f;
		else if (c >= 0xe0 && c <= 0xef)
			need = 2, cp = c & 0x0f;
		else if (c >= 0xf0 && c <= 0xf4)
			need = 3, cp = c & 0x07;
		else
			return "invalid UTF-8";
		if (len - i <= need)
			return "invalid UTF-8";
		for (unsigned k = 1; k <= need; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return "invalid UTF-8";
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		/* Overlong forms, UTF-16 surrogates and values past U+10FFFF are
		 * not UTF-8 either. */
		if ((need == 2 && cp < 0x800) || (need == 3 && cp < 0x10000) || (cp >= 0xd800 && cp <= 0xdfff) ||
		    cp > 0x10ffff)
			return "invalid UTF-8";
		i += need + 1;
	}
	return NULL;
}

/* ---- the parser ---- */

struct jp {
	const char *s;
	size_t len, i;
	const char *err;
};

static void ws(struct jp *p)
{
	while (p->i < p->len && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\r' || p->s[p->i] == '\n'))
		p->i++;
}

static bool fail(struct jp *p, const char *why)
{
	if (!p->err)
		p->err = why;
	return false;
}

static bool is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static bool string(struct jp *p)
{
	p->i++; /* the opening quote */
	while (p->i < p->len) {
		unsigned char c = (unsigned char)p->s[p->i];

		if (c == '"') {
			p->i++;
			return true;
		}
		if (c < 0x20)
			return fail(p, "control character in a string");
		if (c != '\\') {
			p->i++;
			continue;
		}
		if (p->i + 1 >= p->len)
			break;
		c = (unsigned char)p->s[p->i + 1];
		if (c == 'u') {
			if (p->len - p->i < 6)
				break;
			for (int k = 2; k < 6; k++)
				if (!is_hex(p->s[p->i + k]))
					return fail(p, "bad \\u escape");
			p->i += 6;
		} else if (c && strchr("\"\\/bfnrt", c)) {
			p->i += 2;
		} else {
			return fail(p, "bad escape in a string");
		}
	}
	return fail(p, "string not closed (line cut?)");
}

static bool digits(struct jp *p)
{
	size_t from = p->i;

	while (p->i < p->len && p->s[p->i] >= '0' && p->s[p->i] <= '9')
		p->i++;
	return p->i > from;
}

static bool number(struct jp *p)
{
	if (p->s[p->i] == '-')
		p->i++;
	if (p->i < p->len && p->s[p->i] == '0')
		p->i++;
	else if (!digits(p))
		return fail(p, "bad number");
	if (p->i < p->len && p->s[p->i] == '.') {
		p->i++;
		if (!digits(p))
			return fail(p, "bad number");
	}
	if (p->i < p->len && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
		p->i++;
		if (p->i < p->len && (p->s[p->i] == '+' || p->s[p->i] == '-'))
			p->i++;
		if (!digits(p))
			return fail(p, "bad number");
	}
	return true;
}

static bool literal(struct jp *p, const char *word)
{
	size_t n = strlen(word);

	if (p->len - p->i < n || memcmp(p->s + p->i, word, n) != 0)
		return fail(p, p->len - p->i < n ? "value cut (line cut?)" : "unexpected character");
	p->i += n;
	return true;
}

static bool value(struct jp *p, int depth, enum jl_type *type);

/* An object or an array; fills o with the members when o is given. */
static bool container(struct jp *p, int depth, struct jl_obj *o)
{
	char close = p->s[p->i] == '{' ? '}' : ']';

	if (depth >= JL_DEPTH_MAX)
		return fail(p, "nested too deep");
	p->i++;
	ws(p);
	if (p->i < p->len && p->s[p->i] == close) {
		p->i++;
		return true;
	}
	for (;;) {
		struct jl_field f = { 0 };

		ws(p);
		if (p->i >= p->len)
			return fail(p, "object or array not closed (line cut?)");
		if (close == '}') {
			if (p->s[p->i] != '"')
				return fail(p, "expected a member name");
			f.key = p->s + p->i + 1;
			if (!string(p))
				return false;
			f.klen = (size_t)(p->s + p->i - 1 - f.key);
			ws(p);
			if (p->i >= p->len || p->s[p->i] != ':')
				return fail(p, p->i >= p->len ? "object not closed (line cut?)" : "expected ':'");
			p->i++;
			ws(p);
		}
		f.val = p->s + p->i;
		if (!value(p, depth + 1, &f.type))
			return false;
		f.vlen = (size_t)(p->s + p->i - f.val);
		if (o && o->n < JL_FIELDS_MAX)
			o->f[o->n++] = f;
		ws(p);
		if (p->i >= p->len)
			return fail(p, "object or array not closed (line cut?)");
		if (p->s[p->i] == close) {
			p->i++;
			return true;
		}
		if (p->s[p->i] != ',')
			return fail(p, "expected ',' or the end of the object or array");
		p->i++;
	}
}

static bool value(struct jp *p, int depth, enum jl_type *type)
{
	char c;

	ws(p);
	if (p->i >= p->len)
		return fail(p, "value missing (line cut?)");
	c = p->s[p->i];
	switch (c) {
	case '"':
		*type = JL_STRING;
		return string(p);
	case '{':
		*type = JL_OBJECT;
		return container(p, depth, NULL);
	case '[':
		*type = JL_ARRAY;
		return container(p, depth, NULL);
	case 't':
		*type = JL_TRUE;
		return literal(p, "true");
	case 'f':
		*type = JL_FALSE;
		return literal(p, "false");
	case 'n':
		*type = JL_NULL;
		return literal(p, "null");
	default:
		*type = JL_NUMBER;
		if (c == '-' || (c >= '0' && c <= '9'))
			return number(p);
		return fail(p, "unexpected character");
	}
}

const char *jl_parse(const char *line, size_t len, struct jl_obj *o, size_t *at)
{
	struct jp p = { .s = line, .len = len };
	const char *bad;

	o->n = 0;
	bad = jl_check_text(line, len, at);
	if (bad)
		return bad;
	ws(&p);
	if (p.i >= p.len || p.s[p.i] != '{') {
		*at = p.i;
		return p.i >= p.len ? "empty line" : "not a JSON object";
	}
	if (container(&p, 0, o)) {
		ws(&p);
		if (p.i == p.len)
			return NULL;
		p.err = "text after the object";
	}
	*at = p.i;
	return p.err;
}

const struct jl_field *jl_get(const struct jl_obj *o, const char *key)
{
	size_t n = strlen(key);

	for (unsigned i = 0; i < o->n; i++)
		if (o->f[i].klen == n && memcmp(o->f[i].key, key, n) == 0)
			return &o->f[i];
	return NULL;
}

static unsigned hex4(const char *s)
{
	unsigned v = 0;

	for (int k = 0; k < 4; k++) {
		char c = s[k];

		v = v << 4 | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
	}
	return v;
}

/* Appends the UTF-8 form of cp; a lone surrogate becomes U+FFFD. */
static size_t put_utf8(char *out, size_t o, size_t outlen, unsigned cp)
{
	char b[4];
	size_t n;

	if (cp >= 0xd800 && cp <= 0xdfff)
		cp = 0xfffd;
	if (cp < 0x80)
		b[0] = (char)cp, n = 1;
	else if (cp < 0x800)
		b[0] = (char)(0xc0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
	else if (cp < 0x10000)
		b[0] = (char)(0xe0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
		b[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
	else
		b[0] = (char)(0xf0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), b[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
	if (o + n >= outlen)
		return o;
	memcpy(out + o, b, n);
	return o + n;
}

void jl_unescape(const struct jl_field *f, char *out, size_t outlen)
{
	const char *s = f->val + 1, *end = f->val + f->vlen - 1; /* inside the quotes */
	size_t o = 0;

	if (!outlen)
		return;
	while (s < end && o + 1 < outlen) {
		if (*s != '\\') {
			out[o++] = *s++;
			continue;
		}
		/* jl_parse has checked every escape is whole and well formed. */
		switch (s[1]) {
		case 'u': {
			unsigned cp = hex4(s + 2);

			s += 6;
			if (cp >= 0xd800 && cp < 0xdc00 && end - s >= 6 && s[0] == '\\' && s[1] == 'u') {
				unsigned lo = hex4(s + 2);

				if (lo >= 0xdc00 && lo <= 0xdfff) {
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
					s += 6;
				}
			}
			o = put_utf8(out, o, outlen, cp);
			continue;
		}
		case 'b': out[o++] = '\b'; break;
		case 'f': out[o++] = '\f'; break;
		case 'n': out[o++] = '\n'; break;
		case 'r': out[o++] = '\r'; break;
		case 't': out[o++] = '\t'; break;
		default: out[o++] = s[1]; break;
		}
		s += 2;
	}
	out[o] = '\0';
}

bool jl_str(const struct jl_obj *o, const char *key, char *out, size_t outlen)
{
	const struct jl_field *f = jl_get(o, key);

	if (outlen)
		out[0] = '\0';
	if (!f || f->type != JL_STRING)
		return false;
	jl_unescape(f, out, outlen);
	return true;
}

long long jl_int(const struct jl_obj *o, const char *key, long long def)
{
	const struct jl_field *f = jl_get(o, key);
	char buf[32];
	char *end;
	long long v;

	if (!f || f->type != JL_NUMBER || f->vlen >= sizeof(buf))
		return def;
	memcpy(buf, f->val, f->vlen);
	buf[f->vlen] = '\0';
	errno = 0;
	v = strtoll(buf, &end, 10);
	return errno || *end ? def : v;
}

/* ---- the line reader ---- */

#define JL_CHUNK 65536

struct jl_reader {
	int fd;
	gzFile gz; /* NULL: plain */
	char in[JL_CHUNK];
	size_t in_pos, in_len;
	bool eof;
	char line[JL_LINE_MAX];
	unsigned long lineno;
};

struct jl_reader *jl_open(const char *path)
{
	struct jl_reader *r;
	unsigned char magic[2];
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r) {
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	/* A directory opens, and fails only at its first read: say so here,
	 * as a file that can not be read, not as a bad line. */
	if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
		free(r);
		close(fd);
		errno = EISDIR;
		return NULL;
	}
	r->fd = fd;
	/* pread: the plain path then reads from the start with nothing to undo. */
	n = pread(fd, magic, sizeof(magic), 0);
	if (n == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
		int gfd = dup(fd);

		r->gz = gfd >= 0 ? gzdopen(gfd, "rb") : NULL;
		if (!r->gz) {
			if (gfd >= 0)
				close(gfd);
			close(fd);
			free(r);
			errno = ENOMEM;
			return NULL;
		}
	}
	return r;
}

bool jl_is_gzip(const struct jl_reader *r)
{
	return r->gz != NULL;
}

void jl_close(struct jl_reader *r)
{
	if (!r)
		return;
	if (r->gz)
		gzclose(r->gz);
	close(r->fd);
	free(r);
}

/* Refills r->in; 0 at the end, -1 with *what on an error. */
static int fill(struct jl_reader *r, const char **what)
{
	ssize_t n;

	if (r->eof)
		return 0;
	if (r->gz) {
		int err = Z_OK;

		n = gzread(r->gz, r->in, sizeof(r->in));
		if (n < 0) {
			const char *msg = gzerror(r->gz, &err);

			(void)msg;
			r->eof = true;
			*what = err == Z_BUF_ERROR ? "gzip data ends early (file cut)" : "gzip data damaged";
			return -1;
		}
		if (n == 0) {
			/* gzread gives 0 at the end of a stream cut short too, and says
			 * so only through gzerror. */
			gzerror(r->gz, &err);
			r->eof = true;
			if (err == Z_BUF_ERROR) {
				*what = "gzip data ends early (file cut)";
				return -1;
			}
			if (err != Z_OK) {
				*what = "gzip data damaged";
				return -1;
			}
			return 0;
		}
	} else {
		do
			n = read(r->fd, r->in, sizeof(r->in));
		while (n < 0 && errno == EINTR);
		if (n < 0) {
			r->eof = true;
			*what = strerror(errno);
			return -1;
		}
		if (n == 0) {
			r->eof = true;
			return 0;
		}
	}
	r->in_pos = 0;
	r->in_len = (size_t)n;
	return 1;
}

int jl_next(struct jl_reader *r, const char **line, size_t *len, unsigned long *lineno, const char **what)
{
	size_t n = 0;
	bool any = false, too_long = false;

	*what = NULL;
	for (;;) {
		if (r->in_pos == r->in_len) {
			const char *err = NULL;
			int rc = fill(r, &err);

			if (rc <= 0) {
				if (rc < 0 && !any)
					return *what = err, -1;
				if (!any)
					return 0;
				/* The last line has no newline: whole unless the stream broke. */
				*what = rc < 0 ? err : too_long ? "line too long" : NULL;
				break;
			}
		}
		const char *p = r->in + r->in_pos;
		size_t avail = r->in_len - r->in_pos;
		const char *nl = memchr(p, '\n', avail);
		size_t take = nl ? (size_t)(nl - p) : avail;

		any = true;
		if (n + take > JL_LINE_MAX) {
			too_long = true;
			memcpy(r->line + n, p, JL_LINE_MAX - n);
			n = JL_LINE_MAX;
		} else if (!too_long) {
			memcpy(r->line + n, p, take);
			n += take;
		}
		r->in_pos += take + (nl ? 1 : 0);
		if (nl) {
			*what = too_long ? "line too long" : NULL;
			break;
		}
	}
	*line = r->line;
	*len = n;
	*lineno = ++r->lineno;
	return 1;
}

/* ---- writing ---- */

void jl_put_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}
