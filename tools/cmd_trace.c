/*
 * rdmashim trace FILE...: the shim's trace files as one timeline per
 * connection (trace_model.c groups the lines), or --summary counts, in
 * text or --json.
 *
 * Exit status: 0 every line read; 1 some line was bad (each named on
 * stderr, FILE:LINE, and the rest still read and shown); 2 bad usage or a
 * file that can not be opened.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"
#include "reason.h"
#include "trace_model.h"

int rdmashim_cmd_trace(int argc, char **argv);
void rdmashim_trace_usage(FILE *out);

void rdmashim_trace_usage(FILE *out)
{
	fputs("trace [--summary] [--json] [--all] [--conn ID] [--pid PID] [--event NAME]\n"
	      "      [--reason NAME] FILE...\n"
	      "  reads trace files (RDMASHIM_TRACE_FILE; plain or gzip) and prints one\n"
	      "  timeline per connection: tracked, upgrade start and end or why not, each\n"
	      "  switch, failovers, close, with ms since its first line and since the\n"
	      "  line before. Lines of level debug are left out unless they carry a\n"
	      "  reason or close the connection; --all shows every line.\n"
	      "  A connection's ID is PID/LOCAL/PEER as its header shows it (#N for the\n"
	      "  Nth on the same 4-tuple in one process).\n"
	      "  --conn ID       that connection; ID may be an endpoint ADDR:PORT, which\n"
	      "                  selects both ends' views of the connections it is in\n"
	      "  --pid PID       the connections of that process\n"
	      "  --event NAME    only lines whose event starts with NAME\n"
	      "  --reason NAME   connections with a line or an outcome of that reason\n"
	      "                  (names: rdmashim reasons; outcomes: no_attempt,\n"
	      "                  unfinished, untracked)\n"
	      "  Each option may be given more than once (any of its values matches).\n"
	      "  --summary       counts per event and per reason, and why the connections\n"
	      "                  that did not upgrade did not, grouped by reason\n"
	      "  --json          the same as one JSON object\n"
	      "  Exit: 0 all lines read; 1 some line was bad (FILE:LINE: why, on\n"
	      "  stderr; the rest is still read); 2 bad usage or a file unreadable.\n"
	      "\n"
	      "Example: a client under the shim with one connection to a redis-server under\n"
	      "the shim and one to a redis-server without it (rdmashim trace FILE):\n"
	      "             ms         +ms  event                reason         details\n"
	      "\n"
	      "  conn 13970/127.0.0.1:55982/127.0.0.1:6379  client fd 4, from 2026-12-07T18:13:09.960363Z: upgraded to shm\n"
	      "          0.000      +0.000  conn.track           whitelisted    state=tcp eligible=true how=connect\n"
	      "          1.267      +1.267  upgrade.start        -\n"
	      "          1.861      +0.594  tx.switch            upgraded       transport=shm offset=48\n"
	      "          1.870      +0.009  upgrade.done         upgraded       transport=shm ring_bytes=1048576 tx=2 rx=true pair=false bell_line=true tx_kept=no\n"
	      "          1.884      +0.014  rx.switch            upgraded       offset=56\n"
	      "\n"
	      "  conn 13970/127.0.0.1:43346/127.0.0.1:6380  client fd 7, from 2026-12-07T18:13:09.960556Z: stayed on TCP: peer_no_shim\n"
	      "          0.000      +0.000  conn.track           whitelisted    state=tcp eligible=true how=connect\n"
	      "          1.999      +1.999  upgrade.start        -\n"
	      "          2.051      +0.052  upgrade.fail         peer_no_shim\n"
	      "\n"
	      "rdmashim trace --summary over the same run's files (an excerpt):\n"
	      "  43 file(s), 1100 line(s) counted, 0 bad; 205 connection(s): 202 upgraded, 3 not\n"
	      "\n"
	      "  not upgraded, by reason:\n"
	      "          2  no_attempt            tracked, but no upgrade began (closed before its first data call, or too young)\n"
	      "          1  peer_no_shim          the peer answered no offer: it runs without the shim\n",
	      out);
}

#define MAX_VALUES 32

struct values {
	const char *v[MAX_VALUES];
	unsigned n;
};

struct opts {
	struct values conn, pid, event, reason;
	bool summary, json, all;
};

static bool any_value(const struct values *vs, bool (*match)(const char *want, const void *arg), const void *arg)
{
	if (!vs->n)
		return true;
	for (unsigned i = 0; i < vs->n; i++)
		if (match(vs->v[i], arg))
			return true;
	return false;
}

static bool event_match(const char *want, const void *arg)
{
	return strncmp(arg, want, strlen(want)) == 0;
}

static bool line_selected(const struct opts *o, const struct tr_rec *r)
{
	return any_value(&o->event, event_match, r->event);
}

/* Shown without --all: what a person reading a connection's story needs. */
static bool line_brief(const struct tr_rec *r)
{
	return strcmp(r->level, "debug") != 0 && strcmp(r->level, "trace") != 0 ? true
	       : *r->reason                                                       ? true
	       : strcmp(r->event, "fd.close") == 0 || strncmp(r->event, "close.", 6) == 0;
}

