/* The fake server S against a shimmed client C. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

/* ---- fake server against a shimmed client ---- */

/* Anything the victim wrote into the ring it may only read ("oob"). */
static void count_foreign_ring_writes(void)
{
	for (uint32_t i = 0; i < st.tx.size; i++)
		if (st.tx.data[i] != st.shadow[i])
			st.oob++;
	if (!is_mode("hdr_after") && (st.tx.h->magic != RING_MAGIC || st.rx.h->magic != RING_MAGIC))
		st.oob++;
}

void run_server(void)
{
	struct sockaddr_in srv, peer;
	socklen_t plen = sizeof(peer);
	struct sockaddr_un sun;
	socklen_t nlen;
	int lfd, one = 1, memfd = -1;
	long long end;

	if (parse_addr(o.addr, &srv) < 0)
		fail_setup("bad --listen");
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&srv, sizeof(srv)) < 0 || listen(lfd, 4) < 0)
		fail_setup("tcp listen");
	/* A shim server holds its port's beacon; so does this one (anybody
	 * can), or the client would not offer at all. */
	if (hold_beacon(ntohs(srv.sin_port)) < 0)
		fail_setup("beacon");
	printf("READY %u\n", ntohs(srv.sin_port));
	fflush(stdout);
	if (!wait_fd(lfd, POLLIN, 20000) || (st.tcp = accept4(lfd, (struct sockaddr *)&peer, &plen, SOCK_CLOEXEC)) < 0)
		fail_setup("no client");
	nlen = rv_name(&sun, &peer, &srv);
	/* C listens on its first data call. */
	for (end = now_ms() + o.wait_ms;; usleep(2000)) {
		st.rv = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (connect(st.rv, (struct sockaddr *)&sun, nlen) == 0)
			break;
		close(st.rv);
		if (now_ms() > end)
			fail_setup("the client's rendezvous never appeared");
	}

	struct offer off;

	memset(&off, 0, sizeof(off));
	off.hdr = (struct hdr){ WIRE_MAGIC, WIRE_VERSION, MSG_OFFER, sizeof(off), 0 };
	random_bytes(off.nonce, sizeof(off.nonce));
	off.ring_bytes = 64 * 1024;
	off.tcp_fd = st.tcp;
	if (send_with_fds(st.rv, &off, sizeof(off), -1, is_mode("offer_fds")) < 0)
		fail_setup("send OFFER");

	struct accept acc;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} control;
	struct iovec iov = { &acc, sizeof(acc) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
			     .msg_controllen = sizeof(control.buf) };

	if (!wait_fd(st.rv, POLLIN, o.wait_ms) || recvmsg(st.rv, &mh, MSG_CMSG_CLOEXEC) != sizeof(acc) ||
	    acc.hdr.type != MSG_ACCEPT)
		fail_setup("no ACCEPT: the client refused us");
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(&memfd, CMSG_DATA(c), sizeof(int));
	struct stat sb;

	if (memfd < 0 || fstat(memfd, &sb) < 0 || (uint64_t)sb.st_size < 2 * ((uint64_t)RING_HDR + acc.ring_bytes))
		fail_setup("ACCEPT without a usable memfd");
	map_rings(memfd, (size_t)sb.st_size, acc.ring_bytes, 0);
	/* The ring only the victim reads: whatever we do not write must stay. */
	st.shadow = malloc(st.tx.size);
	if (!st.shadow)
		fail_setup("out of memory");
	memset(st.tx.data, FILLER, st.tx.size);
	memset(st.shadow, FILLER, st.tx.size);

	/* We commit first: nothing of ours went on TCP, so our offset is 0. */
	struct switch_at at;
	struct sw_frame sw;

	memset(&at, 0, sizeof(at));
	at.hdr = (struct hdr){ WIRE_MAGIC, WIRE_VERSION, MSG_SWITCH_AT, sizeof(at), 0 };
	at.switch_offset = is_mode("offset_huge") ? 1ull << 62 : 0;
	/* trunc, ctrunc, extra_fds: the lie is in this message and its fds. */
	if (send_with_fds(st.rv, &at, sizeof(at), -1, !is_mode("offer_fds")) < 0)
		fail_setup("send SWITCH_AT");
	memset(&sw, 0, sizeof(sw));
	sw.type = 'W';
	memcpy(sw.nonce, acc.nonce, sizeof(sw.nonce));
	if (is_mode("badnonce"))
		sw.nonce[0] ^= 0xff;
	send_all(st.tcp, &sw, sizeof(sw));
	st.reached = 1;

	/* C's offset; its TCP bytes up to it are data (echoed first, on the
	 * ring: our direction switched), then its frame. */
	if (!wait_fd(st.rv, POLLIN, o.wait_ms) || recv(st.rv, &at, sizeof(at), 0) != sizeof(at) ||
	    at.hdr.type != MSG_SWITCH_AT || at.switch_offset > (256u << 20)) {
		say("%s", "no usable SWITCH_AT from the client: it stays on TCP");
		sleep((unsigned)o.seconds);
		result();
	}
	st.pending.b = malloc((size_t)at.switch_offset + 1);
	st.pending.len = (size_t)at.switch_offset;
	if (!st.pending.b)
		fail_setup("out of memory");
	if (recv_exact(st.pending.b, st.pending.len) < 0 || recv_exact(&sw, sizeof(sw)) < 0) {
		/* The lie is out (ours went first): a victim that saw through
		 * it may end the connection before its own frame reaches us,
		 * by a reset or a close, which is an answer, not a setup
		 * failure. */
		if (errno != ECONNRESET && errno != EPIPE)
			fail_setup("short TCP before the client's switch");
		st.reset = errno == ECONNRESET;
		st.eof = !st.reset;
		say("%s", "the client ended the connection before its switch");
		count_foreign_ring_writes();
		result();
	}
	if (sw.type != 'W' || memcmp(sw.nonce, off.nonce, sizeof(sw.nonce)))
		fail_setup("the client's SWITCH frame is wrong");
	say("%s", "both directions switched");
	if (fcntl(st.tcp, F_SETFL, O_NONBLOCK) < 0)
		fail_setup("nonblock");
	pump(memfd, 1);
	count_foreign_ring_writes();
	result();
}
