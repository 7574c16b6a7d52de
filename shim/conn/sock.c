/*
 * Tracking policy: which fds the shim follows, and the life of a shim_sock.
 * Every function here runs after the real call succeeded (or, for close and
 * dup2, before it), never on a pass-through fd's data path.
 */
#include "sock.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>

#include <sys/ioctl.h>

#include "close.h"
#include "statarea.h"
#include "fdtable.h"
#include "streampos.h"
#include "frames.h"
#include "upgrade.h"
#include "real.h"
#include "reaper.h"
#include "sockstat.h"
#include "stats.h"
#include "trace.h"
#include "transport.h"

static struct shim_sock *sock_new(enum shim_role role, enum shim_sock_state state,
				  const struct shim_tuple *tuple)
{
	struct shim_sock *sock = shim_sock_alloc();

	if (!sock)
		return NULL;
	sock->role = role;
	sock->state = state;
	sock->tuple = *tuple;
	sock->born_ns = shim_now_ns();
	sock->rcv_timeout_ms = -1;
	sock->snd_timeout_ms = -1;
	return sock;
}


/* The socket's protocol is TCP. Its family need not be asked: every caller
 * got an AF_INET or AF_INET6 address from it or for it first. */
static bool is_tcp(int fd)
{
	int protocol = 0;
	socklen_t len = sizeof(protocol);

	return REAL(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) == 0 && protocol == IPPROTO_TCP;
}

static int endpoint_of(int fd, bool peer, struct shim_endpoint *ep)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int rc = peer ? getpeername(fd, (struct sockaddr *)&ss, &len)
		      : getsockname(fd, (struct sockaddr *)&ss, &len);

	if (rc < 0)
		return -errno;
	return shim_endpoint_from_sockaddr((struct sockaddr *)&ss, len, ep);
}

/* Decides whether a whitelisted connection may try to upgrade. */
static void decide_eligibility(struct shim_sock *sock)
{
	/* The arm is the hash's alone, whatever else keeps the connection on
	 * TCP (RDMASHIM_TRANSPORTS=tcp makes an A/A test: both arms TCP). */
	if (shim_cfg.ab_percent < 100)
		sock->ab_arm = shim_tuple_ab_selected(&sock->tuple, shim_cfg.ab_percent) ? SHIM_STAT_ARM_ACCEL
											: SHIM_STAT_ARM_CONTROL;
	if (shim_upgrade_barred()) {
		/* A sandboxed process: its calls on the connection stay the
		 * program's own (io/bypass.c). */
		sock->eligible = false;
		sock->reason = SHIM_REASON_SANDBOXED;
	} else if (shim_cfg.n_transports == 0) {
		sock->eligible = false;
		sock->reason = SHIM_REASON_TCP_ONLY;
	} else if (!shim_tuple_ab_selected(&sock->tuple, shim_cfg.ab_percent)) {
		sock->eligible = false;
		sock->reason = SHIM_REASON_AB_EXCLUDED;
	} else {
		sock->eligible = true;
		sock->reason = SHIM_REASON_WHITELISTED;
		shim_reap_prepare();
	}
	shim_stats_count(sock->reason);
}

static void trace_tracked(int fd, const struct shim_sock *sock, const char *how)
{
	SHIM_TRACE(SHIM_TRACE_INFO, "conn.track", fd, &sock->tuple, sock->reason,
		   "\"role\":\"%s\",\"state\":\"%s\",\"eligible\":%s,\"how\":\"%s\"",
		   shim_role_name(sock->role), shim_state_name(sock->state),
		   sock->eligible ? "true" : "false", how);
}

/*
 * An adopted socket (inherited, received) may have carried bytes through
 * another process or image, and its peer may have been switched and back:
 * the two ends' counts of the stream, which a SWITCH frame's offset names,
 * need not agree then. Only a stream still at its first byte both ways, by
 * the kernel's own counts, may upgrade; when the kernel can not say, no.
 */
static bool moved_before(int fd)
{
	uint64_t written = 0, read = 0;

	return shim_stream_position(fd, &written, &read) < 0 || written || read;
}

/* Returns whether the connection is tracked and may upgrade. nonblocking:
 * the file's O_NONBLOCK when the caller knows it (accept4's flags), else
 * -1 (asked of the kernel). */
