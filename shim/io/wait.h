/*
 * Readiness for the hooked waits: poll, ppoll, select, pselect and the
 * epoll family, for fds whose directions moved to a side channel. A fd
 * still on TCP is left to the kernel, whose answer is then exact.
 */
#ifndef RDMASHIM_WAIT_H
#define RDMASHIM_WAIT_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <time.h>

/* True when any of the fds is intercepted and switched (poll is needed). */
bool shim_wait_poll_needed(const struct pollfd *fds, nfds_t nfds);
bool shim_wait_select_needed(int nfds, const fd_set *r, const fd_set *w);

/* What poll returns: the number of entries with revents, counted from the
 * entries, never summed from the rounds (a fd whose upgrade completes
 * between the kernel's round and the channel's was filled by both). */
int shim_wait_count_ready(const struct pollfd *fds, nfds_t nfds);

/* timeout_ns: -1 for none. Return as poll(2) does, or -errno. */
int shim_wait_poll(struct pollfd *fds, nfds_t nfds, long long timeout_ns, const sigset_t *sigmask);
int shim_wait_select(int nfds, fd_set *r, fd_set *w, fd_set *e, long long *timeout_ns,
		     const sigset_t *sigmask);

/* A tracked epoll set inside poll or select, a cascaded set (epoll_wait.c):
 * whether a poll must ask here; the set held for one round; POLLIN when
 * its own epoll_wait would report one of its switched items, 0 when not,
 * -1 when none is switched (the kernel's readiness of the set is then
 * exact); the arms of a sleep (1: sleep, 0: one was ready, -errno), their
 * undoing, and the end of the round (disarms too). */
struct shim_ep_outer;
bool shim_epoll_outer_needed(int fd);
struct shim_ep_outer *shim_epoll_outer_get(int fd);
int shim_epoll_outer_mask(struct shim_ep_outer *o);
int shim_epoll_outer_arm(struct shim_ep_outer *o, int *cap_ms);
void shim_epoll_outer_disarm(struct shim_ep_outer *o);
void shim_epoll_outer_put(struct shim_ep_outer *o);

/* epoll (epoll.c). */
int shim_epoll_ctl(int epfd, int op, int fd, struct epoll_event *event);
/* fd, just tracked, was already in the set epfd with the program's events
 * and data (epoll_early.c): the shim takes the registration over. */
int shim_epoll_adopt(int epfd, int fd, uint32_t events, uint64_t data);
/* An fd the shim does not track went into an epoll set (the wrapper's fast
 * path): remembered, cheaply, in case it is tracked later (epoll_early.c). */
void shim_epoll_note_early(int epfd, int fd);
/* fd was just tracked (connect): registrations made before that are taken
 * over. */
void shim_epoll_adopt_early(int fd);
/* Returns 1 and fills *rc when it handled the wait, 0 when the kernel's
 * epoll_wait is exact for this epfd. */
int shim_epoll_wait(int epfd, struct epoll_event *events, int maxevents, long long timeout_ns,
		    const sigset_t *sigmask, int *rc);
/* An epoll fd's set of intercepted items (the sock of an epoll fd owns
 * one, with its own copy of epfd); a connection's fd is about to close:
 * every set's items added under that number, or reached through it, follow
 * the file (epoll_close.c). */
struct shim_ep *shim_epoll_new(int epfd);
void shim_epoll_free(struct shim_ep *ep);
struct shim_sock;
void shim_epoll_fd_closed(int fd, struct shim_sock *sock);
/* fork: every set's lock (interpose/atfork.c). */
void shim_epoll_atfork_prepare(void);
void shim_epoll_atfork_release(void);
/* A kernel epoll_wait that began before the set held an intercepted fd may
 * return one of its tagged events: map them to the program's data. */
int shim_epoll_fixup(int epfd, struct epoll_event *events, int n);

#endif
