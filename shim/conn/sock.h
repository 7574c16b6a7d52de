/*
 * Tracked sockets and the decisions about them.
 *
 * A shim_sock stands for one kernel open file description: dup'ed fds share
 * it (refs counts the fds). It exists only for TCP sockets on whitelisted
 * ports: listeners, clients (decided at connect) and servers (decided at
 * accept on a tracked listener). Every other fd stays NULL in the fd table.
 */
#ifndef RDMASHIM_SOCK_H
#define RDMASHIM_SOCK_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "clock.h"
#include "compiler.h"
#include "config.h"
#include "fdtable.h"
#include "reason.h"
#include "spin.h"
#include "tuple.h"

enum shim_role {
	SHIM_ROLE_LISTENER,
	SHIM_ROLE_CLIENT, /* called connect() */
	SHIM_ROLE_SERVER, /* came from accept() */
	SHIM_ROLE_EPOLL,  /* an epoll set holding intercepted fds (epoll.c) */
};

enum shim_sock_state {
	SHIM_STATE_LISTENING,
	SHIM_STATE_CONNECTING, /* nonblocking connect in progress */
	SHIM_STATE_TCP,        /* established, data on TCP */
	SHIM_STATE_CLOSED,
};

/* Where one direction's application bytes travel. */
enum shim_dir {
	SHIM_DIR_TCP,       /* on the kernel TCP stream */
	SHIM_DIR_SWITCHING, /* rx: TCP consumed up to the switch; frame expected */
	SHIM_DIR_CHAN,      /* on the side channel; TCP carries frames only */
};

/* Progress of the upgrade (conn/upgrade.c); what happens inside a phase is
 * the negotiating transport's (s->xport, its state s->neg). */
enum shim_phase {
	SHIM_PHASE_IDLE,        /* eligible, nothing started */
	SHIM_PHASE_NEGOTIATING, /* a transport negotiates; nobody committed, it may end any time */
	SHIM_PHASE_COMMITTING,  /* the peer may switch its direction at an offset not learnt yet */
	SHIM_PHASE_DONE,        /* both switch offsets known */
	SHIM_PHASE_FAILED,      /* stays on TCP; reason says why */
};

struct shim_chan;
struct shim_ep;
struct shim_transport_type;

struct shim_sock {
	/* Lifetime (socklife.c, shim/LIFETIME.md). refs: fd-table entries plus
	 * the references calls in progress took with shim_sock_get(); 0 means
	 * free (in the pool). fds: of refs, the fd-table entries (changed only
	 * when an entry is made or dropped, off the data path). Both atomic. */
	int refs;
	int fds;
	struct shim_sock *pool_next; /* the free list, while refs == 0 */
	struct shim_sock *all_next;  /* every sock ever made, never unlinked */
	/* Guards the fields below except the ones said to be atomic or set
	 * once before publication; never held across a blocking wait. Lives
	 * as long as the pool: it is never destroyed. */
	pthread_mutex_t lock;

	enum shim_role role;
	enum shim_sock_state state;
	/* Whether the connection may try an upgrade, and why (not). */
	bool eligible;
	enum shim_reason reason;
	struct shim_tuple tuple;
	unsigned long long born_ns; /* when it was tracked (shim_now_ns) */
	/* Turns seen on TCP: data calls that moved bytes the other way than
	 * the last one that did (upgrade.h, the short-connection rule), and
	 * that last way (0: none yet, 1: sent, 2: received). */
	uint16_t tcp_turns;
	uint8_t tcp_last_way;