static bool track_connection(int fd, enum shim_role role, enum shim_sock_state state,
			     const struct shim_tuple *tuple, const char *how, int nonblocking)
{
	struct shim_sock *sock = sock_new(role, state, tuple);
	bool eligible;

	if (!sock) {
		SHIM_TRACE(SHIM_TRACE_ERROR, "conn.untracked", fd, tuple, SHIM_REASON_INTERNAL_ERROR,
			   "\"errno\":%d", ENOMEM);
		return false;
	}
	decide_eligibility(sock);
	if (sock->eligible && strcmp(how, "connect") && strcmp(how, "accept") && moved_before(fd)) {
		sock->eligible = false;
		sock->reason = SHIM_REASON_ADOPTED_MID_STREAM;
		shim_stats_count(sock->reason);
	}
	/* An A/B arm that stays on TCP (the control arm; every arm when
	 * RDMASHIM_TRANSPORTS=tcp) is still measured: its calls go through
	 * the shim as the accelerated arm's do, so both arms pay the same
	 * interception and their round trips compare. It never negotiates. */
	bool measured = !sock->eligible && sock->ab_arm &&
			(sock->reason == SHIM_REASON_AB_EXCLUDED || sock->reason == SHIM_REASON_TCP_ONLY);

	if (measured)
		sock->phase = SHIM_PHASE_FAILED;
	if (sock->eligible || measured) {
		if (nonblocking < 0) {
			int fl = REAL(fcntl)(fd, F_GETFL);

			nonblocking = fl >= 0 && (fl & O_NONBLOCK);
		}
		sock->nonblocking = nonblocking;
		/* From here on every data call on this fd goes through the data path (io_rx.c, io_tx.c). */
		sock->intercept = true;
	}
	eligible = sock->eligible;
	shim_sockstat_track(sock, fd);
	trace_tracked(fd, sock, how);
	if (shim_sock_install(fd, sock) < 0) {
		SHIM_TRACE(SHIM_TRACE_WARN, "conn.untracked", fd, tuple, SHIM_REASON_INTERNAL_ERROR,
			   "\"why\":\"fd beyond RLIMIT_NOFILE\"");
		return false;
	}
	return eligible;
}

int shim_sock_tcp_arrived(const struct shim_sock *s, int fd, uint64_t *arrived)
{
	int queued = 0;

	if (REAL(ioctl)(fd, FIONREAD, &queued) < 0)
		return -errno;
	if (queued < 0)
		return -EPROTO;
	*arrived = s->rx_tcp_bytes + (uint64_t)queued;
	return 0;
}

void shim_sock_on_listen(int fd)
{
	struct shim_tuple tuple = { 0 };

	if (!shim_cfg.enabled || shim_fd_get(fd))
		return;
	if (endpoint_of(fd, false, &tuple.local) < 0 || !is_tcp(fd))
		return;
	if (!shim_config_port_listed(&shim_cfg, tuple.local.port)) {
		SHIM_TRACE(SHIM_TRACE_TRACE, "listen.skip", fd, &tuple, SHIM_REASON_NOT_WHITELISTED, NULL);
		return;
	}
	struct shim_sock *sock = sock_new(SHIM_ROLE_LISTENER, SHIM_STATE_LISTENING, &tuple);

	if (!sock)
		return;
	sock->reason = SHIM_REASON_WHITELISTED;
	SHIM_TRACE(SHIM_TRACE_INFO, "listen.track", fd, &tuple, sock->reason, NULL);
	if (shim_sock_install(fd, sock) == 0 && shim_sock_hooks.serving)
		shim_sock_hooks.serving(&tuple);
}

static void on_accept(int listen_fd, int fd, const struct sockaddr *peer, socklen_t peer_len, int flags)
{
	struct shim_sock *listener = shim_sock_get(listen_fd);
	struct shim_tuple tuple;
	bool is_listener = listener && listener->role == SHIM_ROLE_LISTENER;

	shim_sock_put(listener);
	if (!is_listener)
		return;
	if (endpoint_of(fd, false, &tuple.local) < 0)
		return;
	if ((!peer || shim_endpoint_from_sockaddr(peer, peer_len, &tuple.peer) < 0) &&
	    endpoint_of(fd, true, &tuple.peer) < 0)
		return;
	/* An accepted socket's O_NONBLOCK is accept4's flag, never the
	 * listener's (accept(2)). */
	track_connection(fd, SHIM_ROLE_SERVER, SHIM_STATE_TCP, &tuple, "accept", !!(flags & SOCK_NONBLOCK));
	/* Also where the listener came from another process (inherited, or
	 * its beacon's holder exited): clients learn that this one serves. */
	if (shim_sock_hooks.serving)
		shim_sock_hooks.serving(&tuple);
}

