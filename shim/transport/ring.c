/* The SPSC byte ring; see ring.h for the conventions and the wake-up proof. */
#include "ring.h"

#include <errno.h>
#include <string.h>

#include "compiler.h"
#include "msgstamps.h"

void shim_ring_format(void *mem, uint32_t size)
{
	struct shim_ring_hdr *hdr = mem;

	memset(hdr, 0, sizeof(*hdr));
	hdr->magic = SHIM_RING_MAGIC;
	hdr->size = size;
}

int shim_ring_attach(struct shim_ring *ring, void *mem, uint32_t size)
{
	struct shim_ring_hdr *hdr = mem;

	if (!size || (size & (size - 1)) || hdr->magic != SHIM_RING_MAGIC || hdr->size != size)
		return -EPROTO;
	ring->hdr = hdr;
	ring->data = (uint8_t *)mem + SHIM_RING_HDR_BYTES;
	ring->mask = size - 1;
	ring->own = 0;
	ring->violated = 0;
	ring->stopped = 0;
	ring->stop_at = 0;
	ring->cursors_shared = 0;
	ring->zc_watch = 0;
	return 0;
}

bool shim_ring_violated(const struct shim_ring *ring)
{
	return __atomic_load_n(&ring->violated, __ATOMIC_RELAXED) != 0;
}

/* Our own cursor. Relaxed: it is written only by us, under the socket's
 * lock; the lock-free readers (busy polling) need no ordering with it.
 * Once the ring is shared with a process of ours (shim_ring_share_cursors)
 * the published copy is the truth instead: the other process may have
 * moved it (acquire: pairs with the release stores of head and tail). */
static uint64_t own_cursor(const struct shim_ring *ring, const uint64_t *published)
{
	if (__atomic_load_n(&ring->cursors_shared, __ATOMIC_RELAXED))
		return __atomic_load_n(published, __ATOMIC_ACQUIRE);
	return __atomic_load_n(&ring->own, __ATOMIC_RELAXED);
}

static uint64_t own_head(const struct shim_ring *ring)
{
	return own_cursor(ring, &ring->hdr->head);
}

static uint64_t own_tail(const struct shim_ring *ring)
{
	return own_cursor(ring, &ring->hdr->tail);
}

/*
 * Bytes between the two cursors, from one read of the peer's: the only way
 * a peer's cursor enters any computation. Returns false (and marks the ring
 * violated) when the distance is impossible: more than the ring holds, or
 * "negative" (the unsigned difference wraps).
 */
static bool cursor_distance(struct shim_ring *ring, uint64_t head, uint64_t tail, size_t *out)
{
	uint64_t used = tail - head;

	if (used > (uint64_t)ring->mask + 1 || shim_ring_violated(ring)) {
		__atomic_store_n(&ring->violated, 1, __ATOMIC_RELAXED);
		*out = 0;
		return false;
	}
	*out = (size_t)used;
	return true;
}

/* Acquire: pairs with the producer's release store of tail in
 * shim_ring_write(), so the bytes before tail are visible. A stopped
 * consumer's tail is its own frozen copy (acquire: pairs with the release
 * store of stopped in shim_ring_consumer_stop(), so stop_at is seen). */
static uint64_t load_peer_tail(const struct shim_ring *ring)
{
	if (__atomic_load_n(&ring->stopped, __ATOMIC_ACQUIRE))
		return __atomic_load_n(&ring->stop_at, __ATOMIC_RELAXED);
	return __atomic_load_n(&ring->hdr->tail, __ATOMIC_ACQUIRE);
}

/* Acquire: pairs with the consumer's release store of head in
 * shim_ring_read(), so the consumer's reads of the freed bytes are done. */
static uint64_t load_peer_head(const struct shim_ring *ring)
{
	return __atomic_load_n(&ring->hdr->head, __ATOMIC_ACQUIRE);
}

size_t shim_ring_readable(struct shim_ring *ring)
{
	size_t avail;

	cursor_distance(ring, own_head(ring), load_peer_tail(ring), &avail);
	return avail;
}

size_t shim_ring_writable(struct shim_ring *ring)
{
	size_t used;

	if (__atomic_load_n(&ring->stopped, __ATOMIC_RELAXED))
		return 0;
	if (!cursor_distance(ring, load_peer_head(ring), own_tail(ring), &used))
		return 0;
	return (size_t)ring->mask + 1 - used;
}

