#!/usr/bin/env bash
# Ranks started with different runs (MPMD launches `-np 1 A : -np 1 B` where B differs from A in
# one option): every launch must end within seconds, non-zero, with the agreement error naming
# that option on every rank, never a crash inside MPI or two replicas training different runs.
# usage: rank_agreement.sh GRADUS MPIRUN DATA_DIR TEXT_SAMPLE
set -uo pipefail
gradus=$1
mpirun=$2
data=$3
sample=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
images=(train --model mlp --epochs 1 --threads 1 --limit-train 256 --limit-test 100 --no-progress
  --data-dir "$data" --batch-size 32)
gpt=(train --model gpt --data text --data-file "$sample" --context 16 --layers 1 --heads 2 --width 32
  --iters 4 --eval-every 2 --eval-iters 1 --threads 1 --batch-size 8)
checked=0
# expect_refused KEY BASE_ARRAY_NAME A_ARGS -- B_ARGS
expect_refused() {
  local key=$1 base=$2
  shift 2
  local -n common=$base
  local a=() b=()
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  b=("$@")
  local out rc
  out=$(timeout 60 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -np 1 "$gradus" "${common[@]}" "${a[@]}" : -np 1 "$gradus" "${common[@]}" "${b[@]}" 2>&1)
  rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "$key: exit $rc (expected a refusal): $out"
  local n
  n=$(grep -c "not started with the same run" <<<"$out")
  [ "$n" -eq 2 ] || fail "$key: the agreement error on $n of 2 ranks: $out"
  grep -q "^  $key: rank 0 " <<<"$out" || fail "$key: the error does not name $key: $out"
  grep -qiE "segmentation|signal 11|SIGSEGV|SIGABRT" <<<"$out" && fail "$key: a crash: $out"
  checked=$((checked + 1))
}
expect_refused option.batch_size images --dist ddp -- --dist ddp --batch-size 64
expect_refused option.lr images --dist ddp -- --dist ddp --lr 0.5
expect_refused option.seed images --dist ddp -- --dist ddp --seed 9
expect_refused option.optimizer images --dist ddp -- --dist ddp --optimizer sgd
expect_refused option.model images --dist zero1 -- --dist zero1 --model cnn
expect_refused option.amp images --dist ddp -- --dist ddp --amp bf16
expect_refused option.limit_train images --dist ddp -- --dist ddp --limit-train 512
expect_refused option.freeze images --dist zero1 -- --dist zero1 --freeze 0.
expect_refused trainer.checkpoint_dir images --dist zero1 -- --dist zero1 --checkpoint-dir "$work/c"
expect_refused trainer.strategy images --dist ddp -- --dist zero1
expect_refused option.batch_size gpt --dist ddp -- --dist ddp --batch-size 16
expect_refused option.iters gpt --dist ps -- --dist ps --iters 6
echo "rank_agreement: $checked launches refused by name on both ranks PASS"
