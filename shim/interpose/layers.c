/* Wires the layers together; see layers.h. */
#include "layers.h"

#include "rdma.h"
#include "shm.h"
#include "transport.h"
#include "sock.h"
#include "upgrade.h"
#include "wait.h"

void shim_layers_register(void)
{
	shim_sock_hooks = (struct shim_sock_hooks){
		.release = shim_upgrade_release,
		.ep_free = shim_epoll_free,
		.fd_closed = shim_epoll_fd_closed,
		.connected = shim_transport_warm,
		.serving = shim_transport_serving,
		.fork_settle = shim_upgrade_settle_for_fork,
	};
	shim_transport_register(&shim_shm_transport);
	shim_transport_register(&shim_rdma_transport);
}
