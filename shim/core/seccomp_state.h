/*
 * Whether this process already runs under a seccomp filter it inherited
 * (from its parent or across exec: systemd's SystemCallFilter=, a
 * container runtime, a sandboxing launcher). The shim can not read the
 * filter, so it can not know which of its own calls it allows.
 */
#ifndef RDMASHIM_SECCOMP_STATE_H
#define RDMASHIM_SECCOMP_STATE_H

/* The Seccomp: field of /proc/self/status: 0 none, 1 strict, 2 filter;
 * -errno when it can not be read (no /proc). */
int shim_seccomp_mode(void);

#endif
