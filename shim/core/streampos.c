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

/* TCP_INFO with the byte counters, or a negative errno. */
static int tcp_info_of(int fd, struct tcp_info *ti)
{
	socklen_t len = sizeof(*ti);

	if (REAL(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, ti, &len) < 0)
		return -errno;
	if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti->tcpi_bytes_received))
		return -EOPNOTSUPP;
	return 0;
}

/* Tries at one consistent look (the counters move while we read them). */
#define POSITION_TRIES 8

/*
 * written = bytes acked + bytes still queued to send (SIOCOUTQ: unacked and
 * unsent), read = bytes received in order - bytes not yet read (SIOCINQ).
 * Both count the stream from its first byte, so the two ends of one
 * connection agree on them however each came by its socket. The counters
 * and the queues are read in separate calls: a segment or an ACK that
 * lands between them would make the sums wrong, so the counters are read
 * again after the queues, and the look is kept only when they did not move.
 */
int shim_stream_position(int fd, uint64_t *written, uint64_t *read)
{
	for (int i = 0; i < POSITION_TRIES; i++) {
		struct tcp_info before, after;
		int inq = 0, outq = 0, rc;

		rc = tcp_info_of(fd, &before);
		if (rc < 0)
			return rc;
		if (REAL(ioctl)(fd, SIOCINQ, &inq) < 0 || REAL(ioctl)(fd, SIOCOUTQ, &outq) < 0)
			return -errno;
		rc = tcp_info_of(fd, &after);
		if (rc < 0)
			return rc;
		if (before.tcpi_bytes_received != after.tcpi_bytes_received ||
		    before.tcpi_bytes_acked != after.tcpi_bytes_acked || before.tcpi_state != after.tcpi_state)
			continue;
		if (inq < 0 || outq < 0 || (uint64_t)inq > after.tcpi_bytes_received)
			return -EPROTO;
		*written = after.tcpi_bytes_acked + (uint64_t)outq;
		*read = after.tcpi_bytes_received - (uint64_t)inq;
		/* A FIN takes a sequence number: the peer's counts in
		 * bytes_received (SIOCINQ leaves it out), ours in what was
		 * queued to send. */
		if (fin_received(after.tcpi_state) && *read)
			(*read)--;
		if (fin_sent(after.tcpi_state) && *written)
			(*written)--;
		return 0;
	}
	return -EAGAIN;
}
