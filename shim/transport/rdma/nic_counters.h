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

struct shim_nic_counters {
	unsigned n;
	/* "name" for counters/, "hw.name" for hw_counters/ (both folders may
	 * hold a counter of one name: link_downed). */
	char name[SHIM_NIC_COUNTERS_MAX][SHIM_NIC_COUNTER_NAME];
	unsigned long long value[SHIM_NIC_COUNTERS_MAX];
};

/* Whether a counter of this name counts faults (errors, discards, drops,
 * retries, sequence faults, link downs). */
bool shim_nic_counter_is_error(const char *name);

/* Reads the error counters of port `port` of device `dev` below root (NULL:
 * /sys/class/infiniband; tests give a folder of their own). A file that
 * does not read as a number is left out. 0, or -ENOENT when the port has
 * neither folder. */
int shim_nic_counters_read(const char *root, const char *dev, unsigned port, struct shim_nic_counters *out);

/* Writes "name":delta for every counter of now that is larger than in
 * before (one before did not have counts from 0) into buf, comma
 * separated, JSON-ready; returns how many grew. buf is always terminated;
 * what does not fit is left out. */
unsigned shim_nic_counters_grew(const struct shim_nic_counters *before, const struct shim_nic_counters *now,
				char *buf, size_t len);

#endif