static bool line_shown(const struct opts *o, const struct tr_rec *r)
{
	if (!line_selected(o, r))
		return false;
	return o->all || o->event.n || line_brief(r);
}

struct conn_arg {
	const struct tr_model *m;
	const struct tr_conn *c;
};

static bool conn_match(const char *want, const void *arg)
{
	const struct tr_conn *c = ((const struct conn_arg *)arg)->c;
	size_t n = strlen(want);

	return strcmp(c->id, want) == 0 || (strncmp(c->id, want, n) == 0 && c->id[n] == '#') ||
	       strcmp(c->local, want) == 0 || strcmp(c->peer, want) == 0;
}

static bool pid_match(const char *want, const void *arg)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%lld", *(const long long *)arg);
	return strcmp(buf, want) == 0;
}

static bool list_has_reason(const struct tr_model *m, const struct tr_list *l, const char *want)
{
	for (size_t k = 0; k < l->n; k++)
		if (strcmp(m->recs[l->idx[k]].reason, want) == 0)
			return true;
	return false;
}

static bool reason_match(const char *want, const void *arg)
{
	const struct conn_arg *a = arg;

	return strcmp(a->c->why, want) == 0 || strcmp(tr_outcome_name(a->c->outcome), want) == 0 ||
	       list_has_reason(a->m, &a->c->recs, want);
}

static bool list_selected(const struct opts *o, const struct tr_model *m, const struct tr_list *l)
{
	for (size_t k = 0; k < l->n; k++)
		if (line_selected(o, &m->recs[l->idx[k]]))
			return true;
	return false;
}

static bool conn_selected(const struct opts *o, const struct tr_model *m, const struct tr_conn *c)
{
	struct conn_arg a = { m, c };

	return any_value(&o->conn, conn_match, &a) && any_value(&o->pid, pid_match, &c->pid) &&
	       any_value(&o->reason, reason_match, &a) && list_selected(o, m, &c->recs);
}

struct reason_arg {
	const struct tr_model *m;
	const struct tr_proc *p;
};

static bool proc_reason_match(const char *want, const void *arg)
{
	const struct reason_arg *a = arg;

	return list_has_reason(a->m, &a->p->recs, want);
}

/* A process's own lines: not with --conn, which names connections. */
static bool proc_selected(const struct opts *o, const struct tr_model *m, const struct tr_proc *p)
{
	struct reason_arg a = { m, p };

	return !o->conn.n && any_value(&o->pid, pid_match, &p->pid) && any_value(&o->reason, proc_reason_match, &a) &&
	       list_selected(o, m, &p->recs);
}

/* ---- output ---- */

static double ms_between(const struct tr_rec *a, const struct tr_rec *b)
{
	return a->t < 0 || b->t < 0 ? NAN : (b->t - a->t) * 1000.0;
}

static void json_ms(double ms)
{
	if (isnan(ms))
		fputs("null", stdout);
	else
		printf("%.3f", ms);
}

/* The members a timeline line does not show in its own columns. */
static bool shown_apart(const struct jl_field *f)
{
	static const char *const keys[] = { "ts", "pid", "tid", "level", "event", "fd", "local", "peer", "reason", "role" };

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (f->klen == strlen(keys[i]) && memcmp(f->key, keys[i], f->klen) == 0)
			return true;
	return false;
}

/* Prints the members not shown apart, each " key=value"; with print
 * false, only says whether there is one. */
