/*
 * Where a TCP connection's byte stream stands, by the kernel's own counts:
 * the bytes the program wrote and the bytes it read, since the connection
 * began, whichever process did the I/O.
 */
#ifndef RDMASHIM_STREAMPOS_H
#define RDMASHIM_STREAMPOS_H

#include <stdint.h>

/* 0, or a negative errno (a kernel without these counters: -EOPNOTSUPP). */
int shim_stream_position(int fd, uint64_t *written, uint64_t *read);

#endif
