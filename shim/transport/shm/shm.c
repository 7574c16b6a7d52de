/* The shared-memory transport; see shm.h and transport.h. */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "faults.h"
#include "fdtable.h"
#include "flimit.h"
#include "msgstamps.h"
#include "real.h"
#include "reaper.h"
#include "rendezvous.h"
#include "ring.h"
#include "shm_zc.h"
#include "trace.h"
#include "wire.h"

struct shm_chan {
	struct shim_chan chan;
	void *map; /* the reservation: guard page, both rings, guard page */
	size_t map_len;
	/* A slot of a pair's arena instead (map NULL): told when this view
	 * ends, and whether the slot may be used again (destroy) or not
	 * (forget: another process still uses it). */
	void (*slot_done)(void *ctx, bool reusable);
	void *slot_ctx;
	struct shim_ring tx, rx;
	/* This end stopped the channel for a failover (failover.c). Only ours:
	 * the peer learns it from our RESUME on TCP, never from the shared
	 * pages, which it could write. */
	uint32_t failed;
	bool abortive; /* our close resets the connection (transport.h) */
	/*
	 * The bell line (PROTOCOL.md, "Bell line"): our end of the
	 * connection's socketpair (fd -1: none). line_rung: the peer rings us
	 * on it when we arm for it; line_off: a fork shares the channel, and a
	 * bell drained by one process would be lost to the other, so we arm
	 * for TCP bells only. rx_how, tx_how: the bell bits armed since the
	 * last disarm. All under the sock's lock.
	 */
	struct shim_owned_fd line;
	bool line_rung, line_off;
	uint32_t rx_how, tx_how;
	/* Bells on the line due to taken arms and not read yet (at most
	 * LINE_OWED_MAX: a peer that takes arms and sends nothing costs a
	 * look each); line_seen: a wait saw the line readable (line_rang). */
	unsigned line_owed;
	bool line_seen;
	/* The peer's bells on the line, all told (line_bells_in op), by the
	 * arms of ours it took. Wraps. */
	unsigned line_bells_in;
	/* The peer's end went (EOF on it, or a send refused): it rings on TCP
	 * from now on, and a line that stays readable at EOF must not keep
	 * level-triggered waits awake. */
	bool line_dead;
	struct shm_zc zc; /* one copy (shm_zc.h) */
};

static struct shm_chan *shm_of(const struct shim_chan *ch)
{
	return (struct shm_chan *)ch;
}

static bool shm_failed(const struct shim_chan *ch);

static struct shm_chan *shm_chan_new(void)
{
	struct shm_chan *sc = calloc(1, sizeof(*sc));

	if (sc) {
		sc->line.fd = -1;
		shm_zc_init(&sc->zc);
	}
	return sc;
}

uint64_t shim_shm_footprint(uint32_t ring_bytes)
{
	return 2 * (uint64_t)shim_ring_footprint(ring_bytes);
}

void shim_shm_format(uint8_t *base, uint32_t ring_bytes)
{
	shim_ring_format(base, ring_bytes);
	shim_ring_format(base + shim_ring_footprint(ring_bytes), ring_bytes);
}

