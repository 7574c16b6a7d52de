/*
 * The shm negotiation over a pair channel (shim/PROTOCOL.md, "Pair
 * channel"): C sends a HINT with a fresh socketpair end and the ring; S
 * checks C against the TCP connection as on a named rendezvous, maps the
 * ring and commits with one COMMIT that carries its TCP socket; C checks
 * that socket and follows with its SWITCH_AT. One message each way before
 * both directions move, and no name, listen, connect or retry.
 *
 * Point of no return, as on the named rendezvous: S commits first, and only
 * after C passed its check. C may stop S (SHUT_RD on its socketpair end: S's
 * COMMIT then fails with EPIPE) until it has read a COMMIT; a COMMIT that
 * got in before is followed. Anything that does not end in a COMMIT leaves
 * both ends on TCP, and C goes on with the named rendezvous.
 */
#include "shm_pair_neg.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdtable.h"
#include "frames.h"
#include "neg_state.h"
#include "pair.h"
#include "real.h"
#include "reaper.h"
#include "rendezvous.h"
#include "shm.h"
#include "trace.h"
#include "upgrade.h"
#include "wire.h"

/* Pending HINTs one handshake at S looks at before it gives the pair way
 * up for this connection (a stranger may have queued decoys). */
#define CLAIM_TRIES 4

/* A HINT our own close stopped sooner than this (50 ms) after it went tells
 * nothing of the server's processes: a short connection (one request, a
 * loaded machine) ends before its server's next call could take it. Taken
 * for a miss, it would pause the pair (shim_pair_miss), and every upgrade
 * meanwhile would take the named way, a ring memfd each
 * (docs/BENCHMARKS.md, "Pair misses"). */
#define CLOSE_MISS_GRACE_NS 50000000ull
/* ... unless the connection went on for two more round trips after it
 * (four turns): the process holding the connection answered in calls in
 * which its own upgrade was due, and would have taken a HINT on its pair.
 * The HINT went to another process of the server's (prefork): the pair
 * pauses, and the next connections take the named way, which reaches the
 * process that accepted them. Without this, a prefork server whose kernel
 * gave most connections to a process with no pair to the client upgraded
 * almost none of them (t_shm_pair (b); docs/BENCHMARKS.md, "Pair
 * misses"). */
#define CLOSE_MISS_TURNS 4

static bool stopped_by_early_close(const struct shim_sock *s, const struct shm_neg *ng, unsigned long long now)
{
	return ng->stopped && s->closing && now - ng->listen_ns < CLOSE_MISS_GRACE_NS &&
	       (uint16_t)(s->tcp_turns - ng->turns_at_hint) < CLOSE_MISS_TURNS;
}

static void fill_endpoints(struct shim_msg_hint *h, const struct shim_sock *s)
{
	const struct shim_endpoint *c = shm_client_ep(s), *sv = shm_server_ep(s);

	memcpy(h->client_addr, c->addr, 16);
	memcpy(h->server_addr, sv->addr, 16);
	h->client_port = c->port;
	h->server_port = sv->port;
}

bool shm_c_hint(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = shm_neg_of(s);
	struct shim_msg_hint hint;
	struct shim_chan *chan;
	int sp[2];
	pid_t pid;

	/* A shut write side can carry no SWITCH frame: the named way says so. */
	if (!shim_cfg.shm_pairs || s->wr_shut)
		return false;
	/* Before the socketpair: past it, the only ways out are its own. */
	if (shim_upgrade_new_nonce(s->rx_nonce) < 0)
		return false;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) < 0)
		return false;
	sp[0] = shim_fd_own_checked(sp[0]);
	sp[1] = shim_fd_own_checked(sp[1]);
	if (sp[0] < 0 || sp[1] < 0) {
		shim_reap(sp[0]);
		shim_reap(sp[1]);
		return false;
	}
	memset(&hint, 0, sizeof(hint));
	shim_msg_init(&hint.hdr, SHIM_MSG_HINT, sizeof(hint));
	fill_endpoints(&hint, s);
	hint.ring_bytes = shm_ring_bytes();
	hint.tcp_fd = fd;
	memcpy(hint.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	if (shim_cfg.shm_bell_line)
		hint.hdr.flags |= SHIM_MSG_F_BELL_LINE;
	int pidfd = -1;
	int rc = shim_pair_send_hint(shm_server_ep(s), &hint, sp[1], now, &pid, &pidfd, &chan);

	/* The kernel holds S's copy now (or nobody does). */
	REAL(close)(sp[1]);
	if (rc < 0) {
		shim_reap(sp[0]);
		return false;
	}
	ng->rv_fd = sp[0];
	ng->via_pair = true;
	ng->pair_pid = pid;
	/* Our socketpair names ourselves: one copy writes into the pair's
	 * process, the one S's COMMIT must come from (shm_zc.h). */
	if (shim_cfg.zerocopy != SHIM_ZC_OFF) {
		shim_shm_zc_bind(chan, pidfd);
		ng->zc_bound = true;
	}
	ng->step = SHM_C_HINTED;
	ng->listen_ns = now;
	ng->rx_at_listen = s->rx_tcp_bytes;
	ng->turns_at_hint = s->tcp_turns;
	s->chan = chan;
	/* S may commit from here on. */
	shim_upgrade_committing(s);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.hint", fd, &s->tuple, SHIM_REASON_NONE, "\"peer_pid\":%d,\"slot\":%d",
		   (int)pid, hint.slot == SHIM_SLOT_NONE ? -1 : (int)hint.slot);
	return true;
}