/* Copies len bytes between the ring at cursor and buf, wrapping once. */
static void copy_out(const struct shim_ring *ring, uint64_t cursor, uint8_t *buf, size_t len)
{
	size_t off = (size_t)(cursor & ring->mask);
	size_t first = ring->mask + 1 - off;

	if (first > len)
		first = len;
	memcpy(buf, ring->data + off, first);
	memcpy(buf + first, ring->data, len - first);
}

size_t shim_ring_read(struct shim_ring *ring, const struct iovec *iov, int iovcnt, bool peek)
{
	uint64_t head = own_head(ring);
	size_t avail, done = 0;

	if (!cursor_distance(ring, head, load_peer_tail(ring), &avail))
		return 0;
	if (avail)
		SHIM_MSGSTAMP_SEEN();
	for (int i = 0; i < iovcnt && done < avail; i++) {
		size_t n = iov[i].iov_len;

		if (n > avail - done)
			n = avail - done;
		copy_out(ring, head + done, iov[i].iov_base, n);
		done += n;
	}
	if (done)
		SHIM_MSGSTAMP_MARK(SHIM_MSG_COPY);
	if (!peek && done) {
		__atomic_store_n(&ring->own, head + done, __ATOMIC_RELAXED);
		/* Release: our copies out of the ring happen before the producer
		 * may overwrite; pairs with load_peer_head() in the producer. */
		__atomic_store_n(&ring->hdr->head, head + done, __ATOMIC_RELEASE);
		SHIM_MSGSTAMP_MARK(SHIM_MSG_PUBLISH);
	}
	return done;
}

size_t shim_ring_copy_iov_in(uint8_t *data, uint32_t mask, uint64_t cursor, const struct iovec *iov,
			     int iovcnt, size_t skip, size_t max)
{
	size_t done = 0;

	for (int i = 0; i < iovcnt && done < max; i++) {
		size_t len = iov[i].iov_len, off, first;
		const uint8_t *base = iov[i].iov_base;

		if (skip >= len) {
			skip -= len;
			continue;
		}
		base += skip;
		len -= skip;
		skip = 0;
		if (len > max - done)
			len = max - done;
		off = (size_t)((cursor + done) & mask);
		first = (size_t)mask + 1 - off < len ? (size_t)mask + 1 - off : len;
		memcpy(data + off, base, first);
		memcpy(data, base + first, len - first);
		done += len;
	}
	return done;
}

size_t shim_ring_write(struct shim_ring *ring, const struct iovec *iov, int iovcnt, size_t skip)
{
	uint64_t tail = own_tail(ring);
	size_t space = shim_ring_writable(ring);
	size_t done = space ? shim_ring_copy_iov_in(ring->data, ring->mask, tail, iov, iovcnt, skip, space) : 0;

	if (done) {
		SHIM_MSGSTAMP_MARK(SHIM_MSG_COPY);
		__atomic_store_n(&ring->own, tail + done, __ATOMIC_RELAXED);
		/* Release: the bytes are in place before the consumer can see the
		 * new tail; pairs with load_peer_tail() in the consumer. */
		__atomic_store_n(&ring->hdr->tail, tail + done, __ATOMIC_RELEASE);
		SHIM_MSGSTAMP_MARK(SHIM_MSG_POST);
		SHIM_MSGSTAMP_POSTED();
	}
	return done;
}

bool shim_ring_eof(struct shim_ring *ring)
{
	/* Closed is stored after the last tail (release in producer_close), so
	 * an acquire read of closed followed by the tail check is exact. */
	return __atomic_load_n(&ring->hdr->producer_closed, __ATOMIC_ACQUIRE) &&
	       shim_ring_readable(ring) == 0;
}

bool shim_ring_producer_closed(const struct shim_ring *ring)
{
	return __atomic_load_n(&ring->hdr->producer_closed, __ATOMIC_ACQUIRE) != 0;
}