static bool text_details(const struct tr_rec *r, bool print)
{
	static struct jl_obj obj;
	size_t at;

	if (jl_parse(r->line, r->len, &obj, &at))
		return false;
	for (unsigned i = 0; i < obj.n; i++) {
		const struct jl_field *f = &obj.f[i];
		bool quoted = f->type == JL_STRING;

		if (shown_apart(f))
			continue;
		if (!print)
			return true;
		/* Strings as they are inside their quotes: escapes stay escapes,
		 * so a control character in a damaged trace never reaches the
		 * terminal. */
		printf(" %.*s=%.*s", (int)f->klen, f->key, (int)(f->vlen - 2 * quoted), f->val + quoted);
	}
	return false;
}

static void text_lines(const struct opts *o, const struct tr_model *m, const struct tr_list *l)
{
	const struct tr_rec *first = l->n ? &m->recs[l->idx[0]] : NULL, *prev = NULL;

	for (size_t k = 0; k < l->n; k++) {
		const struct tr_rec *r = &m->recs[l->idx[k]];
		double t = ms_between(first, r), dt = prev ? ms_between(prev, r) : 0;

		if (!line_shown(o, r))
			continue;
		if (isnan(t))
			printf("  %11s %11s", "?", "?");
		else
			printf("  %11.3f %+11.3f", t, dt);
		if (text_details(r, false)) {
			printf("  %-20s %-14s", r->event, *r->reason ? r->reason : "-");
			text_details(r, true);
		} else {
			printf("  %-20s %s", r->event, *r->reason ? r->reason : "-");
		}
		putchar('\n');
		prev = r;
	}
}

static void print_text(const struct opts *o, const struct tr_model *m)
{
	bool any = false;

	for (size_t i = 0; i < m->n_procs; i++) {
		const struct tr_proc *p = &m->procs[i];
		const struct tr_rec *first = &m->recs[p->recs.idx[0]];

		if (!proc_selected(o, m, p))
			continue;
		if (!any)
			printf("%13s %11s  %-20s %-14s %s\n", "ms", "+ms", "event", "reason", "details");
		any = true;
		printf("\nprocess %lld  (from %s)\n", p->pid, first->ts);
		text_lines(o, m, &p->recs);
	}
	for (size_t i = 0; i < m->n_conns; i++) {
		const struct tr_conn *c = &m->conns[i];
		char outcome[160];

		if (!conn_selected(o, m, c))
			continue;
		if (!any)
			printf("%13s %11s  %-20s %-14s %s\n", "ms", "+ms", "event", "reason", "details");
		any = true;
		tr_outcome_text(c, outcome, sizeof(outcome));
		printf("\nconn %s  %s fd %d, from %s: %s\n", c->id, *c->role ? c->role : "?", c->fd,
		       m->recs[c->recs.idx[0]].ts, outcome);
		text_lines(o, m, &c->recs);
	}
}

static void json_lines(const struct opts *o, const struct tr_model *m, const struct tr_list *l)
{
	const struct tr_rec *first = l->n ? &m->recs[l->idx[0]] : NULL, *prev = NULL;
	bool comma = false;

	fputs(",\"events\":[", stdout);
	for (size_t k = 0; k < l->n; k++) {
		const struct tr_rec *r = &m->recs[l->idx[k]];

		if (!line_shown(o, r))
			continue;
		printf("%s{\"file\":", comma ? "," : "");
		jl_put_str(m->files[r->file].path);
		printf(",\"line\":%lu,\"t_ms\":", r->lineno);
		json_ms(ms_between(first, r));
		fputs(",\"dt_ms\":", stdout);
		json_ms(prev ? ms_between(prev, r) : 0);
		/* The line itself: jl_parse has checked it is one JSON object. */
		printf(",\"record\":%.*s}", (int)r->len, r->line);
		comma = true;
		prev = r;
	}
	putchar(']');
}