/*
 * Nothing came on the socketpair but its end: S refused, never took the
 * HINT (not the process holding the connection) or was stopped by us. No
 * COMMIT was queued, so nothing switched. The pair pauses either way: a
 * HINT that found no taker before the connection ended (a fork, a pin or a
 * hand-off stopped it, or a close CLOSE_MISS_GRACE_NS or more after it) is
 * as much a sign of a prefork server as one that timed out. Stopped, the
 * upgrade ends, as on the named rendezvous; else the named way follows,
 * unless the upgrade's time is up.
 */
static enum shm_hint_result c_hint_fell_through(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shm_neg *ng = shm_neg_of(s);

	if (!stopped_by_early_close(s, ng, now))
		shim_pair_miss(shm_server_ep(s), now);
	SHIM_TRACE(SHIM_TRACE_DEBUG, "upgrade.hint_missed", fd, &s->tuple, SHIM_REASON_NONE, "\"stopped\":%s",
		   ng->stopped ? "true" : "false");
	if (ng->stopped) {
		shm_c_give_up(s, fd, SHIM_REASON_PEER_CLOSED);
		return SHM_HINT_ENDED;
	}
	shm_c_drop_ring(s);
	shm_close_fd(&ng->rv_fd);
	ng->via_pair = false;
	ng->server_has_shim = true;
	if (now >= s->deadline_ns) {
		shim_upgrade_fail(s, fd, SHIM_REASON_PEER_NO_SHIM);
		return SHM_HINT_ENDED;
	}
	shim_upgrade_negotiating(s, ng);
	return SHM_HINT_FALLBACK;
}

/*
 * S's COMMIT came: S's socket came with it (or, near our fd limit, only its
 * number). Only the process holding S's end of the connection can pass it.
 * A socket that is not it is a stranger's, and the real S never committed:
 * both stay on TCP. Without the socket and with its number no longer
 * S's, we can not tell a stranger from an S that closed since; S may have
 * switched, so the connection ends as by a reset rather than risk reading
 * S's SWITCH frame as data.
 */
static void c_take_commit(struct shim_sock *s, int fd, const struct shim_msg_commit *commit, int s_sock)
{
	struct shm_neg *ng = shm_neg_of(s);
	int rc = shm_verify_fault(s, fd, "client_commit");

	if (!rc)
		rc = shim_rv_verify_socket(s_sock, ng->pair_pid, commit->tcp_fd, shm_server_ep(s), shm_client_ep(s),
					   &ng->rv_owner);

	/* A COMMIT is sent by a server that has switched already: its SWITCH
	 * frame is on its way on TCP. Giving up now would hand that frame to
	 * the program as data (t_faults, verify-commit: the stream corrupt).
	 * Whoever sent it, the connection can not go on as plain TCP, so it
	 * ends as a reset, as one that can not hold the socket (EMFILE). Only
	 * a process holding our pair channel can get here. */
	if (rc < 0) {
		shm_trace_refused(s, fd, "client", -rc);
		if (s_sock != -EMFILE)
			shim_pair_miss(shm_server_ep(s), shim_now_ns());
		shim_frames_abort(s, fd, s_sock == -EMFILE ? SHIM_REASON_FD_LIMIT : SHIM_REASON_VERIFY_FAILED,
				  "commit_unverified");
		return;
	}
	memcpy(s->tx_nonce, commit->nonce, SHIM_NONCE_LEN);
	/* S rings us on the socketpair, which stays on as the bell line. */
	ng->keep_line = commit->hdr.flags & SHIM_MSG_F_BELL_LINE;
	shm_c_follow(s, fd, commit->switch_offset);
}

static enum shm_hint_result read_commit(struct shim_sock *s, int fd, unsigned long long now, bool stopped)
{
	struct shm_neg *ng = shm_neg_of(s);
	union shm_neg_msg msg;
	int s_sock;

	switch (shm_neg_recv(ng->rv_fd, &msg, SHIM_MSG_COMMIT, &s_sock, 1, NULL)) {
	case SHM_GOT_NONE:
		if (stopped)
			return c_hint_fell_through(s, fd, now);
		/* S has not taken the HINT: stop it (a COMMIT that got in
		 * first is still read, once more below), then go the named
		 * way. */
		if (now >= s->deadline_ns || shm_peer_answers_plain(s, ng, now)) {
			REAL(shutdown)(ng->rv_fd, SHUT_RD);
			return read_commit(s, fd, now, true);
		}
		return SHM_HINT_PENDING;
	case SHM_GOT_END:
		return c_hint_fell_through(s, fd, now);
	case SHM_GOT_ERROR:
		shm_c_give_up(s, fd, SHIM_REASON_PEER_CLOSED);
		return SHM_HINT_ENDED;
	case SHM_GOT_OTHER:
		shm_c_give_up(s, fd, SHIM_REASON_HANDSHAKE_MALFORMED);
		return SHM_HINT_ENDED;
	case SHM_GOT_IT:
		break;
	}
	c_take_commit(s, fd, &msg.commit, s_sock);
	shim_reap(s_sock);
	return SHM_HINT_ENDED;
}

