/*
 * server.c — the server side: accept, give each connection a mode (its own
 * thread, or one of the epoll-et loops), print each connection's verdict and
 * checksums, and fail connections that make no progress for --timeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stress.h"

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct conn *list;
	int threaded, finished, failed;
	uint64_t rx, tx;
	struct srv_result *res;		/* selftest: indexed by connection id */
	int nres;
	bool quiet;			/* selftest: OK lines only with -v */
	struct worker *ws;
	int nws, next_w;
} S = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void srv_finish(struct conn *c)
{
	bool failed = is_failed(c);
	char a[24], b[24];

	/* the verdict line first: the summary must come after every one */
	if (!failed && (!S.quiet || O.verbose)) {
		pthread_mutex_lock(&out_mu);
		printf("stress-server: conn=%" PRIu32 " OK mode=%s recv=%" PRIu64 " crc32c=%08" PRIx32
		       " sent=%" PRIu64 " crc32c=%08" PRIx32 " expected-recv=%s expected-sent=%s\n",
		       c->id, mode_name[c->mode], c->rx_off, c->crc_rx, c->tx_off, c->crc_tx,
		       fmt_total(c->rx_total, a, sizeof a), fmt_total(c->tx_total, b, sizeof b));
		fflush(stdout);
		pthread_mutex_unlock(&out_mu);
	}
	pthread_mutex_lock(&S.mu);
	if (c->prev)
		c->prev->next = c->next;
	else
		S.list = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->mode != M_EPOLL)
		S.threaded--;
	S.finished++;
	S.failed += failed;
	S.rx += c->rx_off;
	S.tx += c->tx_off;
	if (c->hdr_ok && c->id < (uint32_t)S.nres) {
		struct srv_result *r = &S.res[c->id];
		r->seen = true;
		r->ok = !failed;
		r->rx = c->rx_off;
		r->tx = c->tx_off;
		r->crc_rx = c->crc_rx;
		r->crc_tx = c->crc_tx;
	}
	pthread_cond_broadcast(&S.cv);
	pthread_mutex_unlock(&S.mu);

	close(c->fd);
	free(c->txbuf);
	free(c);
}

void conn_finish(struct conn *c)
{
	if (c->server) {
		srv_finish(c);
	} else {
		close(c->fd);
		atomic_store(&c->done, true);
	}
}

/* Per-connection no-progress limit. */
static void *srv_watchdog(void *arg)
{
	(void)arg;
	for (;;) {
		sleep(1);
		long long now = now_ms();
		pthread_mutex_lock(&S.mu);
		for (struct conn *c = S.list; c; c = c->next) {
			double idle = (now - atomic_load(&c->last_ms)) / 1000.0;
			if (idle > O.timeout && !is_failed(c))
				conn_fail(c, c->rx_off, "reason=no progress for %.0fs (recv %" PRIu64
					  ", sent %" PRIu64 ")", idle, c->rx_off, c->tx_off);
		}
		pthread_mutex_unlock(&S.mu);
	}
	return NULL;
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl(O_NONBLOCK): %s", strerror(errno));
}

static void srv_dispatch(int fd, uint32_t seq, struct rng *r)
{
	struct conn *c = calloc(1, sizeof *c);
	if (!c)
		die("out of memory");
	c->fd = fd;
	c->id = seq;		/* until the header names it */
	c->server = true;
	c->corrupt_at = O.corrupt_at;
	c->mode = O.mode == M_MIXED ? (int)(rnext(r) % 3) : O.mode;
	touch(c);

	pthread_mutex_lock(&S.mu);
	if (c->mode != M_EPOLL && S.threaded >= MAX_THREADED)
		c->mode = M_EPOLL;
	if (c->mode != M_EPOLL)
		S.threaded++;
	c->next = S.list;
	if (S.list)
		S.list->prev = c;
	S.list = c;
	pthread_mutex_unlock(&S.mu);

	if (c->mode != M_BLOCKING)
		set_nonblock(fd);
	if (c->mode == M_EPOLL) {
		worker_add(&S.ws[S.next_w++ % S.nws], c);
	} else {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		int e = pthread_create(&t, &a, conn_thread, c);
		if (e)
			die("pthread_create: %s", strerror(e));
		pthread_attr_destroy(&a);
	}
}

/* selftest: keep each connection's result, indexed by connection id, and
 * print the per-connection OK lines only with -v. */
struct srv_result *server_keep_results(int n)
{
	S.quiet = true;
	S.nres = n;
	S.res = calloc((size_t)n, sizeof *S.res);
	if (!S.res)
		die("out of memory");
	return S.res;
}

/* Accept and serve; with --exit-after N return after N connections: 0 if all
 * were right, 1 otherwise. */
int server_run(int lfd)
{
	struct rng r = rng_for(O.seed, 0, 99);
	pthread_t wd;
	int accepted = 0;
	bool warned = false;

	S.nws = O.threads;
	S.ws = workers_new(S.nws, true);
	for (int i = 0; i < S.nws; i++)
		worker_start(&S.ws[i]);
	if (pthread_create(&wd, NULL, srv_watchdog, NULL))
		die("pthread_create failed");
	pthread_detach(wd);

	while (!O.exit_after || accepted < O.exit_after) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if ((errno == EMFILE || errno == ENFILE) && !warned) {
				fprintf(stderr, "stress-server: accept: %s (waiting)\n", strerror(errno));
				warned = true;
			}
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				usleep(10000);
				continue;
			}
			die("accept: %s", strerror(errno));
		}
		srv_dispatch(fd, (uint32_t)accepted++, &r);
	}
	pthread_mutex_lock(&S.mu);
	while (S.finished < O.exit_after)
		pthread_cond_wait(&S.cv, &S.mu);
	pthread_mutex_unlock(&S.mu);
	pthread_mutex_lock(&out_mu);
	printf("stress-server: %s conns=%d failed=%d recv=%" PRIu64 " sent=%" PRIu64 "\n",
	       S.failed ? "FAIL" : "OK", S.finished, S.failed, S.rx, S.tx);
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
	return S.failed ? 1 : 0;
}

int listen_on(const char *addr, int port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai;
	char ps[16];
	int one = 1;

	snprintf(ps, sizeof ps, "%d", port);
	int e = getaddrinfo(addr, ps, &hints, &ai);
	if (e)
		die("bind address %s: %s", addr, gai_strerror(e));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		die("bind %s:%d: %s", addr, port, strerror(errno));
	if (listen(fd, 4096) < 0)
		die("listen: %s", strerror(errno));
	freeaddrinfo(ai);
	return fd;
}

int local_port(int fd)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof sa;
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
		die("getsockname: %s", strerror(errno));
	return sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
					: ntohs(((struct sockaddr_in *)&sa)->sin_port);
}