static void print_json(const struct opts *o, const struct tr_model *m)
{
	bool comma = false;

	fputs("{\"files\":[", stdout);
	for (size_t i = 0; i < m->n_files; i++) {
		printf("%s{\"path\":", i ? "," : "");
		jl_put_str(m->files[i].path);
		printf(",\"gzip\":%s,\"lines\":%lu,\"bad_lines\":%lu}", m->files[i].gzip ? "true" : "false",
		       m->files[i].lines, m->files[i].bad);
	}
	fputs("],\"processes\":[", stdout);
	for (size_t i = 0; i < m->n_procs; i++) {
		const struct tr_proc *p = &m->procs[i];

		if (!proc_selected(o, m, p))
			continue;
		printf("%s{\"pid\":%lld", comma ? "," : "", p->pid);
		json_lines(o, m, &p->recs);
		putchar('}');
		comma = true;
	}
	fputs("],\"connections\":[", stdout);
	comma = false;
	for (size_t i = 0; i < m->n_conns; i++) {
		const struct tr_conn *c = &m->conns[i];

		if (!conn_selected(o, m, c))
			continue;
		printf("%s{\"id\":\"%s\",\"pid\":%lld,\"fd\":%d,\"role\":\"%s\",\"local\":\"%s\",\"peer\":\"%s\","
		       "\"outcome\":\"%s\",\"reason\":\"%s\",\"transport\":\"%s\"",
		       comma ? "," : "", c->id, c->pid, c->fd, c->role, c->local, c->peer, tr_outcome_name(c->outcome),
		       c->why, c->transport);
		json_lines(o, m, &c->recs);
		putchar('}');
		comma = true;
	}
	printf("],\"bad_lines\":%lu}\n", m->bad_lines);
}

/* ---- --summary ---- */

struct count {
	const char *name;
	unsigned long n;
};

struct counts {
	struct count *c;
	size_t n;
};

static void count(struct counts *cs, const char *name)
{
	for (size_t i = 0; i < cs->n; i++)
		if (strcmp(cs->c[i].name, name) == 0) {
			cs->c[i].n++;
			return;
		}
	cs->c = realloc(cs->c, (cs->n + 1) * sizeof(*cs->c));
	if (!cs->c) {
		fputs("rdmashim trace: out of memory\n", stderr);
		exit(2);
	}
	cs->c[cs->n++] = (struct count){ name, 1 };
}

static int by_count(const void *a, const void *b)
{
	const struct count *x = a, *y = b;

	return x->n != y->n ? (x->n < y->n ? 1 : -1) : strcmp(x->name, y->name);
}

static void count_lines(const struct opts *o, const struct tr_model *m, const struct tr_list *l,
			struct counts *ev, struct counts *rs)
{
	for (size_t k = 0; k < l->n; k++) {
		const struct tr_rec *r = &m->recs[l->idx[k]];

		if (!line_selected(o, r))
			continue;
		count(ev, r->event);
		if (*r->reason)
			count(rs, r->reason);
	}
}

static const char *reason_meaning(const char *name)
{
	for (int r = 0; r < SHIM_REASON_COUNT; r++)
		if (strcmp(shim_reason_name((enum shim_reason)r), name) == 0)
			return shim_reason_text((enum shim_reason)r);
	if (strcmp(name, "no_attempt") == 0)
		return "tracked, but no upgrade began (closed before its first data call, or too young)";
	if (strcmp(name, "unfinished") == 0)
		return "an upgrade began and no end is traced (still running, or its end is at a level not traced)";
	if (strcmp(name, "untracked") == 0)
		return "no conn.track in the trace (it began later)";
	return "";
}

static void text_counts(const char *title, struct counts *cs, bool meanings)
{
	if (cs->n) /* qsort wants a base even for nothing */
		qsort(cs->c, cs->n, sizeof(*cs->c), by_count);
	printf("\n%s\n", title);
	if (!cs->n)
		printf("  (none)\n");
	for (size_t i = 0; i < cs->n; i++) {
		const char *name = *cs->c[i].name ? cs->c[i].name : "(none)";

		if (meanings)
			printf("  %7lu  %-20s  %s\n", cs->c[i].n, name, reason_meaning(cs->c[i].name));
		else
			printf("  %7lu  %s\n", cs->c[i].n, name);
	}
}

static void json_counts(const char *key, struct counts *cs)
{
	if (cs->n) /* qsort wants a base even for nothing */
		qsort(cs->c, cs->n, sizeof(*cs->c), by_count);
	printf(",\"%s\":{", key);
	for (size_t i = 0; i < cs->n; i++)
		printf("%s\"%s\":%lu", i ? "," : "", cs->c[i].name, cs->c[i].n);
	putchar('}');
}

