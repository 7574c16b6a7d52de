/*
 * rdmashim doctor: can this host run RDMA under the shim? A checklist,
 * one line per check, PASS, WARN or FAIL with the fix in one sentence.
 * Exit 0 when nothing FAILs, 1 when something does, 2 on bad usage.
 *
 * Checks that need no peer: rdma-core and its providers, a device with an
 * ACTIVE port (the judgement of rdmashim health, fabric_health.h), the
 * MTUs, RLIMIT_MEMLOCK against what the pool pins (mrpool.h), huge pages,
 * the shim library loadable, and the ports whitelisted in this
 * environment. With PEER, the checks of doctor_peer.c follow: the RoCE v2
 * GID of the address that routes to it, the MTU, an rdma_cm resolve.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "doctor.h"
#include "fabric_health.h"
#include "mrpool.h"
#include "rdma.h"
#include "rdma_wire.h"

int rdmashim_cmd_doctor(int argc, char **argv);
int rdmashim_locate_library(char out[PATH_MAX], char *why, size_t len);

#define VM_RECIPE DOCTOR_VM_RECIPE
#define line rdmashim_doctor_line

static unsigned n_fail, n_warn;

void rdmashim_doctor_line(const char *verdict, const char *what, const char *fmt, ...)
{
	va_list ap;

	n_fail += verdict[0] == 'F';
	n_warn += verdict[0] == 'W';
	printf("%-4s  %-10s ", verdict, what);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static const char *env_get(const char *name, void *ctx)
{
	(void)ctx;
	return getenv(name);
}

static const char *no_env(const char *name, void *ctx)
{
	(void)name;
	(void)ctx;
	return NULL;
}

static void check_libraries(void)
{
	static const char *const libs[] = { "libibverbs.so.1", "librdmacm.so.1" };
	const char *dirs[] = { "/usr/lib/x86_64-linux-gnu/libibverbs", "/usr/lib64/libibverbs", "/usr/lib/libibverbs" };
	bool any_provider = false;

	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		void *h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);

		if (h) {
			line("PASS", "rdma-core", "%s loads", libs[i]);
			dlclose(h);
		} else {
			line("FAIL", "rdma-core", "%s does not load (%s): install rdma-core (apt install rdma-core "
			     "ibverbs-providers librdmacm1)", libs[i], dlerror());
		}
	}
	/* libibverbs finds a device only through a provider library
	 * (librxe, libmlx5); without one the device list is empty even with
	 * the kernel driver loaded. */
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]) && !any_provider; i++) {
		DIR *d = opendir(dirs[i]);
		struct dirent *e;

		if (!d)
			continue;
		while ((e = readdir(d)))
			if (strstr(e->d_name, "-rdmav") && strstr(e->d_name, ".so"))
				any_provider = true;
		closedir(d);
	}
	if (any_provider)
		line("PASS", "providers", "verbs provider libraries present");
	else
		line("WARN", "providers", "no verbs provider library found: install ibverbs-providers");
}

