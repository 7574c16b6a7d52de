/*
 * fork_sandbox: a connection that switched (or is switching) to a side
 * channel in a server, which then forks a child that sandboxes itself as
 * sshd's pre-auth child does (no_new_privs, then a seccomp filter that
 * allows only the calls the child makes itself and kills the process on
 * any other: sendto, sendmsg, recvfrom, socket, ioctl, fcntl...), and
 * serves the connection with read and write. Every byte is checked both
 * ways.
 *
 *   fork_sandbox server --port P --parent close|idle|resume [--pending B] [--half 1]
 *   fork_sandbox client --port P --parent close|idle|resume [--pending B] [--half 1]
 *
 * The client connects, writes "CLIENT01" and B bytes more at once (pending:
 * with B > 0 its switch offset lies behind bytes the server has not read
 * when it forks, as the ssh client's KEXINIT does), reads the server's
 * banner, waits on the connection a while (its upgrade ends), writes
 * CHILD_BYTES (into the ring), and reads as many back. With --half it
 * writes CHILD_BYTES at once behind the rest and shuts its side, so that
 * its direction never switches while the server's does; the parent then
 * only writes. With --parent
 * resume it then writes PARENT_BYTES and reads as many back (the parent
 * serves them after its child exited). Then it shuts its side and reads
 * end of file. It prints "OK" or what went wrong.
 * The server accepts, writes its banner, reads "CLIENT01" (only), polls
 * the connection a while (the upgrade runs to its end), forks, and its
 * child sandboxes itself and serves: the B pending bytes, then the child
 * phase. The parent closes its copy at once (close), keeps it untouched
 * until the child exited (idle), or then serves the next phase itself
 * (resume). It prints "OK" when the child exited 0 (not killed by its
 * filter: SIGSYS) and its own part was right, exits 1 otherwise.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BANNER "SSH-2.0-fork_sandbox banner of 41 bytes\r\n"
#define BANNER_LEN 41
#define HELLO "CLIENT01"
#define CHILD_BYTES (512u * 1024)
#define PARENT_BYTES (2u * 1024 * 1024)

_Static_assert(sizeof(BANNER) - 1 == BANNER_LEN, "banner length");

/* --half: the client writes all it has at once and shuts its side before
 * its upgrade got far, so its direction never switches (its SWITCH_AT
 * says it stays on TCP) while the server's does. */
static int half;

static uint8_t pattern_byte(unsigned seed, size_t i)
{
	uint32_t x = (uint32_t)(i * 2654435761u) ^ (seed * 40503u) ^ (uint32_t)(i >> 13);

	return (uint8_t)(x ^ (x >> 11) ^ (x >> 23));
}

static void fill(uint8_t *buf, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pattern_byte(seed, i);
}

/* What a sandboxed process may say: write(2) only. */
static void say(const char *msg)
{
	ssize_t r = write(2, msg, strlen(msg));

	(void)r;
}

static int read_full(int fd, uint8_t *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = read(fd, buf + got, n - got);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int write_full(int fd, const uint8_t *buf, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, buf + off, n - off);

		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return 0;
}

