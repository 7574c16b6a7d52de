/*
 * hostile_rdma: a peer that speaks the shim's RDMA wire (rdma_wire.h) and
 * lies, for the Soft-RoCE scenario (integration/vm/guest-rdma-one.sh). It
 * checks nothing about the victim itself: it reports what it saw, and the
 * guest script checks the victim (alive, traced the violation, still
 * serving byte-exact) and these reports.
 *
 *   hostile_rdma --host H --port P --mode imm|head|recvs|norecv|linkmsg|dataclosed|datahead [--linger S] [--timeout S]
 *   hostile_rdma --host H --mode squat --ports A-B [--timeout S]
 *
 * Lies (modes imm, head, recvs, norecv): it connects over TCP to a shim
 * server like a shim client, listens with rdma_cm at its own (IP, port),
 * answers the server's OFFER, proves itself honestly (it does own the TCP
 * connection), waits for the server's switch, then:
 *   imm     one WRITE WITH IMMEDIATE whose tail word announces 2^40 bytes
 *   dataclosed  100 bytes in one WRITE whose immediate is DATA with CLOSED
 *           (rdma_wire.h: never together)
 *   datahead    100 honest bytes in one DATA WRITE whose head bits claim
 *           the victim's next 2^18 - 1 bytes read, none of them sent yet
 *   head    sets the server's tx_head (our credit to it) to 2^40, then
 *           sends 100 honest bytes for the server to echo
 *   recvs   sets the server's tx_peer_recvs to 2^40, then 100 bytes
 *   norecv  posts no receive after the switch, sets the server's armed
 *           word, then 100 bytes: the echo's immediate meets no receive
 *   linkmsg link messages (shim/PROTOCOL.md, "Links"): an OFFER naming a
 *           client that is not the link's peer, a RELEASE of the server's
 *           live connection, then 100 honest bytes (echoed: the connection
 *           lives on), then a message of an unknown type (the server
 *           breaks the link, and the connection goes on over TCP)
 * and prints "hostile: lie sent", then for --linger seconds (default 2) keeps
 * the connection (no DREQ that would end a victim's wait early) and counts
 * the bytes the server announces on our ring ("hostile: ring bytes N after
 * the lie").
 *
 * Squatter (mode squat): binds rdma_cm listeners at H on every port of
 * A-B before a real client does (the scenario narrows the kernel's
 * ephemeral range to A-B), so the real client's rendezvous is taken and the
 * real server reaches us. It answers OFFERs, sends SWITCH_AT(0) and counts
 * the bytes the server announces on our ring: "hostile: squat accepted K,
 * ring bytes N" at the end (--timeout, or once every server it caught
 * disconnected). A server that waits for the proof sends us nothing.
 *
 * Exit status: 0 when the lie (or, for squat, the listeners) went out, 1 on
 * a setup failure (reported), 2 on usage.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdma_wire.h"

#define MAX_SQUAT 64
#define RECVS 16

static const char *mode;
static int version = SHIM_RDMA_VERSION;
static int linger_s = 2;

static void die(const char *what)
{
	fprintf(stderr, "hostile: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One RDMA peer: its QP, our registered ctl page + ring, the victim's. */
struct peer {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *mem;
	uint32_t ring_bytes;
	uint64_t raddr;
	uint32_t rkey;
	uint8_t nonce_s[SHIM_NONCE_LEN], nonce_h[SHIM_NONCE_LEN];
	uint64_t ring_in; /* bytes the victim announced on our ring */
	uint32_t victim_id; /* the victim's id of the connection (its immediates and SWITCH_AT name it) */
	bool at_known;
	uint64_t at;
	uint64_t wr_seq;
};

static struct rdma_cm_event *wait_event(struct rdma_event_channel *ec, double deadline)
{
	struct rdma_cm_event *ev;

	while (now_s() < deadline) {
		struct pollfd p = { .fd = ec->fd, .events = POLLIN };

		if (poll(&p, 1, 100) > 0 && rdma_get_cm_event(ec, &ev) == 0)
			return ev;
	}
	return NULL;
}

static void post_recv(struct peer *p)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->mem + 128, .length = 64, .lkey = p->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 0, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(p->id->qp, &wr, &bad))
		die("ibv_post_recv");
}

/* The victim's tail on our ring: the word its immediate WRITEs carry. */
static uint64_t announced(const struct peer *p)
{
	uint64_t v;

	memcpy(&v, p->mem + offsetof(struct shim_rdma_ctl, rx_announced), sizeof(v));
	return v;
}

