/*
 * The data path of intercepted connections (io.h): what its two
 * directions share, a data call's start and end and the steps of each of
 * its rounds. The directions themselves are io_rx.c (recv) and io_tx.c
 * (send), as net/smc's smc_rx.c and smc_tx.c.
 *
 * Locking: s->lock is held for every state change and every ring access,
 * and dropped around every wait, so one thread blocked in recv never holds
 * up another thread's send on the same fd. TCP calls made under the lock
 * are always MSG_DONTWAIT; blocking is emulated by waiting outside it.
 */
#include "io.h"
#include "io_internal.h"

#include <errno.h>

#include "clock.h"
#include "failover.h"
#include "frames.h"
#include "upgrade.h"

size_t shim_io_iov_total(const struct iovec *iov, int iovcnt)
{
	size_t total = 0;

	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	return total;
}

int shim_io_iov_window(const struct iovec *iov, int iovcnt, size_t skip, size_t max, struct iovec *out)
{
	int n = 0;

	for (int i = 0; i < iovcnt && n < SHIM_IO_MAX_IOV && max; i++) {
		size_t len = iov[i].iov_len;

		if (skip >= len) {
			skip -= len;
			continue;
		}
		out[n].iov_base = (char *)iov[i].iov_base + skip;
		out[n].iov_len = len - skip < max ? len - skip : max;
		max -= out[n].iov_len;
		skip = 0;
		n++;
	}
	return n;
}

/*
 * A data call starts: from here until io_leave() it is counted in
 * s->active, so a close of fd on another thread, spinning or sleeping
 * alike, makes the copy shim_io_fd() then uses, and nothing here ever acts on
 * the number once the program closed it (it may name another file by
 * then). Returns the fd to use, or -EBADF (in *rc) when fd was closed
 * before the call began.
 */
static int io_enter(struct shim_sock *s, int fd, int *rc)
{
	s->active++;
	fd = shim_sock_fd_locked(s, fd);
	if (fd < 0 || s->closed) {
		*rc = -EBADF;
		return -1;
	}
	shim_failover_look_elsewhere(s, fd);
	return fd;
}

static void io_leave(struct shim_sock *s)
{
	/* The last call that may have been on a closed number ends: new calls
	 * check their number against the table (io_enter). */
	if (--s->active == 0)
		s->fd_lost = false;
}

bool shim_io_young_not_due(const struct shim_sock *s, unsigned long long now)
{
	return shim_io_young_locked(s) && !s->neg && !s->tcp_out_len && !s->aborted && !s->rx_tcp_reset &&
	       !shim_upgrade_due(s, now);
}

/*
 * A data call's first step, under s->lock, before io_enter(): the time,
 * looked at once for the call's shim_io_young_not_due() (0 when the
 * connection is past its idle phase, which asks nothing of the clock),
 * and, when the upgrade is due while a young epoll registration of the
 * connection is still the kernel's, that registration taken over first,
 * so that the upgrade can start in this call (epoll_young.c; the lock is
 * let go meanwhile: the set's lock comes before the sock's).
 */
static unsigned long long young_look(struct shim_sock *s)
{
	unsigned long long now;

	if (s->phase != SHIM_PHASE_IDLE)
		return 0;
	now = shim_now_ns();
	if (unlikely(__atomic_load_n(&s->ep_young_set, __ATOMIC_RELAXED)) && shim_upgrade_due(s, now)) {
		pthread_mutex_unlock(&s->lock);
		shim_io_young_take_over(s);
		pthread_mutex_lock(&s->lock);
	}
	return now;
}

unsigned long long shim_io_begin(struct shim_sock *s, int *fd, int *rc)
{
	unsigned long long now;

	pthread_mutex_lock(&s->lock);
	now = young_look(s);
	*fd = io_enter(s, *fd, rc);
	return now;
}

void shim_io_end(struct shim_sock *s)
{
	io_leave(s);
	pthread_mutex_unlock(&s->lock);
}

int shim_io_round(struct shim_sock *s, int *fd)
{
	*fd = shim_io_fd(s, *fd);
	if (*fd < 0)
		return -EBADF;
	shim_failover_look_elsewhere(s, *fd);
	if (s->tcp_out_len)
		shim_frames_flush(s, *fd);
	shim_upgrade_progress(s, *fd);
	shim_failover_progress(s, *fd);
	return s->aborted ? -ECONNRESET : 0;
}
