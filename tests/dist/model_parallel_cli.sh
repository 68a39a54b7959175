#!/usr/bin/env bash
# gradus train --tp/--pp/--micro-batches/--schedule: every layout of 1-4 ranks trains the MLP to
# what one process trains (the same epoch losses and test accuracy to the 4 printed decimals; the
# micro-batches only change float32 summation order), --save gathers the whole model,
# tensor-parallel slices included (one process's tensors and values, within 1e-4), and bad layouts
# stop every rank with a message, never hang. `--dist ps|zero1` share each stage's update over the
# data ranks (a parameter server, a sharded optimizer) and train the same.
#
# usage: model_parallel_cli.sh GRADUS_BINARY MPIRUN
set -euo pipefail
gradus=$1
mpirun=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model mlp --optimizer sgd --lr 0.1 --epochs 2 --limit-train 1024 --limit-test 300
        --batch-size 64 --threads 1 --no-progress --seed 5)
run() {  # run NP ARGS...: prints the run's epoch lines without their timing
  local np=$1
  shift
  "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np "$np" \
    "$gradus" "${common[@]}" "$@" 2>"$work/err" | grep "^epoch" | sed 's/ (.*//'
}

reference=$("$gradus" "${common[@]}" --save "$work/one.safetensors" 2>/dev/null | grep "^epoch" | sed 's/ (.*//')
[ "$(echo "$reference" | wc -l)" -eq 2 ] || { echo "the one-process run printed: $reference"; exit 1; }
echo "one process: $(echo "$reference" | tail -1)"
layouts=0
for layout in "2 --pp 2 --micro-batches 4" "2 --pp 2 --micro-batches 3 --schedule gpipe" \
              "2 --tp 2" "3 --pp 3 --micro-batches 2" "4 --pp 2 --micro-batches 2" \
              "4 --tp 2 --pp 2 --micro-batches 4" "4 --pp 4 --micro-batches 8" \
              "4 --pp 2 --micro-batches 2 --dist zero1" "4 --tp 2 --dist ps"; do
  rm -f "$work/w.safetensors"
  # shellcheck disable=SC2086
  got=$(run $layout --save "$work/w.safetensors")
  if [ "$got" != "$reference" ]; then
    echo "FAIL: -np $layout trained differently:"; echo "$got"; echo "expected:"; echo "$reference"
    cat "$work/err"; exit 1
  fi
  # The stages' layers and the tensor-parallel slices gathered into one file: the one-process
  # file's names, dtypes and shapes, and its values (within float32 summation order).
  "$gradus" inspect "$work/w.safetensors" --json > "$work/w.json"
  "$gradus" inspect "$work/one.safetensors" --json > "$work/one.json"
  cmp -s <(sed "s/.*\"tensors\"://" "$work/w.json") <(sed "s/.*\"tensors\"://" "$work/one.json") ||
    { echo "FAIL: -np $layout saved a different set of tensors"; exit 1; }
  worst=$("$gradus" inspect "$work/w.safetensors" --compare "$work/one.safetensors" |
    sed -n 's/^max_relative_difference=//p')
  awk -v w="$worst" 'BEGIN { exit !(w != "" && w + 0 <= 1e-4) }' ||
    { echo "FAIL: -np $layout saved weights $worst (relative) from one process's"; exit 1; }
  layouts=$((layouts + 1))
  echo "ok: -np $layout"
done

expect_error() {  # expect_error NP REGEX ARGS...: exit 1 within the timeout, with the message
  local np=$1 regex=$2 rc=0
  shift 2
  timeout 60 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -np "$np" "$gradus" "${common[@]}" "$@" >"$work/out" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "FAIL: -np $np $*: exit code $rc"; cat "$work/out"; exit 1; }
  grep -Eq -- "$regex" "$work/out" || { echo "FAIL: -np $np $*: no '$regex' in:"; cat "$work/out"; exit 1; }
  echo "ok: -np $np $* -> $(grep -Eo -- "$regex" "$work/out" | head -1)"
  layouts=$((layouts + 1))
}
expect_error 3 "--tp 2 --pp 1 need a multiple of 2 ranks .*this world has 3" --tp 2
expect_error 2 "cannot be cut into --micro-batches 100" --pp 2 --micro-batches 100
expect_error 3 "out_features \(256\) must be a positive multiple of the group size \(3\)" --tp 3
expect_error 4 "the model has 3 layer\(s\), fewer than the 4 pipeline stages" --pp 4 --model mlp-bench
expect_error 2 "--tp splits the hidden layers of --model mlp" --tp 2 --model cnn
[ "$layouts" -eq 14 ] || { echo "FAIL: $layouts of 14 cases ran"; exit 1; }
echo "model_parallel_cli: PASS"