/* Reads n bytes and compares them with the pattern: 0, or -1. */
static int expect(int fd, uint8_t *buf, size_t n, unsigned seed)
{
	if (read_full(fd, buf, n) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (buf[i] != pattern_byte(seed, i))
			return -1;
	return 0;
}

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

/* An allow list, as sshd's: every other call kills the process. */
static int sandbox(void)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		ALLOW(__NR_read),
		ALLOW(__NR_write),
		ALLOW(__NR_exit),
		ALLOW(__NR_exit_group),
		ALLOW(__NR_brk),
		ALLOW(__NR_mmap),
		ALLOW(__NR_munmap),
		ALLOW(__NR_madvise),
		ALLOW(__NR_futex),
		ALLOW(__NR_rt_sigprocmask),
		ALLOW(__NR_rt_sigreturn),
		ALLOW(__NR_clock_gettime),
		ALLOW(__NR_getpid),
		ALLOW(__NR_ppoll),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

static int child(int fd, size_t pending, uint8_t *buf, uint8_t *out)
{
	fill(out, CHILD_BYTES, 2);
	if (sandbox() < 0) {
		perror("fork_sandbox: seccomp");
		return 2;
	}
	if (pending && expect(fd, buf, pending, 7) < 0) {
		say("fork_sandbox child: the pending bytes did not arrive as sent\n");
		return 3;
	}
	if (expect(fd, buf, CHILD_BYTES, 1) < 0) {
		say("fork_sandbox child: the client's bytes did not arrive as sent\n");
		return 4;
	}
	if (write_full(fd, out, CHILD_BYTES) < 0) {
		say("fork_sandbox child: write failed\n");
		return 5;
	}
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

static int server(unsigned short port, const char *parent, size_t pending)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				   .sin_port = htons(port) };
	uint8_t hello[sizeof(HELLO) - 1];
	uint8_t *buf = malloc(PARENT_BYTES), *out = malloc(PARENT_BYTES);
	int lfd, fd, one = 1, st;
	pid_t pid;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (!buf || !out || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 4) < 0) {
		perror("fork_sandbox: listen");
		return 2;
	}
	printf("READY %d\n", port);
	fflush(stdout);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		return 2;
	close(lfd);
	if (write_full(fd, (const uint8_t *)BANNER, BANNER_LEN) < 0 || read_full(fd, hello, sizeof(hello)) < 0 ||
	    memcmp(hello, HELLO, sizeof(hello))) {
		fprintf(stderr, "fork_sandbox server: no hello\n");
		return 1;
	}
	/* Calls on the connection move its upgrade on; the pending bytes
	 * (if any) stay unread, so poll keeps saying readable. */
	for (int i = 0; i < 30; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		poll(&p, 1, 10);
		if (p.revents)
			sleep_ms(10);
	}
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 2;
	if (pid == 0)
		_exit(child(fd, pending, buf, out));
	if (!strcmp(parent, "close"))
		close(fd);
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		if (WIFSIGNALED(st))
			fprintf(stderr, "fork_sandbox server: the child was killed by signal %d%s\n", WTERMSIG(st),
				WTERMSIG(st) == SIGSYS ? " (SIGSYS: its seccomp filter)" : "");
		else
			fprintf(stderr, "fork_sandbox server: the child exited %d\n", WEXITSTATUS(st));
		return 1;
	}
	if (!strcmp(parent, "resume")) {
		fill(out, PARENT_BYTES, 4);
		if ((!half && expect(fd, buf, PARENT_BYTES, 3) < 0) || write_full(fd, out, PARENT_BYTES) < 0) {
			fprintf(stderr, "fork_sandbox server: the parent's part went wrong\n");
			return 1;
		}
		if (read(fd, buf, 1) != 0) {
			fprintf(stderr, "fork_sandbox server: bytes after the client's end\n");
			return 1;
		}
	}
	if (strcmp(parent, "close"))
		close(fd);
	printf("OK\n");
	return 0;
}

static int client(unsigned short port, const char *parent, size_t pending)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				   .sin_port = htons(port) };
	size_t first = sizeof(HELLO) - 1 + pending;
	uint8_t *buf = malloc(PARENT_BYTES), *out = malloc(first > PARENT_BYTES ? first : PARENT_BYTES);
	uint8_t banner[BANNER_LEN];
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ssize_t n;

	if (!buf || !out || connect(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
		perror("fork_sandbox: connect");
		return 2;
	}
	memcpy(out, HELLO, sizeof(HELLO) - 1);
	fill(out + sizeof(HELLO) - 1, pending, 7);
	if (write_full(fd, out, first) < 0) {
		printf("FAIL hello\n");
		return 1;
	}
	if (half) {
		fill(out, CHILD_BYTES, 1);
		if (write_full(fd, out, CHILD_BYTES) < 0)
			return 1;
		shutdown(fd, SHUT_WR);
	}
	if (read_full(fd, banner, BANNER_LEN) < 0 || memcmp(banner, BANNER, BANNER_LEN)) {
		printf("FAIL banner\n");
		return 1;
	}
	/* Waits on the connection move the upgrade on, so that our direction
	 * switches before the next bytes: they go into the ring, where the
	 * server's child finds them unread as it hands the connection back. */
	for (int i = 0; i < 30; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		poll(&p, 1, 10);
	}
	fill(out, CHILD_BYTES, 1);
	if ((!half && write_full(fd, out, CHILD_BYTES) < 0) || expect(fd, buf, CHILD_BYTES, 2) < 0) {
		printf("FAIL child phase\n");
		return 1;
	}
	if (!strcmp(parent, "resume")) {
		fill(out, PARENT_BYTES, 3);
		if ((!half && write_full(fd, out, PARENT_BYTES) < 0) || expect(fd, buf, PARENT_BYTES, 4) < 0) {
			printf("FAIL parent phase\n");
			return 1;
		}
	}
	if (!half)
		shutdown(fd, SHUT_WR);
	n = read(fd, buf, 1);
	if (n != 0) {
		printf("FAIL end: %zd (%s)\n", n, n < 0 ? strerror(errno) : "a byte more");
		return 1;
	}
	close(fd);
	printf("OK\n");
	return 0;
}

int main(int argc, char **argv)
{
	unsigned short port = 0;
	const char *parent = "close";
	size_t pending = 0;

	if (argc < 2)
		return 2;
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			port = (unsigned short)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--parent"))
			parent = argv[i + 1];
		else if (!strcmp(argv[i], "--pending"))
			pending = (size_t)atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--half"))
			half = atoi(argv[i + 1]);
	}
	if (strcmp(parent, "close") && strcmp(parent, "idle") && strcmp(parent, "resume"))
		return 2;
	return !strcmp(argv[1], "server") ? server(port, parent, pending) : client(port, parent, pending);
}
