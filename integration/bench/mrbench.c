/*
 * mrbench.c — ibv_reg_mr throughput for the pool's chunk memory: 2 MiB huge
 * pages against 4 KiB pages (integration/bench/rdma-vm.sh runs it in the
 * Soft-RoCE VM). Registers BYTES (default 64 MiB) REPS times each way, on the
 * first RDMA device, and prints the median MB/s for each.
 * Built by rdma-vm.sh against build/lib/librdmashim_core.a (mrpool.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include <infiniband/verbs.h>

#include "mrpool.h"

static int cmp(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	size_t bytes = (argc > 1 ? strtoull(argv[1], NULL, 0) : 64) << 20;
	int reps = argc > 2 ? atoi(argv[2]) : 5, n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx;
	struct ibv_pd *pd;

	if (!list || n == 0) {
		fprintf(stderr, "mrbench: no RDMA device\n");
		return 1;
	}
	ctx = ibv_open_device(list[0]);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd) {
		fprintf(stderr, "mrbench: cannot open %s\n", ibv_get_device_name(list[0]));
		return 1;
	}
	for (int huge = 1; huge >= 0; huge--) {
		long long ns[64];
		int got = 0;

		for (int i = 0; i < reps && i < 64; i++) {
			long long t = shim_mrpool_time_registration(pd, bytes, huge);

			if (t < 0)
				break;
			ns[got++] = t;
		}
		if (!got) {
			printf("mrbench: %s pages: unavailable\n", huge ? "2 MiB" : "4 KiB");
			continue;
		}
		qsort(ns, (size_t)got, sizeof(ns[0]), cmp);
		printf("mrbench: %s pages: ibv_reg_mr of %zu MiB median %.2f ms = %.0f MB/s (%d runs)\n",
		       huge ? "2 MiB" : "4 KiB", bytes >> 20, ns[got / 2] / 1e6, bytes / 1e6 / (ns[got / 2] / 1e9),
		       got);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