bool shim_ring_consumer_arm(struct shim_ring *ring, uint32_t how)
{
	/* Or: another sleeper of ours may have armed for a bell of its kind. */
	__atomic_fetch_or(&ring->hdr->consumer_armed, how, __ATOMIC_RELAXED);
	/* Full fence: orders our armed store before our tail load (and an
	 * offer's state, shm_zc.c); pairs with the fence in
	 * shim_ring_producer_should_bell() (Dekker). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return !shim_ring_readable(ring) && !shim_ring_zc_news(ring) &&
	       !__atomic_load_n(&ring->hdr->producer_closed, __ATOMIC_ACQUIRE) && !shim_ring_violated(ring);
}

uint32_t shim_ring_consumer_disarm(struct shim_ring *ring)
{
	return __atomic_exchange_n(&ring->hdr->consumer_armed, 0, __ATOMIC_RELAXED);
}

uint32_t shim_ring_producer_should_bell(struct shim_ring *ring)
{
	/* Full fence: orders our tail (or closed) store before the armed load;
	 * pairs with the fence in shim_ring_consumer_arm(). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&ring->hdr->consumer_armed, __ATOMIC_RELAXED))
		return 0;
	/* Exchange so that one armed wait gets one bell, not one per write. */
	return __atomic_exchange_n(&ring->hdr->consumer_armed, 0, __ATOMIC_RELAXED);
}

bool shim_ring_producer_arm(struct shim_ring *ring, uint32_t how)
{
	__atomic_fetch_or(&ring->hdr->producer_wants_space, how, __ATOMIC_RELAXED);
	/* Full fence: pairs with the fence in shim_ring_consumer_should_bell(). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return shim_ring_writable(ring) < shim_ring_space_lowat(ring) && !shim_ring_consumer_gone(ring) &&
	       !shim_ring_violated(ring);
}

uint32_t shim_ring_producer_disarm(struct shim_ring *ring)
{
	return __atomic_exchange_n(&ring->hdr->producer_wants_space, 0, __ATOMIC_RELAXED);
}

uint32_t shim_ring_consumer_should_bell(struct shim_ring *ring)
{
	/* Full fence: pairs with the fence in shim_ring_producer_arm(). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&ring->hdr->producer_wants_space, __ATOMIC_RELAXED))
		return 0;
	/* Wake the producer only for room worth writing into; a later read
	 * frees more and looks again, so the wake-up is delayed, not lost. */
	if (ring->mask + 1 - shim_ring_readable(ring) < shim_ring_space_lowat(ring))
		return 0;
	return __atomic_exchange_n(&ring->hdr->producer_wants_space, 0, __ATOMIC_RELAXED);
}

void shim_ring_producer_close(struct shim_ring *ring)
{
	/* Release: every tail store happens before closed is seen; pairs with
	 * the acquire load in shim_ring_eof(). */
	__atomic_store_n(&ring->hdr->producer_closed, 1, __ATOMIC_RELEASE);
}

bool shim_ring_consumer_gone(const struct shim_ring *ring)
{
	return __atomic_load_n(&ring->hdr->consumer_closed, __ATOMIC_ACQUIRE) != 0;
}

void shim_ring_consumer_close(struct shim_ring *ring)
{
	/* Release pairs with the acquire load in shim_ring_consumer_gone(). */
	__atomic_store_n(&ring->hdr->consumer_closed, 1, __ATOMIC_RELEASE);
}

void shim_ring_consumer_stop(struct shim_ring *ring, bool drop_unread)
{
	uint64_t head = own_head(ring), at;
	size_t avail;

	if (drop_unread)
		at = head;
	else if (__atomic_load_n(&ring->stopped, __ATOMIC_RELAXED))
		return;
	else
		at = cursor_distance(ring, head, load_peer_tail(ring), &avail) ? head + avail : head;
	__atomic_store_n(&ring->stop_at, at, __ATOMIC_RELAXED);
	/* Release: stop_at is set before stopped is seen; pairs with the
	 * acquire load in load_peer_tail(). */
	__atomic_store_n(&ring->stopped, 1, __ATOMIC_RELEASE);
}

void shim_ring_producer_stop(struct shim_ring *ring)
{
	__atomic_store_n(&ring->stopped, 1, __ATOMIC_RELAXED);
}

