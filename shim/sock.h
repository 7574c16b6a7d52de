/*
 * Tracked sockets and the decisions about them.
 *
 * A shim_sock stands for one kernel open file description: dup'ed fds share
 * it (refs counts the fds). It exists only for TCP sockets on whitelisted
 * ports: listeners, clients (decided at connect) and servers (decided at
 * accept on a tracked listener). Every other fd stays NULL in the fd table.
 */
#ifndef RDMASHIM_SOCK_H
#define RDMASHIM_SOCK_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "config.h"
#include "reason.h"
#include "tuple.h"

enum shim_role {
	SHIM_ROLE_LISTENER,
	SHIM_ROLE_CLIENT, /* called connect() */
	SHIM_ROLE_SERVER, /* came from accept() */
};

enum shim_sock_state {
	SHIM_STATE_LISTENING,
	SHIM_STATE_CONNECTING, /* nonblocking connect in progress */
	SHIM_STATE_TCP,        /* established, data on TCP */
	SHIM_STATE_CLOSED,
};

struct shim_sock {
	int refs; /* fds that point here; atomic */
	enum shim_role role;
	enum shim_sock_state state;
	/* Whether the connection may try an upgrade, and why (not). */
	bool eligible;
	enum shim_reason reason;
	struct shim_tuple tuple;
	pid_t owner_pid; /* process that created this entry */
	pthread_mutex_t lock;
	struct shim_sock *retired_next;
	unsigned long long retired_at_ns;
};

const char *shim_role_name(enum shim_role role);
const char *shim_state_name(enum shim_sock_state state);

/* Policy entry points, called by the exported wrappers after the real call. */
void shim_sock_on_listen(int fd);
void shim_sock_on_accept(int listen_fd, int fd);
void shim_sock_on_connect(int fd, const struct sockaddr *addr, socklen_t len, int rc, int err);
/* Called before the real close/dup2 target replacement. */
void shim_sock_on_close(int fd);
void shim_sock_on_dup(int oldfd, int newfd);
void shim_sock_on_shutdown(int fd, int how);
/* fds that arrived without our seeing them made: inherited or SCM_RIGHTS. */
void shim_sock_adopt(int fd, const char *how);
void shim_sock_adopt_inherited(void);
void shim_sock_adopt_rights(const struct msghdr *msg);

void shim_sock_before_exec(void);
void shim_sock_after_fork_child(void);

/* Counts of live tracked sockets, for stats and tests. */
unsigned shim_sock_live_count(void);

#endif
