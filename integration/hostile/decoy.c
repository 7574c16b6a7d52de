/* pair_decoy: a HINT for a connection this side does not hold. */
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hostile.h"

static void v4_mapped(uint8_t out[16], const struct in_addr *a)
{
	memset(out, 0, 16);
	out[10] = out[11] = 0xff;
	memcpy(out + 12, &a->s_addr, 4);
}

void pair_decoy(const struct sockaddr_in *srv)
{
	const uint32_t ring = 64 * 1024;
	struct in_addr lo = { htonl(INADDR_LOOPBACK) };
	struct hint h;
	int sp[2], memfd, fds[2];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(fds))];
	} control;
	struct iovec iov = { &h, sizeof(h) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };

	if (o.decoy <= 0)
		fail_setup("pair_decoy needs --decoy PORT");
	memset(&h, 0, sizeof(h));
	h.hdr = (struct hdr){ WIRE_MAGIC, WIRE_VERSION, MSG_HINT, sizeof(h), 0 };
	v4_mapped(h.client_addr, &lo);
	v4_mapped(h.server_addr, &srv->sin_addr);
	h.client_port = (uint16_t)o.decoy;
	h.server_port = ntohs(srv->sin_port);
	h.ring_bytes = ring;
	random_bytes(h.nonce, sizeof(h.nonce));
	h.tcp_fd = st.tcp; /* a socket we hold, but not that connection's */
	h.slot = 0xffffffffu; /* a ring of its own, not a slot of an arena */
	memfd = memfd_create("hostile-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0 || memfd < 0 ||
	    ftruncate(memfd, 2 * ((off_t)RING_HDR + ring)) < 0 ||
	    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		fail_setup("decoy socketpair or memfd");
	/* Well-formed rings: only the check of who holds the connection may
	 * stop it. */
	uint8_t *map = mmap(NULL, 2 * ((size_t)RING_HDR + ring), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);

	if (map == MAP_FAILED)
		fail_setup("decoy mmap");
	for (int r = 0; r < 2; r++) {
		struct ring_hdr *rh = (struct ring_hdr *)(map + r * ((size_t)RING_HDR + ring));

		rh->magic = RING_MAGIC;
		rh->size = ring;
	}
	fds[0] = sp[1];
	fds[1] = memfd;
	memset(control.buf, 0, sizeof(control.buf));
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	if (sendmsg(st.rv, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(h))
		fail_setup("send HINT");
	close(sp[1]);
	close(memfd);
	printf("DECOY_SENT\n");
	fflush(stdout);

	const char *verdict = "none";
	uint8_t msg[128];

	if (wait_fd(sp[0], POLLIN, o.wait_ms))
		verdict = recv(sp[0], msg, sizeof(msg), 0) > 0 ? "committed" : "refused";
	printf("DECOY decoy=%s\n", verdict);
	exit(0);
}
