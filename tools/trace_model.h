/*
 * rdmashim trace: the trace files' lines grouped into connections and
 * processes, and what became of each connection. cmd_trace.c selects and
 * prints; this file only reads and groups.
 *
 * A connection is one process's view of one TCP connection: pid, local and
 * peer endpoint as the trace writes them. Its id is "PID/LOCAL/PEER", with
 * "#N" added for the Nth connection of a process on the same 4-tuple (a
 * port reused after the first one closed). Lines without a peer (the
 * process's own: process.start, listen.track, process.stats, rdma.port)
 * belong to their process; a line with a fd but no endpoints belongs to the
 * connection open on that fd in that process, if any.
 */
#ifndef RDMASHIM_TOOLS_TRACE_MODEL_H
#define RDMASHIM_TOOLS_TRACE_MODEL_H

#include <stdbool.h>
#include <stddef.h>

/* What became of a connection, from the last word of its lines. */
enum tr_outcome {
	TR_UNTRACKED,    /* lines, but no conn.track (the trace began later) */
	TR_NO_ATTEMPT,   /* tracked as eligible, no upgrade.start */
	TR_NOT_ELIGIBLE, /* conn.track eligible=false: why is its reason */
	TR_UNFINISHED,   /* upgrade.start with no end traced */
	TR_DEFERRED,     /* upgrade.deferred last: waiting for bytes to move */
	TR_FAILED,       /* upgrade.fail */
	TR_CLOSED,       /* upgrade.closed: the program closed it mid-upgrade */
	TR_PINNED,       /* conn.pin before any upgrade: kept on TCP */
	TR_UPGRADED,     /* upgrade.done */
	TR_FELL_BACK,    /* upgrade.done, then back to TCP (failover, pin) */
	TR_OUTCOMES
};

struct tr_rec {
	char *line; /* the line, checked to be one JSON object */
	size_t len;
	double t;   /* ts in seconds since the epoch; < 0 when missing */
	long long pid;
	int fd;     /* -1: none */
	/* String members as the line holds them (JSON escapes left in: safe
	 * to print, and trace names never need one); "" when absent. */
	char *event, *reason, *level, *local, *peer, *role, *ts;
	int conn;   /* index into conns; -1: a process's own line */
	unsigned file;
	unsigned long lineno;
};

struct tr_list {
	unsigned *idx; /* record indexes, in the order read */
	size_t n, cap;
};

struct tr_conn {
	char *id;
	long long pid;
	int fd;
	const char *local, *peer, *role; /* point into a record */
	struct tr_list recs;
	enum tr_outcome outcome;
	const char *why;       /* the reason behind the outcome, or "" */
	const char *transport; /* for UPGRADED and FELL_BACK, or "" */
};

struct tr_proc {
	long long pid;
	struct tr_list recs;
};

struct tr_file {
	const char *path;
	bool gzip;
	unsigned long lines, bad;
};

struct tr_model {
	struct tr_rec *recs;
	size_t n_recs, cap_recs;
	struct tr_conn *conns;
	size_t n_conns, cap_conns;
	struct tr_proc *procs;
	size_t n_procs, cap_procs;
	struct tr_file *files;
	size_t n_files;
	unsigned long bad_lines;
	struct tr_index *by_key; /* uthash: "PID/LOCAL/PEER" -> latest conn */
	struct tr_index *by_fd;  /* uthash: "PID/fd N" -> conn open on it */
};

/*
 * Reads path (plain or gzip) into m. Each bad line is reported on stderr
 * as "rdmashim trace: PATH:LINE: what" and counted; the rest is read.
 * Returns 0, or -errno when the file can not be opened (reported too).
 */
int tr_read_file(struct tr_model *m, const char *path);

/* Sets each connection's outcome from its lines; after the last file. */
void tr_judge(struct tr_model *m);

void tr_free(struct tr_model *m);

/* Outcome names for JSON and --reason ("upgraded", "no_attempt", ...). */
const char *tr_outcome_name(enum tr_outcome o);
/* One phrase for the text timeline's header. */
void tr_outcome_text(const struct tr_conn *c, char *out, size_t len);
/* The key the summary groups a connection that did not upgrade under: its
 * reason, or the outcome's name when it has none. */
const char *tr_not_upgraded_key(const struct tr_conn *c);

#endif
