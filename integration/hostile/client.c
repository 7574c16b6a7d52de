/* The fake client C against a shimmed server S. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile.h"

/* ---- fake client against a shimmed server ---- */
static int make_memfd(uint32_t size, size_t *len_out)
{
	int fd = memfd_create("hostile-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t len = 2 * ((size_t)RING_HDR + size);

	if (is_mode("ring_size"))
		len = 2 * ((size_t)RING_HDR + size / 2);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
		fail_setup("memfd");
	if (!is_mode("noseal") &&
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | (is_mode("sealwrite") ? 0 : F_SEAL_SEAL)) < 0)
		fail_setup("seals");
	*len_out = len;
	return fd;
}

/*
 * line_foreign: a service of another process (our child, listening on an
 * abstract SEQPACKET name) and our socket connected to it, which we pass as
 * the bell line. A victim that took it would send its bells, with its own
 * credentials, to that service. The child counts what it gets until we hang
 * up and writes the count to *count_fd.
 */
static pid_t line_service;
static int line_count_fd = -1, line_sock = -1;

static int foreign_line(void)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t len;
	int ready[2], count[2], s;
	char c;

	snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "hostile-line-%d", (int)getpid());
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(sun.sun_path + 1));
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(count, O_CLOEXEC) < 0)
		fail_setup("pipe");
	line_service = fork();
	if (line_service < 0)
		fail_setup("fork");
	if (line_service == 0) {
		int l = socket(AF_UNIX, SOCK_SEQPACKET, 0), a, n = 0;
		uint8_t buf[64];

		if (l < 0 || bind(l, (struct sockaddr *)&sun, len) < 0 || listen(l, 1) < 0)
			_exit(1);
		(void)!write(ready[1], "r", 1);
		a = accept(l, NULL, NULL);
		while (a >= 0 && wait_fd(a, POLLIN, 30000) && recv(a, buf, sizeof(buf), 0) > 0)
			n++;
		(void)!write(count[1], &n, sizeof(n));
		_exit(0);
	}
	close(count[1]);
	line_count_fd = count[0];
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (read(ready[0], &c, 1) != 1 || s < 0 || connect(s, (struct sockaddr *)&sun, len) < 0)
		fail_setup("foreign line service");
	return s;
}

static void report_foreign_line(void)
{
	int n = -1;

	if (line_sock < 0)
		return;
	close(line_sock);
	if (!wait_fd(line_count_fd, POLLIN, 5000) || read(line_count_fd, &n, sizeof(n)) != sizeof(n))
		n = -1;
	waitpid(line_service, NULL, 0);
	printf("LINE_FOREIGN rang=%d\n", n);
}

