/*
 * A NIC port's error counters, as the kernel shows them in sysfs
 * (/sys/class/infiniband/DEV/ports/N/counters and hw_counters): read
 * whole, and compared with an earlier read, so that the port watch
 * (rdma_port.c) can say which grew. Only counters whose name says they
 * count a fault are kept (shim_nic_counter_is_error); the traffic counters
 * would grow on every look and say nothing about health.
 */
#ifndef RDMASHIM_NIC_COUNTERS_H
#define RDMASHIM_NIC_COUNTERS_H

#include <stdbool.h>
#include <stddef.h>

#define SHIM_NIC_COUNTERS_MAX 64
#define SHIM_NIC_COUNTER_NAME 48
#define SHIM_NIC_COUNTERS_BAD_MAX 8

struct shim_nic_counters {
	unsigned n;
	/* "name" for counters/, "hw.name" for hw_counters/ (both folders may
	 * hold a counter of one name: link_downed). */
	char name[SHIM_NIC_COUNTERS_MAX][SHIM_NIC_COUNTER_NAME];
	unsigned long long value[SHIM_NIC_COUNTERS_MAX];
	/* Files that were kept by name but did not read as a number (a
	 * garbled or unreadable file): left out of the counts above, named
	 * here so that a reader can say so (rdmashim health). */
	unsigned n_bad;
	char bad[SHIM_NIC_COUNTERS_BAD_MAX][SHIM_NIC_COUNTER_NAME];
};

/* Which counters a read keeps, by file name. */
typedef bool (*shim_nic_counter_keep_fn)(const char *name);

/* Whether a counter of this name counts faults (errors, discards, drops,
 * retries, sequence faults, link downs). */
bool shim_nic_counter_is_error(const char *name);

/* Reads the error counters of port `port` of device `dev` below root (NULL:
 * /sys/class/infiniband; tests give a folder of their own). A file that
 * does not read as a number is left out. 0, or -ENOENT when the port has
 * neither folder. */
int shim_nic_counters_read(const char *root, const char *dev, unsigned port, struct shim_nic_counters *out);

/* The same with the counters keep() accepts (rdmashim health also wants
 * out_of_buffer and the congestion counters, which count no fault). */
int shim_nic_counters_read_if(const char *root, const char *dev, unsigned port, shim_nic_counter_keep_fn keep,
			      struct shim_nic_counters *out);

/* Writes "name":delta for every counter of now that is larger than in
 * before (one before did not have counts from 0) into buf, comma
 * separated, JSON-ready; returns how many grew. buf is always terminated;
 * what does not fit is left out. */
unsigned shim_nic_counters_grew(const struct shim_nic_counters *before, const struct shim_nic_counters *now,
				char *buf, size_t len);

#endif
