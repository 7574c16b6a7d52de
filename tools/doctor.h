/*
 * What rdmashim doctor's files share (cmd_doctor.c, the checklist;
 * doctor_peer.c, the checks of `doctor PEER`) and what they borrow from
 * cmd_health.c.
 */
#ifndef RDMASHIM_TOOLS_DOCTOR_H
#define RDMASHIM_TOOLS_DOCTOR_H

#include "fabric_health.h"

#define DOCTOR_VM_RECIPE "integration/vm/README.md"

/* One line of the checklist: VERDICT (PASS, WARN, FAIL), the check's
 * name, what was found and the fix; counted for the summary. */
void rdmashim_doctor_line(const char *verdict, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The checks of PEER (a name or an address): it resolves, the local
 * address and netdev that route to it, that address's RoCE v2 GID on an
 * ACTIVE port of r, the netdev's MTU against that port's active MTU, and
 * an rdma_cm resolve of the address and of a route to it. sysroot as
 * RDMASHIM_SYSFS (NULL: /sys). */
void rdmashim_doctor_peer(const char *peer, const struct shim_fh_report *r, const char *sysroot);

/* cmd_health.c: the active MTU of each port from verbs (sysfs does not
 * show it); for the real /sys only. */
void rdmashim_health_fill_active_mtu(struct shim_fh_report *r);

#endif
