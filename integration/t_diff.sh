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
# The same traces then run free (free.py): both ends at once without lock-
# step, DIFF_FREE_REPS (2) seeded schedules each, then one with four
# connections per end sharing one thread and epoll set, and one more with
# that set inside a poll, checked by invariants.
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
log "replays of real programs running free: ${DIFF_FREE_REPS:-2} schedule(s) each, three ways"
CMD_TIMEOUT=120 tally_cmd "$PYTHON" "$ROOT/integration/diff/free.py" check --reps "${DIFF_FREE_REPS:-2}" \
  --seed "$DIFF_SEED"
log "the same with four connections per end in one thread, sharing one epoll set"
CMD_TIMEOUT=120 tally_cmd "$PYTHON" "$ROOT/integration/diff/free.py" check --reps 1 --conns 4 \
  --seed $((DIFF_SEED + 100))
log "the same with that epoll set waited on inside a poll (a cascaded set)"
FREE_LOOP_NEST=1 CMD_TIMEOUT=120 tally_cmd "$PYTHON" "$ROOT/integration/diff/free.py" check --reps 1 \
  --conns 4 --seed $((DIFF_SEED + 200))
# The invariants can fail: a reader that misreads the stream by one byte.
out=$(FREE_TEST_SHIFT=1 DIFF_MODES=plain,tcp,shm timeout 60 "$PYTHON" "$ROOT/integration/diff/free.py" \
  check --reps 1 redis_bench 2>&1)
if grep -q "^not ok .*plain" <<<"$out" && grep -q "differs from the peer's pattern" <<<"$out"; then
  ok "free replay: a reader that misreads the stream fails the check"
else
  not_ok "free replay: a reader that misreads the stream was not caught"
  echo "$out" | sed 's/^/# /'
fi
log "random scenarios for ${BUDGET}s"
CMD_TIMEOUT=$((BUDGET + DIFF_SHRINK_S + 60)) tally_cmd "$PYTHON" "$DIFF" random --budget "$BUDGET" --avoid-known
finish
