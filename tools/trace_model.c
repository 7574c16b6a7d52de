/* rdmashim trace: reading and grouping trace lines; see trace_model.h. */
#include "trace_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uthash.h>

#include "jsonl.h"

struct tr_index {
	char *key;
	size_t conn;
	UT_hash_handle hh;
};

/* Out of memory in a command-line reader: nothing sensible is left to do. */
static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		fputs("rdmashim trace: out of memory\n", stderr);
		exit(2);
	}
	return p;
}

static char *xstrndup(const char *s, size_t n)
{
	char *d = xrealloc(NULL, n + 1);

	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

static void list_add(struct tr_list *l, unsigned idx)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 8;
		l->idx = xrealloc(l->idx, l->cap * sizeof(*l->idx));
	}
	l->idx[l->n++] = idx;
}

/* A string member's text without its quotes, escapes kept; "" otherwise. */
static char *raw_str(const struct jl_obj *o, const char *key)
{
	const struct jl_field *f = jl_get(o, key);

	if (!f || f->type != JL_STRING)
		return xstrndup("", 0);
	return xstrndup(f->val + 1, f->vlen - 2);
}

/* "2026-12-07T11:46:11.243326Z" as the shim writes it; -1 otherwise. */
static double parse_ts(const char *s)
{
	struct tm tm = { 0 };
	char frac[16] = "";
	int n = 0;
	double t;

	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
		   &tm.tm_sec, &n) != 6)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	t = (double)timegm(&tm);
	if (s[n] == '.' && sscanf(s + n, "%15[.0-9]", frac) == 1)
		t += strtod(frac, NULL);
	return t;
}

static struct tr_index *index_find(struct tr_index *h, const char *key)
{
	struct tr_index *e = NULL;

	HASH_FIND_STR(h, key, e);
	return e;
}

static void index_set(struct tr_index **h, const char *key, size_t conn)
{
	struct tr_index *e = index_find(*h, key);

	if (!e) {
		e = xrealloc(NULL, sizeof(*e));
		e->key = xstrndup(key, strlen(key));
		HASH_ADD_KEYPTR(hh, *h, e->key, strlen(e->key), e);
	}
	e->conn = conn;
}

static void index_del(struct tr_index **h, const char *key)
{
	struct tr_index *e = index_find(*h, key);

	if (e) {
		HASH_DEL(*h, e);
		free(e->key);
		free(e);
	}
}

static size_t new_conn(struct tr_model *m, const char *key, const struct tr_rec *r)
{
	struct tr_index *old = index_find(m->by_key, key);
	unsigned gen = 1;
	struct tr_conn *c;
	char *id;

	/* The Nth connection on one 4-tuple in one process: its id says so. */
	if (old) {
		const char *hash = strrchr(m->conns[old->conn].id, '#');

		gen = hash ? (unsigned)strtoul(hash + 1, NULL, 10) + 1 : 2;
	}
	if (gen > 1) {
		id = xrealloc(NULL, strlen(key) + 16);
		sprintf(id, "%s#%u", key, gen);
	} else {
		id = xstrndup(key, strlen(key));
	}
	if (m->n_conns == m->cap_conns) {
		m->cap_conns = m->cap_conns ? 2 * m->cap_conns : 64;
		m->conns = xrealloc(m->conns, m->cap_conns * sizeof(*m->conns));
	}
	c = &m->conns[m->n_conns];
	memset(c, 0, sizeof(*c));
	c->id = id;
	c->pid = r->pid;
	c->fd = r->fd;
	c->local = r->local;
	c->peer = r->peer;
	c->role = r->role;
	c->why = "";
	c->transport = "";
	index_set(&m->by_key, key, m->n_conns);
	return m->n_conns++;
}

static struct tr_proc *proc_of(struct tr_model *m, long long pid)
{
	for (size_t i = 0; i < m->n_procs; i++)
		if (m->procs[i].pid == pid)
			return &m->procs[i];
	if (m->n_procs == m->cap_procs) {
		m->cap_procs = m->cap_procs ? 2 * m->cap_procs : 8;
		m->procs = xrealloc(m->procs, m->cap_procs * sizeof(*m->procs));
	}
	memset(&m->procs[m->n_procs], 0, sizeof(m->procs[0]));
	m->procs[m->n_procs].pid = pid;
	return &m->procs[m->n_procs++];
}

/* Puts record i in its connection or its process (see trace_model.h). */
static void place(struct tr_model *m, unsigned i)
{
	struct tr_rec *r = &m->recs[i];
	char key[640], fdkey[48];
	struct tr_index *e;
	long conn = -1;

	snprintf(fdkey, sizeof(fdkey), "%lld/fd %d", r->pid, r->fd);
	if (*r->local && *r->peer) {
		snprintf(key, sizeof(key), "%lld/%s/%s", r->pid, r->local, r->peer);
		e = index_find(m->by_key, key);
		/* conn.track opens a connection; a line of one the trace missed
		 * the start of opens one too. */
		conn = (long)(!e || strcmp(r->event, "conn.track") == 0 ? new_conn(m, key, r) : e->conn);
		if (r->fd >= 0)
			index_set(&m->by_fd, fdkey, (size_t)conn);
	} else if (r->fd >= 0 && !*r->local && (e = index_find(m->by_fd, fdkey))) {
		conn = (long)e->conn;
	}
	r->conn = (int)conn;
	if (conn >= 0)
		list_add(&m->conns[conn].recs, i);
	else
		list_add(&proc_of(m, r->pid)->recs, i);
	/* The last descriptor of the connection closed: its fd number may now
	 * name another socket. */
	if (strcmp(r->event, "fd.close") == 0 && r->fd >= 0 && strstr(r->line, "\"fds_left\":0"))
		index_del(&m->by_fd, fdkey);
}

