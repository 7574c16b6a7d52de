/*
 * hostile_shm: a peer that speaks the shared-memory upgrade protocol itself
 * (shim/PROTOCOL.md, shim/wire.h, shim/ring.h; no shim header is included on
 * purpose: an attacker has only the documented formats) and lies in one field
 * per run, for t_shm_hostile.
 *
 *   hostile_shm --role client --connect 127.0.0.1:PORT --mode M [options]
 *       a fake C against a shimmed server S: binds its TCP socket first,
 *       listens on the rendezvous named by the 4-tuple, connects, sends a
 *       short prefix on TCP (S starts its upgrade on its first data call),
 *       answers S's OFFER with an ACCEPT carrying a memfd of its own, writes
 *       SWITCH in-band, then talks over the ring.
 *   hostile_shm --role server --listen 127.0.0.1:PORT --mode M [options]
 *       a fake S against a shimmed client C (e.g. echo_client): accepts one
 *       connection, connects to C's rendezvous, OFFERs, maps C's memfd,
 *       echoes C's bytes back (honestly unless the mode lies).
 *   hostile_shm --role flood --seconds S [--procs N] [--connect ADDR:PORT]
 *       N processes connect, in a loop, to every "@rdmashim1/" name listed
 *       in /proc/net/unix (world-readable; with --connect, those of
 *       connections to PORT) and hang up.
 *
 * --blocking S: every fd this side passes, in place of a memfd (extra ones,
 * those of a truncated message, notmemfd's pipe, a flood's message, a
 * bell line's message with line_hup) is a TCP socket whose last close
 * blocks for as long as a child of this process keeps its receiver
 * silent: S seconds, beyond this process's exit (util.c lingering_fd).
 *
 * Options: --ring BYTES (client role: the ring size to announce; default the
 * OFFER's), --payload BYTES (honest bytes before the lie, default 64 KiB),
 * --seconds S (how long to go on after the lie, default 2), --wait-ms N
 * (handshake waits, default 4000), --resp 1 (client role: against
 * redis-server, the stream is "SET k <payload letters>", then after the lie
 * "GET k", so the server writes the whole value at once; replies are counted,
 * not classified).
 *
 * Modes (one lie each; "honest" lies in nothing and must echo exactly):
 *   tail_far      producer tail 1 GiB ahead of the bytes written
 *   tail_over     producer tail one ring plus one byte ahead of the consumer
 *   head_ahead    consumer head 1 GiB ahead of the producer's tail
 *   head_behind   consumer head more than one ring behind the tail
 *   flip          a thread flips tail and head between true and 1 GiB off
 *   hdr_after     ring headers' size 2 GiB and magic 0 once switched; the
 *                 exchange goes on (the victim must keep its own size)
 *   ring_size     ACCEPT ring_bytes twice what the memfd holds (client role)
 *   ring_hdr      ring header size field half of ring_bytes (client role)
 *   tiny          honest, with a 4 KiB ring (client role)
 *   ring_huge     honest, with a 64 MiB ring whose echo it never reads
 *                 (client role)
 *   line_hup      honest, with a bell line of its own (a socketpair it
 *                 made), whose end it closes once switched; then silent
 *                 for --seconds, as idle (client role): "parked" says how much the victim holds
 *   idle          honest switch, then nothing for --seconds (client role)
 *   noseal        memfd without seals; shrunk to 0 once S switched
 *   sealwrite     memfd sealed against new writable mappings
 *   notmemfd      a pipe where the ring memfd belongs
 *   trunc         ACCEPT (server role: SWITCH_AT) 100 bytes long (MSG_TRUNC)
 *                 with an fd attached
 *   ctrunc        ACCEPT (SWITCH_AT) with 8 fds (MSG_CTRUNC at the receiver)
 *   extra_fds     a valid ACCEPT (SWITCH_AT) with 2 more fds
 *   offer_fds     a valid OFFER with 3 fds attached (server role)
 *   line_foreign  a valid ACCEPT whose bell line is a socket connected to a
 *                 service of another process (a child of this one), then
 *                 both armed words ask for bells on the line: prints
 *                 "LINE_FOREIGN rang=N", the messages that service got
 *                 (client role)
 *   resume        a RESUME frame on the switched shm connection
 *   garbage       a byte that starts no frame ('X') after the switch
 *   badnonce      the in-band SWITCH frame carries a wrong nonce
 *   offset_huge   switch offset 2^62 in its SWITCH_AT
 *   silent_close  honest exchange, then every armed word of the victim's
 *                 is taken (which promises a bell) and no bell rung; 300
 *                 ms later the stream ends (producer_closed), TCP kept open
 *                 and silent for --seconds: the victim's close waits for
 *                 bells that never come (client role)
 *   pair_decoy    honest switch (the server keeps the rendezvous as a pair
 *                 when this side runs as its user), then a HINT on it for
 *                 the connection from 127.0.0.1:--decoy, which this side
 *                 does not hold, with a socketpair and ring of its own;
 *                 prints "DECOY_SENT", then "DECOY decoy=refused" (S
 *                 closed the socketpair), "committed" (S sent a COMMIT: a
 *                 connection given to a process that does not hold it) or
 *                 "none" (no answer in --wait-ms), and exits
 *
 * The bytes this side sends are letters ('a'..'z', a known stream); every
 * byte of its rings that it did not write holds FILLER (0xEE). Each byte
 * echoed back is classified: "good" (the byte sent at that position),
 * "never_sent" (a letter or FILLER out of place: the victim delivered ring
 * bytes that were never published) or "foreign" (anything else: the
 * victim's own memory, or another connection's). In server role, the ring
 * the victim only reads is compared with a shadow copy at the end: "oob"
 * counts bytes the victim wrote outside its own ring. Every fd passed is a
 * memfd named "hostile-ring" or "hostile-extra": the victim's
 * /proc/<pid>/fd shows any it kept.
 *
 * Last line: "RESULT role=R mode=M reached=yes|no sent=N echoed=N good=N
 * never_sent=N foreign=N oob=N parked=N end=open|eof|reset" (reached: the lie went
 * out to a peer that had switched, or, for handshake lies, was sent). Exit
 * status 0 when nothing foreign, never sent or out of bounds came back, 3
 * when something did, 1 when the handshake could not be set up, 2 on usage.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostile.h"

static void usage(void)
{
	fprintf(stderr, "usage: hostile_shm --role client --connect ADDR:PORT --mode M\n"
			"       hostile_shm --role server --listen ADDR:PORT --mode M\n"
			"       hostile_shm --role flood --seconds S [--procs N] [--connect ADDR:PORT]\n"
			"       [--ring BYTES] [--payload BYTES] [--seconds S] [--wait-ms N] [--resp 1]\n"
			"       [--blocking S]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i += 2) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!v)
			usage();
		if (!strcmp(a, "--role"))
			o.role = v;
		else if (!strcmp(a, "--connect") || !strcmp(a, "--listen"))
			o.addr = v;
		else if (!strcmp(a, "--mode"))
			o.mode = v;
		else if (!strcmp(a, "--ring"))
			o.ring = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--payload"))
			o.payload = strtoul(v, NULL, 0);
		else if (!strcmp(a, "--seconds"))
			o.seconds = atoi(v);
		else if (!strcmp(a, "--wait-ms"))
			o.wait_ms = atoi(v);
		else if (!strcmp(a, "--procs"))
			o.procs = atoi(v);
		else if (!strcmp(a, "--resp"))
			o.resp = atoi(v);
		else if (!strcmp(a, "--decoy"))
			o.decoy = atoi(v);
		else if (!strcmp(a, "--blocking"))
			o.blocking = atoi(v);
		else
			usage();
	}
	if (!o.role)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	/* Nothing here may outlive its test. */
	alarm((unsigned)(o.seconds + o.wait_ms / 1000 * 3 + 30));
	if (!strcmp(o.role, "flood"))
		run_flood();
	if (!o.addr)
		usage();
	if (!strcmp(o.role, "client")) {
		if (o.resp)
			resp_build();
		run_client();
	}
	if (!strcmp(o.role, "server"))
		run_server();
	usage();
}