	/* Data path (io/io_rx.c, io/io_tx.c). intercept is read without the
	 * lock by the wrappers: it is set once, before the first call that
	 * needs the data path, and cleared
	 * only when the connection can no longer leave TCP. */
	bool intercept;
	/* Epoll items naming this sock, in every set (io/epoll.c changes it
	 * under each set's lock; atomic: read without any). With none and
	 * intercept off, a registration change of its fd is the kernel's. */
	unsigned ep_items;
	/* A young connection's registration in one epoll set, left with the
	 * kernel under the program's own data until its upgrade is near
	 * (io/epoll_young.c): the set (its shim_ep id; 0: none; atomic, read
	 * without the lock by the data calls), the number it was added
	 * under, the program's events and data. Under the lock otherwise.
	 * While there is one, no upgrade starts (upgrade.c). */
	uint64_t ep_young_set;
	int ep_young_fd;
	uint32_t ep_young_events;
	uint64_t ep_young_data;
	bool nonblocking; /* O_NONBLOCK of the open file description */
	bool tx_dontwait; /* the send in progress may not wait (MSG_DONTWAIT): no zero copy (io_tx.c sets it) */
	bool rd_shut, wr_shut;
	bool rx_tcp_eof;
	unsigned rx_starved, tx_starved; /* calls that found no bytes / no room (epoll.c's EPOLLET) */
	unsigned rx_wakes; /* SO_RCVLOWAT set with enough queued: the kernel's wake-up (EPOLLET) */
	bool rx_tcp_reset;   /* that end came as a reset (ECONNRESET), reported once */
	bool rx_reset_seen;  /* ... and stays a reset: later sends fail EPIPE at once */
	bool peer_gone_told; /* a write after the peer closed was taken (io_tx.c) */
	bool closed;         /* the last reference went: channel released */
	bool closing;        /* the program closed its last fd (close.c) */
	bool pinned;         /* must stay on TCP: used where the shim can not see */
	bool aborted;        /* the peer broke the protocol: the connection was
			      * ended as by a reset; calls fail ECONNRESET */
	int tcp_keep;        /* our dup of the file, made when the program closed
			      * a fd while a call was in progress on it (-1: none) */
	bool fd_lost;        /* such a close could not make tcp_keep (EMFILE) */
	unsigned active;     /* data calls in progress (io.c), spinning or sleeping */
	unsigned raw_reads;  /* of them, in the kernel's own blocking read (io_rx.c,
			      * recv_raw): no handshake starts meanwhile */
	bool shared;         /* another process may reach its channel or stream: a
			      * fork while it had one, an SCM_RIGHTS send */
	bool app_nodelay; /* TCP_NODELAY as the program set it */
	long long rcv_timeout_ms, snd_timeout_ms; /* SO_RCVTIMEO/SO_SNDTIMEO; -1: none */
	int rcv_lowat; /* SO_RCVLOWAT as the program set it (0: the default, 1) */
	enum shim_dir tx_dir, rx_dir;
	uint64_t tx_tcp_bytes, rx_tcp_bytes; /* application bytes carried by TCP */
	bool rx_switch_known;
	uint64_t rx_switch_at;
	uint8_t rx_nonce[16]; /* what the peer's SWITCH frame must carry */
	uint8_t tx_nonce[16]; /* what our SWITCH frame carries */
	uint8_t rx_frame[24]; /* the peer's SWITCH frame as it arrives */
	size_t rx_frame_len;
	uint8_t tcp_out[64]; /* frames waiting for TCP send space */
	size_t tcp_out_len;
	unsigned bells_owed; /* bells the peer took an arm for and will send */
	unsigned bells_early; /* bells drained before the disarm that owes them (frames.c) */
	unsigned rx_bells;    /* bells the peer sent us, all told (frames.c) */
	unsigned rx_bells_at_send; /* rx_bells at our last send that moved bytes (io_tx.c) */
	unsigned exchanges, unpaid; /* in this window, and of them woken each way (io_tx.c) */
	unsigned unpaid_windows; /* windows in a row with too many unpaid (io_tx.c) */
	unsigned chan_sends; /* sends that moved bytes on the channel (io_tx.c, RDMASHIM_TEST_HANDBACK_AFTER) */
	bool unpaid_due;     /* judged unpaid: back to TCP at the next quiet send (io_tx.c) */
	unsigned sleepers;   /* threads of ours waiting on this connection */
	unsigned rx_idle_arms; /* rx arms since data last came (io_sleep.c, arm_grace) */
	bool shared_sleep;   /* two of them at once were seen (io_sleep.c) */
	struct shim_spin_hist spin_hist; /* do this socket's waits spin (spin.h) */
	struct shim_chan *chan;
	/* Its record in the live stats area (core/statarea.h; NULL: none),
	 * the fd it was tracked under, whether a round trip is open (our
	 * send began it, no data came back yet), how many began, and when
	 * the open one's send went (0: not timed; sockstat.h). */
	struct shim_stat_rec *stat;
	int stat_fd;
	uint8_t stat_chan; /* enum shim_transport of the channel it had */
	uint8_t ab_arm;    /* enum shim_stat_arm_id, 0 with no A/B test */
	bool ab_fell_back, ab_erred; /* counted in its arm once */
	bool shadowed;     /* RDMASHIM_MODE=shadow: negotiated to the switch, stayed on TCP */
	bool stat_rt_open;
	uint32_t stat_rts;
	unsigned long long stat_sent_ns;

