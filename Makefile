# rdmashim: see README.md. `make` builds, `make test` installs what it needs and
# runs every test, `make demo` shows unmodified programs through the shim, over
# shared memory and then between two Soft-RoCE VMs (`make demo-shm`: the first
# part only).

PREFIX ?= /usr/local
BUILD  ?= build
CC     ?= cc

# SAN=asan (ASan + UBSan, a UBSan report aborts) or SAN=tsan builds the
# library, the core archive and the unit tests instrumented; use a BUILD of
# its own (`make asan`, `make tsan` do: build/asan, build/tsan).
SAN ?=
ifeq ($(SAN),asan)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else ifeq ($(SAN),tsan)
# TSan does not model stand-alone fences (the ring's Dekker wake-ups);
# gcc warns about each. They order only atomic accesses, which TSan never
# reports, so the warning is off rather than an error.
SAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer -Wno-tsan
else ifneq ($(SAN),)
$(error SAN must be asan, tsan or empty, not '$(SAN)')
endif

CFLAGS_COMMON := -std=gnu11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC \
                 -fno-strict-aliasing -MMD -MP $(SAN_FLAGS)
CFLAGS_SHIM   := $(CFLAGS_COMMON) -fvisibility=hidden
LDLIBS_SHIM   := -ldl -lpthread -lrdmacm -libverbs

# The shim's modules, one folder per layer (docs/ARCHITECTURE.md):
# a layer includes only its own and lower layers
# (tools/check-layers.sh). interpose/ holds init and the exported wrappers, the
# rest is the core that the unit tests link against. Object names stay flat
# (build/obj/shim/NAME.o): module names are unique across the folders.
SHIM_DIRS := shim/core shim/conn shim/transport shim/transport/shm shim/transport/rdma shim/io shim/interpose
SHIM_INC  := $(addprefix -I,$(SHIM_DIRS))
vpath %.c $(SHIM_DIRS)
SHIM_CORE := clock self nonce bgthread spin faults config tuple reason flimit seccomp_state trace fdtable owned reaper streampos real \
             stats statarea statlink statread abverdict stamps msgstamps wire \
             sock sockfd socklife sockstat frames failover fo_worker transport upgrade upgrade_wake rxswitch handback close close_budget \
             ring shm shm_zc arena slots shm_neg neg_state shm_pair_neg pair diag beacon rendezvous \
             breaker mrpool mr_cache mr_watch mr_events nic_counters fabric_health rdma_port rdma_dev rdma_link rdma_link_stat rdma_link_table rdma_link_join rdma_link_offers rdma_post rdma_zc rdma_chan rdma_fail rdma_qp rdma_setup rdma_switch rdma_close rdma_teardown \
             bypass io io_rx io_tx io_sleep io_ready io_calls waitloop wait epoll_set epoll epoll_wait epoll_close epoll_early epoll_young \
             atfork layers
SHIM_HOOKS := init interpose_socket interpose_io interpose_poll interpose_proc interpose_bypass interpose_mem
CORE_OBJS := $(SHIM_CORE:%=$(BUILD)/obj/shim/%.o)
HOOK_OBJS := $(SHIM_HOOKS:%=$(BUILD)/obj/shim/%.o)

LIB  := $(BUILD)/lib/librdmashim.so
CORE := $(BUILD)/lib/librdmashim_core.a
TOOL := $(BUILD)/bin/rdmashim