static void add_line(struct tr_model *m, const char *line, size_t len, const struct jl_obj *o, unsigned file,
		     unsigned long lineno)
{
	struct tr_rec *r;

	if (m->n_recs == m->cap_recs) {
		m->cap_recs = m->cap_recs ? 2 * m->cap_recs : 1024;
		m->recs = xrealloc(m->recs, m->cap_recs * sizeof(*m->recs));
	}
	r = &m->recs[m->n_recs];
	r->line = xstrndup(line, len);
	r->len = len;
	r->pid = jl_int(o, "pid", -1);
	r->fd = (int)jl_int(o, "fd", -1);
	if (r->fd < -1)
		r->fd = -1;
	r->event = raw_str(o, "event");
	r->reason = raw_str(o, "reason");
	r->level = raw_str(o, "level");
	r->local = raw_str(o, "local");
	r->peer = raw_str(o, "peer");
	r->role = raw_str(o, "role");
	r->ts = raw_str(o, "ts");
	r->t = parse_ts(r->ts);
	r->file = file;
	r->lineno = lineno;
	place(m, (unsigned)m->n_recs++);
}

static void bad(struct tr_model *m, struct tr_file *f, unsigned long lineno, const char *what, long col)
{
	if (col >= 0)
		fprintf(stderr, "rdmashim trace: %s:%lu: %s (byte %ld)\n", f->path, lineno, what, col + 1);
	else
		fprintf(stderr, "rdmashim trace: %s:%lu: %s\n", f->path, lineno, what);
	f->bad++;
	m->bad_lines++;
}

int tr_read_file(struct tr_model *m, const char *path)
{
	static struct jl_obj obj; /* large: off the stack */
	struct jl_reader *rd = jl_open(path);
	struct tr_file *f;
	const char *line, *what;
	unsigned long lineno = 0;
	size_t len, at;
	int rc;

	if (!rd) {
		int err = errno;

		fprintf(stderr, "rdmashim trace: %s: %s\n", path, strerror(err));
		return -err;
	}
	m->files = xrealloc(m->files, (m->n_files + 1) * sizeof(*m->files));
	f = &m->files[m->n_files];
	memset(f, 0, sizeof(*f));
	f->path = path;
	f->gzip = jl_is_gzip(rd);
	while ((rc = jl_next(rd, &line, &len, &lineno, &what)) > 0) {
		const char *why;

		f->lines = lineno;
		if (what) {
			bad(m, f, lineno, what, -1);
			continue;
		}
		why = jl_parse(line, len, &obj, &at);
		if (why) {
			bad(m, f, lineno, why, (long)at);
			continue;
		}
		add_line(m, line, len, &obj, (unsigned)m->n_files, lineno);
	}
	if (rc < 0) /* a read error before any line of a new chunk: it ends the file */
		bad(m, f, lineno + 1, what ? what : "read error", -1);
	jl_close(rd);
	m->n_files++;
	return 0;
}

/* A line that sends an upgraded connection back to TCP. */
static bool back_to_tcp(const struct tr_rec *r)
{
	return *r->reason && (strncmp(r->event, "failover.", 9) == 0 || strcmp(r->event, "conn.pin") == 0 ||
			      strcmp(r->event, "conn.handback") == 0);
}

/* The string value of key in r's line, escapes kept, into out. */
static void rec_field(const struct tr_rec *r, const char *key, char *out, size_t len)
{
	static struct jl_obj obj;
	const struct jl_field *f;
	size_t at;

	out[0] = '\0';
	if (jl_parse(r->line, r->len, &obj, &at) || !(f = jl_get(&obj, key)) || f->type != JL_STRING)
		return;
	snprintf(out, len, "%.*s", (int)f->vlen - 2, f->val + 1);
}