	/* Back to TCP after the channel failed (failover.c). */
	bool fo_started;    /* our RESUME is queued: the channel carries nothing more */
	enum shim_reason fo_why; /* why we left on purpose (failover.c); NONE: a failure */
	bool fo_peer_known; /* the peer's RESUME arrived: plain bytes follow it */
	bool fo_peer_rx_nothing; /* the channel carried none of our bytes: replay from 0 */
	bool fo_tx_done;    /* our replay went out: tx is plain TCP again */
	bool fo_peer_closed; /* the peer closed first: no RESUME of ours went (failover.c) */
	bool fo_peer_stays; /* the peer's direction never switched: no RESUME comes */
	bool fo_absorb_bad; /* a frame other than bells came in one read with SWITCH */
	uint64_t fo_peer_rx_offset; /* what the peer's RESUME said it received */
	bool fo_offset_implied;     /* ... taken from a lossless channel before it came */
	uint64_t fo_implied_at;     /* ... and named in our RESUME (tx_from) */
	/* The peer's RESUME said where its bytes behind it start (wire.h,
	 * SHIM_RESUME_F_TX_FROM), and what our RESUME named (or would have):
	 * the two must agree before a byte behind the peer's RESUME is read. */
	bool fo_peer_from_known;
	uint64_t fo_peer_tx_from;
	bool fo_rx_said_known;
	uint64_t fo_rx_said;
	uint8_t *fo_replay;         /* our bytes the peer never got, sent on TCP first */
	size_t fo_replay_len, fo_replay_off;
	/* A hand-back that read the peer's plain bytes before its SWITCH
	 * frame (handback.c): our RETURN frame and those bytes, read so far
	 * (fo_ret_got, of fo_ret_len) and sent so far (fo_ret_off), ahead of
	 * every frame queued after it (frames.c). */
	uint8_t *fo_ret;
	size_t fo_ret_len, fo_ret_got, fo_ret_off;
	bool fo_ret_queued; /* complete, and in the queue: flush sends it first */
	/* The peer's RETURN: its bytes as they arrive (fo_back_got of
	 * fo_back_len), sent back behind our RESUME, ahead of our replay. */
	uint8_t *fo_back;
	size_t fo_back_len, fo_back_got;

