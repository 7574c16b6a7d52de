/*
 * seccomp_exec: runs a program under a seccomp filter it inherits, as a
 * container runtime or systemd's SystemCallFilter= sets one up before the
 * service starts.
 *
 *   seccomp_exec unix|acct PROG [ARG...]
 *
 * unix: the filter kills the process on socket(AF_UNIX, ...), a call the
 * shim makes for its rendezvous and a TCP server such as echo_server never
 * does; acct: on acct(2) only, which nobody here makes (a filter that lets
 * the shim's calls through). no_new_privs first, as an unprivileged filter
 * needs.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Kills on call nr, when its first argument is arg0 (any: -1). The low
 * word of the argument is compared (x86-64 is little-endian). */
static int filter(long nr, long arg0)
{
	struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		/* Any argument: the jump to the kill is taken either way. */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)arg0, 0, arg0 < 0 ? 0 : 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0 ? -errno : 0;
}

int main(int argc, char **argv)
{
	bool unix_sock;

	if (argc < 3 || (strcmp(argv[1], "unix") && strcmp(argv[1], "acct"))) {
		fprintf(stderr, "usage: seccomp_exec unix|acct PROG [ARG...]\n");
		return 2;
	}
	unix_sock = !strcmp(argv[1], "unix");
	if (filter(unix_sock ? SYS_socket : SYS_acct, unix_sock ? AF_UNIX : -1) < 0) {
		perror("seccomp_exec: filter");
		return 1;
	}
	execvp(argv[2], argv + 2);
	perror("seccomp_exec: exec");
	return 127;
}
