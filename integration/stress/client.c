/*
 * client.c — the client side: plan each connection (its share of the bytes,
 * its mode), connect, run them all and bound the whole run with a watchdog;
 * and selftest, a server thread and the client in one process whose views of
 * every connection must agree.
 */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stress.h"
#include "../progs/thread_named.h"

static struct {
	struct conn *c;
	int n;
	double t0;
	atomic_bool finished;
} C;

static void put64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static void put32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }

static int cli_connect(struct conn *c, struct addrinfo *ai, bool nb)
{
	double give_up = now_s() + (O.timeout < 10 ? O.timeout : 10);
	for (;;) {
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | (nb ? SOCK_NONBLOCK : 0), 0);
		if (fd < 0)
			die("socket: %s", strerror(errno));
		c->fd = fd;
		int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
		if (r < 0 && nb && errno == EINPROGRESS) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			int err = 0;
			socklen_t el = sizeof err;
			r = poll(&p, 1, (int)(O.timeout * 1000));
			if (r == 0)
				err = ETIMEDOUT;
			else if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
				err = errno;
			r = err ? -1 : 0;
			errno = err;
		}
		if (r == 0)
			return fd;
		int err = errno;
		close(fd);
		if (err == ECONNREFUSED && now_s() < give_up) {
			usleep(50000);
			continue;
		}
		c->fd = -1;
		conn_fail(c, 0, "reason=connect: %s", strerror(err));
		return -1;
	}
}

/* The whole client run is bounded: fail clearly instead of hanging. */
static void *cli_watchdog(void *arg)
{
	double limit = O.timeout + O.duration, end = *(double *)arg + limit;
	char a[24], b[24];

	while (now_s() < end) {
		if (atomic_load(&C.finished))
			return NULL;
		usleep(100000);
	}
	struct conn *worst = NULL;
	for (int i = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		if (!atomic_load(&c->done) && (!worst || atomic_load(&c->last_ms) < atomic_load(&worst->last_ms)))
			worst = c;
	}
	pthread_mutex_lock(&out_mu);
	if (worst)
		printf("stress: FAIL conn=%" PRIu32 " offset=%" PRIu64 " reason=timeout after %.0fs: mode=%s "
		       "sent %" PRIu64 " of %s, received %" PRIu64 " of %s, idle %.1fs\n",
		       worst->id, worst->rx_off, limit, mode_name[worst->mode], worst->tx_off,
		       fmt_total(worst->tx_total, a, sizeof a), worst->rx_off,
		       fmt_total(worst->rx_total, b, sizeof b),
		       (now_ms() - atomic_load(&worst->last_ms)) / 1000.0);
	else
		printf("stress: FAIL reason=timeout after %.0fs\n", limit);
	fflush(stdout);
	_exit(1);
}

void client_run(const char *host, int port, struct cli_stats *st)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV }, *ai;
	struct rng plan = rng_for(O.seed, 0, 77);
	char ps[16];
	int threaded = 0;
	double t_start = now_s();
	pthread_t wd;

	snprintf(ps, sizeof ps, "%d", port);
	int e = getaddrinfo(host, ps, &hints, &ai);
	if (e)
		die("host %s: %s", host, gai_strerror(e));

	atomic_store(&C.finished, false);	/* a run after --warm-up's */
	C.n = O.conns;
	C.c = calloc((size_t)C.n, sizeof *C.c);
	pthread_t *thr = calloc((size_t)C.n, sizeof *thr);
	if (!C.c || !thr)
		die("out of memory");
	if (pthread_create(&wd, NULL, cli_watchdog, &t_start))
		die("pthread_create failed");

	uint64_t per = O.bytes / (uint64_t)C.n, extra = O.bytes % (uint64_t)C.n;
	for (int i = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		c->id = (uint32_t)i;
		c->seed = O.seed;
		c->half_close = O.half_close;
		c->max_msg = O.max_msg;
		c->corrupt_at = UNBOUNDED;
		if (O.down_set) {
			c->tx_total = O.duration > 0 ? UNBOUNDED : per + ((uint64_t)i < extra);
			c->rx_total = O.down_bytes;
		} else if (O.duration > 0) {
			c->tx_total = c->rx_total = UNBOUNDED;
		} else {
			/* this connection's share, split between the directions:
			 * mostly both ways, now and then one way only */
			uint64_t mine = per + ((uint64_t)i < extra), up;
			unsigned pick = rnext(&plan) % 32;
			up = pick == 0 ? 0 : pick == 1 ? mine
				: (uint64_t)((double)mine * (0.1 + 0.8 * (rnext(&plan) % 1001) / 1000.0));
			c->tx_total = up;
			c->rx_total = mine - up;
		}
		c->mode = O.mode == M_MIXED ? (int)(rnext(&plan) % 3) : O.mode;
		if (c->mode != M_EPOLL && ++threaded > MAX_THREADED)
			c->mode = M_EPOLL;
		conn_streams(c);
		put64(c->hdr, HDR_MAGIC);
		put32(c->hdr + 8, HDR_VERSION | (c->half_close ? HF_HALFCLOSE : 0) << 16);
		put32(c->hdr + 12, c->id);
		put64(c->hdr + 16, c->seed);
		put64(c->hdr + 24, c->tx_total);
		put64(c->hdr + 32, c->rx_total);
		put32(c->hdr + 40, c->max_msg);
		touch(c);
	}
	for (int i = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		int one = 1;
		if (cli_connect(c, ai, c->mode != M_BLOCKING) < 0)
			die("connect failed");	/* not reached: conn_fail exits */
		if (rnext(&plan) & 1)
			setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		touch(c);
	}
	freeaddrinfo(ai);

	int nws = O.threads;
	struct worker *ws = workers_new(nws, false);
	C.t0 = now_s();
	for (int i = 0, k = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		if (O.duration > 0)
			c->stop_at = C.t0 + O.duration;
		touch(c);
		if (c->mode == M_EPOLL) {
			worker_add(&ws[k++ % nws], c);
		} else if ((e = pthread_create(&thr[i], NULL, conn_thread, c))) {
			die("pthread_create: %s", strerror(e));
		}
	}
	for (int i = 0; i < nws; i++)
		worker_start(&ws[i]);
	for (int i = 0; i < C.n; i++)
		if (C.c[i].mode != M_EPOLL)
			pthread_join(thr[i], NULL);
	for (int i = 0; i < nws; i++) {
		pthread_join(ws[i].thr, NULL);
		close(ws[i].ep);
	}
	st->secs = now_s() - C.t0;
	atomic_store(&C.finished, true);
	pthread_join(wd, NULL);

	st->sent = st->recv = 0;
	for (int i = 0; i < C.n; i++) {
		struct conn *c = &C.c[i];
		st->sent += c->tx_off;
		st->recv += c->rx_off;
		if (O.verbose)
			printf("stress: conn=%" PRIu32 " OK mode=%s sent=%" PRIu64 " crc32c=%08" PRIx32
			       " recv=%" PRIu64 " crc32c=%08" PRIx32 "\n", c->id, mode_name[c->mode],
			       c->tx_off, c->crc_tx, c->rx_off, c->crc_rx);
		free(c->txbuf);
		c->txbuf = NULL;
	}
	free(ws);
	free(thr);
}

