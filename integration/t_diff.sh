#!/bin/bash
# t_diff: the differential harness (integration/diff/README.md). Every
# scenario of integration/diff/corpus/ runs three ways (plain TCP, the shim
# tracking but never upgrading, the shim upgrading to shm) and the records of
# both ends must be identical; the cases in corpus/known/ reproduce known
# differences of the shim and are reported ("known difference"), not failed.
# The replays of real programs (corpus/replay_*.scn) must first be what
# trace2scn.py makes of their kept traces (corpus/traces/).
# In the same pass, each scenario's shm run again with every shm
# connection handed back to TCP at its 1st, 2nd, then 3rd send on the
# channel (RDMASHIM_TEST_HANDBACK_AFTER), each against the same plain run
# (diff.py's DIFF_HANDBACK_SENDS: a pass of its own per send ran the plain
# and tcp runs again, which a hand-back does not change).
# Then random scenarios (without the shapes of the known differences) run for
# DIFF_BUDGET_S seconds (default 20; the default before, 45, reaches
# further seeds; `make soak-diff` runs them for an hour); a difference is
# shrunk and saved to
# corpus/new/, and fails the scenario. The seeds start at DIFF_SEED (default
# 1), so that make test is a gate that gives one verdict for one commit; the
# search for new differences with fresh seeds is make soak-diff.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_built "$PROGS/diff_driver"
need_cmd python3

BUDGET=${DIFF_BUDGET_S:-20}
export DIFF_SEED=${DIFF_SEED:-1}
export DIFF_SHRINK_S=${DIFF_SHRINK_S:-45}
DIFF=$ROOT/integration/diff/diff.py

log "replays of real programs: each is what trace2scn.py makes of its kept traces"
CMD_TIMEOUT=60 tally_cmd "$PYTHON" "$ROOT/integration/diff/trace2scn.py" verify
# The hand-back of a connection that does not pay (shim/io/io_tx.c) happens
# mid-stream in real programs; forced at a connection's 2nd and 3rd send
# on shm (DIFF_HANDBACK_SENDS) it falls at most moments of the corpus'
# shapes (before these runs, at sends 1-3: 16 differences, among them a
# hang, a 2 s close and resets), and at its 1st, right after the switch
# (one known difference there: corpus/sizes_write_readv.scn).
export DIFF_HANDBACK_SENDS=${DIFF_HANDBACK_SENDS-1 2 3}
log "corpus, and each shm run again handed back to TCP at its send ${DIFF_HANDBACK_SENDS// /, } on the channel"
# The bound of the four passes this one pass replaced.
CMD_TIMEOUT=960 tally_cmd "$PYTHON" "$DIFF" check
log "random scenarios for ${BUDGET}s"
CMD_TIMEOUT=$((BUDGET + DIFF_SHRINK_S + 60)) tally_cmd "$PYTHON" "$DIFF" random --budget "$BUDGET" --avoid-known
finish
