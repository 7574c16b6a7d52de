#!/bin/bash
# soak_faults: random fault schedules (integration/faults_lib.sh,
# fault_schedule) under checksummed streams, for SOAK_MINUTES (default 60;
# `make soak-faults`). Each run's seed is printed; the runs' seeds follow
# one another from SOAK_SEED (default: a random one, printed first), so a
# soak is repeated by its first seed. A run checks every byte, that only the
# listed kinds struck and in the faulted process, that a connection a
# ring_alloc or rv_silent struck never upgraded, and no conn.abort or
# rx.switch_refused (fault_run ... any). A failing run's seed is appended to
# integration/faults_seeds.txt, which t_faults replays; its scratch files
# are kept (those of passing runs are removed as it goes).
# Not a scenario (run-all.sh runs t_*.sh only); it uses lib.sh all the same.
SOAK_MINUTES=${SOAK_MINUTES:-60}
[[ $SOAK_MINUTES =~ ^[0-9]+$ ]] || { echo "SOAK_MINUTES must be a number of minutes"; exit 2; }
: "${CMD_TIMEOUT:=90}"
SCENARIO_NAME=soak_faults
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STRESS=$PROGS/stress
need_built "$STRESS"
need_cmd python3
TMO=$((CMD_TIMEOUT - 20))
. "$(dirname "${BASH_SOURCE[0]}")/faults_lib.sh"

SEEDS_FILE=$ROOT/integration/faults_seeds.txt
base=${SOAK_SEED:-$(od -An -N3 -tu4 /dev/urandom | tr -d ' ')}
[[ $base =~ ^[0-9]+$ ]] || { echo "SOAK_SEED must be a number"; exit 2; }
end=$(($(date +%s) + SOAK_MINUTES * 60))
log "soak-faults: first seed $base, $SOAK_MINUTES min (SOAK_SEED=$base repeats it)"
runs=0 failed=0
for ((seed = base; $(date +%s) < end; seed++)); do
  before=$N_FAIL
  fault_seed_run "soak-$seed" "$seed"
  runs=$((runs + 1))
  if ((N_FAIL > before)); then
    failed=$((failed + 1))
    echo "$seed # found $(date -u +%F) by soak-faults: $(fault_schedule "$seed" | paste -sd' ' -)" >>"$SEEDS_FILE"
    log "seed $seed FAILED: kept in $SEEDS_FILE, scratch files in $WORK/soak-$seed"
  else
    rm -rf "$WORK/soak-$seed" "$WORK"/soak-"$seed"-*.out "$WORK"/soak-"$seed"-*.err
  fi
done
log "soak-faults: $runs runs, $failed failed (seeds $base..$((seed - 1)))"
finish
