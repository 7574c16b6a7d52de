/*
 * The handshake's wake fd for event loops; see upgrade.h.
 *
 * A blocking data call sleeps on the handshake's own fd as well as on TCP
 * (io_sleep.c). An event loop sleeps in the kernel on the program's
 * registrations alone, so a handshake message that comes with no TCP byte
 * behind it (the named way's OFFER and ACCEPT, an answer to an idle
 * connection) waited for the program's next event, or for the wait's
 * slice (200 ms): measured, an epoll server that offered on a quiet
 * connection committed 200 ms later.
 *
 * The fd that message lands on changes step by step (a listener, then the
 * rendezvous; the pairs' hub while S waits for a HINT), and a set watches a
 * file under one registration. So each negotiating connection that an
 * event loop watches gets an epoll fd of its own, which watches whatever
 * the handshake waits on now; the program's set registers that one. No
 * set takes a reference to what it watches: a rendezvous the handshake
 * closes leaves ours at once (closing is how one end stops the other, and
 * a listener's name is freed at once), and ours leaves the program's sets
 * when the negotiation ends and closes it, with no call on them.
 *
 * Every epoll fd has the same inode, so the kept-fd check (fdtable.h)
 * tells ours from another file, not from an epoll fd the program opened on
 * the number after a raw close_range took ours: a weakness it shares with
 * the pairs' hub (pair.c). neg_wake_gen tells our own fds apart.
 */
#include "upgrade.h"

#include <errno.h>
#include <sys/epoll.h>

#include "fdtable.h"
#include "real.h"
#include "transport.h"

int shim_upgrade_wait_fd(const struct shim_sock *s)
{
	if (!s->neg || !s->xport || !s->xport->wait_fd)
		return -1;
	return s->xport->wait_fd(s);
}

/* A negotiation still under way: what a wait watches and times. */
static bool pending(const struct shim_sock *s)
{
	return s->neg && s->xport && !s->closed && !shim_upgrade_settled(s);
}

int shim_upgrade_pending_fd(const struct shim_sock *s)
{
	return pending(s) ? shim_upgrade_wait_fd(s) : -1;
}

unsigned long long shim_upgrade_due_ns(const struct shim_sock *s)
{
	return pending(s) && s->xport->due_ns ? s->xport->due_ns(s) : 0;
}

void shim_upgrade_wake_close(struct shim_sock *s)
{
	shim_owned_close(&s->neg_wake);
	s->neg_wake_watch = -1;
}

int shim_upgrade_wake_fd(struct shim_sock *s)
{
	int wait = shim_upgrade_pending_fd(s);
	struct epoll_event ev = { .events = EPOLLIN };

	if (wait < 0) {
		shim_upgrade_wake_close(s);
		return -1;
	}
	/* No step of the handshake since the last check: its fds are the
	 * ones we watch (a raw close_range under us costs wake-ups, bounded by
	 * the wait's slice, and no call here touches a number it reused). */
	if (s->neg_wake.fd >= 0 && wait == s->neg_wake_watch && s->neg_wake_steps == s->neg_steps)
		return s->neg_wake.fd;
	/* A program's close-all may have taken our number (fdtable.h). */
	if (s->neg_wake.fd >= 0 && !shim_owned_still(&s->neg_wake)) {
		shim_owned_forget(&s->neg_wake);
		s->neg_wake_watch = -1;
	}
	if (s->neg_wake.fd < 0) {
		int efd = shim_fd_own_checked(REAL(epoll_create1)(EPOLL_CLOEXEC));

		if (efd < 0)
			return -1;
		if (shim_owned_take_epoll(&s->neg_wake, efd) < 0) {
			REAL(close)(efd);
			return -1;
		}
		s->neg_wake_gen++;
	}
	/*
	 * A number the handshake has closed since may name another file now:
	 * deleting it from our own set finds nothing of that file's, and the
	 * file we watched left the set when it closed. The ADD is the check
	 * that the wait fd is still the file we watch (EEXIST) and not a new
	 * one under an old number.
	 */
	if (s->neg_wake_watch >= 0 && s->neg_wake_watch != wait)
		REAL(epoll_ctl)(s->neg_wake.fd, EPOLL_CTL_DEL, s->neg_wake_watch, NULL);
	ev.data.fd = wait;
	if (REAL(epoll_ctl)(s->neg_wake.fd, EPOLL_CTL_ADD, wait, &ev) < 0 && errno != EEXIST) {
		s->neg_wake_watch = -1;
		return -1;
	}
	s->neg_wake_watch = wait;
	s->neg_wake_steps = s->neg_steps;
	return s->neg_wake.fd;
}
