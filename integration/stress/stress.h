/*
 * stress/ — end-to-end integrity stress for TCP byte streams.
 *
 *   stress server --port P [--bind ADDR] [--exit-after N] [--mode M]
 *                 [--timeout SECS] [--threads T] [-v]
 *                                         prints "READY <port>" once listening
 *                                         (--port 0: any free port)
 *   stress client --host ADDR --port P [--conns N] [--bytes TOTAL] [--seed S]
 *                 [--max-msg BYTES] [--mode blocking|nonblock|epoll-et|mixed]
 *                 [--half-close] [--duration SECS] [--timeout SECS]
 *                 [--threads T] [--warm-up SECS] [--down-bytes B] [-v]
 *   stress selftest [client options]      server thread + client, one process,
 *                                         on a free 127.0.0.1 port
 *
 * Each connection carries a 48-byte header from the client (magic, connection
 * id, seed, bytes client->server, bytes server->client, max message size,
 * flags) and then nothing but payload: a pseudo-random stream in which byte o
 * of direction d of connection i is a pure function of (seed, i, d, o), so
 * every byte is checked on arrival, on its own. Both directions run at the
 * same time. A CRC32C runs over each direction on both sides; `selftest`
 * compares the client's with the server's, a standalone server prints its
 * per-connection verdict and checksums on stdout.
 *
 * Reads: random sizes (log-uniform, 1 B .. 2 MiB) with recv, read, readv and
 * recvmsg into scattered iovecs (guard bytes between them are checked),
 * MSG_PEEK followed by the real read (same bytes, at least as many),
 * MSG_WAITALL, and MSG_DONTWAIT on blocking sockets. Writes: messages of
 * log-uniform size (1 B .. --max-msg), written with send, write, writev,
 * sendmsg and send(MSG_MORE), resumed after partial writes.
 *
 * Modes, per connection: blocking (a reader and a writer thread), nonblock (one
 * thread, poll), epoll-et (a fixed pool of --threads event loops, edge
 * triggered, each fd drained until EAGAIN; fair across connections). Threaded
 * modes are limited to 64 connections; mixed puts the rest on epoll-et.
 * Nonblocking client connections connect with EINPROGRESS.
 *
 * --half-close: each side shutdown(SHUT_WR)s after its last byte and the
 * other must read exactly EOF there; without it the client closes once both
 * directions are complete and the server closes on EOF. --duration: streams
 * are unbounded, the client stops after SECS (then half-closes), the server
 * stops sending when it sees EOF. --down-bytes B: every connection's server
 * sends exactly B bytes, its client --bytes' share (or, with --duration,
 * an unbounded stream), so that a fault test can put nearly all the
 * traffic on the server's receive path.
 *
 * --warm-up SECS (client): first one short connection (64 KiB, blocking;
 * the server counts it), then a wait of at most SECS until this process has
 * no thread named "rdmashim-warm" left. Under the shim, a fresh process's
 * RDMA warm-up runs on that thread beside its first connections, and under a
 * heavy load in a slow VM it can outlast them; the measured connections then
 * start in a warm process. Without the shim there is no such thread.
 *
 * Client: "stress: OK conns=N sent=X recv=Y MiB/s=Z" and exit 0, or one line
 * "stress: FAIL conn=I offset=O expected=0x.. got=0x.." (or reason=...) and
 * exit 1. --timeout (default 120 s) bounds the whole client run (plus
 * --duration); on the server it is a per-connection no-progress limit.
 * Server: "stress-server: conn=I OK ..." / "stress-server: FAIL conn=I ..."
 * per connection; with --exit-after N it exits after N connections, 1 if any
 * failed. Hidden --corrupt-at OFFSET: the server flips the byte at that offset
 * of every stream it sends (proves the client can fail).
 */
/*
 * stress.h — what the files of the stress tool share: the wire header, the
 * options, the connection state and the functions each file offers the others.
 *
 *   cli.c      options, usage and main
 *   util.c     clock, fatal errors, allocation
 *   pattern.c  random generators, the deterministic byte stream, CRC32C
 *   conn.c     per-connection state, one receive step and one send step
 *   driver.c   the loops that run those steps: blocking, nonblock, epoll-et
 *   server.c   accept, dispatch, per-connection verdicts, watchdog
 *   client.c   connect, plan, run, watchdog; selftest
 */
#ifndef STRESS_H
#define STRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HDR_LEN      48
#define HDR_MAGIC    0x3153525453485352ULL	/* "RSHSTRS1" little-endian */
#define HDR_VERSION  1
#define HF_HALFCLOSE 1u
#define UNBOUNDED    UINT64_MAX
#define RX_MAX       (2u << 20)
#define EXP_CHUNK    (64u << 10)
#define MAX_IOV      8
#define IOV_GAP      64
#define CANARY       0xa5
#define MAX_THREADED 64