	/* Upgrade handshake (upgrade.c). */
	enum shim_phase phase;
	const struct shim_transport_type *xport; /* the transport picked (transport.h) */
	void *neg; /* its negotiation state; freed by its release */
	unsigned long long deadline_ns, next_try_ns, retry_delay_ns;
	pid_t io_pid; /* the process that started the upgrade */
	int neg_fd;   /* the fd it started from (a fork settles it: socklife.c) */
	/* An event loop's wake fd for the negotiation (upgrade_wake.c), the
	 * wait fd it watches now (-1: none), and which one it is: every epoll
	 * fd has the same inode, so a waiter's copy is matched by this count
	 * of the ones made. */
	struct shim_owned_fd neg_wake;
	int neg_wake_watch;
	unsigned neg_wake_gen;
	/* Calls into the transport's negotiation, which alone opens and closes
	 * its fds (upgrade.c), and their count when the wake fd was last
	 * checked: while it stands, the watch stands too, with no system call. */
	unsigned neg_steps, neg_wake_steps;
	bool await_bytes_used; /* the one retry of an idle start was granted (upgrade.c) */
	bool forked_idle; /* a fork found it idle: another process may have moved its
			   * stream, so its counts are checked before an upgrade */
	/* RDMASHIM_TEST_STAMPS (core/stamps.h): when the upgrade started here
	 * and each direction switched here (shim_now_ns; 0: not yet). */
	unsigned long long stamp_start_ns, stamp_tx_ns, stamp_rx_ns;

	struct shim_ep *ep; /* SHIM_ROLE_EPOLL only */
};

/*
 * References (shim/LIFETIME.md): one per fd in the table, plus one per call
 * in progress, taken atomically with the lookup by shim_sock_get(), so a
 * thread sleeping in recv keeps the channel mapped while another thread
 * closes the fd. The last one releases the channel; the memory goes back to
 * a type-stable pool, never to malloc, so a lookup racing the last put
 * still reads a shim_sock.
 */
/* socklife.c: the last reference went (shim_sock_put()). */
void shim_sock_free_last(struct shim_sock *sock);

/* Gives back a reference (NULL: nothing). Inline: every intercepted call
 * takes and gives one. */
static inline void shim_sock_put(struct shim_sock *s)
{
	/* Acq_rel: every use of the sock by this holder happens before the
	 * free, and the freeing thread sees every other holder's writes. */
	if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
		shim_sock_free_last(s);
}

/* The socket at fd with a reference held, or NULL. Every non-NULL result
 * is given back with shim_sock_put(). */
static inline struct shim_sock *shim_sock_get(int fd)
{
	for (;;) {
		struct shim_sock *s = shim_fd_get_acquire(fd);
		int r;

		if (!s)
			return NULL;
		r = __atomic_load_n(&s->refs, __ATOMIC_RELAXED);
		do {
			if (r == 0)
				break;
			/* Acquire: pairs with the release store of refs in
			 * shim_sock_alloc() and the acq_rel drop in put. */
		} while (!__atomic_compare_exchange_n(&s->refs, &r, r + 1, true, __ATOMIC_ACQUIRE,
						      __ATOMIC_RELAXED));
		if (r == 0)
			continue; /* freed since the load: the entry changed too */
		/* The sock may have been freed and made again for another fd
		 * between our load and our increment: the entry says. */
		if (likely(shim_fd_get_acquire(fd) == s))
			return s;
		shim_sock_put(s);
	}
}

/* Whether the sock at fd may be intercepted, looked at without a
 * reference: the pool is type-stable, so a sock freed meanwhile is still
 * one to read, and a connection that left interception for good (or never
 * had it: an epoll set, a listener, a connection on TCP for good) costs
 * its calls no reference taken and given back. A true answer is checked
 * again under a reference. */
static inline bool shim_fd_may_intercept(int fd)
{
	struct shim_sock *s = shim_fd_get(fd);

	return s && __atomic_load_n(&s->intercept, __ATOMIC_RELAXED);
}

