#!/bin/bash
# t_fuzz_wire: fuzzes the rendezvous message parser (shim_msg_check in
# shim/core/wire.c) with libFuzzer, ASan and UBSan: tests/fuzz_wire.c is built
# into build/fuzz_wire and runs for FUZZ_SECS (default 20) seconds from the
# seed corpus tests/corpus/wire (new inputs go to the scratch directory, the
# committed corpus is only read). Any crash, sanitizer report or broken
# invariant fails the scenario (the reproducer is kept in the scratch
# directory). Also checks that the committed corpus is exactly what the seed
# generator (tests/fuzz_wire.c built with -DFUZZ_WIRE_GEN) makes from the
# current wire.h, and that every seed runs clean.
# Skipped (77) when clang or its libFuzzer runtime is unavailable.
: "${CMD_TIMEOUT:=120}"
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FUZZ_SECS=${FUZZ_SECS:-20}
SRC=$ROOT/tests/fuzz_wire.c
CORPUS=$ROOT/tests/corpus/wire
BIN=$ROOT/build/fuzz_wire

CLANG=
for c in clang clang-14 clang-15 clang-16 clang-17 clang-18; do
  if command -v "$c" >/dev/null 2>&1; then
    CLANG=$c
    break
  fi
done
[[ -n $CLANG ]] || skip "clang is not installed"

# Is libFuzzer there at all? A trivial target tells.
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
  >"$WORK/probe.c"
if ! timeout 60 "$CLANG" -fsanitize=fuzzer "$WORK/probe.c" -o "$WORK/probe" >"$WORK/probe.log" 2>&1; then
  skip "$CLANG has no libFuzzer runtime (-fsanitize=fuzzer): $(head -n 1 "$WORK/probe.log")"
fi

[[ -d $CORPUS ]] || { not_ok "seed corpus $CORPUS exists"; finish; }

# The corpus is the generator's output for the current wire format.
if timeout 60 "$CLANG" -std=gnu11 -Wall -Wextra -Werror -DFUZZ_WIRE_GEN -D_GNU_SOURCE -I"$ROOT/shim/core" \
     "$SRC" "$ROOT/shim/core/wire.c" -o "$WORK/gen" >"$WORK/gen.log" 2>&1; then
  mkdir -p "$WORK/gen-corpus"
  check "seed generator runs and every seed gets its expected verdict" \
    timeout 20 "$WORK/gen" "$WORK/gen-corpus" >"$WORK/gen.out" 2>&1
  check "tests/corpus/wire is exactly the generator's output ($(ls "$CORPUS" | wc -l) files)" \
    diff -r "$WORK/gen-corpus" "$CORPUS"
else
  not_ok "seed generator builds"
  cat "$WORK/gen.log"
fi

mkdir -p "$(dirname "$BIN")"
if ! timeout 120 "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
     -I"$ROOT/shim/core" -D_GNU_SOURCE "$SRC" "$ROOT/shim/core/wire.c" -o "$BIN" >"$WORK/build.log" 2>&1; then
  not_ok "fuzz_wire builds with -fsanitize=fuzzer,address,undefined"
  cat "$WORK/build.log"
  finish
fi
ok "fuzz_wire builds with -fsanitize=fuzzer,address,undefined"

# Every seed once, alone.
rc=0
(cd "$WORK" && timeout 60 "$BIN" -runs=0 "$CORPUS" >"$WORK/seeds.log" 2>&1) || rc=$?
check "every seed runs clean (status $rc)" test "$rc" -eq 0

# The fuzzing run. UBSan reports abort (-fno-sanitize-recover), so a report
# is a crash like any other.
mkdir -p "$WORK/new" "$WORK/artifacts"
rc=0
t0=$(date +%s)
(cd "$WORK" && UBSAN_OPTIONS=print_stacktrace=1 timeout -k 10 $((FUZZ_SECS + 60)) "$BIN" \
   -max_total_time="$FUZZ_SECS" -print_final_stats=1 -artifact_prefix="$WORK/artifacts/" \
   -max_len=256 "$WORK/new" "$CORPUS" >"$WORK/fuzz.log" 2>&1) || rc=$?
t1=$(date +%s)
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/fuzz.log" | tail -n 1)
cov=$(grep -E '^#[0-9]+' "$WORK/fuzz.log" | tail -n 1 | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
ft=$(grep -E '^#[0-9]+' "$WORK/fuzz.log" | tail -n 1 | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
log "fuzzed for $((t1 - t0)) s: ${execs:-?} executions, coverage ${cov:-?} edges, ${ft:-?} features," \
  "$(ls "$WORK/new" | wc -l) new corpus entries"
check "fuzz_wire ran $FUZZ_SECS s without a crash (status $rc)" test "$rc" -eq 0
check "no crash reproducer written" test -z "$(ls -A "$WORK/artifacts")"
check "libFuzzer finished normally (Done line)" grep -q '^Done [0-9]* runs' "$WORK/fuzz.log"
check "it executed inputs (${execs:-0})" test "${execs:-0}" -gt 1000
if ((N_FAIL > 0)); then
  grep -E 'ERROR|invariant|SUMMARY|runtime error' "$WORK/fuzz.log" | head -n 20
  ls -l "$WORK/artifacts" 2>/dev/null
fi

finish