/*
 * accept on a tracked listener. The call brings the peer's address, which
 * tracking needs: into a buffer of ours when the program asks for none (a
 * getpeername saved per connection); the program's own when it holds the
 * whole address. The program's buffer is never written by us.
 */
int shim_sock_accept(int listen_fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	struct sockaddr_storage ss;
	socklen_t ss_len = sizeof(ss), asked = len ? *len : 0;
	bool ours = !addr;
	int fd = REAL(accept4)(listen_fd, ours ? (struct sockaddr *)&ss : addr, ours ? &ss_len : len, flags);

	if (fd < 0)
		return -errno;
	if (ours)
		on_accept(listen_fd, fd, (struct sockaddr *)&ss, ss_len, flags);
	else
		on_accept(listen_fd, fd, *len <= asked ? addr : NULL, *len, flags);
	return fd;
}

void shim_sock_on_connect(int fd, const struct sockaddr *addr, socklen_t len, int rc, int err)
{
	struct shim_tuple tuple;
	struct shim_sock *known;

	if (!shim_cfg.enabled)
		return;
	known = shim_sock_get(fd);
	if (known) {
		/* A repeated connect() reports how a nonblocking one ended. */
		pthread_mutex_lock(&known->lock);
		if (known->state == SHIM_STATE_CONNECTING && (rc == 0 || err == EISCONN))
			known->state = SHIM_STATE_TCP;
		shim_sockstat_sync(known);
		pthread_mutex_unlock(&known->lock);
		shim_sock_put(known);
		return;
	}
	if (rc < 0 && err != EINPROGRESS)
		return;
	if (shim_endpoint_from_sockaddr(addr, len, &tuple.peer) < 0)
		return;
	if (!shim_config_port_listed(&shim_cfg, tuple.peer.port)) {
		shim_stats_count(SHIM_REASON_NOT_WHITELISTED);
		SHIM_TRACE(SHIM_TRACE_TRACE, "conn.skip", fd, NULL, SHIM_REASON_NOT_WHITELISTED,
			   "\"port\":%u", tuple.peer.port);
		return;
	}
	if (!is_tcp(fd) || endpoint_of(fd, false, &tuple.local) < 0)
		return;
	/* An IPv6 socket connected to a v4-mapped address reports a v4-mapped
	 * local address too: both sides of the tuple compare the same. */
	/* A connect still in progress is a nonblocking one. */
	if (track_connection(fd, SHIM_ROLE_CLIENT, rc == 0 ? SHIM_STATE_TCP : SHIM_STATE_CONNECTING, &tuple,
			     "connect", rc == 0 ? -1 : 1))
		/* The process that connects is the one that will do the I/O:
		 * start the RDMA warm-up now (a thread; this call does not wait),
		 * so that it is done or nearly by the first send. Not at listen
		 * or accept, nor for inherited fds (adopted in the constructor,
		 * before a daemon's fork): those processes may fork the workers
		 * that do the I/O, and a child can not use RDMA its parent set
		 * up (rdma_dev.c); a worker warms up by itself. */
		if (shim_sock_hooks.connected)
			shim_sock_hooks.connected(&tuple);
}

void shim_sock_on_shutdown(int fd, int how)
{
	struct shim_sock *sock = shim_sock_get(fd);

	if (sock)
		SHIM_TRACE(SHIM_TRACE_DEBUG, "conn.shutdown", fd, &sock->tuple, SHIM_REASON_NONE,
			   "\"how\":%d", how);
	shim_sock_put(sock);
}

struct shim_sock *shim_sock_track_epoll(int epfd, struct shim_ep *ep)
{
	struct shim_tuple none = { 0 };
	struct shim_sock *sock = ep ? sock_new(SHIM_ROLE_EPOLL, SHIM_STATE_TCP, &none) : NULL;

