/*
 * sandboxed_echo: a fork-per-connection echo server whose child sandboxes
 * itself before its first read, as sshd's pre-auth child does: it sets
 * no_new_privs and installs a seccomp filter that kills the process on
 * socket(2) and memfd_create(2), calls an echo server never makes.
 *
 *   sandboxed_echo --port P --conns N
 *
 * Prints "READY <port>", serves N connections (echo until EOF), exits 0
 * when every child exited 0 (a child killed by its filter makes it 1).
 */
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int sandbox(void)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_memfd_create, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

static int echo(int fd)
{
	char buf[65536];
	ssize_t n;

	if (sandbox() < 0) {
		perror("sandboxed_echo: seccomp");
		return 1;
	}
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(fd, buf + off, (size_t)(n - off));

			if (w <= 0)
				return 1;
			off += w;
		}
	}
	return n < 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int lfd, one = 1, conns = 1, bad = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--port"))
			sin.sin_port = htons((unsigned short)atoi(argv[i + 1]));
		else if (!strcmp(argv[i], "--conns"))
			conns = atoi(argv[i + 1]);
	}
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 16) < 0) {
		perror("sandboxed_echo: listen");
		return 2;
	}
	printf("READY %d\n", ntohs(sin.sin_port));
	fflush(stdout);
	for (int i = 0; i < conns; i++) {
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0)
			return 2;
		if (fork() == 0) {
			close(lfd);
			_exit(echo(fd));
		}
		close(fd);
	}
	for (int i = 0; i < conns; i++) {
		int st;

		wait(&st);
		bad += !WIFEXITED(st) || WEXITSTATUS(st);
	}
	return bad ? 1 : 0;
}