/* The victim's bytes on our ring after one of its immediates: a DATA one
 * adds the bytes its WRITE placed, a tail word one names them all. */
static void take_ring_imm(struct peer *p, const struct ibv_wc *wc)
{
	uint32_t imm = be32toh(wc->imm_data);

	if (imm & SHIM_RDMA_IMM_DATA)
		p->ring_in = shim_rdma_imm_tail(p->ring_in, imm, wc->byte_len, p->ring_bytes);
	else
		p->ring_in = announced(p);
}

/* Takes what the victim's completions say: its SWITCH_AT, its ring bytes. */
static void reap(struct peer *p, bool repost)
{
	struct ibv_wc wc[16];
	int n;

	while ((n = ibv_poll_cq(p->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || !(wc[i].opcode & IBV_WC_RECV))
				continue;
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
				take_ring_imm(p, &wc[i]);
			} else {
				struct shim_rdma_switch_at at;

				memcpy(&at, p->mem + 128, sizeof(at));
				p->at = be64toh(at.offset);
				p->at_known = true;
			}
			if (repost)
				post_recv(p);
		}
	}
}

/* Accepts the victim's OFFER from a CONNECT_REQUEST event (not acked). */
static int accept_offer(struct peer *p, struct rdma_cm_event *ev, unsigned recvs)
{
	struct shim_rdma_hello h, acc;
	struct ibv_qp_init_attr qa;
	struct rdma_conn_param cp;
	size_t len;

	if (!ev->param.conn.private_data || ev->param.conn.private_data_len < sizeof(h))
		return -1;
	memcpy(&h, ev->param.conn.private_data, sizeof(h));
	p->id = ev->id;
	p->raddr = be64toh(h.addr);
	p->rkey = be32toh(h.rkey);
	p->ring_bytes = be32toh(h.ring_bytes);
	p->victim_id = be32toh(h.conn_id);
	memcpy(p->nonce_s, h.nonce, SHIM_NONCE_LEN);
	if (getrandom(p->nonce_h, SHIM_NONCE_LEN, 0) != SHIM_NONCE_LEN)
		die("getrandom");
	len = SHIM_RDMA_CTL_BYTES + (size_t)p->ring_bytes;
	p->mem = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	if (!p->mem)
		die("aligned_alloc");
	memset(p->mem, 0, len);
	p->pd = ibv_alloc_pd(p->id->verbs);
	p->cq = p->pd ? ibv_create_cq(p->id->verbs, 64, NULL, NULL, 0) : NULL;
	p->mr = p->cq ? ibv_reg_mr(p->pd, p->mem, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!p->mr)
		die("pd/cq/mr");
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = p->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.sq_sig_all = 1;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 32;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(p->id, p->pd, &qa))
		die("rdma_create_qp");
	for (unsigned i = 0; i < recvs; i++)
		post_recv(p);
	memset(&acc, 0, sizeof(acc));
	acc.magic = htobe32(SHIM_RDMA_MAGIC);
	acc.version = (uint8_t)version;
	acc.type = SHIM_RDMA_ACCEPT;
	acc.order = 0x0102;
	memcpy(acc.nonce, p->nonce_h, SHIM_NONCE_LEN);
	acc.addr = htobe64((uint64_t)(uintptr_t)p->mem);
	acc.rkey = htobe32(p->mr->rkey);
	acc.ring_bytes = h.ring_bytes;
	memset(&cp, 0, sizeof(cp));
	cp.private_data = &acc;
	cp.private_data_len = sizeof(acc);
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_accept(p->id, &cp))
		die("rdma_accept");
	return 0;
}

/* The victim writes into our ring: our QP must allow it (rdma_cm's INIT
 * may not have). */
static void allow_writes(struct peer *p)
{
	struct ibv_qp_attr a = { .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE };

	ibv_modify_qp(p->id->qp, &a, IBV_QP_ACCESS_FLAGS);
}

