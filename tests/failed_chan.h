/*
 * A channel that failed, for the failover unit tests (test_failover.c,
 * test_fo_worker.c): what failover.c asks of a channel once it is down,
 * with the answers a test sets.
 *
 *   tx_offset      what the peer got of our stream (peer_got), and
 *                  whether the channel knows it (tx_known)
 *   rx_offset      what the channel brought us (rx_count)
 *   tx_unreceived  our stream's bytes [held_from, held_from + strlen(held))
 *                  still held for a resend; -ERANGE outside them
 *
 * Header only: each test binary has its one channel.
 */
#ifndef RDMASHIM_TESTS_FAILED_CHAN_H
#define RDMASHIM_TESTS_FAILED_CHAN_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "transport.h"

static struct {
	uint64_t peer_got, rx_count, held_from;
	bool tx_known;
	const char *held;
} failed_chan_is;

static bool failed_chan_failed(const struct shim_chan *ch)
{
	(void)ch;
	return true;
}

static void failed_chan_noop(struct shim_chan *ch)
{
	(void)ch;
}

static bool failed_chan_tx_offset(const struct shim_chan *ch, uint64_t *offset)
{
	(void)ch;
	*offset = failed_chan_is.peer_got;
	return failed_chan_is.tx_known;
}

static uint64_t failed_chan_rx_offset(const struct shim_chan *ch)
{
	(void)ch;
	return failed_chan_is.rx_count;
}

static int failed_chan_tx_unreceived(const struct shim_chan *ch, uint64_t from, struct iovec out[2])
{
	uint64_t to = failed_chan_is.held_from + strlen(failed_chan_is.held);

	(void)ch;
	if (from < failed_chan_is.held_from || from > to)
		return -ERANGE;
	out[0].iov_base = (void *)(failed_chan_is.held + (from - failed_chan_is.held_from));
	out[0].iov_len = to - from;
	return 1;
}

static size_t failed_chan_readable(const struct shim_chan *ch)
{
	(void)ch;
	return 0;
}

static const struct shim_transport_ops failed_chan_ops = {
	.readable = failed_chan_readable,
	.destroy = failed_chan_noop,
	.failed = failed_chan_failed,
	.fail = failed_chan_noop,
	.tx_offset = failed_chan_tx_offset,
	.rx_offset = failed_chan_rx_offset,
	.tx_unreceived = failed_chan_tx_unreceived,
};
static struct shim_chan failed_chan = { .ops = &failed_chan_ops };

#endif