/* The device, port and MTU lines, from r as health reads it. */
static void check_devices(struct shim_fh_report *r, const char *sysroot)
{
	struct shim_fh_limits lim;
	unsigned active = 0, mtu_known = 0;

	shim_fh_limits_default(&lim);
	shim_fh_scan(sysroot, r);
	if (!sysroot)
		rdmashim_health_fill_active_mtu(r);
	shim_fh_judge(r, &lim); /* no window: states and MTUs, not counters */
	if (r->status == SHIM_FH_NO_DEVICE) {
		line("FAIL", "device", "%s: load Soft-RoCE (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev "
		     "IFACE) or use the VM recipe in " VM_RECIPE, r->why);
		return;
	}
	for (unsigned i = 0; i < r->n_ports; i++) {
		const struct shim_fh_port *p = &r->ports[i];

		if (shim_fh_state_active(p->state_code)) {
			active++;
			line("PASS", "port", "%s port %u is ACTIVE%s%s", p->dev, p->num, p->rate[0] ? ", " : "", p->rate);
		} else {
			line("WARN", "port", "%s port %u: %s: bring its link up (ip link set %s up) or check the cable",
			     p->dev, p->num, p->n_problems ? p->problems[0] : "not ACTIVE",
			     p->netdev[0] ? p->netdev : "IFACE");
		}
		if (p->active_mtu > 0 && p->netdev_mtu > 0) {
			mtu_known++;
			if (strcmp(p->link_layer, "Ethernet") == 0 && !shim_fh_mtu_fits(p->active_mtu, p->netdev_mtu))
				line("WARN", "mtu", "%s port %u: active MTU %d and the RoCE v2 headers do not fit %s's MTU "
				     "%d: set both ends' netdev MTU alike", p->dev, p->num, p->active_mtu, p->netdev,
				     p->netdev_mtu);
			else
				line("PASS", "mtu", "%s port %u: active MTU %d fits %s's MTU %d", p->dev, p->num,
				     p->active_mtu, p->netdev, p->netdev_mtu);
		}
	}
	if (!active)
		line("FAIL", "device", "no ACTIVE port among %u: run rdmashim health, fix the link, or use the VM "
		     "recipe in " VM_RECIPE, r->n_ports);
	if (!mtu_known)
		line("WARN", "mtu", "active MTU unknown (no verbs device behind sysfs): check ibv_devinfo's "
		     "active_mtu against the netdev MTU");
}

static void human(unsigned long long bytes, char *buf, size_t len)
{
	if (bytes >= 1ull << 20)
		snprintf(buf, len, "%.1f MiB", (double)bytes / (1 << 20));
	else
		snprintf(buf, len, "%llu KiB", bytes >> 10);
}

/* Each connection pins its pool slot's chunk (shared by a chunk's slots)
 * and an MR of its own over its control page and receive ring. */
static unsigned long long pinned_for(unsigned conns, size_t slot_bytes, uint32_t ring_bytes)
{
	unsigned per_chunk;
	size_t chunk = shim_mrpool_chunk_bytes(slot_bytes, &per_chunk);
	unsigned long long chunks = (conns + per_chunk - 1) / per_chunk;

	return chunks * chunk + (unsigned long long)conns * (SHIM_RDMA_CTL_BYTES + ring_bytes);
}

/* Whether this process may lock memory past RLIMIT_MEMLOCK
 * (CAP_IPC_LOCK: the kernel does not count pinned pages against the limit
 * for it). The programs started from here inherit the same. */
static bool can_ipc_lock(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	unsigned long long caps = 0;
	char buf[256];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(buf, sizeof(buf), f))
		found = sscanf(buf, "CapEff: %llx", &caps) == 1;
	fclose(f);
	return found && (caps >> 14 & 1); /* CAP_IPC_LOCK is capability 14 */
}

static void check_memlock(const struct shim_config *cfg)
{
	uint32_t ring = cfg->ring_kb * 1024u;
	size_t slot = shim_rdma_slot_bytes(ring);
	unsigned per_chunk;
	struct rlimit rl;
	char have[32], need1[32], need_chunk[32];

	shim_mrpool_chunk_bytes(slot, &per_chunk);
	if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0) {
		line("WARN", "memlock", "getrlimit(RLIMIT_MEMLOCK): %s", strerror(errno));
		return;
	}
	human(pinned_for(1, slot, ring), need1, sizeof(need1));
	human(pinned_for(per_chunk, slot, ring), need_chunk, sizeof(need_chunk));
	if (rl.rlim_cur == RLIM_INFINITY) {
		line("PASS", "memlock", "RLIMIT_MEMLOCK unlimited");
		return;
	}
	human(rl.rlim_cur, have, sizeof(have));
	if (can_ipc_lock()) {
		line("PASS", "memlock", "RLIMIT_MEMLOCK %s is not enforced here (CAP_IPC_LOCK); a program without "
		     "that capability needs %s per %u connections", have, need_chunk, per_chunk);
		return;
	}
	if (rl.rlim_cur < pinned_for(1, slot, ring))
		line("FAIL", "memlock", "RLIMIT_MEMLOCK %s is below the %s one connection pins at "
		     "RDMASHIM_RING_KB=%u, so registration fails: raise it (ulimit -l unlimited, or memlock in "
		     "/etc/security/limits.conf)", have, need1, cfg->ring_kb);
	else if (rl.rlim_cur < pinned_for(per_chunk, slot, ring))
		line("WARN", "memlock", "RLIMIT_MEMLOCK %s holds fewer than %u connections (%s) at "
		     "RDMASHIM_RING_KB=%u: raise it (ulimit -l unlimited) or lower RDMASHIM_RING_KB", have, per_chunk,
		     need_chunk, cfg->ring_kb);
	else
		line("PASS", "memlock", "RLIMIT_MEMLOCK %s holds at least %u connections at RDMASHIM_RING_KB=%u",
		     have, per_chunk, cfg->ring_kb);
}

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