	if (!sock) {
		if (ep && shim_sock_hooks.ep_free)
			shim_sock_hooks.ep_free(ep);
		return NULL;
	}
	/* The set keeps its own copy of epfd for the shim's waits and
	 * registrations (io/epoll.c). */
	sock->ep = ep;
	/* Held for the caller; the table's reference is the one made here. */
	__atomic_add_fetch(&sock->refs, 1, __ATOMIC_RELAXED);
	if (shim_sock_install(epfd, sock) < 0) {
		shim_sock_put(sock);
		return NULL;
	}
	return sock;
}

void shim_sock_on_fcntl_setfl(int fd, int flags)
{
	struct shim_sock *sock = shim_sock_get(fd);

	if (sock) {
		pthread_mutex_lock(&sock->lock);
		sock->nonblocking = (flags & O_NONBLOCK) != 0;
		pthread_mutex_unlock(&sock->lock);
	}
	shim_sock_put(sock);
}

int shim_sock_getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct shim_sock *sock;
	int v = -1;

	if (!val || !len || *len < sizeof(int))
		return 0;
	if (!(level == SOL_SOCKET && name == SO_ERROR) && !(level == IPPROTO_TCP && name == TCP_NODELAY))
		return 0;
	sock = shim_sock_get(fd);
	if (!sock)
		return 0;
	pthread_mutex_lock(&sock->lock);
	if (sock->intercept && level == SOL_SOCKET) {
		/* A reset the shim read under the bells took the kernel's
		 * pending error: the program gets it here, once, as from the
		 * kernel. */
		if (sock->rx_tcp_reset)
			v = ECONNRESET;
		sock->rx_tcp_reset = false;
	} else if (sock->intercept) {
		/* The shim sets TCP_NODELAY for its bells; the program sees
		 * its own. */
		v = sock->app_nodelay;
	}
	pthread_mutex_unlock(&sock->lock);
	shim_sock_put(sock);
	if (v < 0)
		return 0;
	memcpy(val, &v, sizeof(v));
	*len = sizeof(v);
	return 1;
}

int shim_sock_ioctl(int fd, unsigned long request, void *arg)
{
	struct shim_sock *sock = shim_sock_get(fd);
	int rc;

	rc = REAL(ioctl)(fd, request, arg) < 0 ? -errno : 0;
	if (rc == 0 && sock && request == FIONBIO && arg) {
		pthread_mutex_lock(&sock->lock);
		sock->nonblocking = *(int *)arg != 0;
		pthread_mutex_unlock(&sock->lock);
	}
	shim_sock_put(sock);
	return rc;
}

/* Longest timeout kept as a number (about 292 years): longer ones, as
 * the kernel's past MAX_SCHEDULE_TIMEOUT, mean "never". */
#define TIMEOUT_MS_MAX (1LL << 53)

static long long timeval_ms(const void *val, socklen_t len)
{
	struct timeval tv;

	if (len < sizeof(tv))
		return -1;
	memcpy(&tv, val, sizeof(tv));
	if (tv.tv_sec == 0 && tv.tv_usec == 0)
		return -1; /* zero means "no timeout" */
	if (tv.tv_sec < 0)
		return 0; /* the kernel takes a negative time as "at once" */
	if (tv.tv_sec >= TIMEOUT_MS_MAX / 1000)
		return -1;
	return (long long)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
}

/* The options whose setting the sock keeps (the rest are the kernel's
 * alone: keep-alive, buffer sizes... cost a tracked fd no lookup). */
static bool option_kept(int level, int name)
{
	if (level == IPPROTO_TCP)
		return name == TCP_NODELAY;
	return level == SOL_SOCKET && (name == SO_RCVTIMEO || name == SO_SNDTIMEO || name == SO_RCVLOWAT);
}

