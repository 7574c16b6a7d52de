/*
 * ready_rules: many connections at once, free-running request/response
 * traffic, and the readiness rules a server relies on checked at every
 * wait. The seed of the concurrent harness: the scenarios of epoll_dup
 * and the differential harness step both ends in lock-step, which never
 * lets a report race with bytes arriving on other connections; real
 * servers (nginx workers, apache event, forking servers) live in exactly
 * that race.
 *
 *   ready_rules --mode MODE --port P [--conns N] [--seconds S] [--msgs M]
 *               [--min-msgs K] [--depth D] [--seed X] [--max-size B]
 *
 * The process listens on 127.0.0.1:P, forks the server side in the shape
 * MODE names and a client that connects N connections (32) and runs an
 * epoll loop over them (level-triggered; edge-triggered in mode et). The
 * server shapes:
 *   level      two worker processes share the listener, one epoll set each
 *   et         one process, EPOLLET, every read and write until EAGAIN
 *   oneshot    one epoll set shared by two threads, EPOLLONESHOT, re-armed
 *              with EPOLL_CTL_MOD after each handling
 *   modtoggle  EPOLL_CTL_MOD from EPOLLIN to EPOLLOUT and back per request
 *              (read one request exactly, write its reply, read the next)
 *   forkconn   a child process per accepted connection, its own epoll set
 *   poll       poll() with every connection listed twice, and select(),
 *              turn about
 *
 * Traffic: each client connection keeps up to D (4) requests in flight,
 * without waiting for the replies (no lock-step), for S seconds (3) or M
 * requests, but at least K (50) each: on a machine so loaded that the
 * processes barely start within S, every connection still lives long
 * enough for the shim to upgrade it. A request asks for a reply of a
 * random size; both sizes are 1 B to B (256 KiB), log-uniform, from the
 * seed. Every message is a 32-byte header (kind, length, the
 * connection's id, a per-direction sequence number, the payload's
 * checksum) and a payload that is a pure function of (seed, connection,
 * direction, sequence), so the receiver checks every byte, not only the
 * sum. A side that is done sends END with the number of bytes it sent
 * before it, then shuts its writing down.
 *
 * Rules, counted as violations:
 *   R1 one registration appears at most once in one epoll_wait result
 *      (its data is unique); with EPOLLONESHOT, never to a second thread
 *      while the first handles it; of poll's two entries for one fd,
 *      the second reports at least what the first does (the kernel looks
 *      at them in turn, so what arrived in between may show in the second
 *      alone: counted as poll_splits, not a violation)
 *   R2 EPOLLIN / POLLIN / a readable fd_set bit: the next read returns >0,
 *      or 0 at end of stream, never EAGAIN (every reader here is the only
 *      one of its connection at that moment)
 *   R3 EPOLLOUT / POLLOUT / a writable bit: the next write (at least one
 *      byte) does not fail with EAGAIN
 *   R4 end of stream only after every byte the peer sent: END came, it
 *      announced what arrived, and the peer's own count (shared memory)
 *      agrees
 *   R5 every byte exactly once and in order: header fields, sequence,
 *      payload bytes and checksum
 *   R6 no wait returns later than its timeout (1 s) plus 1 s, and no
 *      connection that the wait watches for reading keeps bytes its peer
 *      has written (shared counters) unread for longer than that without
 *      being reported
 * Each violation prints a line "VIOLATION Rn side=... mode=... pid=...
 * conn=...: details" (the first 60 of them); an unexpected failure of a
 * call prints "ERROR ...". The last line is
 *   OK conns=N msgs=M bytes=B violations=0 longest_wait_ms=W ...
 * or "FAIL ..." with the count per rule and of errors; exit 0 or 1.
 * longest_pending_ms is the longest a connection's unread bytes waited for
 * a report (R6's measure).
 *
 * This file reads the options, starts both sides and writes the summary;
 * the others here hold one part each: payload.c the bytes and checksums,
 * conn.c a connection's stream (R2-R5), loop.c, epoll.c and poll.c the
 * waits (R1), stall.c the stall detector (R6), sides.c the server shapes
 * and the client, report.c the lines written.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ready_rules.h"

const char *mode_names[] = { "level", "et", "oneshot", "modtoggle", "forkconn", "poll" };

struct shared *S;
int mode, nconns = 32, depth = 4, port;
uint32_t max_size = 256 * 1024;
uint64_t seed = 1, msgs_per_conn, min_msgs = 50;
double seconds = 3;
uint64_t t_start_us, t_stop_us, t_giveup_us;

static pid_t spawn(void (*fn)(int), int arg)
{
	pid_t pid = fork();

	if (pid == 0) {
		fn(arg);
		_exit(0);
	}
	if (pid < 0) {
		error_line(NULL, NULL, "fork: %s", strerror(errno));
		exit(1);
	}
	return pid;
}

static void usage(void)
{
	fprintf(stderr, "usage: ready_rules --mode level|et|oneshot|modtoggle|forkconn|poll --port P [--conns N]\n"
			"       [--seconds S] [--msgs M] [--min-msgs K] [--depth D] [--seed X] [--max-size B]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int one = 1, lfd, fails = 0, st = 0;
	pid_t srv, cli;
	uint64_t v[7];

	mode = -1;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (!val)
			usage();
		i++;
		if (!strcmp(o, "--mode")) {
			for (int m = 0; m < (int)(sizeof(mode_names) / sizeof(*mode_names)); m++)
				if (!strcmp(val, mode_names[m]))
					mode = m;
		} else if (!strcmp(o, "--port")) {
			port = atoi(val);
		} else if (!strcmp(o, "--conns")) {
			nconns = atoi(val);
		} else if (!strcmp(o, "--seconds")) {
			seconds = atof(val);
		} else if (!strcmp(o, "--msgs")) {
			msgs_per_conn = strtoull(val, NULL, 0);
		} else if (!strcmp(o, "--min-msgs")) {
			min_msgs = strtoull(val, NULL, 0);
		} else if (!strcmp(o, "--depth")) {
			depth = atoi(val);
		} else if (!strcmp(o, "--seed")) {
			seed = strtoull(val, NULL, 0);
		} else if (!strcmp(o, "--max-size")) {
			max_size = (uint32_t)strtoul(val, NULL, 0);
		} else {
			usage();
		}
	}
	if (mode < 0 || port <= 0 || nconns < 1 || nconns > MAXC || depth < 1 || depth > QN / 2 || max_size < 1 ||
	    max_size > (1u << 24) || seconds <= 0)
		usage();
	S = mmap(NULL, sizeof(*S), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (S == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	t_start_us = now_us();
	t_stop_us = t_start_us + (uint64_t)(seconds * 1e6);
	/* Past this a side stops waiting and says how far it got; the caller's
	 * timeout is the last resort. */
	t_giveup_us = t_stop_us + 20 * 1000000ull;

	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 512) < 0) {
		printf("FAIL listen on %d: %s\n", port, strerror(errno));
		return 1;
	}
	srv = spawn(run_server, lfd);
	cli = spawn(run_client, lfd);
	close(lfd);
	if (waitpid(cli, &st, 0) < 0 || !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		error_line(NULL, NULL, "the client ended with status %#x", st);
	if (waitpid(srv, &st, 0) < 0 || !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		error_line(NULL, NULL, "the server ended with status %#x", st);
	for (int s = 0; s < 2; s++)
		if (atomic_load(&S->clean[s]) != (uint64_t)nconns)
			error_line(NULL, NULL, "%llu of %d connections finished cleanly on the %s side",
				   (unsigned long long)atomic_load(&S->clean[s]), nconns, s ? "server" : "client");
	for (int r = 1; r <= 6; r++)
		fails += (v[r] = atomic_load(&S->viol[r])) != 0;
	printf("%s conns=%llu msgs=%llu bytes=%llu violations=%llu", fails || atomic_load(&S->errors) ? "FAIL" : "OK",
	       (unsigned long long)atomic_load(&S->clean[CLIENT]), (unsigned long long)atomic_load(&S->msgs),
	       (unsigned long long)atomic_load(&S->bytes),
	       (unsigned long long)(v[1] + v[2] + v[3] + v[4] + v[5] + v[6]));
	if (fails || atomic_load(&S->errors))
		printf(" R1=%llu R2=%llu R3=%llu R4=%llu R5=%llu R6=%llu errors=%llu", (unsigned long long)v[1],
		       (unsigned long long)v[2], (unsigned long long)v[3], (unsigned long long)v[4],
		       (unsigned long long)v[5], (unsigned long long)v[6], (unsigned long long)atomic_load(&S->errors));
	printf(" longest_wait_ms=%llu longest_pending_ms=%llu waits=%llu",
	       (unsigned long long)atomic_load(&S->longest_wait_us) / 1000,
	       (unsigned long long)atomic_load(&S->longest_pending_us) / 1000,
	       (unsigned long long)atomic_load(&S->waits));
	if (mode == M_POLL)
		printf(" poll_splits=%llu", (unsigned long long)atomic_load(&S->poll_splits));
	printf(" mode=%s\n", mode_names[mode]);
	return fails || atomic_load(&S->errors) ? 1 : 0;
}
