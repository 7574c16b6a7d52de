/* driver.h: shared state of the differential driver (integration/diff/). */
#ifndef DIFF_DRIVER_H
#define DIFF_DRIVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MAX_STEPS 4096
#define MAX_TOK 8
#define PATTERN_PERIOD 251 /* prime: a shifted or lost byte shows as a mismatch */
#define MAX_XFER (8u << 20)

struct step {
	int ntok;
	char *tok[MAX_TOK];
	char *text;
};

struct drv {
	int is_server;
	int fd;	     /* the tested connection */
	int lfd;     /* the listener (server) */
	int sync_fd; /* barrier with the other end; never the tested connection */
	int epfd;
	uint64_t tx;	  /* stream offset of the next byte this end sends */
	uint64_t rx;	  /* stream offset of the next byte this end consumes */
	int rcvtimeo_ms;  /* as last set with SO_RCVTIMEO, for the elapsed-time rule */
	int sndtimeo_ms;
	unsigned char *txbuf; /* this end's pattern, MAX_XFER + PATTERN_PERIOD bytes */
	unsigned char *rxbuf;
	int tx_salt, rx_salt;
	struct step *steps;
	int nsteps;
	const char *self;
	const char *script;
};

extern struct drv D;

/* One canonical record line for step i. */
void rec(int i, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *ename(int e);
double now_ms(void);
long num(const char *s);
unsigned char pat(int salt, uint64_t off);
/* Checks received bytes against the peer's pattern from D.rx and appends
 * "n=... bad=... h=..." to out. */
void describe_rx(char *out, size_t cap, ssize_t n, const unsigned char *buf, uint64_t from, int err);
uint32_t fnv(uint32_t h, const unsigned char *p, size_t n);

/* driver_ops.c */
int run_step(int i);	  /* returns the next step index */
int do_sync(char *out, size_t cap);

/* driver_proc.c */
void do_threads2(int i, struct step *st);
int do_fork(int i, int pass); /* returns the next step index */
void do_alarm(struct step *st);
void await_upgrade(void);

/* driver_wait.c */
int wait_step(int i, struct step *st); /* 1 if the step was a wait step */
void revents_str(char *out, size_t cap, unsigned ev);

#endif
