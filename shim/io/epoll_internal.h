/*
 * What the epoll files share (epoll_set.c: the sets and their items;
 * epoll.c: the program's registration changes; epoll_wait.c: the wait over
 * a set; epoll_close.c, epoll_young.c, epoll_early.c); nothing outside io/
 * includes it.
 */
#ifndef RDMASHIM_EPOLL_INTERNAL_H
#define RDMASHIM_EPOLL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <uthash.h>

#include "fdtable.h"
#include "sock.h"
#include "spin.h"
#include "wait.h"

/*
 * One registration of the program's, as the kernel keys it: the file (a
 * tracked sock) and the number it was added under. The number may be
 * closed while a dup keeps the file open; the kernel then keeps the
 * registration until the file's last fd goes, and so does the item
 * (an orphan, reached through another of the file's numbers).
 */
struct shim_epitem {
	int fd; /* the number it was added under */
	/* Its file: compared, never used without a reference taken through a
	 * number. Alive as long as the item, as every close of a tracked
	 * connection's number comes to shim_epoll_fd_closed() first. */
	struct shim_sock *sock;
	/* A number of the program's that names sock now: fd, or for an
	 * orphan another of the file's fds (kept current at every close). */
	int via;
	/* An orphan's kernel registration, moved to our own copy of the file
	 * before its number closed, so that it can still be changed (-1:
	 * none, its registration stays as it was). */
	int kfd;
	bool orphan;
	uint32_t id;     /* the low half of the kernel registration's tag */
	uint32_t events; /* the application's */
	epoll_data_t data;
	bool kernel_switched; /* kernel registration is the bell-only one */
	/* Our own copy of the connection's bell line, registered in the set
	 * (edge-triggered, under the line tag) while the item is switched;
	 * fd -1: none (shim_ep_item_line). */
	struct shim_owned_fd line;
	/* Which of the sock's handshake wake fds (conn/upgrade.h, counted by
	 * neg_wake_gen from 1) the set watches for this item, registered like
	 * the line (a wake-up, never the program's event); 0: none yet
	 * (shim_ep_item_wake). */
	unsigned wake_gen;
	unsigned moved_gen; /* the look that gave the program's registration back (epoll_wait.c) */
	/* The report that holds this item's event, and where (epoll_wait.c,
	 * ep_settle): one registration is one entry of a report. */
	unsigned long settle_gen;
	int settle_at;
	bool oneshot_fired;
	/* EPOLLET on a switched fd: the readiness last seen, and the bytes
	 * received by then (shim_io_rx_arrived); an event is a rise of
	 * readiness, or bytes that came since (ep_channel_round). ADD and MOD
	 * start from none, as the kernel's MOD re-checks readiness. */
	uint32_t et_level;
	uint64_t et_rx_arrived;
	unsigned et_rx_starved, et_tx_starved, et_rx_wakes; /* the sock's counts at the last report */
	UT_hash_handle hh;    /* ep->items, by fd: the items whose number is open */
	UT_hash_handle hh_id; /* ep->by_id: every item */
	struct shim_epitem *orphan_next;
};

