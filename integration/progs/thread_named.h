/*
 * thread_named: whether a thread of this process has that name (its comm).
 * The shim's warm-up thread (rdmashim-warm) is the only way a test program
 * sees its RDMA warm-up end from outside. Shared by the test programs that
 * wait for it (conn_hold, stress).
 */
#ifndef RDMASHIM_TEST_THREAD_NAMED_H
#define RDMASHIM_TEST_THREAD_NAMED_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static inline bool thread_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool found = false;

	while (d && !found && (e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f && fgets(comm, sizeof comm, f))
			found = !strncmp(comm, name, strlen(name)) && comm[strlen(name)] == '\n';
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

#endif