void shim_ring_zc_watch(struct shim_ring *ring, uint64_t wake_word)
{
	/* Atomic: shim_ring_zc_news() may read it lock-free while a new
	 * offer rewrites it; the flag below orders it. */
	__atomic_store_n(&ring->zc_wake, wake_word, __ATOMIC_RELAXED);
	/* Release: the word before the flag; pairs with the acquire load of
	 * the flag in shim_ring_zc_news() (lock-free readiness checks). */
	__atomic_store_n(&ring->zc_watch, 1, __ATOMIC_RELEASE);
}

void shim_ring_zc_unwatch(struct shim_ring *ring)
{
	__atomic_store_n(&ring->zc_watch, 0, __ATOMIC_RELAXED);
}

bool shim_ring_zc_news(const struct shim_ring *ring)
{
	/* Acquire on the state: pairs with the producer's release store of
	 * DONE (shm_zc_send). */
	return unlikely(__atomic_load_n(&ring->zc_watch, __ATOMIC_ACQUIRE)) &&
	       __atomic_load_n(&ring->hdr->zc_state, __ATOMIC_ACQUIRE) ==
		       __atomic_load_n(&ring->zc_wake, __ATOMIC_RELAXED);
}

void shim_ring_violate(struct shim_ring *ring)
{
	__atomic_store_n(&ring->violated, 1, __ATOMIC_RELAXED);
}

uint64_t shim_ring_own(const struct shim_ring *ring)
{
	return __atomic_load_n(&ring->own, __ATOMIC_RELAXED);
}

uint64_t shim_ring_sent(const struct shim_ring *ring)
{
	return own_tail(ring);
}

uint64_t shim_ring_received(struct shim_ring *ring)
{
	return own_head(ring) + shim_ring_readable(ring);
}

int shim_ring_span(uint8_t *data, uint32_t mask, uint64_t from, uint64_t tail, struct iovec out[2])
{
	size_t n, off, first;

	if (from > tail || tail - from > (uint64_t)mask + 1)
		return -ERANGE;
	n = (size_t)(tail - from);
	off = (size_t)(from & mask);
	first = (size_t)mask + 1 - off < n ? (size_t)mask + 1 - off : n;
	out[0] = (struct iovec){ .iov_base = data + off, .iov_len = first };
	out[1] = (struct iovec){ .iov_base = data, .iov_len = n - first };
	return n > first ? 2 : 1;
}

int shim_ring_unreceived(const struct shim_ring *ring, uint64_t from, struct iovec out[2])
{
	return shim_ring_span(ring->data, ring->mask, from, own_tail(ring), out);
}

void shim_ring_share_cursors(struct shim_ring *ring, bool we_produce)
{
	__atomic_store_n(&ring->cursors_shared, 1, __ATOMIC_RELAXED);
	/* Relaxed: a hint for the peer's choice of a moment to hand back,
	 * ordered with nothing. */
	__atomic_store_n(we_produce ? &ring->hdr->producer_shared : &ring->hdr->consumer_shared, 1,
			 __ATOMIC_RELAXED);
}

bool shim_ring_resume_announce(struct shim_ring *ring)
{
	__atomic_store_n(&ring->hdr->producer_resuming, 1, __ATOMIC_RELAXED);
	/* Full fence: the store above before the load below; pairs with the
	 * one in shim_ring_close_before_resume(). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return !__atomic_load_n(&ring->hdr->consumer_closed, __ATOMIC_RELAXED);
}

bool shim_ring_close_before_resume(struct shim_ring *ring)
{
	__atomic_store_n(&ring->hdr->consumer_closed, 1, __ATOMIC_RELAXED);
	/* Full fence: pairs with the one in shim_ring_resume_announce(). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&ring->hdr->producer_resuming, __ATOMIC_RELAXED) != 0;
}

bool shim_ring_producer_resuming(const struct shim_ring *ring)
{
	/* Relaxed: no memory is read on its word; what follows reads TCP,
	 * where the RESUME itself is (or is not yet). */
	return __atomic_load_n(&ring->hdr->producer_resuming, __ATOMIC_RELAXED) != 0;
}

bool shim_ring_peer_shared(const struct shim_ring *ring, bool we_produce)
{
	return __atomic_load_n(we_produce ? &ring->hdr->consumer_shared : &ring->hdr->producer_shared,
			       __ATOMIC_RELAXED) != 0;
}
