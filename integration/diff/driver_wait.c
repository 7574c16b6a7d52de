/* driver_wait.c: the readiness steps of the differential driver: poll, poll2
 * (the fd twice in one array), ppoll, select, pselect and epoll. */
#include "driver.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>

/* Events as "in+out+rdhup+et" (epoll flags et, oneshot, excl too). */
static unsigned parse_ev(const char *s)
{
	unsigned ev = 0;
	char buf[128];
	snprintf(buf, sizeof(buf), "%s", s);
	char *save;
	for (char *t = strtok_r(buf, "+", &save); t; t = strtok_r(NULL, "+", &save)) {
		if (!strcmp(t, "in"))
			ev |= EPOLLIN;
		else if (!strcmp(t, "out"))
			ev |= EPOLLOUT;
		else if (!strcmp(t, "io"))
			ev |= EPOLLIN | EPOLLOUT;
		else if (!strcmp(t, "rdhup"))
			ev |= EPOLLRDHUP;
		else if (!strcmp(t, "pri"))
			ev |= EPOLLPRI;
		else if (!strcmp(t, "et"))
			ev |= EPOLLET;
		else if (!strcmp(t, "oneshot"))
			ev |= EPOLLONESHOT;
		else if (!strcmp(t, "excl"))
			ev |= EPOLLEXCLUSIVE;
	}
	return ev;
}

void revents_str(char *out, size_t cap, unsigned ev)
{
	static const struct {
		unsigned bit;
		const char *name;
	} names[] = {{EPOLLIN, "IN"},	    {EPOLLOUT, "OUT"}, {EPOLLPRI, "PRI"}, {EPOLLRDHUP, "RDHUP"},
		     {EPOLLHUP, "HUP"},	    {EPOLLERR, "ERR"}, {POLLNVAL, "NVAL"}};
	size_t l = snprintf(out, cap, "rev=");
	int any = 0;
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		if (ev & names[k].bit) {
			l += snprintf(out + l, cap - l, "%s%s", any ? "|" : "", names[k].name);
			any = 1;
		}
	if (!any)
		snprintf(out + l, cap - l, "0");
}

static void finish(int i, int r, int e, double t0, int timeout_ms, const char *what)
{
	char out[200];
	double el = now_ms() - t0;
	if (r < 0)
		snprintf(out, sizeof(out), "-1 %s", ename(e));
	else
		snprintf(out, sizeof(out), "%d %s", r, what);
	size_t l = strlen(out);
	if (r == 0 && timeout_ms > 0)
		snprintf(out + l, sizeof(out) - l, el >= 0.8 * timeout_ms ? " waited" : " early");
	else if (el > 3000)
		snprintf(out + l, sizeof(out) - l, " SLOW");
	rec(i, "%s", out);
}

int wait_step(int i, struct step *st)
{
	const char *op = st->tok[0];
	const char *evs = st->ntok > 1 ? st->tok[1] : "in";
	int to = st->ntok > 2 ? (int)num(st->tok[2]) : 0;
	char what[160];
	double t0 = now_ms();
	if (!strcmp(op, "poll") || !strcmp(op, "ppoll") || !strcmp(op, "poll2")) {
		struct pollfd p[2] = {{.fd = D.fd, .events = (short)parse_ev(evs)}, {.fd = D.fd}};
		p[1].events = p[0].events;
		int n = !strcmp(op, "poll2") ? 2 : 1, r;
		if (!strcmp(op, "ppoll")) {
			struct timespec ts = {to / 1000, (to % 1000) * 1000000L};
			sigset_t none;
			sigemptyset(&none);
			r = ppoll(p, n, to < 0 ? NULL : &ts, &none);
		} else {
			r = poll(p, n, to);
		}
		int e = errno;
		revents_str(what, sizeof(what), r > 0 ? p[0].revents : 0);
		if (n == 2) {
			size_t l = strlen(what);
			snprintf(what + l, sizeof(what) - l, " ");
			revents_str(what + l + 1, sizeof(what) - l - 1, r > 0 ? p[1].revents : 0);
		}
		finish(i, r, e, t0, to, what);
		return 1;
	}
	if (!strcmp(op, "pollep")) {
		/* The epoll set inside poll (a cascaded set): readable while
		 * one of its registrations has an event to report. */
		if (D.epfd < 0)
			D.epfd = epoll_create1(0);
		struct pollfd p = {.fd = D.epfd, .events = (short)parse_ev(evs)};
		int r = poll(&p, 1, to), e = errno;
		revents_str(what, sizeof(what), r > 0 ? p.revents : 0);
		finish(i, r, e, t0, to, what);
		return 1;
	}
	if (!strcmp(op, "select") || !strcmp(op, "pselect")) {
		unsigned ev = parse_ev(evs);
		fd_set rs, ws, xs;
		FD_ZERO(&rs);
		FD_ZERO(&ws);
		FD_ZERO(&xs);
		if (ev & EPOLLIN)
			FD_SET(D.fd, &rs);
		if (ev & EPOLLOUT)
			FD_SET(D.fd, &ws);
		if (ev & EPOLLPRI)
			FD_SET(D.fd, &xs);
		int r;
		if (!strcmp(op, "pselect")) {
			struct timespec ts = {to / 1000, (to % 1000) * 1000000L};
			r = pselect(D.fd + 1, &rs, &ws, &xs, to < 0 ? NULL : &ts, NULL);
		} else {
			struct timeval tv = {to / 1000, (to % 1000) * 1000};
			r = select(D.fd + 1, &rs, &ws, &xs, to < 0 ? NULL : &tv);
		}
		int e = errno;
		snprintf(what, sizeof(what), "r=%d w=%d x=%d", r > 0 && FD_ISSET(D.fd, &rs),
			 r > 0 && FD_ISSET(D.fd, &ws), r > 0 && FD_ISSET(D.fd, &xs));
		finish(i, r, e, t0, to, what);
		return 1;
	}
	if (!strcmp(op, "epadd") || !strcmp(op, "epmod") || !strcmp(op, "epdel")) {
		if (D.epfd < 0)
			D.epfd = epoll_create1(0);
		struct epoll_event ev = {.events = parse_ev(evs), .data.fd = D.fd};
		int how = op[2] == 'a' ? EPOLL_CTL_ADD : op[2] == 'm' ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
		int r = epoll_ctl(D.epfd, how, D.fd, &ev);
		rec(i, "%d %s", r, r ? ename(errno) : "-");
		return 1;
	}
	if (!strcmp(op, "epwait")) {
		/* "epwait T": the timeout is the first argument here. */
		to = st->ntok > 1 ? (int)num(st->tok[1]) : 0;
		if (D.epfd < 0)
			D.epfd = epoll_create1(0);
		struct epoll_event evs2[4];
		int r = epoll_wait(D.epfd, evs2, 4, to);
		int e = errno;
		size_t l = 0;
		what[0] = 0;
		for (int k = 0; k < r && k < 4; k++) {
			l += snprintf(what + l, sizeof(what) - l, "%s", k ? " " : "");
			revents_str(what + l, sizeof(what) - l, evs2[k].events);
			l = strlen(what);
		}
		finish(i, r, e, t0, to, what);
		return 1;
	}
	return 0;
}
