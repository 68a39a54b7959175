#!/usr/bin/env bash
# A ZeRO-1 run checkpointed at one world size resumes at others: 4 ranks -> 2 -> 1, and 1 -> 4,
# each ending where the uninterrupted 4-rank run ends. The checkpoint holds the consolidated
# optimizer state (what one unsharded optimizer would hold), so each world re-shards it. Across
# world sizes only the summation order of the averaged gradients differs (float32), so the final
# losses and accuracy agree to rounding, not bitwise.
#
# usage: zero_resume.sh GRADUS_BINARY MPIRUN
set -euo pipefail
gradus=$1
mpirun=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # run NP ARGS...: a zero1 training run on NP ranks; prints its last epoch line
  local np=$1
  shift
  "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np "$np" \
    "$gradus" train --dist zero1 --model mlp --optimizer adam --epochs 2 --limit-train 1536 \
    --limit-test 500 --batch-size 96 --threads 1 --no-progress "$@" 2>"$work/err" | tee -a "$work/out"
}
final() { grep "^epoch 2/2" | sed 's/ (.*//'; }

reference=$(run 4 | final)
echo "uninterrupted, 4 ranks: $reference"
run 4 --checkpoint-dir "$work/a" --checkpoint-every 5 --stop-after-steps 10 >/dev/null
run 2 --checkpoint-dir "$work/a" --checkpoint-every 5 --resume --stop-after-steps 20 >/dev/null
grep -q "resuming from .*ckpt-0000000010" "$work/err" || { echo "2 ranks did not resume at step 10"; cat "$work/err"; exit 1; }
a=$(run 1 --checkpoint-dir "$work/a" --resume | final)
grep -q "resuming from .*ckpt-0000000020" "$work/err" || { echo "1 rank did not resume at step 20"; exit 1; }
echo "4 -> 2 -> 1 ranks:      $a"
run 1 --checkpoint-dir "$work/b" --checkpoint-every 5 --stop-after-steps 15 >/dev/null
b=$(run 4 --checkpoint-dir "$work/b" --resume | final)
grep -q "resuming from .*ckpt-0000000015" "$work/err" || { echo "4 ranks did not resume at step 15"; exit 1; }
echo "1 -> 4 ranks:           $b"
close() {  # the numbers of two epoch lines agree to 2e-3
  paste <(echo "$1" | grep -oE '[0-9]+\.[0-9]+') <(echo "$2" | grep -oE '[0-9]+\.[0-9]+') |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 2e-3) bad = 1 } END { exit bad }'
}
[ -n "$reference" ] && close "$reference" "$a" && close "$reference" "$b" ||
  { echo "zero_resume: FAIL"; exit 1; }
echo "zero_resume: PASS"