struct shim_ep {
	pthread_mutex_t lock;
	/* Names the set for a young connection's record (sock.h,
	 * ep_young_set): unique in the process, never reused, never 0. */
	uint64_t id;
	struct shim_epitem *items;   /* by fd, orphans left out */
	struct shim_epitem *by_id;   /* every item, by id */
	struct shim_epitem *orphans; /* the items whose number was closed */
	uint32_t next_id;
	/* The shim's own copy of the set's fd, closed after the set left
	 * all_eps: what a wait and every registration change go through,
	 * never the program's number, which may be reused. */
	int efd;
	/* A fork happened while the set existed: another process may share
	 * it, whose items would still name a registration moved here. */
	bool forked;
	/* A look found an item back on TCP while its kernel registration
	 * still asked for bells: the program's registration must return, and
	 * the kernel be asked again, within the same wait (epoll_wait.c). */
	bool moved_back;
	unsigned look_gen; /* counts looks, for moved_gen */
	unsigned long settle_gen; /* counts reports, for the items' settle_gen */
	/* Wakes the set's waiters at a registration change of an item on a
	 * channel: the kernel would, for its own fds, when the change makes
	 * one ready; a channel's readiness has no kernel object, and a sleep
	 * armed before the change does not watch the item's channel. An
	 * eventfd in the set, edge-triggered (each write is one wake-up, no
	 * drain); -1 until the first such change. */
	int kick_fd;
	/* Items the last channel round found in the shim's hands (a channel
	 * or a handshake): with none, the set is the kernel's alone, and a
	 * wait is one epoll_wait (epoll_wait.c). */
	unsigned shim_items;
	/* Items of every kind (ep->by_id's count): written under ep->lock,
	 * read without it by a registration change of a fd the shim does not
	 * intercept, which with none has nothing of ours to look up. */
	unsigned n_items;
	struct shim_ep *next; /* all sets, for shim_epoll_fd_closed() */
	struct shim_spin_hist spin_hist; /* do this set's waits spin (spin.h) */
};

/* Registrations whose kernel state is their mask and data alone
 * (level-triggered, neither one-shot nor exclusive): a MOD between the
 * program's data and our tag changes nothing the program can see, as it
 * re-checks readiness, which a level-triggered registration reports anyway
 * (epoll_young.c takes such a one over, epoll_wait.c gives it back). */
static inline bool shim_ep_mask_and_data_only(uint32_t events)
{
	return !(events & (EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE));
}

/* The intercepted sock at fd, held (shim_sock_put()), or NULL. */
struct shim_sock *shim_ep_intercepted_sock(int fd);
/* The tracked epoll set at epfd, its sock held (shim_sock_put()), or NULL.
 * The reference keeps the set's state alive for a wait in progress when
 * another thread closes epfd. */
struct shim_sock *shim_ep_sock(int epfd);
/* The shim's own copy of the set's fd (made at tracking, closed with the
 * last reference): never the program's number, which may be reused. */
int shim_ep_fd(const struct shim_sock *es);
/* Calls fn(ep, ctx) for every set, under the all-sets lock and the set's. */
void shim_ep_each(void (*fn)(struct shim_ep *ep, void *ctx), void *ctx);
/* The kernel registration of an item (op: EPOLL_CTL_*), through its kfd
 * once it has one, else its number; returns 0 or -errno. */
int shim_ep_kernel_ctl(int efd, int op, struct shim_epitem *it);
/* Unlinks and frees an item (closing its kfd); under ep->lock. Its kernel
 * registration is the caller's business. */
void shim_ep_item_drop(struct shim_ep *ep, struct shim_epitem *it);
/* The sock an item names (through it->via), held, or NULL. */
struct shim_sock *shim_ep_item_sock(const struct shim_epitem *it);
/* Changes an item's kernel registration while its fd still names s. */
void shim_ep_item_ctl(int efd, struct shim_sock *s, struct shim_epitem *it);
/* Keeps the item's line registration in step with line (the connection's
 * bell line, shim_io_line(); -1: none, and the registration goes). Returns
 * line when the set watches it, else -1. Under ep->lock. */
int shim_ep_item_line(struct shim_ep *ep, struct shim_epitem *it, int line);
/* Registers s's handshake wake fd in the set for the item, once per wake
 * fd: a handshake message that comes with no TCP byte wakes the set's
 * wait, whose look then moves the handshake on (epoll_wait.c). Nothing to
 * remove ever: the registration goes with the wake fd, closed when the
 * negotiation ends. Lowers *cap_ms to the handshake's next timed step
 * (shim_io_wake_register). Under ep->lock, not s->lock. */
void shim_ep_item_wake(struct shim_ep *ep, struct shim_epitem *it, struct shim_sock *s, int *cap_ms);

/* Under ep->lock, after a registration change of a switched item: wakes
 * the set's waiters (the kick is made at the first), whose sleep was armed
 * without it (epoll.c). */