void shim_sock_on_setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct shim_sock *sock;

	if (!option_kept(level, name))
		return;
	sock = shim_sock_get(fd);
	if (!sock)
		return;
	pthread_mutex_lock(&sock->lock);
	if (level == IPPROTO_TCP && name == TCP_NODELAY && len >= sizeof(int))
		sock->app_nodelay = *(const int *)val != 0;
	if (level == SOL_SOCKET && name == SO_RCVTIMEO)
		sock->rcv_timeout_ms = timeval_ms(val, len);
	else if (level == SOL_SOCKET && name == SO_SNDTIMEO)
		sock->snd_timeout_ms = timeval_ms(val, len);
	else if (level == SOL_SOCKET && name == SO_RCVLOWAT && len >= sizeof(int)) {
		sock->rcv_lowat = *(const int *)val;
		/* Linux's tcp_set_rcvlowat() wakes the readers when enough is
		 * queued for the new mark, or the peer's FIN came: an edge for
		 * EPOLLET (epoll_wait.c). On TCP the kernel does it itself. */
		if (sock->chan && sock->rx_dir == SHIM_DIR_CHAN) {
			size_t lowat = sock->rcv_lowat > 1 ? (size_t)sock->rcv_lowat : 1;

			if (sock->chan->ops->readable(sock->chan) >= lowat || sock->chan->ops->rx_eof(sock->chan))
				__atomic_add_fetch(&sock->rx_wakes, 1, __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&sock->lock);
	shim_sock_put(sock);
}

void shim_sock_adopt(int fd, const char *how)
{
	struct shim_tuple tuple = { 0 };
	int listening = 0;
	socklen_t len = sizeof(listening);

	if (!shim_cfg.enabled || shim_fd_get(fd))
		return;
	if (endpoint_of(fd, false, &tuple.local) < 0 || !is_tcp(fd))
		return;
	if (REAL(getsockopt)(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening) {
		shim_sock_on_listen(fd);
		return;
	}
	if (endpoint_of(fd, true, &tuple.peer) < 0)
		return;
	/* The whitelisted port names the server: if ours is listed we accepted. */
	if (shim_config_port_listed(&shim_cfg, tuple.local.port))
		track_connection(fd, SHIM_ROLE_SERVER, SHIM_STATE_TCP, &tuple, how, -1);
	else if (shim_config_port_listed(&shim_cfg, tuple.peer.port))
		track_connection(fd, SHIM_ROLE_CLIENT, SHIM_STATE_TCP, &tuple, how, -1);
}

/* Inherited fds seen so far, by socket inode: several fds of one socket
 * (inetd's dup2 onto stdin and stdout) are one connection, like dup's. */
#define ADOPT_SEEN_MAX 64

struct adopt_seen {
	struct {
		ino_t ino;
		int fd;
	} fds[ADOPT_SEEN_MAX];
	int n;
};

static void adopt_one(int fd, void *ctx)
{
	struct adopt_seen *seen = ctx;
	struct stat st;
	int twin = -1;

	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return;
	for (int i = 0; i < seen->n && twin < 0; i++)
		if (seen->fds[i].ino == st.st_ino)
			twin = seen->fds[i].fd;
	if (twin >= 0 && shim_fd_get(twin)) {
		shim_sock_on_dup(twin, fd);
		return;
	}
	shim_sock_adopt(fd, "inherited");
	if (shim_fd_get(fd) && seen->n < ADOPT_SEEN_MAX) {
		seen->fds[seen->n].ino = st.st_ino;
		seen->fds[seen->n].fd = fd;
		seen->n++;
	}
}

void shim_sock_adopt_inherited(void)
{
	struct adopt_seen seen = { .n = 0 };

	shim_fd_each_open(adopt_one, &seen);
}

static void adopt_right(int fd)
{
	shim_sock_adopt(fd, "scm_rights");
}

void shim_sock_adopt_rights(const struct msghdr *msg)
{
	shim_sock_each_right(msg, adopt_right);
}

void shim_sock_before_exec(void)
{
	shim_sock_hand_off_before_exec();
	if (!shim_upgrade_barred())
		shim_statarea_before_exec();
	SHIM_TRACE(SHIM_TRACE_DEBUG, "process.exec", -1, NULL, SHIM_REASON_NONE,
		   "\"tracked\":%u", shim_sock_live_count());
}

void shim_sock_after_fork_child(void)
{
	shim_trace_after_fork();
	SHIM_TRACE(SHIM_TRACE_DEBUG, "process.fork", -1, NULL, SHIM_REASON_NONE,
		   "\"parent\":%d,\"tracked\":%u", (int)getppid(), shim_sock_live_count());
}