/* One WR, waited for (bounded): 0, or -1 when it failed or timed out. */
static int post_wait(struct peer *p, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	double end = now_s() + 5;

	wr->wr_id = ++p->wr_seq;
	wr->send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(p->id->qp, wr, &bad))
		return -1;
	while (now_s() < end) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(p->cq, 1, &wc);

		if (n > 0 && (wc.opcode & IBV_WC_RECV)) {
			/* A receive: put it back for reap() by counting here. */
			if (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM)
				take_ring_imm(p, &wc);
			else if (wc.status == IBV_WC_SUCCESS) {
				struct shim_rdma_switch_at at;

				memcpy(&at, p->mem + 128, sizeof(at));
				p->at = be64toh(at.offset);
				p->at_known = true;
			}
			continue;
		}
		if (n > 0)
			return wc.status == IBV_WC_SUCCESS && wc.wr_id == wr->wr_id ? 0 : -1;
		usleep(100);
	}
	return -1;
}

/* WRITEs len bytes of ours at loff to the victim's page at roff, with imm. */
static int write_to(struct peer *p, size_t loff, size_t len, uint64_t roff, bool with_imm, uint32_t imm)
{
	struct ibv_sge sge = { .addr = (uintptr_t)p->mem + loff, .length = (uint32_t)len, .lkey = p->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = len ? 1 : 0 };

	wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.imm_data = htobe32(imm);
	wr.wr.rdma.remote_addr = p->raddr + roff;
	wr.wr.rdma.rkey = p->rkey;
	return post_wait(p, &wr);
}

/* n honest bytes at the start of the victim's ring, announced as a
 * producer does: the data, then the tail word with the victim's id. */
static int announce(struct peer *p, size_t n)
{
	uint64_t tail = n;

	memset(p->mem + SHIM_RDMA_CTL_BYTES, 'h', n);
	memcpy(p->mem + 264, &tail, sizeof(tail));
	if (write_to(p, SHIM_RDMA_CTL_BYTES, n, SHIM_RDMA_CTL_BYTES, false, 0) < 0)
		return -1;
	return write_to(p, 264, sizeof(tail), offsetof(struct shim_rdma_ctl, rx_announced), true, p->victim_id);
}

/* One link message (a SEND): type, to_id, the client address named. */
static int send_link_msg(struct peer *p, uint8_t type, uint32_t to_id, const uint8_t client_addr[16])
{
	struct shim_rdma_link_msg m;
	struct ibv_sge sge = { .addr = (uintptr_t)p->mem + 512, .length = sizeof(m), .lkey = p->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND };

	memset(&m, 0, sizeof(m));
	m.magic = htobe32(SHIM_RDMA_MAGIC);
	m.version = (uint8_t)version;
	m.type = type;
	m.to_id = htobe32(to_id);
	memcpy(m.client_addr, client_addr, 16);
	memcpy(p->mem + 512, &m, sizeof(m));
	return post_wait(p, &wr);
}

static int write_word(struct peer *p, size_t ctl_off, uint64_t v)
{
	memcpy(p->mem + 256, &v, sizeof(v));
	return write_to(p, 256, sizeof(v), ctl_off, false, 0);
}

static int send_switch_at(struct peer *p, uint64_t offset)
{
	struct shim_rdma_switch_at at = {
		.magic = htobe32(SHIM_RDMA_MAGIC),
		.version = (uint8_t)version,
		.type = SHIM_RDMA_SWITCH_AT,
		.offset = htobe64(offset),
		.to_id = htobe32(p->victim_id),
	};
	struct ibv_sge sge = { .addr = (uintptr_t)p->mem + 192, .length = sizeof(at), .lkey = p->mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND };

	memcpy(p->mem + 192, &at, sizeof(at));
	return post_wait(p, &wr);
}

static void write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	while (len) {
		ssize_t n = send(fd, b, len, MSG_NOSIGNAL);

		if (n <= 0)
			die("send");
		b += n;
		len -= (size_t)n;
	}
}

/* Reads exactly len bytes from TCP (bounded by the deadline). */
static int read_exact(int fd, void *buf, size_t len, double deadline)
{
	uint8_t *b = buf;

	while (len && now_s() < deadline) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = recv(fd, b, len, 0);
		if (n <= 0)
			return -1;
		b += n;
		len -= (size_t)n;
	}
	return len ? -1 : 0;
}