enum shm_hint_result shm_c_read_commit(struct shim_sock *s, int fd, unsigned long long now)
{
	return read_commit(s, fd, now, false);
}

/* Our channel on a HINT's ring, when it fits (no larger than ours) and
 * can be had; the ring is consumed or dropped either way. 0 or -errno. */
static int s_hint_chan(struct shim_sock *s, int fd, struct shim_pair_hint *h, struct shim_chan **chan)
{
	if (!shm_s_ring_fits(s, fd, h->msg.ring_bytes)) {
		shim_pair_hint_drop_ring(h);
		return -EPROTO;
	}
	if (shim_fault_hit(SHIM_FAULT_RING_ALLOC, fd, &s->tuple, "server_pair_ring")) {
		shim_pair_hint_drop_ring(h);
		return -ENOMEM;
	}
	return shim_pair_hint_ring(h, chan);
}

/*
 * One pending HINT naming our connection. The process that made its
 * socketpair (SO_PEERCRED of either end names the maker) must hold C's TCP
 * socket as the fd it names, as on a named rendezvous. Returns true when
 * the handshake went on (committed) or ended; false to try another HINT or
 * the named way (the HINT was a stranger's, or C stopped waiting).
 */
static bool s_take_hint(struct shim_sock *s, int fd, struct shim_pair_hint *h)
{
	struct shm_neg *ng = shm_neg_of(s);
	struct shim_msg_commit commit;
	struct shim_chan *chan;
	/* Where the HINT is dropped: SHIM_REASON_NONE to try another HINT or
	 * the named way, else why the upgrade ends. */
	enum shim_reason why = SHIM_REASON_NONE;
	int rc, tcp;

	if (!shim_rv_is_seqpacket(h->rv_fd))
		goto drop;
	rc = shm_verify_fault(s, fd, "server_hint");
	if (!rc)
		rc = shim_rv_verify_peer(h->rv_fd, shm_client_ep(s), shm_server_ep(s), h->msg.tcp_fd, &ng->rv_owner);
	if (rc < 0) {
		if (rc == -ENOENT && shim_rv_peer_gone(h->rv_fd, rc))
			why = SHIM_REASON_PEER_CLOSED;
		else
			shm_trace_refused(s, fd, "server", -rc);
		goto drop;
	}
	if (s_hint_chan(s, fd, h, &chan) < 0) {
		why = SHIM_REASON_RING_ALLOC_FAILED;
		goto drop;
	}
	tcp = shim_sock_fd_locked(s, fd);
	bool switching = shm_tx_may_switch(s);

	memset(&commit, 0, sizeof(commit));
	shim_msg_init(&commit.hdr, SHIM_MSG_COMMIT, sizeof(commit));
	commit.switch_offset = switching ? s->tx_tcp_bytes : SHIM_SWITCH_NEVER;
	commit.tcp_fd = fd;
	/* C rings us on this socketpair once the handshake is over; so do we. */
	if ((h->msg.hdr.flags & SHIM_MSG_F_BELL_LINE) && shim_cfg.shm_bell_line)
		commit.hdr.flags |= SHIM_MSG_F_BELL_LINE;
	if (tcp < 0 || shim_upgrade_new_nonce(s->rx_nonce) < 0) {
		why = SHIM_REASON_INTERNAL_ERROR;
		goto destroy;
	}
	memcpy(commit.nonce, s->rx_nonce, SHIM_NONCE_LEN);
	/* C stopped waiting (EPIPE): nothing switched; the named way may still. */
	if (shim_rv_send_fds(h->rv_fd, &commit, sizeof(commit), &tcp, 1) < 0)
		goto destroy;
	memcpy(s->tx_nonce, h->msg.nonce, SHIM_NONCE_LEN);
	ng->rv_fd = h->rv_fd;
	ng->via_pair = true;
	ng->keep_line = commit.hdr.flags & SHIM_MSG_F_BELL_LINE;
	shm_s_committed(s, fd, chan, switching, h->msg.ring_bytes);
	return true;
destroy:
	chan->ops->destroy(chan);
drop:
	shim_reap(h->rv_fd);
	shim_pair_hint_drop_ring(h); /* unless it was consumed or dropped above */
	if (why == SHIM_REASON_NONE)
		return false;
	shim_upgrade_fail(s, fd, why);
	return true;
}

bool shm_s_claim(struct shim_sock *s, int fd, unsigned long long now)
{
	struct shim_pair_hint h;

	if (!shim_cfg.shm_pairs)
		return false;
	for (unsigned i = 0; i < CLAIM_TRIES && shim_pair_claim(&s->tuple, &h, now); i++)
		if (s_take_hint(s, fd, &h))
			return true;
	return false;
}