/* What one pool chunk takes in 2 MiB pages: the pool maps a chunk with
 * MAP_HUGETLB when it can, and falls back to 4 KiB pages for the whole
 * chunk when the free huge pages do not cover it (mrpool.c). */
static void check_huge_pages(const struct shim_config *cfg, const char *sysroot)
{
	uint32_t ring = cfg->ring_kb * 1024u;
	unsigned per_chunk;
	size_t chunk = shim_mrpool_chunk_bytes(shim_rdma_slot_bytes(ring), &per_chunk);
	long need = (long)(chunk >> 21), free_pages;
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
		 sysroot ? sysroot : "/sys");
	free_pages = read_long(path);
	if (!cfg->huge_pages)
		line("PASS", "hugepages", "off (RDMASHIM_HUGE_PAGES=0): the pool uses 4 KiB pages");
	else if (free_pages < 0)
		line("WARN", "hugepages", "no 2 MiB huge pages here (%s unreadable): the pool uses 4 KiB pages, "
		     "slower to register; a kernel with hugetlbfs and vm.nr_hugepages set lifts it", path);
	else if (free_pages < need)
		line("WARN", "hugepages", "%ld free 2 MiB page(s), short of the %ld a pool chunk takes (%u connections "
		     "at RDMASHIM_RING_KB=%u): it falls back to 4 KiB pages, slower to register; reserve "
		     "more (sysctl vm.nr_hugepages=%ld)", free_pages, need, per_chunk, cfg->ring_kb,
		     need * 4 > 64 ? need * 4 : 64);
	else
		line("PASS", "hugepages", "%ld free 2 MiB pages: %ld pool chunk(s) of %u connections at "
		     "RDMASHIM_RING_KB=%u", free_pages, free_pages / need, per_chunk, cfg->ring_kb);
}

/* Loads the library into a child (true(1)): what the loader or the shim
 * says on stderr is the verdict, since ld.so runs the program on even when
 * a preload fails. */