static void print_summary(const struct opts *o, const struct tr_model *m)
{
	struct counts ev = { 0 }, rs = { 0 }, not_up = { 0 }, fell = { 0 }, up = { 0 };
	unsigned long conns = 0, lines = 0;

	for (size_t i = 0; i < m->n_procs; i++)
		if (proc_selected(o, m, &m->procs[i]))
			count_lines(o, m, &m->procs[i].recs, &ev, &rs);
	for (size_t i = 0; i < m->n_conns; i++) {
		const struct tr_conn *c = &m->conns[i];

		if (!conn_selected(o, m, c))
			continue;
		conns++;
		count_lines(o, m, &c->recs, &ev, &rs);
		if (c->outcome == TR_UPGRADED)
			count(&up, c->transport);
		else if (c->outcome == TR_FELL_BACK)
			count(&up, c->transport), count(&fell, c->why);
		else
			count(&not_up, tr_not_upgraded_key(c));
	}
	for (size_t i = 0; i < ev.n; i++)
		lines += ev.c[i].n;
	if (o->json) {
		printf("{\"files\":%zu,\"lines\":%lu,\"bad_lines\":%lu,\"connections\":%lu", m->n_files, lines,
		       m->bad_lines, conns);
		json_counts("upgraded", &up);
		json_counts("events", &ev);
		json_counts("reasons", &rs);
		json_counts("not_upgraded", &not_up);
		json_counts("back_to_tcp", &fell);
		fputs("}\n", stdout);
	} else {
		unsigned long n_up = 0;

		for (size_t i = 0; i < up.n; i++)
			n_up += up.c[i].n;
		printf("%zu file(s), %lu line(s) counted, %lu bad; %lu connection(s): %lu upgraded, %lu not\n",
		       m->n_files, lines, m->bad_lines, conns, n_up, conns - n_up);
		text_counts("upgraded, by transport:", &up, false);
		text_counts("events:", &ev, false);
		text_counts("reasons (lines that carry one):", &rs, false);
		text_counts("not upgraded, by reason:", &not_up, true);
		text_counts("upgraded, then back to TCP, by reason:", &fell, true);
	}
	free(ev.c), free(rs.c), free(not_up.c), free(fell.c), free(up.c);
}

/* ---- the command ---- */

static int add_value(struct values *vs, const char *flag, const char *v)
{
	if (!v || !*v) {
		fprintf(stderr, "rdmashim trace: %s needs a value\n", flag);
		return -1;
	}
	if (vs->n == MAX_VALUES) {
		fprintf(stderr, "rdmashim trace: at most %d values of %s\n", MAX_VALUES, flag);
		return -1;
	}
	vs->v[vs->n++] = v;
	return 0;
}

int rdmashim_cmd_trace(int argc, char **argv)
{
	struct opts o = { 0 };
	struct tr_model m = { 0 };
	const char **files = calloc((size_t)argc, sizeof(*files));
	int n_files = 0, rc = 0;
	bool opts_done = false;

	if (!files)
		return 2;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		struct values *vs = NULL;

		if (opts_done || a[0] != '-' || !a[1]) {
			files[n_files++] = a;
			continue;
		}
		if (strcmp(a, "--") == 0)
			opts_done = true;
		else if (strcmp(a, "--summary") == 0)
			o.summary = true;
		else if (strcmp(a, "--json") == 0)
			o.json = true;
		else if (strcmp(a, "--all") == 0)
			o.all = true;
		else if (strcmp(a, "--conn") == 0)
			vs = &o.conn;
		else if (strcmp(a, "--pid") == 0)
			vs = &o.pid;
		else if (strcmp(a, "--event") == 0)
			vs = &o.event;
		else if (strcmp(a, "--reason") == 0)
			vs = &o.reason;
		else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			rdmashim_trace_usage(stdout);
			free(files);
			return 0;
		} else {
			fprintf(stderr, "rdmashim trace: unknown option '%s' (try 'rdmashim help trace')\n", a);
			free(files);
			return 2;
		}
		if (vs && add_value(vs, a, i + 1 < argc ? argv[++i] : NULL) < 0) {
			free(files);
			return 2;
		}
	}
	if (!n_files) {
		fprintf(stderr, "rdmashim trace: no trace file named (try 'rdmashim help trace')\n");
		free(files);
		return 2;
	}
	for (int i = 0; i < n_files; i++)
		if (tr_read_file(&m, files[i]) < 0)
			rc = 2;
	tr_judge(&m);
	if (o.summary)
		print_summary(&o, &m);
	else if (o.json)
		print_json(&o, &m);
	else
		print_text(&o, &m);
	if (!rc && m.bad_lines)
		rc = 1;
	tr_free(&m);
	free(files);
	return rc;
}