static int lie(const char *host, int port, int timeout)
{
	double deadline = now_s() + timeout;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) }, me;
	socklen_t mlen = sizeof(me);
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *lid;
	struct rdma_cm_event *ev;
	struct peer p = { 0 };
	const char hello[16] = "hostile-hello-16";
	char echo[16];
	struct shim_frame_switch frame = { .type = SHIM_FRAME_SWITCH }, theirs;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	bool norecv = !strcmp(mode, "norecv");
	/* A v4-mapped 1.2.3.4: a client that is not the link's peer. */
	static const uint8_t stranger[16] = { [10] = 0xff, [11] = 0xff, 1, 2, 3, 4 };

	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 || fd < 0 || !ec)
		die("setup");
	/* Our (IP, port) in rdma_cm's space may be held (a CM id of the
	 * victim's links took that number as its source port): another
	 * connection then, as a shim client would stay on TCP. */
	for (int tries = 0;; tries++) {
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			die("connect");
		getsockname(fd, (struct sockaddr *)&me, &mlen);
		if (rdma_create_id(ec, &lid, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (rdma_bind_addr(lid, (struct sockaddr *)&me) == 0 && rdma_listen(lid, 4) == 0)
			break;
		if (tries == 5)
			die("rdma listen at our own (IP, port)");
		rdma_destroy_id(lid);
		close(fd);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket");
	}
	/* The victim starts its upgrade at its first data call. */
	write_all(fd, hello, sizeof(hello));
	if (read_exact(fd, echo, sizeof(echo), deadline) < 0 || memcmp(echo, hello, sizeof(hello)))
		die("first echo");
	for (;;) {
		ev = wait_event(ec, deadline);
		if (!ev) {
			fprintf(stderr, "hostile: no CONNECT_REQUEST from the victim\n");
			return 1;
		}
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev);
	}
	accept_offer(&p, ev, norecv ? 1 : RECVS);
	rdma_ack_cm_event(ev);
	ev = wait_event(ec, deadline);
	if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED) {
		fprintf(stderr, "hostile: not established (%s)\n", ev ? rdma_event_str(ev->event) : "timeout");
		return 1;
	}
	rdma_ack_cm_event(ev);
	allow_writes(&p);
	/* Prove ourselves, as an honest client would: we do own this TCP
	 * connection, so we know where the victim's nonce must go. */
	if (send_switch_at(&p, sizeof(hello)) < 0)
		die("switch_at");
	memcpy(frame.nonce, p.nonce_s, SHIM_NONCE_LEN);
	write_all(fd, &frame, sizeof(frame));
	while (!p.at_known && now_s() < deadline) {
		reap(&p, !norecv);
		usleep(1000);
	}
	if (!p.at_known || p.at != sizeof(hello) || read_exact(fd, &theirs, sizeof(theirs), deadline) < 0 ||
	    memcmp(theirs.nonce, p.nonce_h, SHIM_NONCE_LEN)) {
		fprintf(stderr, "hostile: the victim did not switch to us\n");
		return 1;
	}
	printf("hostile: victim switched\n");
	if (!strcmp(mode, "dataclosed") || !strcmp(mode, "datahead")) {
		uint32_t imm = shim_rdma_imm_data(p.victim_id, SHIM_RDMA_IMM_DATA_HEAD, false);

		if (!strcmp(mode, "dataclosed"))
			imm = shim_rdma_imm_data(p.victim_id, 0, false) | SHIM_RDMA_IMM_CLOSED;
		memset(p.mem + SHIM_RDMA_CTL_BYTES, 'd', 100);
		write_to(&p, SHIM_RDMA_CTL_BYTES, 100, SHIM_RDMA_CTL_BYTES, true, imm);
	} else if (!strcmp(mode, "imm")) {
		{
			uint64_t lie = 1ull << 40;

			memcpy(p.mem + 256, &lie, sizeof(lie));
			write_to(&p, 256, sizeof(lie), offsetof(struct shim_rdma_ctl, rx_announced), true, p.victim_id);
		}
	} else {
		if (!strcmp(mode, "head"))
			write_word(&p, offsetof(struct shim_rdma_ctl, tx_head), 1ull << 40);
		else if (!strcmp(mode, "recvs"))
			write_word(&p, offsetof(struct shim_rdma_ctl, tx_peer_recvs), 1ull << 40);
		else if (norecv)
			write_word(&p, offsetof(struct shim_rdma_ctl, tx_consumer_armed), 1);
		else if (!strcmp(mode, "linkmsg")) {
			send_link_msg(&p, SHIM_RDMA_LINK_OFFER, 0, stranger);
			send_link_msg(&p, SHIM_RDMA_LINK_RELEASE, p.victim_id, stranger);
		}
		/* 100 honest bytes for the victim to echo (its receives are
		 * credited: it posted SHIM_RDMA_RQ_DEPTH). */
		announce(&p, 100);
		if (!strcmp(mode, "linkmsg")) {
			/* The echo comes back over the link: it lives on. Then
			 * a message no shim sends: the link breaks. */
			for (double until = now_s() + 10; p.ring_in < 100 && now_s() < until;) {
				reap(&p, true);
				usleep(1000);
			}
			printf("hostile: echoed %llu before the unknown message\n", (unsigned long long)p.ring_in);
			send_link_msg(&p, 99, 0, stranger);
		}
	}
	printf("hostile: lie sent (%s)\n", mode);
	fflush(stdout);
	uint64_t before = p.ring_in;
	double end = now_s() + linger_s;

	while (now_s() < end) {
		uint8_t sink[4096];

		reap(&p, !norecv);
		if (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) == 0)
			break;
		usleep(1000);
	}
	printf("hostile: ring bytes %llu after the lie\n", (unsigned long long)(p.ring_in - before));
	close(fd);
	rdma_disconnect(p.id);
	return 0;
}