/*
 * fd's epoll registration changes hold nothing of the shim's: its file is
 * not intercepted and no item of any set names it (a connection on TCP for
 * good, once the program's registrations left our items). Looked at as
 * shim_fd_may_intercept does, without a reference: a sock recycled under
 * it is a close racing the call, whose outcome is the kernel's to decide.
 * Relaxed: the items that matter are fd's own, which only fd's
 * registration changes (the program's, ordered by it) or its close make or
 * drop. The epoll_ctl wrapper asks it first: a program that changes its
 * registrations on every request (redis's event loop: five calls a
 * request) pays two loads for each, not a call into the epoll layer.
 */
static inline bool shim_fd_ctl_is_kernels(int fd)
{
	struct shim_sock *s = shim_fd_get(fd);

	return s && !__atomic_load_n(&s->intercept, __ATOMIC_RELAXED) &&
	       !__atomic_load_n(&s->ep_items, __ATOMIC_RELAXED);
}

/* The socket at fd if the data path intercepts it (held), else NULL: the
 * kernel's own path. A fd the shim does not track costs one load, one it
 * no longer intercepts two. */
static inline struct shim_sock *shim_sock_get_intercepted(int fd)
{
	struct shim_sock *s;

	if (likely(!shim_fd_may_intercept(fd)))
		return NULL;
	s = shim_sock_get(fd);
	if (s && !__atomic_load_n(&s->intercept, __ATOMIC_RELAXED)) {
		shim_sock_put(s);
		return NULL;
	}
	return s;
}

/* Under sock->lock: the fd to use for the kernel socket (the program's fd
 * number while the table still maps it to sock, else our own copy), or
 * -EBADF when neither names it any more. While sock->lock is held, a fd
 * returned here names the socket: close clears the table, then takes the
 * lock, before the real close. */
static inline int shim_sock_fd_locked(const struct shim_sock *s, int fd)
{
	if (s->tcp_keep >= 0)
		return s->tcp_keep;
	if (fd >= 0 && shim_fd_get_acquire(fd) == s)
		return fd;
	return -EBADF;
}

/* Under sock->lock, fd from shim_sock_fd_locked(): the bytes that came
 * over TCP so far, read by the program (rx_tcp_bytes) or still queued in
 * the kernel. 0, or -errno when the kernel can not say. */
int shim_sock_tcp_arrived(const struct shim_sock *s, int fd, uint64_t *arrived);

/* Process-wide: fork handlers over every lock of this module (atfork.c). */
void shim_sock_atfork_prepare(void);
void shim_sock_atfork_parent(void);
void shim_sock_atfork_child(void);
/* After every fork handler unlocked: frees what only dead threads held. */
void shim_sock_atfork_child_done(void);
/* Socks ever made (the pool's size, live or free), for tests and benchmarks. */
unsigned shim_sock_pool_count(void);

const char *shim_role_name(enum shim_role role);
const char *shim_phase_name(enum shim_phase phase);
const char *shim_state_name(enum shim_sock_state state);

/* Policy entry points, called by the exported wrappers after the real call. */
void shim_sock_on_listen(int fd);
/* accept4 on a tracked listener, the new connection tracked; the fd or a
 * negative errno. */
int shim_sock_accept(int listen_fd, struct sockaddr *addr, socklen_t *len, int flags);
void shim_sock_on_connect(int fd, const struct sockaddr *addr, socklen_t len, int rc, int err);
/* Called before the real close. */
void shim_sock_on_close(int fd);
/* Around a dup2/dup3 onto newfd: before the real call, takes newfd's socket
 * out of the table as close would (returned: give it to _after_replace);
 * after it, rc < 0 puts it back. */
struct shim_sock *shim_sock_before_replace(int oldfd, int newfd);
void shim_sock_after_replace(int newfd, struct shim_sock *old, int rc);
void shim_sock_on_dup(int oldfd, int newfd);
/* Calls fn with each fd an SCM_RIGHTS message of msg carries (sockfd.c). */
void shim_sock_each_right(const struct msghdr *msg, void (*fn)(int fd));
/* exec: switched connections that stay open go back to TCP (sockfd.c). */
void shim_sock_hand_off_before_exec(void);
/* The process is about to restrict its own system calls (seccomp): every
 * connection it holds goes to the kernel's own path, on TCP, so that from
 * then on each call on it is the one the program made. Returns how many
 * could not (they stay on their channel, traced). After upgrades are
 * barred (shim_upgrade_bar): no handshake may start meanwhile. */
