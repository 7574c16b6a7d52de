/*
 * cpu_of: runs a command and writes the CPU time it and its children spent
 * (wait4's rusage, microseconds) and its wall time to a file, for the
 * suite's third-party clients (redis-benchmark, qperf, ucx_perftest).
 *
 *   cpu_of FILE CMD [ARG...]
 *
 * FILE gets one line "cpu_us=N wall_us=N status=N"; the command's own
 * output passes through. Exit status: the command's (128 + signal).
 */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct timespec t0, t1;
	struct rusage ru;
	int st;
	pid_t pid;

	if (argc < 3)
		return 2;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid = fork();
	if (pid == 0) {
		execvp(argv[2], argv + 2);
		_exit(127);
	}
	if (pid < 0 || wait4(pid, &st, 0, &ru) < 0)
		return 2;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	FILE *f = fopen(argv[1], "w");
	if (!f)
		return 2;
	int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	fprintf(f, "cpu_us=%lld wall_us=%lld status=%d\n",
		(long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec,
		(long long)(t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000, rc);
	fclose(f);
	return rc;
}
