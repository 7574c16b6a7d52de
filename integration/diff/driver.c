/*
 * diff_driver: one end of a differential scenario (integration/diff/README.md).
 *
 *   diff_driver server|client PORT SYNC_FD SCRIPT
 *   diff_driver resume server|client PORT SYNC_FD SCRIPT FD START TX RX  (after exec)
 *
 * The server listens on 127.0.0.1:PORT (or $DIFF_ADDR:PORT: rdma_cm needs the
 * Soft-RoCE address, see integration/vm/guest-diff.sh), tells the client over SYNC_FD (a UNIX
 * socket shared with the other end, never the tested connection) and accepts
 * one connection; the client connects (blocking, or nonblocking when its first
 * step is "nbconnect"). Then each step of SCRIPT runs in order and prints one
 * canonical record line on stdout: what a program can observe of it (return
 * values, errno, byte counts and hashes, revents, elapsed time against its
 * bound). The two ends' records of one scenario are compared across plain
 * TCP and the shim's runs by diff.py.
 */
#include "driver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct drv D = {.fd = -1, .lfd = -1, .sync_fd = -1, .epfd = -1};

const char *ename(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "E?";
}

double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

long num(const char *s)
{
	char *end;
	long v = strtol(s, &end, 0);
	if (*end == 'k' || *end == 'K')
		v <<= 10;
	else if (*end == 'm' || *end == 'M')
		v <<= 20;
	return v;
}

unsigned char pat(int salt, uint64_t off)
{
	return (unsigned char)((off % PATTERN_PERIOD) ^ (unsigned)salt);
}

uint32_t fnv(uint32_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

void describe_rx(char *out, size_t cap, ssize_t n, const unsigned char *buf, uint64_t from, int err)
{
	if (n < 0) {
		snprintf(out, cap, "-1 %s", ename(err));
		return;
	}
	size_t bad = 0;
	for (ssize_t k = 0; k < n; k++)
		bad += buf[k] != pat(D.rx_salt, from + k);
	snprintf(out, cap, "%zd bad=%zu h=%08x", n, bad, fnv(2166136261u, buf, n));
}

void rec(int i, const char *fmt, ...)
{
	char body[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	printf("%d %s = %s\n", i, i >= 0 && i < D.nsteps ? D.steps[i].text : "-", body);
	fflush(stdout);
}

static void fatal(const char *what)
{
	printf("FATAL %s: %s\n", what, ename(errno));
	fflush(stdout);
	exit(3);
}

static void load_script(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		fatal("script");
	D.steps = calloc(MAX_STEPS, sizeof(*D.steps));
	char line[512];
	while (fgets(line, sizeof(line), f) && D.nsteps < MAX_STEPS) {
		line[strcspn(line, "\r\n")] = 0;
		char *p = line + strspn(line, " \t");
		if (!*p || *p == '#')
			continue;
		struct step *st = &D.steps[D.nsteps++];
		st->text = strdup(p);
		char *save, *copy = strdup(p);
		for (char *t = strtok_r(copy, " \t", &save); t && st->ntok < MAX_TOK; t = strtok_r(NULL, " \t", &save))
			st->tok[st->ntok++] = t;
	}
	fclose(f);
}

static void setup(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	const char *addr = getenv("DIFF_ADDR");
	if (inet_pton(AF_INET, addr && *addr ? addr : "127.0.0.1", &a.sin_addr) != 1)
		fatal("DIFF_ADDR");
	char b = 'L';
	if (D.is_server) {
		int one = 1;
		D.lfd = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(D.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(D.lfd, (struct sockaddr *)&a, sizeof(a)) || listen(D.lfd, 8))
			fatal("listen");
		if (write(D.sync_fd, &b, 1) != 1)
			fatal("sync listen");
		D.fd = accept(D.lfd, NULL, NULL);
		if (D.fd < 0)
			fatal("accept");
		return;
	}
	if (read(D.sync_fd, &b, 1) != 1)
		fatal("sync listen");
	D.fd = socket(AF_INET, SOCK_STREAM, 0);
	if (D.nsteps > 0 && !strcmp(D.steps[0].tok[0], "nbconnect")) {
		fcntl(D.fd, F_SETFL, fcntl(D.fd, F_GETFL) | O_NONBLOCK);
		int rc = connect(D.fd, (struct sockaddr *)&a, sizeof(a));
		rec(0, "%d %s", rc, rc ? ename(errno) : "-");
		return;
	}
	if (connect(D.fd, (struct sockaddr *)&a, sizeof(a)))
		fatal("connect");
}

/* Nagle holds a second small segment until the first is acknowledged, and
 * loopback delays that ACK up to 40 ms: without TCP_NODELAY, whether bytes
 * sent before a barrier are readable after it is a matter of timing. So both
 * ends start with TCP_NODELAY; "nodelay 0" turns Nagle back on. */
static void nodelay(void)
{
	int one = 1;
	setsockopt(D.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int main(int argc, char **argv)
{
	int resume = argc > 1 && !strcmp(argv[1], "resume");
	char **av = argv + resume;
	if (argc - resume < 5) {
		fprintf(stderr, "usage: %s [resume] server|client PORT SYNC_FD SCRIPT [FD START TX RX]\n", argv[0]);
		return 2;
	}
	/* A write to a closed connection is to show as EPIPE, not to end the run
	 * ("sigpipe" restores the default). */
	signal(SIGPIPE, SIG_IGN);
	D.self = argv[0];
	D.is_server = !strcmp(av[1], "server");
	D.tx_salt = D.is_server ? 0x5a : 0xa5;
	D.rx_salt = D.is_server ? 0xa5 : 0x5a;
	D.sync_fd = atoi(av[3]);
	D.script = av[4];
	D.txbuf = malloc(MAX_XFER + PATTERN_PERIOD);
	D.rxbuf = malloc(MAX_XFER + PATTERN_PERIOD);
	for (size_t k = 0; k < MAX_XFER + PATTERN_PERIOD; k++)
		D.txbuf[k] = pat(D.tx_salt, k);
	load_script(D.script);
	int i = 0;
	if (resume) {
		if (argc < 10)
			return 2;
		D.fd = atoi(av[5]);
		i = atoi(av[6]);
		D.tx = strtoull(av[7], NULL, 10);
		D.rx = strtoull(av[8], NULL, 10);
	} else {
		setup(atoi(av[2]));
		nodelay();
		if (D.nsteps > 0 && !strcmp(D.steps[0].tok[0], "nbconnect"))
			i = 1;
	}
	while (i < D.nsteps)
		i = run_step(i);
	/* Neither end exits (which closes its socket) before the other finished
	 * its steps: an exit is a close the scenario did not ask for. */
	char b = 'E';
	if (write(D.sync_fd, &b, 1) != 1 || read(D.sync_fd, &b, 1) != 1)
		b = 0;
	printf("END\n");
	fflush(stdout);
	return 0;
}
