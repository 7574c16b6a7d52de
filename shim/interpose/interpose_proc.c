/*
 * Exported process wrappers: fork, vfork and the exec family.
 *
 * vfork() is carried out as fork(): a vfork child shares the parent's memory,
 * and any hook it runs before exec (close, dup2, ...) would change the
 * parent's fd table under it. POSIX allows vfork to be fork.
 *
 * The exec family converges on the real execve/execvpe/fexecve/execv/execvp
 * after the policy has had its say (shim_sock_before_exec).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "compiler.h"
#include "real.h"
#include "sock.h"

extern char **environ;

SHIM_EXPORT pid_t fork(void)
{
	pid_t pid = REAL(fork)();

	if (pid == 0) {
		int err = errno;

		shim_sock_after_fork_child();
		errno = err;
	}
	return pid;
}

SHIM_EXPORT pid_t vfork(void)
{
	return fork();
}

SHIM_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	shim_sock_before_exec();
	return REAL(execve)(path, argv, envp);
}

SHIM_EXPORT int execv(const char *path, char *const argv[])
{
	shim_sock_before_exec();
	return REAL(execv)(path, argv);
}

SHIM_EXPORT int execvp(const char *file, char *const argv[])
{
	shim_sock_before_exec();
	return REAL(execvp)(file, argv);
}

SHIM_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	shim_sock_before_exec();
	return REAL(execvpe)(file, argv, envp);
}

SHIM_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	shim_sock_before_exec();
	return REAL(fexecve)(fd, argv, envp);
}

/*
 * The variadic execl* forms: collect the arguments into an argv on the stack
 * (bounded like glibc's own), then call the vector form. The collecting is a
 * macro because a va_list can not be handed on and used again portably.
 */
#define SHIM_EXECL_MAX_ARGS 4096

#define COLLECT_ARGS(first, last_named, argv, ok, after)                        \
	do {                                                                    \
		va_list ap;                                                     \
		int n = 1;                                                      \
		va_start(ap, last_named);                                       \
		(argv)[0] = (char *)(first);                                    \
		(ok) = 1;                                                       \
		while ((argv)[n - 1] != NULL) {                                 \
			if (n == SHIM_EXECL_MAX_ARGS) {                         \
				(ok) = 0;                                       \
				break;                                          \
			}                                                       \
			(argv)[n++] = va_arg(ap, char *);                       \
		}                                                               \
		after;                                                          \
		va_end(ap);                                                     \
	} while (0)

SHIM_EXPORT int execl(const char *path, const char *arg, ...)
{
	char *argv[SHIM_EXECL_MAX_ARGS];
	int ok;

	COLLECT_ARGS(arg, arg, argv, ok, (void)0);
	return ok ? execv(path, argv) : (int)shim_ret(-E2BIG);
}

SHIM_EXPORT int execlp(const char *file, const char *arg, ...)
{
	char *argv[SHIM_EXECL_MAX_ARGS];
	int ok;

	COLLECT_ARGS(arg, arg, argv, ok, (void)0);
	return ok ? execvp(file, argv) : (int)shim_ret(-E2BIG);
}

SHIM_EXPORT int execle(const char *path, const char *arg, ...)
{
	char *argv[SHIM_EXECL_MAX_ARGS];
	char *const *envp = NULL;
	int ok;

	/* envp follows the NULL that ends the arguments. */
	COLLECT_ARGS(arg, arg, argv, ok, envp = ok ? va_arg(ap, char *const *) : NULL);
	return ok ? execve(path, argv, envp) : (int)shim_ret(-E2BIG);
}