/* --warm-up: see stress.h. */
void client_warm_up(const char *host, int port)
{
	struct opts saved = O;
	struct cli_stats st;
	double t0, end;

	O.conns = 1;
	O.bytes = 64 << 10;
	O.duration = 0;
	O.mode = M_BLOCKING;
	client_run(host, port, &st);
	O = saved;
	t0 = now_s();
	end = t0 + O.warm_up;
	while (thread_named("rdmashim-warm") && now_s() < end)
		usleep(10000);
	printf("stress: warm-up connection ok; %.2f s waiting for the shim's warm-up%s\n", now_s() - t0,
	       thread_named("rdmashim-warm") ? " (still running)" : "");
	fflush(stdout);
}

void print_ok(const struct cli_stats *st)
{
	double mibs = st->secs > 0 ? (double)(st->sent + st->recv) / 1048576.0 / st->secs : 0;
	printf("stress: OK conns=%d sent=%" PRIu64 " recv=%" PRIu64 " MiB/s=%.1f\n",
	       O.conns, st->sent, st->recv, mibs);
	fflush(stdout);
}

/* ---------------------------------------------------------------- selftest */

static int server_status;

static void *selftest_server(void *arg)
{
	server_status = server_run(*(int *)arg);
	return NULL;
}

int selftest(void)
{
	static const char digits[] = "123456789";
	struct cli_stats st;
	struct srv_result *res;
	pthread_t t;
	int lfd;

	if (crc32c(0, digits, 9) != 0xe3069283u)
		die("CRC32C self-check failed");
	if (!O.host)
		O.host = "127.0.0.1";
	lfd = listen_on(O.host, 0);
	O.port = local_port(lfd);
	O.exit_after = O.conns;
	res = server_keep_results(O.conns);
	if (pthread_create(&t, NULL, selftest_server, &lfd))
		die("pthread_create failed");

	client_run(O.host, O.port, &st);
	pthread_join(t, NULL);
	close(lfd);

	/* the server's view of each connection must match the client's */
	for (int i = 0; i < O.conns; i++) {
		struct conn *c = &C.c[i];
		struct srv_result *r = &res[i];
		if (!r->seen || !r->ok)
			die("server did not finish conn=%d cleanly", i);
		if (r->rx != c->tx_off || r->crc_rx != c->crc_tx)
			die("conn=%d client sent %" PRIu64 " bytes crc32c=%08" PRIx32 ", server received %"
			    PRIu64 " crc32c=%08" PRIx32, i, c->tx_off, c->crc_tx, r->rx, r->crc_rx);
		if (r->tx != c->rx_off || r->crc_tx != c->crc_rx)
			die("conn=%d server sent %" PRIu64 " bytes crc32c=%08" PRIx32 ", client received %"
			    PRIu64 " crc32c=%08" PRIx32, i, r->tx, r->crc_tx, c->rx_off, c->crc_rx);
	}
	if (server_status)
		die("server reported failures");
	print_ok(&st);
	return 0;
}
