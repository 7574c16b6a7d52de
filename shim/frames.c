/* In-band frames; see frames.h and wire.h. */
#include "frames.h"

#include <errno.h>
#include <string.h>

#include "real.h"
#include "trace.h"
#include "wire.h"

int shim_frames_flush(struct shim_sock *s, int fd)
{
	while (s->tcp_out_len) {
		ssize_t n = REAL(send)(fd, s->tcp_out, s->tcp_out_len, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (n < 0)
			return errno == EWOULDBLOCK ? -EAGAIN : -errno;
		memmove(s->tcp_out, s->tcp_out + n, s->tcp_out_len - (size_t)n);
		s->tcp_out_len -= (size_t)n;
	}
	return 0;
}

int shim_frames_queue(struct shim_sock *s, int fd, const void *frame, size_t len)
{
	const uint8_t *bytes = frame;

	/* One waiting bell of a kind wakes the peer as well as two would. */
	if (len == 1 && memchr(s->tcp_out, bytes[0], s->tcp_out_len))
		return shim_frames_flush(s, fd);
	if (s->tcp_out_len + len > sizeof(s->tcp_out))
		return -ENOBUFS;
	memcpy(s->tcp_out + s->tcp_out_len, frame, len);
	s->tcp_out_len += len;
	return shim_frames_flush(s, fd);
}

void shim_frames_drain(struct shim_sock *s, int fd)
{
	uint8_t scratch[256];

	for (;;) {
		ssize_t n = REAL(recv)(fd, scratch, sizeof(scratch), MSG_DONTWAIT);

		if (n == 0) {
			s->rx_tcp_eof = true;
			s->bells_owed = 0;
			return;
		}
		if (n < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
				s->rx_tcp_eof = true; /* reset: the peer is gone */
				s->bells_owed = 0;
			}
			return;
		}
		s->bells_owed = (size_t)n >= s->bells_owed ? 0 : s->bells_owed - (unsigned)n;
	}
}

void shim_frames_absorb(struct shim_sock *s, const uint8_t *bytes, size_t len)
{
	size_t want = sizeof(struct shim_frame_switch) - s->rx_frame_len;
	size_t take = len < want ? len : want;

	memcpy(s->rx_frame + s->rx_frame_len, bytes, take);
	s->rx_frame_len += take;
	/* What follows the SWITCH frame can only be bells: nothing to keep. */
}

int shim_frames_read_switch(struct shim_sock *s, int fd)
{
	struct shim_frame_switch frame;

	while (s->rx_frame_len < sizeof(frame)) {
		ssize_t n = REAL(recv)(fd, s->rx_frame + s->rx_frame_len, sizeof(frame) - s->rx_frame_len,
				       MSG_DONTWAIT);

		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -ECONNRESET;
		s->rx_frame_len += (size_t)n;
	}
	memcpy(&frame, s->rx_frame, sizeof(frame));
	if (frame.type != SHIM_FRAME_SWITCH || memcmp(frame.nonce, s->rx_nonce, SHIM_NONCE_LEN) != 0)
		return -EPROTO;
	return 1;
}
