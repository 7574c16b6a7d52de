/*
 * cli.c — the command line of the stress tool: options, usage and main,
 * which runs the server, the client or the selftest.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "stress.h"

const char *const mode_name[] = { "blocking", "nonblock", "epoll-et", "mixed" };

struct opts O = {
	.bind = "0.0.0.0", .conns = 8, .mode = M_MIXED, .bytes = 64ull << 20,
	.seed = 1, .corrupt_at = UNBOUNDED, .max_msg = 1u << 20, .timeout = 120,
};

static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static int default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n < 2 ? 2 : n > 8 ? 8 : (int)n;
}

static void usage(FILE *f)
{
	fputs("usage: stress server --port P [--bind ADDR] [--exit-after N] [--mode M]\n"
	      "                     [--timeout SECS] [--threads T] [-v]\n"
	      "         prints \"READY <port>\" when listening (--port 0: any free port)\n"
	      "       stress client --host ADDR --port P [--conns N] [--bytes TOTAL] [--seed S]\n"
	      "                     [--max-msg BYTES] [--mode M] [--half-close]\n"
	      "                     [--duration SECS] [--timeout SECS] [--threads T]\n"
	      "                     [--warm-up SECS] [--down-bytes B] [-v]\n"
	      "       stress selftest [client options]\n"
	      "  M: blocking | nonblock | epoll-et | mixed (default mixed, per connection)\n"
	      "  TOTAL, BYTES: with suffix K, M, G (powers of 1024); TOTAL is the payload\n"
	      "  of all connections, both directions (default 64M); --max-msg default 1M\n"
	      "  --timeout: client: whole run (default 120 s); server: per-connection idle\n"
	      "  --threads: epoll-et event loops (default: CPUs, 2..8)\n"
	      "  --warm-up: one short connection first, then wait (at most SECS) for the\n"
	      "  shim's RDMA warm-up thread of this process to end\n", f);
}

static uint64_t parse_size(const char *s, const char *what)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	uint64_t mul = 1;
	switch (*end) {
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	case 't': case 'T': mul = 1ull << 40; end++; break;
	}
	if (mul > 1 && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (errno || end == s || *end || (v && mul > UINT64_MAX / v)) {
		fprintf(stderr, "stress: bad %s: %s\n", what, s);
		exit(2);
	}
	return v * mul;
}

static double parse_num(const char *s, const char *what)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || v < 0) {
		fprintf(stderr, "stress: bad %s: %s\n", what, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	enum { O_HOST = 256, O_PORT, O_BIND, O_CONNS, O_BYTES, O_SEED, O_MAXMSG, O_MODE,
	       O_HALF, O_DUR, O_TIMEOUT, O_EXIT, O_CORRUPT, O_THREADS, O_WARM, O_DOWN };
	static const struct option lo[] = {
		{ "host", 1, 0, O_HOST }, { "port", 1, 0, O_PORT }, { "bind", 1, 0, O_BIND },
		{ "conns", 1, 0, O_CONNS }, { "bytes", 1, 0, O_BYTES }, { "seed", 1, 0, O_SEED },
		{ "max-msg", 1, 0, O_MAXMSG }, { "mode", 1, 0, O_MODE },
		{ "half-close", 0, 0, O_HALF }, { "duration", 1, 0, O_DUR },
		{ "timeout", 1, 0, O_TIMEOUT }, { "exit-after", 1, 0, O_EXIT },
		{ "corrupt-at", 1, 0, O_CORRUPT }, { "threads", 1, 0, O_THREADS }, { "warm-up", 1, 0, O_WARM },
		{ "down-bytes", 1, 0, O_DOWN },
		{ "verbose", 0, 0, 'v' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
	};
	int opt;
	bool port_given = false;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	const char *cmd = argv[1];
	O.threads = default_threads();
	optind = 2;
	while ((opt = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
		switch (opt) {
		case O_HOST: O.host = optarg; break;
		case O_BIND: O.bind = optarg; break;
		case O_PORT: O.port = (int)parse_num(optarg, "--port"); port_given = true; break;
		case O_CONNS: O.conns = (int)parse_num(optarg, "--conns"); break;
		case O_BYTES: O.bytes = parse_size(optarg, "--bytes"); break;
		case O_SEED: O.seed = parse_size(optarg, "--seed"); break;
		case O_MAXMSG: O.max_msg = (uint32_t)parse_size(optarg, "--max-msg"); break;
		case O_HALF: O.half_close = true; break;
		case O_DUR: O.duration = parse_num(optarg, "--duration"); break;
		case O_TIMEOUT: O.timeout = parse_num(optarg, "--timeout"); break;
		case O_EXIT: O.exit_after = (int)parse_num(optarg, "--exit-after"); break;
		case O_CORRUPT: O.corrupt_at = parse_size(optarg, "--corrupt-at"); break;
		case O_THREADS: O.threads = (int)parse_num(optarg, "--threads"); break;
		case O_WARM: O.warm_up = parse_num(optarg, "--warm-up"); break;
		case O_DOWN: O.down_bytes = parse_size(optarg, "--down-bytes"); O.down_set = true; break;
		case 'v': O.verbose = 1; break;
		case O_MODE:
			for (O.mode = 0; O.mode < 4 && strcmp(optarg, mode_name[O.mode]); O.mode++)
				;
			if (O.mode == 4) {
				fprintf(stderr, "stress: bad --mode %s\n", optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stress: unexpected argument %s\n", argv[optind]);
		return 2;
	}
	if (O.conns < 1 || O.conns > 100000 || O.threads < 1 || O.threads > 256 ||
	    O.max_msg < 1 || O.max_msg > (1u << 30) || O.port < 0 || O.port > 65535) {
		fprintf(stderr, "stress: option out of range (conns 1..100000, threads 1..256, "
			"max-msg 1..1G, port 0..65535)\n");
		return 2;
	}
	if (O.conns > MAX_THREADED && (O.mode == M_BLOCKING || O.mode == M_NONBLOCK) &&
	    strcmp(cmd, "server")) {
		fprintf(stderr, "stress: --mode %s runs one thread per connection, so at most %d "
			"connections; use --mode epoll-et or mixed\n", mode_name[O.mode], MAX_THREADED);
		return 2;
	}
	if (O.duration > 0)
		O.half_close = true;	/* unbounded streams end with shutdown */

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	crc_init();
	raise_nofile();

	if (!strcmp(cmd, "selftest"))
		return selftest();
	if (!strcmp(cmd, "server")) {
		if (!port_given) {
			fprintf(stderr, "stress: server needs --port (0: any free port)\n");
			return 2;
		}
		int lfd = listen_on(O.bind, O.port);
		printf("READY %d\n", local_port(lfd));
		fflush(stdout);
		return server_run(lfd);
	}
	if (!strcmp(cmd, "client")) {
		struct cli_stats st;
		if (!O.host || !O.port) {
			fprintf(stderr, "stress: client needs --host and --port\n");
			return 2;
		}
		if (O.warm_up > 0)
			client_warm_up(O.host, O.port);
		client_run(O.host, O.port, &st);
		print_ok(&st);
		return 0;
	}
	usage(stderr);
	return 2;
}
