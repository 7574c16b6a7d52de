/*
 * The queue pair and the CM hellos of an RDMA connection (rdma_qp.c).
 */
#ifndef RDMASHIM_RDMA_QP_H
#define RDMASHIM_RDMA_QP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdma.h"

/* ep (with port) as a sockaddr for rdma_cm; returns its length. */
socklen_t shim_rdma_sockaddr(const struct shim_endpoint *ep, uint16_t port, struct sockaddr_storage *ss);
/* Moves the QP to st (INIT, RTR, RTS) with our attributes; 0 or -errno. */
int shim_rdma_qp_to(struct rdma_conn *c, enum ibv_qp_state st);
/* The CQ, the QP, the slot and its MR, the receives; 0 or -errno. */
int shim_rdma_make_qp(struct rdma_conn *c);
/* The connection's slot and MR on pd (and its share of receives). 0 or -errno. */
int shim_rdma_conn_memory(struct rdma_conn *c, struct ibv_pd *pd);
/* Undoes make_qp (S retries with a new id). */
void shim_rdma_drop_qp(struct rdma_conn *c);
/* Our hello of type, with nonce, as CM private data. */
void shim_rdma_fill_hello(const struct rdma_conn *c, struct shim_rdma_hello *h, uint8_t type, const uint8_t *nonce);
/* Checks a hello of type from private data; fills the peer's ring. */
int shim_rdma_take_hello(struct rdma_conn *c, const void *data, size_t len, uint8_t type, uint8_t *nonce_out);
/* The CM connection parameters carrying private data pd. */
void shim_rdma_conn_param(struct rdma_conn *c, struct rdma_conn_param *p, const void *pd, size_t len);

#endif
