/*
 * What epoll.c (the sets and their items) and epoll_wait.c (the wait over
 * a set) share; nothing outside io/ includes it.
 */
#ifndef RDMASHIM_EPOLL_INTERNAL_H
#define RDMASHIM_EPOLL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <uthash.h>

#include "sock.h"
#include "spin.h"
#include "wait.h"

struct shim_epitem {
	int fd;
	uint32_t events; /* the application's */
	epoll_data_t data;
	bool kernel_switched; /* kernel registration is the bell-only one */
	bool oneshot_fired;
	/* EPOLLET on a switched fd: the readiness last seen, and the bytes
	 * received by then (shim_io_rx_arrived); an event is a rise of
	 * readiness, or bytes that came since (ep_channel_round). ADD and MOD
	 * start from none, as the kernel's MOD re-checks readiness. */
	uint32_t et_level;
	uint64_t et_rx_arrived;
	unsigned et_rx_starved, et_tx_starved; /* the sock's counts at the last report */
	UT_hash_handle hh;
};

struct shim_ep {
	pthread_mutex_t lock;
	struct shim_epitem *items;
	struct shim_ep *next; /* all sets, for shim_epoll_forget_fd() */
	struct shim_spin_hist spin_hist; /* do this set's waits spin (spin.h) */
};

/* The intercepted sock at fd, held (shim_sock_put()), or NULL. */
struct shim_sock *shim_ep_intercepted_sock(int fd);
/* The tracked epoll set at epfd, its sock held (shim_sock_put()), or NULL.
 * The reference keeps the set's state alive for a wait in progress when
 * another thread closes epfd. */
struct shim_sock *shim_ep_sock(int epfd);
/* The shim's own copy of the set's fd (made at tracking, closed with the
 * last reference): never the program's number, which may be reused. */
int shim_ep_fd(const struct shim_sock *es);
/* Changes an item's kernel registration while its fd still names s. */
void shim_ep_item_ctl(int efd, struct shim_sock *s, struct shim_epitem *it);
/* Maps kernel events back (tagged ones to the item's data, bells of
 * switched items dropped); returns how many are kept. Under ep->lock. */
int shim_ep_translate(struct shim_ep *ep, struct epoll_event *ev, int n);

/* epoll_early.c: the sets an untracked fd went into, taken once (0: none
 * noted), and the kernel's registration of fd in epfd. */
#define SHIM_EPOLL_EARLY_SETS 16
unsigned shim_epoll_early_take(int fd, int sets[SHIM_EPOLL_EARLY_SETS]);
bool shim_epoll_early_registration(int epfd, int fd, uint32_t *events, uint64_t *data);

#endif