static void check_library(void)
{
	char lib[PATH_MAX], why[PATH_MAX + 256], err[512] = "";
	int pipefd[2], status;
	ssize_t n;
	pid_t pid;

	if (rdmashim_locate_library(lib, why, sizeof(why)) < 0) {
		line("FAIL", "library", "%s", why);
		return;
	}
	if (pipe(pipefd) < 0 || (pid = fork()) < 0) {
		line("WARN", "library", "can not start a child to load %s: %s", lib, strerror(errno));
		return;
	}
	if (pid == 0) {
		dup2(pipefd[1], 2);
		close(pipefd[0]);
		/* The library alone: the settings have a line of their own. */
		for (char **e = environ; *e;)
			if (strncmp(*e, "RDMASHIM_", 9) == 0) {
				char name[128];

				snprintf(name, sizeof(name), "%.*s", (int)strcspn(*e, "="), *e);
				unsetenv(name); /* moves the rest down: look at *e again */
			} else {
				e++;
			}
		setenv("LD_PRELOAD", lib, 1);
		execlp("true", "true", (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	n = read(pipefd[0], err, sizeof(err) - 1);
	close(pipefd[0]);
	err[n > 0 ? n : 0] = '\0';
	err[strcspn(err, "\n")] = '\0';
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		line("FAIL", "library", "a program preloaded with %s did not run cleanly%s%s: rebuild (make) or "
		     "set RDMASHIM_LIB", lib, err[0] ? ": " : "", err);
	else if (err[0])
		line("FAIL", "library", "preloading %s says: %s", lib, err);
	else
		line("PASS", "library", "%s loads into a program", lib);
}

static void check_config(const struct shim_config *cfg, int parsed, const char *err)
{
	bool rdma = false;

	if (parsed < 0) {
		line("FAIL", "config", "%s: fix the value (rdmashim config shows them all)", err);
		return;
	}
	if (!cfg->enabled) {
		line("FAIL", "ports", "RDMASHIM_PORTS is not set: nothing is whitelisted; export RDMASHIM_PORTS=PORT,... "
		     "or use rdmashim run --ports");
		return;
	}
	line("PASS", "ports", "RDMASHIM_PORTS=%s", getenv("RDMASHIM_PORTS"));
	for (unsigned i = 0; i < cfg->n_transports; i++)
		rdma |= cfg->transports[i] == SHIM_TRANSPORT_RDMA;
	if (!rdma)
		line("WARN", "transports", "RDMASHIM_TRANSPORTS leaves RDMA out: add rdma to use it between hosts");
}

int rdmashim_cmd_doctor(int argc, char **argv)
{
	static struct shim_config cfg;
	static struct shim_fh_report report; /* large: off the stack */
	const char *sysroot = getenv("RDMASHIM_SYSFS");
	const char *peer = NULL;
	char err[PATH_MAX + 256] = "";
	int parsed;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			printf("usage: rdmashim doctor [PEER]\n"
			       "Can this host (and PEER) run RDMA under the shim? One line per check:\n"
			       "PASS, WARN or FAIL, the check (rdma-core, providers, device, port, mtu,\n"
			       "memlock, hugepages, library, ports, config, transports; with PEER, a\n"
			       "name or an address: peer, route, gid, mtu, rdma_cm), what was found and\n"
			       "the fix; then \"doctor: F fail, W warn: VERDICT\". Reads RDMASHIM_*\n"
			       "(ports, ring size), RDMASHIM_LIB and RDMASHIM_SYSFS as rdmashim run and\n"
			       "health do.\n"
			       "Exit: 0 no FAIL line; 1 some FAIL line; 2 bad usage.\n");
			return 0;
		}
		if (argv[i][0] == '-' || peer || !argv[i][0]) {
			fprintf(stderr, "rdmashim doctor: %s '%s' (usage: rdmashim doctor [PEER])\n",
				argv[i][0] == '-' ? "unknown option" : "one PEER only, not", argv[i]);
			return 2;
		}
		peer = argv[i];
	}
	if (sysroot && !*sysroot)
		sysroot = NULL;
	parsed = shim_config_parse(&cfg, env_get, NULL, err, sizeof(err));
	if (parsed < 0) /* the sizes below need values: the defaults */
		shim_config_parse(&cfg, no_env, NULL, err + strlen(err) + 1, sizeof(err) - strlen(err) - 1);
	check_libraries();
	check_devices(&report, sysroot);
	check_memlock(&cfg);
	check_huge_pages(&cfg, sysroot);
	check_library();
	check_config(&cfg, parsed, err);
	if (peer)
		rdmashim_doctor_peer(peer, &report, sysroot);
	printf("doctor: %u fail, %u warn: %s\n", n_fail, n_warn,
	       n_fail ? (peer ? "this host can not carry connections to the peer over RDMA yet (fix the FAIL lines)"
			      : "this host can not carry connections over RDMA yet (fix the FAIL lines)")
	       : n_warn ? "ready, with warnings"
			: "ready");
	return n_fail ? 1 : 0;
}