enum { M_BLOCKING, M_NONBLOCK, M_EPOLL, M_MIXED };
extern const char *const mode_name[];	/* cli.c */

/* Step results of rx_step / tx_step. */
enum { ST_FAIL = -2, ST_AGAIN = -1, ST_DONE = 0, ST_PROGRESS = 1 };

struct opts {
	const char *host, *bind;
	int port, conns, mode, threads, exit_after, verbose;
	uint64_t bytes, seed, corrupt_at;
	uint32_t max_msg;
	bool half_close;
	bool down_set; /* --down-bytes given */
	uint64_t down_bytes;
	double duration, timeout, warm_up;
};
extern struct opts O;			/* cli.c */

/* ---------------------------------------------------------------- util.c */

double now_s(void);
long long now_ms(void);
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *xmalloc(size_t n);

/* ------------------------------------------------------------- pattern.c */

static inline uint64_t fmix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

struct rng { uint64_t s; };

static inline uint64_t rnext(struct rng *r)
{
	return fmix64(r->s += 0x9e3779b97f4a7c15ULL);
}

struct rng rng_for(uint64_t seed, uint32_t id, unsigned what);
uint64_t rand_logu(struct rng *r, uint64_t max);
uint64_t stream_key(uint64_t seed, uint32_t id, int dir);
void gen_fill(uint64_t key, uint64_t off, uint8_t *p, size_t n);
void crc_init(void);
uint32_t crc32c(uint32_t crc, const void *buf, size_t n);

/* ---------------------------------------------------------------- conn.c */

struct worker;

struct conn {
	int fd, mode;
	uint32_t id;
	bool server, half_close, hdr_ok;
	uint64_t seed, key_tx, key_rx;
	uint64_t tx_total, tx_off, rx_total, rx_off;	/* payload bytes */
	uint32_t max_msg;
	struct rng rtx, rrx;
	uint32_t crc_tx, crc_rx;
	uint8_t *txbuf;			/* the message being written */
	size_t txcap, msg_len, msg_done;
	uint8_t hdr[HDR_LEN];
	size_t hdr_done;
	bool tx_fin, rx_fin;
	double stop_at;			/* client --duration: end of the stream */
	uint64_t corrupt_at;		/* server: hidden --corrupt-at */
	atomic_bool peer_eof, done;
	atomic_int failed;
	atomic_llong last_ms;
	/* epoll-et */
	struct worker *w;
	struct conn *qnext;
	bool queued, rd, wr;
	/* server registry (watchdog) */
	struct conn *prev, *next;
};

struct rxbufs {
	uint8_t *buf, *peek, *exp;
};

extern pthread_mutex_t out_mu;		/* serialises verdict lines on stdout */

struct rxbufs *rxbufs_new(void);
void rxbufs_free(struct rxbufs *b);
void touch(struct conn *c);
bool is_failed(struct conn *c);
void conn_fail(struct conn *c, uint64_t off, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void conn_streams(struct conn *c);
bool want_w(struct conn *c);
bool conn_complete(struct conn *c);
const char *fmt_total(uint64_t v, char *buf, size_t n);
int rx_header(struct conn *c);
int rx_step(struct conn *c, struct rxbufs *b, bool blocking);
int tx_step(struct conn *c, bool blocking);

/* -------------------------------------------------------------- driver.c */

struct worker {
	int ep;
	bool server;
	pthread_t thr;
	atomic_int assigned, finished;
	struct conn *qh, *qt;
	int qlen;
};

void run_blocking(struct conn *c);
void run_nonblock(struct conn *c);
void *conn_thread(void *arg);
struct worker *workers_new(int n, bool server);
void worker_add(struct worker *w, struct conn *c);
void worker_start(struct worker *w);

/* -------------------------------------------------------------- server.c */

struct srv_result {
	bool seen, ok;
	uint64_t rx, tx;
	uint32_t crc_rx, crc_tx;
};

/* A connection is over: the server's verdict, or the client's "done". */
void conn_finish(struct conn *c);
int server_run(int lfd);
struct srv_result *server_keep_results(int n);
int listen_on(const char *addr, int port);
int local_port(int fd);

/* -------------------------------------------------------------- client.c */

struct cli_stats {
	uint64_t sent, recv;
	double secs;
};

void client_run(const char *host, int port, struct cli_stats *st);
void client_warm_up(const char *host, int port);
void print_ok(const struct cli_stats *st);
int selftest(void);

#endif