static int squat(const char *host, const char *ports, int timeout)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *lid[MAX_SQUAT];
	struct peer *peers = calloc(MAX_SQUAT, sizeof(*peers));
	int lo, hi, n = 0, accepted = 0, gone = 0;
	uint64_t total = 0;
	double end = now_s() + timeout;

	if (!ec || !peers || sscanf(ports, "%d-%d", &lo, &hi) != 2 || lo < 1 || hi < lo || hi - lo >= MAX_SQUAT)
		return 2;
	for (int port = lo; port <= hi; port++) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

		if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
			return 2;
		if (rdma_create_id(ec, &lid[n], NULL, RDMA_PS_TCP) || rdma_bind_addr(lid[n], (struct sockaddr *)&sa) ||
		    rdma_listen(lid[n], 4))
			die("squat listen");
		n++;
	}
	printf("hostile: squatting %d ports\n", n);
	fflush(stdout);
	while (now_s() < end) {
		struct rdma_cm_event *ev = wait_event(ec, now_s() + 0.05);

		if (ev) {
			struct rdma_cm_id *id = ev->id;
			enum rdma_cm_event_type e = ev->event;

			if (e == RDMA_CM_EVENT_DISCONNECTED)
				gone++;
			if (e == RDMA_CM_EVENT_CONNECT_REQUEST && accepted < MAX_SQUAT) {
				struct peer *p = &peers[accepted++];

				accept_offer(p, ev, RECVS);
			}
			rdma_ack_cm_event(ev);
			if (e == RDMA_CM_EVENT_ESTABLISHED) {
				for (int i = 0; i < accepted; i++) {
					if (peers[i].id != id)
						continue;
					allow_writes(&peers[i]);
					/* A lie the victim can check: our "switch" at 0. */
					send_switch_at(&peers[i], 0);
				}
			}
		}
		for (int i = 0; i < accepted; i++)
			reap(&peers[i], true);
		/* Every victim we caught gave up on us: nothing more comes. */
		if (accepted && gone >= accepted)
			break;
	}
	for (int i = 0; i < accepted; i++)
		total += peers[i].ring_in;
	printf("hostile: squat accepted %d, ring bytes %llu\n", accepted, (unsigned long long)total);
	return 0;
}

int main(int argc, char **argv)
{
	const char *host = NULL, *ports = NULL;
	int port = 0, timeout = 20;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--host"))
			host = argv[i + 1];
		else if (!strcmp(argv[i], "--port"))
			port = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--mode"))
			mode = argv[i + 1];
		else if (!strcmp(argv[i], "--ports"))
			ports = argv[i + 1];
		else if (!strcmp(argv[i], "--timeout"))
			timeout = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--linger"))
			linger_s = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--version"))
			version = atoi(argv[i + 1]);
		else
			goto usage;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (host && mode && !strcmp(mode, "squat") && ports)
		return squat(host, ports, timeout);
	if (host && mode && port > 0 &&
	    (!strcmp(mode, "imm") || !strcmp(mode, "head") || !strcmp(mode, "recvs") || !strcmp(mode, "norecv") ||
	     !strcmp(mode, "linkmsg") || !strcmp(mode, "dataclosed") || !strcmp(mode, "datahead")))
		return lie(host, port, timeout);
usage:
	fprintf(stderr, "usage: hostile_rdma --host H --port P --mode imm|head|recvs|norecv|linkmsg [--linger S] [--timeout S]\n"
			"       hostile_rdma --host H --mode squat --ports A-B [--timeout S]\n");
	return 2;
}