unsigned shim_sock_leave_for_sandbox(void);
/* sendmsg with SCM_RIGHTS: the tracked sockets it carries become shared. */
void shim_sock_note_rights_sent(const struct msghdr *msg);
void shim_sock_on_shutdown(int fd, int how);
/* fds that arrived without our seeing them made: inherited or SCM_RIGHTS. */
void shim_sock_adopt(int fd, const char *how);
void shim_sock_adopt_inherited(void);
void shim_sock_adopt_rights(const struct msghdr *msg);

/* Starts tracking an epoll fd that is about to hold an intercepted fd, with
 * ep its set (io/epoll.c), which the sock owns from here on (NULL: none
 * could be made); returns its sock held (shim_sock_put()), or NULL. */
struct shim_sock *shim_sock_track_epoll(int epfd, struct shim_ep *ep);

/*
 * What the layers above do when this one's objects come and go: conn calls
 * them and knows nothing else of those layers. Set once by
 * shim_layers_register() (interpose/layers.c) before the first sock is
 * made; a NULL member means nothing to do.
 */
struct shim_sock_hooks {
	/* The last reference went, under s->lock: the connection's handshake
	 * and channel go (conn/upgrade.c). */
	void (*release)(struct shim_sock *s);
	/* An epoll sock's set goes (io/epoll.c). */
	void (*ep_free)(struct shim_ep *ep);
	/* A connection's fd is about to close, its entry cleared: the waits
	 * let go of its number (io/epoll_close.c). */
	void (*fd_closed)(int fd, struct shim_sock *s);
	/* connect tracked a connection: this process will do its I/O, so the
	 * transports warm up now (conn/transport.h). */
	void (*connected)(const struct shim_tuple *t);
	/* listen tracked a listener, or accept a connection from one: this
	 * process serves t->local's port (conn/transport.h). */
	void (*serving)(const struct shim_tuple *t);
	/* A fork is coming, under s->lock: a handshake under way settles so
	 * that no two processes inherit it half-way (conn/upgrade.c). */
	void (*fork_settle)(struct shim_sock *s, int fd);
};
extern struct shim_sock_hooks shim_sock_hooks;

/* Kept in step with the kernel by the wrappers, for intercepted fds. */
void shim_sock_on_fcntl_setfl(int fd, int flags);
/* ioctl on a tracked fd: FIONBIO needs the shim's view (FIONREAD on an
 * intercepted fd is io's: shim_io_ioctl()). */
int shim_sock_ioctl(int fd, unsigned long request, void *arg);
void shim_sock_on_setsockopt(int fd, int level, int name, const void *val, socklen_t len);
/* getsockopt on a tracked fd: 1 when it answered from the program's view. */
int shim_sock_getsockopt(int fd, int level, int name, void *val, socklen_t *len);

void shim_sock_before_exec(void);
void shim_sock_after_fork_child(void);

/* Counts of live tracked sockets, for stats and tests. */
unsigned shim_sock_live_count(void);

/* socklife.c, for sock.c: a new sock with one reference, the one its
 * fd-table entry will own; the drop of such a reference (an entry cleared,
 * or never made); a call's reference turned into an entry's (dup). */
struct shim_sock *shim_sock_alloc(void);
/* sock.c: installs sock (its fd reference) at fd, dropping whatever stale
 * entry was there; 0 or -errno (then the reference was dropped). */
int shim_sock_install(int fd, struct shim_sock *sock);
void shim_sock_unref_fd(struct shim_sock *sock);
void shim_sock_ref_becomes_fd(struct shim_sock *sock);

#endif