static void judge_one(struct tr_model *m, struct tr_conn *c)
{
	for (size_t k = 0; k < c->recs.n; k++) {
		struct tr_rec *r = &m->recs[c->recs.idx[k]];
		const char *e = r->event;

		if (strcmp(e, "conn.track") == 0) {
			bool eligible = !strstr(r->line, "\"eligible\":false");

			/* An eligible connection's track reason (whitelisted) is no
			 * reason it stayed on TCP. */
			c->outcome = eligible ? TR_NO_ATTEMPT : TR_NOT_ELIGIBLE;
			c->why = eligible ? "" : r->reason;
		} else if (c->outcome == TR_UPGRADED) {
			if (back_to_tcp(r)) {
				c->outcome = TR_FELL_BACK;
				c->why = r->reason;
			}
		} else if (c->outcome == TR_FELL_BACK) {
			/* The first reason it went back to TCP is the one to tell. */
		} else if (strcmp(e, "upgrade.start") == 0) {
			c->outcome = TR_UNFINISHED;
			c->why = "";
		} else if (strcmp(e, "upgrade.deferred") == 0) {
			c->outcome = TR_DEFERRED;
			c->why = r->reason;
		} else if (strcmp(e, "upgrade.fail") == 0) {
			c->outcome = TR_FAILED;
			c->why = r->reason;
		} else if (strcmp(e, "upgrade.shadow") == 0) {
			/* Shadow mode: stayed on TCP, reason shadow when it
			 * reached the switch, else the failure's own. */
			c->outcome = TR_FAILED;
			c->why = r->reason;
		} else if (strcmp(e, "upgrade.closed") == 0) {
			c->outcome = TR_CLOSED;
			c->why = r->reason;
		} else if (strcmp(e, "conn.pin") == 0) {
			c->outcome = TR_PINNED;
			c->why = r->reason;
		} else if (strcmp(e, "upgrade.done") == 0) {
			static char transports[64][16];
			static unsigned n_transports;
			char t[16];

			c->outcome = TR_UPGRADED;
			c->why = "";
			/* Interned: few transports, many connections. */
			rec_field(r, "transport", t, sizeof(t));
			c->transport = "";
			for (unsigned j = 0; j < n_transports; j++)
				if (strcmp(transports[j], t) == 0)
					c->transport = transports[j];
			if (!*c->transport && n_transports < 64) {
				memcpy(transports[n_transports], t, sizeof(t));
				c->transport = transports[n_transports++];
			}
		}
	}
}

void tr_judge(struct tr_model *m)
{
	for (size_t i = 0; i < m->n_conns; i++)
		judge_one(m, &m->conns[i]);
}

static const char *const outcome_names[TR_OUTCOMES] = {
	[TR_UNTRACKED] = "untracked",      [TR_NO_ATTEMPT] = "no_attempt", [TR_NOT_ELIGIBLE] = "not_eligible",
	[TR_UNFINISHED] = "unfinished",    [TR_DEFERRED] = "deferred",     [TR_FAILED] = "failed",
	[TR_CLOSED] = "closed_in_upgrade", [TR_PINNED] = "pinned",         [TR_UPGRADED] = "upgraded",
	[TR_FELL_BACK] = "fell_back",
};

const char *tr_outcome_name(enum tr_outcome o)
{
	return o < TR_OUTCOMES ? outcome_names[o] : "?";
}

void tr_outcome_text(const struct tr_conn *c, char *out, size_t len)
{
	const char *w = c->why;

	switch (c->outcome) {
	case TR_UNTRACKED: snprintf(out, len, "no conn.track in the trace"); break;
	case TR_NO_ATTEMPT: snprintf(out, len, "tracked, no upgrade attempt"); break;
	case TR_NOT_ELIGIBLE: snprintf(out, len, "not eligible: %s", w); break;
	case TR_UNFINISHED: snprintf(out, len, "upgrade started, its end not traced"); break;
	case TR_DEFERRED: snprintf(out, len, "upgrade deferred (%s), not tried again", w); break;
	case TR_FAILED: snprintf(out, len, "stayed on TCP: %s", w); break;
	case TR_CLOSED: snprintf(out, len, "closed during its upgrade (%s)", w); break;
	case TR_PINNED: snprintf(out, len, "kept on TCP: %s", w); break;
	case TR_UPGRADED: snprintf(out, len, "upgraded to %s", *c->transport ? c->transport : "?"); break;
	case TR_FELL_BACK:
		snprintf(out, len, "upgraded to %s, then back to TCP: %s", *c->transport ? c->transport : "?", w);
		break;
	default: snprintf(out, len, "?"); break;
	}
}

const char *tr_not_upgraded_key(const struct tr_conn *c)
{
	return *c->why ? c->why : tr_outcome_name(c->outcome);
}

void tr_free(struct tr_model *m)
{
	struct tr_index *e, *tmp;

	for (size_t i = 0; i < m->n_recs; i++) {
		struct tr_rec *r = &m->recs[i];

		free(r->line), free(r->event), free(r->reason), free(r->level);
		free(r->local), free(r->peer), free(r->role), free(r->ts);
	}
	for (size_t i = 0; i < m->n_conns; i++)
		free(m->conns[i].id), free(m->conns[i].recs.idx);
	for (size_t i = 0; i < m->n_procs; i++)
		free(m->procs[i].recs.idx);
	HASH_ITER(hh, m->by_key, e, tmp) {
		HASH_DEL(m->by_key, e);
		free(e->key), free(e);
	}
	HASH_ITER(hh, m->by_fd, e, tmp) {
		HASH_DEL(m->by_fd, e);
		free(e->key), free(e);
	}
	free(m->recs), free(m->conns), free(m->procs), free(m->files);
	memset(m, 0, sizeof(*m));
}