uint8_t *shim_shm_map_slots(int memfd, size_t len, unsigned slots, size_t *map_len)
{
	size_t stride = len + SHIM_SHM_GUARD_BYTES;
	uint8_t *map;

	*map_len = slots * stride + SHIM_SHM_GUARD_BYTES;
	map = REAL(mmap)(NULL, *map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (map == MAP_FAILED)
		return MAP_FAILED;
	/* Each piece over the reservation, the guards between them untouched. */
	for (unsigned i = 0; i < slots; i++) {
		if (REAL(mmap)(map + SHIM_SHM_GUARD_BYTES + i * stride, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			 memfd, (off_t)(i * len)) == MAP_FAILED) {
			int err = errno;

			REAL(munmap)(map, *map_len);
			errno = err;
			return MAP_FAILED;
		}
	}
	return map;
}

/* C sends on ring 0, S sends on ring 1 (C formatted both). */
static int shm_attach_rings(struct shm_chan *sc, uint8_t *base, uint32_t ring_bytes, bool is_client)
{
	uint8_t *c_to_s = base, *s_to_c = base + shim_ring_footprint(ring_bytes);
	int rc;

	rc = shim_ring_attach(&sc->tx, is_client ? c_to_s : s_to_c, ring_bytes);
	if (rc == 0)
		rc = shim_ring_attach(&sc->rx, is_client ? s_to_c : c_to_s, ring_bytes);
	sc->chan.ops = &shim_shm_ops;
	sc->chan.priv = sc;
	return rc;
}

/* Maps the memfd and attaches. */
static int shm_map(int memfd, uint32_t ring_bytes, bool is_client, bool format, struct shim_chan **out)
{
	struct shm_chan *sc = shm_chan_new();
	size_t map_len;
	uint8_t *map;
	int rc;

	if (!sc)
		return -ENOMEM;
	map = shim_shm_map_slots(memfd, (size_t)shim_shm_footprint(ring_bytes), 1, &map_len);
	if (map == MAP_FAILED) {
		rc = -errno;
		free(sc);
		return rc;
	}
	if (format)
		shim_shm_format(map + SHIM_SHM_GUARD_BYTES, ring_bytes);
	rc = shm_attach_rings(sc, map + SHIM_SHM_GUARD_BYTES, ring_bytes, is_client);
	if (rc < 0) {
		REAL(munmap)(map, map_len);
		free(sc);
		return rc;
	}
	sc->map = map;
	sc->map_len = map_len;
	*out = &sc->chan;
	return 0;
}

int shim_shm_on_slot(uint8_t *base, uint32_t ring_bytes, bool is_client, void (*done)(void *ctx, bool reusable),
		     void *ctx, struct shim_chan **out)
{
	struct shm_chan *sc = shm_chan_new();
	int rc;

	if (!sc)
		return -ENOMEM;
	rc = shm_attach_rings(sc, base, ring_bytes, is_client);
	if (rc < 0) {
		free(sc);
		return rc;
	}
	sc->slot_done = done;
	sc->slot_ctx = ctx;
	*out = &sc->chan;
	return 0;
}

int shim_shm_memfd(const char *name, uint64_t size)
{
	int memfd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int rc;

	if (memfd < 0)
		return -errno;
	memfd = shim_fd_own_checked(memfd);
	if (memfd < 0)
		return memfd;
	/* A memfd's size counts against RLIMIT_FSIZE: ftruncate past it would
	 * kill the program (SIGXFSZ), so the connection stays on TCP. */
	if (!shim_flimit_allows(size)) {
		REAL(close)(memfd);
		return -EFBIG;
	}
	/* memfds are created 0777 minus nothing: tighten to the owner anyway,
	 * since /proc/<pid>/fd is the only path and it checks ptrace rights. */
	if (fchmod(memfd, 0600) < 0 || ftruncate(memfd, (off_t)size) < 0 ||
	    REAL(fcntl)(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		rc = -errno;
		REAL(close)(memfd);
		return rc;
	}
	return memfd;
}

int shim_shm_memfd_check(int memfd, uint64_t size)
{
	struct stat st;
	int seals;

	if (fstat(memfd, &st) < 0)
		return -errno;
	/* The peer must not be able to shrink the file under our mapping
	 * (a SIGBUS in the host program): insist on the shrink seal. */
	seals = REAL(fcntl)(memfd, F_GET_SEALS);
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size || seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPROTO;
	return 0;
}

int shim_shm_create(uint32_t ring_bytes, struct shim_chan **out, int *memfd_out)
{
	int memfd = shim_shm_memfd("rdmashim-ring", shim_shm_footprint(ring_bytes));
	int rc;

	if (memfd < 0)
		return memfd;
	rc = shm_map(memfd, ring_bytes, true, true, out);
	if (rc < 0) {
		REAL(close)(memfd);
		return rc;
	}
	*memfd_out = memfd;
	return 0;
}

int shim_shm_attach(int memfd, uint32_t ring_bytes, struct shim_chan **out)
{
	int rc = shim_shm_memfd_check(memfd, shim_shm_footprint(ring_bytes));

	return rc < 0 ? rc : shm_map(memfd, ring_bytes, false, false, out);
}

static size_t shm_send(struct shim_chan *ch, const struct iovec *iov, int iovcnt, size_t skip)
{
	struct shm_chan *sc = shm_of(ch);

	SHIM_MSGSTAMP_OP(SHIM_TRANSPORT_SHM, SHIM_MSG_TX);
	if (unlikely(sc->zc.tx_on)) {
		size_t n = shm_zc_send(&sc->zc, &sc->tx, iov, iovcnt, skip);

		if (n)
			return n;
	}
	return shim_ring_write(&sc->tx, iov, iovcnt, skip);
}

static size_t shm_recv(struct shim_chan *ch, const struct iovec *iov, int iovcnt, bool peek)
{
	struct shm_chan *sc = shm_of(ch);

	SHIM_MSGSTAMP_OP(SHIM_TRANSPORT_SHM, SHIM_MSG_RX);
	/* An offer out, made by another call: its DONE bytes are not the
	 * ring's, they are skipped before anything is read. */
	if (unlikely(sc->zc.out))
		shm_zc_settle(&sc->zc, &sc->rx, false);
	return shim_ring_read(&sc->rx, iov, iovcnt, peek);
}

static int shm_rx_offer(struct shim_chan *ch, void *buf, size_t len)
{
	struct shm_chan *sc = shm_of(ch);

	return sc->zc.rx_on ? shm_zc_offer(&sc->zc, &sc->rx, buf, len) : -EPERM;
}

static size_t shm_rx_offer_end(struct shim_chan *ch)
{
	struct shm_chan *sc = shm_of(ch);

	return shm_zc_end(&sc->zc, &sc->rx);
}

static bool shm_rx_offer_out(const struct shim_chan *ch)
{
	return shm_zc_out(&shm_of(ch)->zc);
}

void shim_shm_zc_bind(struct shim_chan *ch, int pidfd)
{
	shm_zc_bind(&shm_of(ch)->zc, pidfd);
}

static size_t shm_readable(const struct shim_chan *ch)
{
	size_t n = shim_ring_readable(&shm_of(ch)->rx);

	/* An offer's DONE: bytes wait in the offering call's buffer. */
	if (!n && unlikely(shim_ring_zc_news(&shm_of(ch)->rx)))
		return 1;
	return n;
}

static size_t shm_writable(const struct shim_chan *ch)
{
	return shim_ring_writable(&shm_of(ch)->tx);
}

static size_t shm_space_lowat(const struct shim_chan *ch)
{
	return shim_ring_space_lowat(&shm_of(ch)->tx);
}

static bool shm_rx_eof(const struct shim_chan *ch)
{
	return shim_ring_eof(&shm_of(ch)->rx);
}

static bool shm_rx_fin(const struct shim_chan *ch)
{
	return shim_ring_producer_closed(&shm_of(ch)->rx);
}

static bool shm_peer_rx_gone(const struct shim_chan *ch)
{
	return shim_ring_consumer_gone(&shm_of(ch)->tx);
}

static size_t shm_tx_unread(const struct shim_chan *ch)
{
	struct shim_ring *tx = &shm_of(ch)->tx;

	return tx->mask + 1 - shim_ring_writable(tx);
}

static bool shm_violated(const struct shim_chan *ch)
{
	return shim_ring_violated(&shm_of(ch)->tx) || shim_ring_violated(&shm_of(ch)->rx);
}

/* One bell on the line: a message of one byte, never waiting (the peer
 * holds the other end and may leave its queue full: then it has a bell to
 * read already). false when it could not go (our end is gone or not ours
 * any more, the peer closed its end): the caller rings on TCP instead,
 * which the peer watches too. */
static bool line_ring(struct shm_chan *sc)
{
	static const uint8_t bell = SHIM_FRAME_DATA_BELL;

	if (sc->line_dead || sc->line.fd < 0 || !shim_owned_still(&sc->line))
		return false;
	if (REAL(send)(sc->line.fd, &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 || errno == EAGAIN)
		return true;
	sc->line_dead = true;
	return false;
}

#define LINE_OWED_MAX 4
/* Messages one drain takes off the line at most. */
#define LINE_DRAIN_MAX 8

/* Takes the bells owed off the line, or, once a wait saw it readable,
 * what is there: a few messages a round (a peer that floods it only wakes
 * us, as its bells on TCP would). One system call, whether one bell or
 * several are there (recvmmsg with MSG_DONTWAIT returns what is queued,
 * never waits for the rest); fds sent with them are closed by the kernel,
 * as we give no room for them. A bell owed that has not come yet makes the
 * line readable later, which the wait then reports (line_rang). A message
 * of no bytes is the end of the line (EOF: SEQPACKET gives every read one
 * then), or a peer's empty message: either way the line is done with. */
static void line_drain(struct shm_chan *sc)
{
	uint8_t buf[LINE_DRAIN_MAX][16];
	struct iovec iov[LINE_DRAIN_MAX];
	struct mmsghdr msgs[LINE_DRAIN_MAX];
	/* Bells carry no fds, but a peer can attach some where the kernel
	 * does not refuse them (before 6.16): with no room, the kernel would
	 * release them itself, in this thread (reaper.h). */
	union {
		struct cmsghdr align;
		char buf[SHIM_SCM_SPACE];
	} control[LINE_DRAIN_MAX];
	unsigned want = sc->line_seen ? LINE_DRAIN_MAX : sc->line_owed;
	int got;

	if (!want || sc->line.fd < 0 || !shim_owned_still(&sc->line))
		return;
	memset(msgs, 0, sizeof(msgs[0]) * want);
	for (unsigned i = 0; i < want; i++) {
		iov[i] = (struct iovec){ buf[i], sizeof(buf[i]) };
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
		msgs[i].msg_hdr.msg_control = control[i].buf;
		msgs[i].msg_hdr.msg_controllen = sizeof(control[i].buf);
	}
	got = REAL(recvmmsg)(sc->line.fd, msgs, want, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
	for (int i = 0; i < got; i++) {
		if (msgs[i].msg_hdr.msg_controllen) {
			/* A bell with fds is no bell of ours: the line is done with. */
			shim_reap_cmsg_fds(&msgs[i].msg_hdr);
			sc->line_dead = true;
			continue;
		}
		if (msgs[i].msg_len == 0) {
			sc->line_dead = true;
			break;
		}
		if (sc->line_owed)
			sc->line_owed--;
	}
	sc->line_seen = false;
}

/* The peer's armed word, as left when we took it: the bell on the line
 * when that alone was asked for and could go, else (any other value, from
 * a sleeper of its own that wants TCP, or a peer that lies) on TCP too.
 * Returns the bells (SHIM_BELL_*): LINE rung here, TCP for the caller. */
static unsigned shm_ring_as_asked(struct shm_chan *sc, uint32_t armed)
{
	unsigned bells = 0;

	if (!armed)
		return 0;
	/* Test-only (faults.h, bell_loss): the word is taken and the bell
	 * never goes; the sleeper must find the bytes by its slice. */
	if (shim_fault_hit(SHIM_FAULT_BELL_LOSS, -1, NULL, armed == SHIM_BELL_LINE ? "line" : "tcp"))
		return 0;
	if (armed & SHIM_BELL_LINE) {
		if (line_ring(sc))
			bells |= SHIM_BELL_LINE;
		else
			bells |= SHIM_BELL_TCP;
	}
	if (armed & ~SHIM_BELL_LINE)
		bells |= SHIM_BELL_TCP;
	return bells;
}

/* Shared memory: the release store of tail already made the bytes visible,
 * so the bell may follow at once. */
static unsigned shm_tx_bell(struct shim_chan *ch)
{
	unsigned bells;

	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	bells = shm_ring_as_asked(shm_of(ch), shim_ring_producer_should_bell(&shm_of(ch)->tx));
	SHIM_MSGSTAMP_MARK(SHIM_MSG_BELL);
	return bells;
}

static bool shm_rx_should_bell(struct shim_chan *ch)
{
	bool bell;

	SHIM_MSGSTAMP_MARK(SHIM_MSG_SHIM);
	bell = shm_ring_as_asked(shm_of(ch), shim_ring_consumer_should_bell(&shm_of(ch)->rx)) & SHIM_BELL_TCP;
	SHIM_MSGSTAMP_MARK(SHIM_MSG_CREDIT);
	return bell;
}

/* What a disarm reports (transport.h): whether a TCP bell is on the way,
 * as false. left: the armed word now cleared (0: the peer took it); how:
 * the bits armed since the last disarm. */
static bool shm_disarmed(struct shm_chan *sc, uint32_t left, uint32_t how)
{
	if (how & SHIM_BELL_LINE) {
		if (!left) {
			sc->line_bells_in++;
			if (sc->line_owed < LINE_OWED_MAX)
				sc->line_owed++;
		}
		line_drain(sc);
	}
	return left != 0 || !(how & SHIM_BELL_TCP);
}

static bool shm_rx_arm(struct shim_chan *ch, unsigned how)
{
	shm_of(ch)->rx_how |= how;
	return shim_ring_consumer_arm(&shm_of(ch)->rx, how);
}

static bool shm_rx_disarm(struct shim_chan *ch)
{
	struct shm_chan *sc = shm_of(ch);
	uint32_t how = sc->rx_how;

	sc->rx_how = 0;
	return shm_disarmed(sc, shim_ring_consumer_disarm(&sc->rx), how);
}

static bool shm_tx_arm(struct shim_chan *ch, unsigned how)
{
	shm_of(ch)->tx_how |= how;
	return shim_ring_producer_arm(&shm_of(ch)->tx, how);
}

static bool shm_tx_disarm(struct shim_chan *ch)
{
	struct shm_chan *sc = shm_of(ch);
	uint32_t how = sc->tx_how;

	sc->tx_how = 0;
	return shm_disarmed(sc, shim_ring_producer_disarm(&sc->tx), how);
}

static void shm_line_rang(struct shim_chan *ch)
{
	shm_of(ch)->line_seen = true;
}

static unsigned shm_line_bells_in(const struct shim_chan *ch)
{
	return shm_of(ch)->line_bells_in;
}

static int shm_bell_fd(const struct shim_chan *ch)
{
	const struct shm_chan *sc = shm_of(ch);

	return sc->line_rung && !sc->line_off && !sc->line_dead ? sc->line.fd : -1;
}

int shim_shm_line_make(struct shim_chan *ch)
{
	struct shm_chan *sc = shm_of(ch);
	int sv[2], rc;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
		return -errno;
	sv[0] = shim_fd_own_checked(sv[0]);
	sv[1] = shim_fd_own_checked(sv[1]);
	/* A line is kept as long as the connection: only while the program's
	 * fd table has room for it (fdtable.h), else bells go on TCP. */
	rc = sv[0] < 0 ? sv[0] : sv[1] < 0 ? sv[1] : !shim_fd_keepable(sv[0]) ? -EMFILE : shim_owned_take(&sc->line, sv[0]);
	if (rc == 0)
		shim_reap_refuse_rights(sv[0]);
	if (rc < 0) {
		if (sv[0] >= 0)
			REAL(close)(sv[0]);
		if (sv[1] >= 0)
			REAL(close)(sv[1]);
		return rc;
	}
	return sv[1];
}

int shim_shm_line_take(struct shim_chan *ch, int line, int rv_fd)
{
	struct shm_chan *sc = shm_of(ch);
	struct ucred theirs, maker;
	socklen_t len = sizeof(theirs), mlen = sizeof(maker);
	int rc = -EPROTO;

	/* Made by the process on the rendezvous (a socketpair names its maker
	 * at both ends): not a socket connected to a service elsewhere, where
	 * our bells would go with our credentials. */
	if (shim_fd_keepable(line) && shim_rv_is_seqpacket(line) &&
	    REAL(getsockopt)(line, SOL_SOCKET, SO_PEERCRED, &theirs, &len) == 0 &&
	    REAL(getsockopt)(rv_fd, SOL_SOCKET, SO_PEERCRED, &maker, &mlen) == 0 && theirs.pid == maker.pid &&
	    theirs.uid == maker.uid && theirs.pid > 0)
		rc = shim_owned_take(&sc->line, line);
	if (rc == 0)
		shim_reap_refuse_rights(line);
	if (rc < 0) {
		shim_reap(line);
		return rc;
	}
	sc->line_rung = true;
	return 0;
}

int shim_shm_line_adopt(struct shim_chan *ch, int rv_fd)
{
	struct shm_chan *sc = shm_of(ch);
	int rc = sc->line.fd >= 0 ? -EEXIST : !shim_fd_keepable(rv_fd) ? -EMFILE : shim_owned_take(&sc->line, rv_fd);

	if (rc == 0) {
		shim_reap_refuse_rights(rv_fd);
		sc->line_rung = true;
	}
	return rc;
}

void shim_shm_line_rung(struct shim_chan *ch)
{
	struct shm_chan *sc = shm_of(ch);

	sc->line_rung = sc->line.fd >= 0;
}

static void shm_shutdown_tx(struct shim_chan *ch)
{
	shim_ring_producer_close(&shm_of(ch)->tx);
}

static void shm_abortive(struct shim_chan *ch)
{
	shm_of(ch)->abortive = true;
}

static void shm_unmap(struct shm_chan *sc, bool reusable)
{
	shm_zc_settle(&sc->zc, &sc->rx, true);
	shm_zc_release(&sc->zc);
	shim_reap_owned(&sc->line);
	if (sc->slot_done)
		sc->slot_done(sc->slot_ctx, reusable);
	else
		REAL(munmap)(sc->map, sc->map_len);
	free(sc);
}

static void shm_destroy(struct shim_chan *ch)
{
	struct shm_chan *sc = shm_of(ch);

	/* A channel stopped for a failover carries no end: the stream went
	 * on over TCP behind our RESUME, and ends there with TCP's FIN. A
	 * closed flag here would end the peer's stream at the ring's end. */
	if (!shm_failed(ch) && !sc->abortive)
		shim_ring_producer_close(&sc->tx);
	/* Our reading end closes either way: after a failover, a peer that
	 * has yet to answer our RESUME learns that nobody reads its own
	 * (failover.c, start). */
	shim_ring_consumer_close(&sc->rx);
	shm_unmap(sc, true);
}

/* Another process may still serve the connection through the same pages:
 * unmap our view and leave the rings' closed flags alone. */
static void shm_forget(struct shim_chan *ch)
{
	shm_unmap(shm_of(ch), false);
}

static bool shm_failed(const struct shim_chan *ch)
{
	return __atomic_load_n(&shm_of(ch)->failed, __ATOMIC_RELAXED) != 0;
}

/* Both rings stop where they are: the peer's bytes already in our ring are
 * still delivered (up to the offset our RESUME announces), ours already in
 * its ring are its to read, nothing new moves either way. */
static void shm_fail(struct shim_chan *ch)
{
	struct shm_chan *sc = shm_of(ch);

	/* A taken offer settles first: its bytes are received or hidden
	 * for good, never counted as the ring's at the stop. */
	shm_zc_settle(&sc->zc, &sc->rx, true);
	sc->zc.tx_on = sc->zc.rx_on = false;
	shim_ring_consumer_stop(&sc->rx, false);
	shim_ring_producer_stop(&sc->tx);
	__atomic_store_n(&sc->failed, 1, __ATOMIC_RELAXED);
}

static void shm_drop_unread(struct shim_chan *ch)
{
	shm_zc_settle(&shm_of(ch)->zc, &shm_of(ch)->rx, true);
	shim_ring_consumer_stop(&shm_of(ch)->rx, true);
}

/* Stream offsets count the bytes offers moved, which the ring's cursors
 * do not (shm_zc.h); a failover settles the offer out first. */
static uint64_t shm_rx_offset(const struct shim_chan *ch)
{
	return shim_ring_received(&shm_of(ch)->rx) + shm_of(ch)->zc.rx_total;
}

/* Shared memory loses nothing: the peer reads every byte we wrote, so the
 * offset its RESUME will name is our tail, known without it. */
static bool shm_tx_offset(const struct shim_chan *ch, uint64_t *offset)
{
	*offset = shim_ring_sent(&shm_of(ch)->tx) + shm_of(ch)->zc.tx_total;
	return true;
}

/* Our ring still holds every byte the peer did not read: it can not have
 * freed what it did not consume. */
static int shm_tx_unreceived(const struct shim_chan *ch, uint64_t from, struct iovec out[2])
{
	/* Bytes written straight into the peer's buffer are not in our
	 * ring's memory: a resume before them can not be served. */
	const struct shm_zc *z = &shm_of(ch)->zc;

	if (from < z->tx_floor)
		return -ERANGE;
	return shim_ring_unreceived(&shm_of(ch)->tx, from - z->tx_total, out);
}

static void shm_share(struct shim_chan *ch)
{
	struct shm_chan *sc = shm_of(ch);

	/* Another process reaches the rings: an offer names one process's
	 * memory, a take writes into the one the pidfd names. Neither any
	 * more; the offer out settles now, for its call to collect. */
	shm_zc_settle(&sc->zc, &sc->rx, true);
	sc->zc.tx_on = sc->zc.rx_on = false;
	shm_of(ch)->line_off = true;
	shim_ring_share_cursors(&shm_of(ch)->tx, true);
	shim_ring_share_cursors(&shm_of(ch)->rx, false);
}

/* Our tx ring's producer_resuming is written by our side alone (the
 * peer's failover announces itself in the other ring): set while we did
 * not stop the channel, it was another process of ours sharing it since a
 * fork (a peer that writes it only moves its own stream to TCP). */
static bool shm_moved_elsewhere(const struct shim_chan *ch)
{
	const struct shm_chan *sc = shm_of(ch);

	return __atomic_load_n(&sc->tx.cursors_shared, __ATOMIC_RELAXED) && !shm_failed(ch) &&
	       shim_ring_producer_resuming(&sc->tx);
}

static bool shm_resume_announce(struct shim_chan *ch)
{
	return shim_ring_resume_announce(&shm_of(ch)->tx);
}

static bool shm_close_before_resume(struct shim_chan *ch)
{
	return shim_ring_close_before_resume(&shm_of(ch)->rx);
}

static bool shm_peer_resuming(const struct shim_chan *ch)
{
	return shim_ring_producer_resuming(&shm_of(ch)->rx);
}

static bool shm_peer_shared(const struct shim_chan *ch)
{
	return shim_ring_peer_shared(&shm_of(ch)->tx, true) || shim_ring_peer_shared(&shm_of(ch)->rx, false);
}

const struct shim_transport_ops shim_shm_ops = {
	.kind = SHIM_TRANSPORT_SHM,
	.send = shm_send,
	.recv = shm_recv,
	.readable = shm_readable,
	.writable = shm_writable,
	.space_lowat = shm_space_lowat,
	.rx_eof = shm_rx_eof,
	.rx_fin = shm_rx_fin,
	.peer_rx_gone = shm_peer_rx_gone,
	.tx_unread = shm_tx_unread,
	.violated = shm_violated,
	.tx_bell = shm_tx_bell,
	.rx_should_bell = shm_rx_should_bell,
	.rx_arm = shm_rx_arm,
	.rx_disarm = shm_rx_disarm,
	.tx_arm = shm_tx_arm,
	.tx_disarm = shm_tx_disarm,
	.bell_fd = shm_bell_fd,
	.line_rang = shm_line_rang,
	.line_bells_in = shm_line_bells_in,
	.shutdown_tx = shm_shutdown_tx,
	.destroy = shm_destroy,
	.abortive = shm_abortive,
	.forget = shm_forget,
	.share = shm_share,
	.failed = shm_failed,
	.fail = shm_fail,
	.drop_unread = shm_drop_unread,
	.rx_offset = shm_rx_offset,
	.tx_offset = shm_tx_offset,
	.bell_bound_costs = true,
	.peer_shared = shm_peer_shared,
	.resume_announce = shm_resume_announce,
	.close_before_resume = shm_close_before_resume,
	.peer_resuming = shm_peer_resuming,
	.moved_elsewhere = shm_moved_elsewhere,
	.takes_return = true,
	.tx_unreceived = shm_tx_unreceived,
	.rx_offer = shm_rx_offer,
	.rx_offer_end = shm_rx_offer_end,
	.rx_offer_out = shm_rx_offer_out,
};