void shim_ep_kick(struct shim_ep *ep);

/* Where an event of a report came from: the item it is for (item is
 * false for a fd the shim holds nothing of) and whether the kernel's
 * registration gave it (then it is TCP's readiness, which the shim may
 * have consumed since: ep_settle checks it) or a channel round. */
struct shim_ep_src {
	uint32_t id;
	bool item;
	bool kernel;
};

/* Maps kernel events back (tagged ones to the item's data, bells of
 * switched items dropped); returns how many are kept, and for each kept
 * one its source in src[] (NULL: not wanted). moved_only: only the items
 * whose registration came back in this look (moved_gen is look_gen), the
 * others' events were taken already. Under ep->lock. */
int shim_ep_translate(struct shim_ep *ep, struct epoll_event *ev, struct shim_ep_src *src, int n, bool moved_only);

/* The tag of our kernel registrations, made once before the first. */
void shim_ep_tag_init(void);
/* The high half of our tags (an event's data is ours when its high half
 * is this), made at the first call. */
uint32_t shim_ep_tag_hi(void);
/* A new item (switched: shim_io_is_switched(s), which the caller knows or
 * asks), not linked yet, or NULL; under ep->lock. */
struct shim_epitem *shim_ep_item_new(struct shim_ep *ep, int fd, struct shim_sock *s, uint32_t events,
				     epoll_data_t data, bool switched);
/* Links a new item into the set's tables; under ep->lock. */
void shim_ep_item_link(struct shim_ep *ep, struct shim_epitem *it);
/* The item the kernel would find for (the file fd names, fd), or NULL;
 * under ep->lock. */
struct shim_epitem *shim_ep_item_at(struct shim_ep *ep, int fd);
/* Under ep->lock and s->lock, fd naming s: an item for the registration
 * the kernel holds of (fd's file, fd) under the program's own events and
 * data, which becomes the tagged one (a MOD, as the program's would be).
 * 0 or -errno (then the kernel's registration is as it was). */
int shim_ep_item_take_over(struct shim_ep *ep, int fd, struct shim_sock *s, uint32_t events, uint64_t data);
/* Calls fn(ep, ctx) for the live set with that id, under the all-sets lock
 * and the set's; false when there is none (it was closed). */
bool shim_ep_with_set(uint64_t id, void (*fn)(struct shim_ep *ep, void *ctx), void *ctx);

/* epoll_young.c: registrations of young connections left with the kernel.
 * A registration change of intercepted s's fd with no item of ours in ep,
 * under ep->lock: true when it answered it (*rc), false when the item path
 * does (an item for it may have been made meanwhile: look again). */
bool shim_ep_young_ctl(struct shim_ep *ep, struct shim_sock *s, int op, int fd, const struct epoll_event *event,
		       int *rc);
/* The same with no lock held, for what needs no set lock nor item lookup,
 * only the sock's lock: a young connection's first registration in a
 * set already tracked (level-triggered), a change of the one the kernel
 * holds for it (MOD to another level-triggered mask, DEL). false: not
 * such a change, the slow path answers. */
bool shim_ep_young_change(int epfd, int op, int fd, const struct epoll_event *event, int *rc);
/* sock's number fd is closing (its entry cleared, the real close not done;
 * other: another number of the file's, or -1), under ep->lock: a young
 * registration of it in ep becomes an item (the file lives on: the item
 * is then orphaned as any other) or goes. */
void shim_ep_young_closed(struct shim_ep *ep, struct shim_sock *sock, int fd, int other);

/* epoll_early.c: the sets an untracked fd went into, taken once (0: none
 * noted), and the kernel's registration of fd in epfd. */
#define SHIM_EPOLL_EARLY_SETS 16
unsigned shim_epoll_early_take(int fd, int sets[SHIM_EPOLL_EARLY_SETS]);
bool shim_epoll_early_registration(int epfd, int fd, uint32_t *events, uint64_t *data);

#endif
