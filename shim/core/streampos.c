/* The kernel's view of a connection's stream positions; see streampos.h. */
#include "streampos.h"

#include <errno.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>

#include "real.h"

/* tcpi_state's values (the kernel's include/net/tcp_states.h, ABI);
 * netinet/tcp.h names them but can not be included with linux/tcp.h. */
enum {
	ST_FIN_WAIT1 = 4,
	ST_FIN_WAIT2 = 5,
	ST_TIME_WAIT = 6,
	ST_CLOSE_WAIT = 8,
	ST_LAST_ACK = 9,
	ST_CLOSING = 11,
};

static bool fin_received(uint8_t state)
{
	return state == ST_CLOSE_WAIT || state == ST_LAST_ACK || state == ST_CLOSING || state == ST_TIME_WAIT;
}

static bool fin_sent(uint8_t state)
{
	return state == ST_FIN_WAIT1 || state == ST_FIN_WAIT2 || state == ST_CLOSING || state == ST_LAST_ACK ||
	       state == ST_TIME_WAIT;
}

/*
 * written = bytes acked + bytes still queued to send (SIOCOUTQ: unacked and
 * unsent), read = bytes received in order - bytes not yet read (SIOCINQ).
 * Both count the stream from its first byte, so the two ends of one
 * connection agree on them however each came by its socket.
 */
int shim_stream_position(int fd, uint64_t *written, uint64_t *read)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int inq = 0, outq = 0;

	if (REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return -errno;
	if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
		return -EOPNOTSUPP;
	if (REAL(ioctl)(fd, SIOCINQ, &inq) < 0 || REAL(ioctl)(fd, SIOCOUTQ, &outq) < 0)
		return -errno;
	if (inq < 0 || outq < 0 || (uint64_t)inq > ti.tcpi_bytes_received)
		return -EPROTO;
	*written = ti.tcpi_bytes_acked + (uint64_t)outq;
	*read = ti.tcpi_bytes_received - (uint64_t)inq;
	/* A FIN takes a sequence number: the peer's counts in bytes_received
	 * (SIOCINQ leaves it out), ours in what was queued to send. */
	if (fin_received(ti.tcpi_state) && *read)
		(*read)--;
	if (fin_sent(ti.tcpi_state) && *written)
		(*written)--;
	return 0;
}
