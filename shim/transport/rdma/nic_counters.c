/* A NIC port's error counters from sysfs; see nic_counters.h. */
#include "nic_counters.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "real.h"

#define SYSFS_IB "/sys/class/infiniband"

bool shim_nic_counter_is_error(const char *name)
{
	/* The words the IB port counters and the drivers' hw_counters use
	 * for faults: symbol_error, port_rcv_errors, port_xmit_discards,
	 * link_downed, VL15_dropped, local_link_integrity_errors,
	 * excessive_buffer_overrun_errors (IB); rcvd_seq_err,
	 * retry_exceeded_err, duplicate_request, out_of_seq_request (rxe);
	 * local_ack_timeout_err, out_of_sequence, rnr_nak_retry_err (mlx5). */
	/* "_err", not "err": ack_deferred counts traffic. */
	static const char *const words[] = {
		"_err", "discard", "drop", "downed", "retry", "seq", "duplicate", "timeout", "integrity", "overrun",
		"violation",
	};

	if (strncmp(name, "err", 3) == 0)
		return true;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (strstr(name, words[i]))
			return true;
	return false;
}

/* One counter file's value; false when it does not read as a number (some
 * drivers' files fail to read on a port that is down). */
static bool read_value(const char *path, unsigned long long *value)
{
	char buf[32], *end;
	int fd = open(path, O_RDONLY | O_CLOEXEC); /* not hooked */
	ssize_t n;

	if (fd < 0)
		return false;
	n = REAL(read)(fd, buf, sizeof(buf) - 1);
	REAL(close)(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	errno = 0;
	*value = strtoull(buf, &end, 10);
	return errno == 0 && end != buf && (*end == '\n' || *end == '\0');
}

/* Adds the error counters of one folder; false when it does not exist. */
static bool read_folder(const char *dir, const char *prefix, shim_nic_counter_keep_fn keep,
			struct shim_nic_counters *out)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return false;
	while ((e = readdir(d)) && out->n < SHIM_NIC_COUNTERS_MAX) {
		char path[512];
		unsigned long long v;
		int w;

		if (e->d_name[0] == '.' || !keep(e->d_name))
			continue;
		w = snprintf(out->name[out->n], SHIM_NIC_COUNTER_NAME, "%s%s", prefix, e->d_name);
		if (w < 0 || w >= SHIM_NIC_COUNTER_NAME)
			continue;
		w = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (w < 0 || (size_t)w >= sizeof(path))
			continue;
		if (!read_value(path, &v)) {
			if (out->n_bad < SHIM_NIC_COUNTERS_BAD_MAX)
				memcpy(out->bad[out->n_bad++], out->name[out->n], SHIM_NIC_COUNTER_NAME);
			continue;
		}
		out->value[out->n++] = v;
	}
	closedir(d);
	return true;
}

int shim_nic_counters_read_if(const char *root, const char *dev, unsigned port, shim_nic_counter_keep_fn keep,
			      struct shim_nic_counters *out)
{
	char dir[384];
	bool any;

	out->n = 0;
	out->n_bad = 0;
	snprintf(dir, sizeof(dir), "%s/%s/ports/%u/counters", root ? root : SYSFS_IB, dev, port);
	any = read_folder(dir, "", keep, out);
	snprintf(dir, sizeof(dir), "%s/%s/ports/%u/hw_counters", root ? root : SYSFS_IB, dev, port);
	any |= read_folder(dir, "hw.", keep, out);
	return any ? 0 : -ENOENT;
}

int shim_nic_counters_read(const char *root, const char *dev, unsigned port, struct shim_nic_counters *out)
{
	return shim_nic_counters_read_if(root, dev, port, shim_nic_counter_is_error, out);
}

static const unsigned long long *counter_named(const struct shim_nic_counters *c, const char *name)
{
	for (unsigned i = 0; i < c->n; i++)
		if (strcmp(c->name[i], name) == 0)
			return &c->value[i];
	return NULL;
}

unsigned shim_nic_counters_grew(const struct shim_nic_counters *before, const struct shim_nic_counters *now,
				char *buf, size_t len)
{
	unsigned grew = 0;
	size_t off = 0;

	if (len)
		buf[0] = '\0';
	for (unsigned i = 0; i < now->n; i++) {
		const unsigned long long *was = counter_named(before, now->name[i]);
		unsigned long long from = was ? *was : 0;
		int w;

		if (now->value[i] <= from)
			continue;
		grew++;
		if (off >= len)
			continue;
		w = snprintf(buf + off, len - off, "%s\"%s\":%llu", off ? "," : "", now->name[i], now->value[i] - from);
		if (w < 0 || (size_t)w >= len - off) {
			buf[off] = '\0'; /* left out whole: the JSON stays whole */
			off = len;        /* and nothing after it */
			continue;
		}
		off += (size_t)w;
	}
	return grew;
}
