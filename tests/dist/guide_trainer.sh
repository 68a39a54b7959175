#!/usr/bin/env bash
# docs/guide.md's Trainer example (examples/guide/trainer.cpp: a custom model, dataset and task
# under DDP, bf16 autocast and checkpoints) run as a user would: on 2 ranks stopped after 50 of
# its 128 steps and resumed, it ends bitwise where an uninterrupted 2-rank run ends; one process
# learns the same task (held-out accuracy >= 0.9, the weights' sum within 1% of the 2 ranks').
# usage: guide_trainer.sh EXAMPLE MPIRUN
set -uo pipefail
example=$1
mpirun=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
launch() {  # launch NP ARGS...
  local np=$1
  shift
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -np "$np" "$example" "$@"
}
value() { sed -n "s/^$1=//p" <<<"$2" | tail -1; }

out=$(launch 2 "$work/a" 50 2>&1) || fail "the stopped run failed: $out"
stops=$(grep -c "stopped after step 50" <<<"$out")
[ "$stops" = 1 ] || fail "the stop after 50 steps was reported $stops time(s): $out"
[ -f "$work/a/ckpt-0000000050.safetensors" ] || fail "no checkpoint at step 50: $(ls "$work/a")"
out=$(launch 2 "$work/a" 2>&1) || fail "the resumed run failed: $out"
grep -q "resuming from .*ckpt-0000000050" <<<"$out" || fail "did not resume from step 50: $out"
resumed=$(value weights "$out")
out=$(launch 2 "$work/b" 2>&1) || fail "the uninterrupted run failed: $out"
whole=$(value weights "$out")
[ -n "$whole" ] && [ "$resumed" = "$whole" ] ||
  fail "resumed weights $resumed, uninterrupted $whole (bitwise expected)"
out=$(launch 1 "$work/c" 2>&1) || fail "the one-process run failed: $out"
one=$(value weights "$out")
accuracy=$(value accuracy "$out")
awk -v a="$accuracy" -v one="$one" -v two="$whole" 'BEGIN {
  d = one - two; if (d < 0) d = -d; m = two < 0 ? -two : two
  exit !(a >= 0.9 && d <= 0.01 * m) }' ||
  fail "one process: accuracy $accuracy, weights $one against 2 ranks' $whole"
echo "guide_trainer: stopped and resumed = uninterrupted ($whole), one process $one, accuracy $accuracy PASS"