UNIT_SUITES := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))
UNIT_BINS   := $(UNIT_SUITES:%=$(BUILD)/tests/%)
TEST_PROGS  := $(patsubst integration/progs/%.c,$(BUILD)/progs/%,$(wildcard integration/progs/*.c))
# The stress tool is several files (integration/stress/), so it has a rule of its own.
STRESS      := $(BUILD)/progs/stress
STRESS_SRCS := $(wildcard integration/stress/*.c)
# So is the hostile shared-memory peer (integration/hostile/).
HOSTILE      := $(BUILD)/progs/hostile_shm
HOSTILE_SRCS := $(wildcard integration/hostile/*.c)
# The differential driver (integration/diff/) is several files as well.
DIFF_DRIVER := $(BUILD)/progs/diff_driver
DIFF_SRCS   := $(wildcard integration/diff/*.c)
# And the readiness-rules harness (integration/progs/ready_rules/).
READY_RULES      := $(BUILD)/progs/ready_rules
READY_RULES_SRCS := $(wildcard integration/progs/ready_rules/*.c)

.PHONY: all deps test check-layers unit unit-bins integration docs demo demo-shm bench bench-quick bench-scripts install clean asan tsan test-asan test-tsan soak-diff soak-diff-free soak-faults diff-replays diff-replays-convert

all: $(LIB) $(TOOL) $(TEST_PROGS) $(STRESS) $(HOSTILE) $(DIFF_DRIVER) $(READY_RULES)

$(BUILD)/obj/shim/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SHIM) $(SHIM_INC) -c $< -o $@

$(LIB): $(CORE_OBJS) $(HOOK_OBJS) shim/interpose/librdmashim.map
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) -shared -Wl,--version-script=shim/interpose/librdmashim.map -Wl,-z,defs -Wl,-soname,librdmashim.so \
	    -o $@ $(CORE_OBJS) $(HOOK_OBJS) $(LDLIBS_SHIM)

$(CORE): $(CORE_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/obj/tools/%.o: tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SHIM_INC) -c $< -o $@

$(TOOL): $(patsubst tools/%.c,$(BUILD)/obj/tools/%.o,$(wildcard tools/*.c)) $(CORE)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) -o $@ $^ $(LDLIBS_SHIM) -lz

$(BUILD)/tests/%: tests/%.c $(CORE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -Wno-error=unused-parameter $(SHIM_INC) -o $@ $< $(CORE) \
	    $$(pkg-config --cflags --libs check) $(LDLIBS_SHIM)

$(BUILD)/progs/%: integration/progs/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $< -lpthread

# The hostile RDMA peer speaks the shim's wire (shim/transport/rdma/rdma_wire.h) itself.
$(BUILD)/progs/hostile_rdma: integration/progs/hostile_rdma.c shim/transport/rdma/rdma_wire.h shim/core/wire.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(SHIM_INC) -o $@ $< -lrdmacm -libverbs

$(STRESS): $(STRESS_SRCS) integration/stress/stress.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -o $@ $(STRESS_SRCS) -lpthread

$(HOSTILE): $(HOSTILE_SRCS) integration/hostile/hostile.h
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -MMD -MP,$(CFLAGS_COMMON)) -o $@ $(HOSTILE_SRCS) -lpthread

$(DIFF_DRIVER): $(DIFF_SRCS) integration/diff/driver.h
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -MMD -MP,$(CFLAGS_COMMON)) -o $@ $(DIFF_SRCS) -lpthread

$(READY_RULES): $(READY_RULES_SRCS) integration/progs/ready_rules/ready_rules.h
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -MMD -MP,$(CFLAGS_COMMON)) -o $@ $(READY_RULES_SRCS) -lpthread

deps:
	@tools/install-deps.sh

# Includes and calls run one way between shim/'s layers (tools/check-layers.sh).
# CHECK_LAYERS=--report lists what is wrong without failing.
check-layers: $(CORE_OBJS) $(HOOK_OBJS)
	@tools/check-layers.sh --list $(CHECK_LAYERS) $(BUILD)/obj/shim

unit-bins: $(UNIT_BINS)

unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; CK_DEFAULT_TIMEOUT=30 $$t; done

integration: all
	@integration/run-all.sh

# Builds run two jobs at once (this machine's two cores: 22 s serial
# against 13 s for all, and as much for each sanitizer build). Then the
# integration scenarios one after the other, the sanitizer runs after
# them. Serial, not run-all.sh's VM lane: with the VMs beside it,
# t_ready_rules' epoll-ET part lost readiness on 12 connections for 20 s
# (a shim defect load brings out, open) and the gate went red.
test: deps
	$(MAKE) -j2 all
	$(MAKE) check-layers
	$(MAKE) -j2 unit-bins
	$(MAKE) unit
	$(MAKE) -j2 asan tsan
	@RUN_ALL_SERIAL=1 RUN_ALL_THEN="tests/sanitize.sh asan tsan" integration/run-all.sh

# Sanitizer builds (own build dirs) and runs: tests/sanitize.sh says what runs.
# The command too: integration/t_trace_tool.sh runs build/asan's on damaged
# trace files.
asan tsan:
	$(MAKE) BUILD=build/$@ SAN=$@ build/$@/lib/librdmashim.so build/$@/bin/rdmashim unit-bins

test-asan test-tsan: all
	$(MAKE) -j2 $(@:test-%=%)
	@tests/sanitize.sh $(@:test-%=%)

# The differential harness's random scenarios for DIFF_SOAK_S seconds (default 3600).
soak-diff: all
	@unshare -n bash -c 'ip link set lo up; DIFF_SOAK=1 integration/diff/diff.py soak --budget $${DIFF_SOAK_S:-3600}'

# Free-running replays of the real programs' traces (integration/diff/
# README.md): fresh seeds, FREE_PAR pairs at once of FREE_CONNS
# connections each, for FREE_SOAK_S seconds (default 1800).
soak-diff-free: all
	@unshare -n bash -c 'ip link set lo up; integration/diff/free.py soak --budget $${FREE_SOAK_S:-1800} --par $${FREE_PAR:-2} --conns $${FREE_CONNS:-4}'

# Real programs' traces as differential scenarios (integration/diff/README.md):
# diff-replays records them again with strace (root; the programs of
# tools/install-deps.sh), diff-replays-convert only rewrites the scenarios
# corpus/replay_*.scn from the kept traces corpus/traces/.
diff-replays:
	@integration/diff/record.sh $(REPLAYS)

diff-replays-convert:
	@integration/diff/trace2scn.py convert

# Random fault schedules (RDMASHIM_TEST_FAULTS) under checksummed streams for
# SOAK_MINUTES (default 60), from SOAK_SEED (default random, printed); a
# failing seed goes to integration/faults_seeds.txt, which t_faults replays.
soak-faults: all
	@SOAK_MINUTES=$${SOAK_MINUTES:-60} integration/soak_faults.sh

# The generated blocks of docs/CONFIG.md (the variables' table) and of
# docs/man/rdmashim.7 (variables, reason codes), from the code's own tables
# (integration/t_docs.sh and t_manpages.sh check them).
docs: $(TOOL)
	@tools/gen-config-doc.sh $(TOOL)

demo: deps
	$(MAKE) all
	@integration/demo.sh

demo-shm: deps
	$(MAKE) all
	@integration/demo.sh --shm-only

# The benchmark suite (integration/bench/suite.sh): every same-host
# transport side by side, one JSON in bench/results/, bench/REPORT.md and
# its plots, and the generated figures of README.md and docs/BENCHMARKS.md.
# BENCH_VM=1 adds the Soft-RoCE VM part. bench-quick is its short form, to a
# temporary directory (integration/t_bench_quick.sh runs it in make test);
# bench-scripts runs the per-topic scripts of integration/bench/ one by one.
bench: all
	@integration/bench/suite.sh
	@integration/bench/report.py --docs

bench-quick: all
	@d=$$(mktemp -d) && BENCH_QUICK=1 BENCH_OUT=$$d integration/bench/suite.sh && \
	    integration/bench/report.py --json $$d/latest.json --out $$d && echo "bench-quick: $$d/REPORT.md"

bench-scripts: all
	@integration/bench/run-all.sh

MANDIR ?= $(PREFIX)/share/man

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7
	install -m 0755 $(LIB) $(DESTDIR)$(PREFIX)/lib/librdmashim.so
	install -m 0755 $(TOOL) $(DESTDIR)$(PREFIX)/bin/rdmashim
	install -m 0644 docs/man/rdmashim.1 $(DESTDIR)$(MANDIR)/man1/rdmashim.1
	install -m 0644 docs/man/rdmashim.7 $(DESTDIR)$(MANDIR)/man7/rdmashim.7

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
