/* The rendezvous flood: connect to every pending rendezvous, again and again. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

/* With --connect ADDR:PORT, only the names of connections to that port
 * (the server endpoint's port is the name's last 4 hex digits), so a test
 * leaves other programs' rendezvous alone. */
static char port_suffix[8];
static int blocking_sent; /* --blocking: messages with a blocking fd, per process */

static unsigned long flood_once(void)
{
	FILE *f = fopen("/proc/net/unix", "r");
	char line[512];
	unsigned long n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *at = strstr(line, "@rdmashim1/");
		struct sockaddr_un sun = { .sun_family = AF_UNIX };

		if (!at)
			continue;
		at[strcspn(at, " \n")] = '\0';
		size_t len = strlen(at + 1);

		if (port_suffix[0] && (len < 4 || strcmp(at + 1 + len - 4, port_suffix)))
			continue;

		if (len + 1 >= sizeof(sun.sun_path))
			continue;
		memcpy(sun.sun_path + 1, at + 1, len);
		socklen_t slen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);

		/* A message with a blocking fd queued, then our hang-up: whoever
		 * releases the socket releases it too. */
		if (o.blocking && blocking_sent < 8) {
			int rc = connect_passing_lingering((struct sockaddr *)&sun, slen);

			n += rc != -1;
			blocking_sent += rc == 0;
			continue;
		}
		/* Nonblocking: a full backlog (a victim that no longer accepts)
		 * must not hold us. */
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

		if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, slen) == 0)
			n++;
		if (fd >= 0)
			close(fd);
	}
	fclose(f);
	return n;
}

void run_flood(void)
{
	long long end = now_ms() + o.seconds * 1000LL;
	unsigned long total = 0;
	int fds[2];

	if (pipe(fds) < 0)
		fail_setup("pipe");
	if (o.addr) {
		struct sockaddr_in sin;

		if (parse_addr(o.addr, &sin) < 0)
			fail_setup("bad --connect");
		snprintf(port_suffix, sizeof(port_suffix), "%04x", ntohs(sin.sin_port));
	}
	for (int p = 1; p < o.procs; p++) {
		if (fork() == 0) {
			unsigned long n = 0;

			while (now_ms() < end)
				n += flood_once();
			if (write(fds[1], &n, sizeof(n)) != sizeof(n))
				_exit(1);
			_exit(0);
		}
	}
	while (now_ms() < end)
		total += flood_once();
	for (int p = 1; p < o.procs; p++) {
		unsigned long n;

		wait(NULL);
		if (read(fds[0], &n, sizeof(n)) == sizeof(n))
			total += n;
	}
	printf("RESULT role=flood mode=flood procs=%d seconds=%d connects=%lu\n", o.procs, o.seconds, total);
	exit(0);
}