void run_client(void)
{
	struct sockaddr_in srv, me;
	socklen_t slen = sizeof(me);
	struct sockaddr_un sun;
	socklen_t nlen;
	int lfd, memfd;
	uint8_t prefix[6];

	if (parse_addr(o.addr, &srv) < 0)
		fail_setup("bad --connect");
	st.tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memset(&me, 0, sizeof(me));
	me.sin_family = AF_INET;
	me.sin_addr = srv.sin_addr;
	if (st.tcp < 0 || bind(st.tcp, (struct sockaddr *)&me, sizeof(me)) < 0 ||
	    getsockname(st.tcp, (struct sockaddr *)&me, &slen) < 0)
		fail_setup("tcp bind");
	/* The name exists before S can look for it. */
	nlen = rv_name(&sun, &me, &srv);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sun, nlen) < 0 || listen(lfd, 4) < 0)
		fail_setup("rendezvous listen");
	if (connect(st.tcp, (struct sockaddr *)&srv, sizeof(srv)) < 0)
		fail_setup("tcp connect");
	for (size_t i = 0; i < sizeof(prefix); i++)
		prefix[i] = out_byte(i);
	expect_add(prefix, sizeof(prefix));
	tcp_send(prefix, sizeof(prefix));
	st.sent = sizeof(prefix);
	if (!wait_fd(lfd, POLLIN, o.wait_ms) || (st.rv = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
		fail_setup("no OFFER: the server never came to the rendezvous");
	close(lfd);

	struct offer off;

	if (!wait_fd(st.rv, POLLIN, o.wait_ms) || recv(st.rv, &off, sizeof(off), 0) != sizeof(off) ||
	    off.hdr.magic != WIRE_MAGIC || off.hdr.type != MSG_OFFER)
		fail_setup("bad OFFER");
	uint32_t size = o.ring ? o.ring : off.ring_bytes;

	if (is_mode("tiny"))
		size = 4096;
	if (is_mode("ring_huge"))
		size = 64u << 20; /* the most shim/wire.c accepts */
	size_t len;

	memfd = make_memfd(size, &len);
	map_rings(memfd, len, is_mode("ring_size") ? size / 2 : size, 1);
	/* Our mapping stays writable; one the victim makes can not be. */
	if (is_mode("sealwrite") && fcntl(memfd, F_ADD_SEALS, 0x0010 /* F_SEAL_FUTURE_WRITE */ | F_SEAL_SEAL) < 0)
		fail_setup("F_SEAL_FUTURE_WRITE");
	/* A huge ring stays sparse: only what the victim could ever see. */
	memset(st.map, FILLER, is_mode("ring_huge") ? 2 * RING_HDR : len);
	for (int r = 0; r < 2; r++) {
		struct ring_hdr *h = r ? st.rx.h : st.tx.h;

		memset(h, 0, sizeof(*h));
		h->magic = RING_MAGIC;
		h->size = is_mode("ring_hdr") ? size / 2 : is_mode("ring_size") ? size / 2 : size;
	}
	if (is_mode("ring_size"))
		st.tx.size = st.rx.size = size / 2;

	struct accept acc;

	memset(&acc, 0, sizeof(acc));
	acc.hdr = (struct hdr){ WIRE_MAGIC, WIRE_VERSION, MSG_ACCEPT, sizeof(acc), 0 };
	random_bytes(acc.nonce, sizeof(acc.nonce));
	acc.ring_bytes = size;
	acc.tcp_fd = st.tcp;
	int pass = memfd, pfd[2];

	if (is_mode("notmemfd")) {
		/* A pipe where the ring memfd belongs. */
		if (pipe2(pfd, O_CLOEXEC) < 0)
			fail_setup("pipe");
		pass = o.blocking ? LINGERING : pfd[0];
	}
	int own_line[2] = { -1, -1 };

	if (is_mode("line_foreign") || is_mode("line_hup")) {
		if (is_mode("line_hup") && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, own_line) < 0)
			fail_setup("socketpair");
		if (is_mode("line_foreign"))
			line_sock = foreign_line();
		acc.hdr.flags = 1;
		if (send_fd_pair(st.rv, &acc, sizeof(acc), memfd, own_line[1] >= 0 ? own_line[1] : line_sock) < 0)
			fail_setup("send ACCEPT");
		if (own_line[1] >= 0)
			close(own_line[1]);
	} else if (send_with_fds(st.rv, &acc, sizeof(acc), pass, 1) < 0) {
		fail_setup("send ACCEPT");
	}
	say("ACCEPT sent (%s)", o.mode);
	if (is_mode("trunc") || is_mode("ctrunc") || is_mode("ring_size") || is_mode("ring_hdr") ||
	    is_mode("noseal") || is_mode("notmemfd") || is_mode("sealwrite"))
		st.reached = 1; /* the lie is the handshake message itself */

	/* S commits first: its offset, its app bytes up to it, its frame. */
	struct switch_at at;
	struct sw_frame sw;

	if (!wait_fd(st.rv, POLLIN, o.wait_ms) || recv(st.rv, &at, sizeof(at), 0) != sizeof(at) ||
	    at.hdr.type != MSG_SWITCH_AT) {
		say("%s", "no SWITCH_AT: the server refused the upgrade");
		st.tcp_app_left = ~0ull; /* it stays on TCP: its bytes are all data */
		tcp_becomes_data();
		st.refused = 1;
		if (fcntl(st.tcp, F_SETFL, O_NONBLOCK) < 0)
			fail_setup("nonblock");
		pump(memfd, 0);
		result();
	}
	if (at.switch_offset > (1u << 20))
		fail_setup("SWITCH_AT offset beyond anything sent");
	uint8_t *app = malloc((size_t)at.switch_offset + 1);

	if (!app || recv_exact(app, (size_t)at.switch_offset) < 0)
		fail_setup("short TCP before the server's switch");
	classify(app, (size_t)at.switch_offset);
	free(app);
	if (recv_exact(&sw, sizeof(sw)) < 0 || sw.type != 'W' || memcmp(sw.nonce, acc.nonce, sizeof(sw.nonce)))
		fail_setup("the server's SWITCH frame is missing or wrong");

	/* Ours: the offset, then the frame (our prefix is all that went before). */
	memset(&at, 0, sizeof(at));
	at.hdr = (struct hdr){ WIRE_MAGIC, WIRE_VERSION, MSG_SWITCH_AT, sizeof(at), 0 };
	at.switch_offset = is_mode("offset_huge") ? 1ull << 62 : st.sent;
	if (send(st.rv, &at, sizeof(at), MSG_NOSIGNAL) != sizeof(at))
		fail_setup("send SWITCH_AT");
	memset(&sw, 0, sizeof(sw));
	sw.type = 'W';
	memcpy(sw.nonce, off.nonce, sizeof(sw.nonce));
	if (is_mode("badnonce"))
		sw.nonce[0] ^= 0xff;
	tcp_send(&sw, sizeof(sw));
	say("%s", "both directions switched");
	/* line_hup: the victim's line reads EOF from here on. */
	if (own_line[0] >= 0) {
		/* Refused at the send where the kernel can (SO_PASSRIGHTS). */
		if (o.blocking)
			say("line fd %s", send_lingering(own_line[0]) == 0 ? "sent" : "refused");
		close(own_line[0]);
	}
	/* Ask for every bell on the line (the victim refused it, or rings it). */
	if (is_mode("line_foreign")) {
		__atomic_store_n(&st.rx.h->consumer_armed, 2, __ATOMIC_SEQ_CST);
		__atomic_store_n(&st.tx.h->producer_wants_space, 2, __ATOMIC_SEQ_CST);
	}
	if (is_mode("pair_decoy"))
		pair_decoy(&srv);
	if (is_mode("offset_huge"))
		tcp_becomes_data();
	if (lie_in_ring() || is_mode("honest") || is_mode("tiny") || is_mode("extra_fds") || is_mode("line_foreign") ||
	    is_mode("line_hup") || is_mode("offset_huge") || is_mode("ring_huge") || is_mode("idle") || is_mode("badnonce"))
		st.reached = 1;
	if (fcntl(st.tcp, F_SETFL, O_NONBLOCK) < 0)
		fail_setup("nonblock");
	pump(memfd, 0);
	report_foreign_line();
	result();
}
