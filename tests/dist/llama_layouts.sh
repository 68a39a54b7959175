#!/usr/bin/env bash
# The Llama (grouped-query attention: 4 heads, 2 key/value heads) under the engine's layouts
# against one process, on the same global batches: ddp, ps, zero1 and fsdp on 2 ranks (fsdp with
# activation checkpointing on 3, and over 2 tensor-parallel replicas), pipelines of 2
# stages (GPipe and 1F1B, with 2 micro-batches), 2 data x 2 pipeline ranks and activation
# checkpointing (one process, and each stage of 2), 2 tensor-parallel ranks (each with 2 of the 4
# query heads and 1 of the 2 key/value heads), zero1 over 2 tensor-parallel replicas and 2 tensor x
# 2 pipeline ranks print the one-process
# validation losses (with a tied head too: tp2, pp2, tp2 x pp2) and end at its weights (gradus inspect --compare: every tensor within 1e-4
# relative). A ddp and a --tp 2 checkpoint (written asynchronously) resume on one process and end
# where the uninterrupted run ends; --tp 2 with a key/value head per 2 ranks is refused;
# --save-hf under a pipeline writes the one-process model (gradus eval on it prints the same loss
# as on the one-process --save file).
# usage: llama_layouts.sh GRADUS MPIRUN TEXT_SAMPLE
set -uo pipefail
gradus=$1
mpirun=$2
sample=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
common=(train --model llama --data text --data-file "$sample" --context 16 --layers 2 --heads 4
  --kv-heads 2 --width 32 --batch-size 12 --iters 6 --eval-every 3 --eval-iters 2 --threads 1
  --seed 5 --weight-decay 0 --lr 0.003)
losses() { grep -o 'val_loss=[0-9.]*' "$1" | tr '\n' ' '; }
launch() { # launch NP ARGS...
  local np=$1
  shift
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -np "$np" "$gradus" "${common[@]}" "$@"
}
close_to() { # close_to A B WHAT
  "$gradus" inspect "$1" --compare "$2" >"$work/compare.txt" || fail "$3: inspect --compare failed"
  awk -v what="$3" '
    /^max_relative_difference=/ { next }
    { if ($2 + 0 > 1e-4) { printf "FAIL: %s: %s differs by %s\n", what, $1, $2; bad = 1 } }
    END { exit bad }' "$work/compare.txt" || exit 1
}

"$gradus" "${common[@]}" --save "$work/one.safetensors" >"$work/one.log" 2>&1 ||
  fail "one process: $(tail -3 "$work/one.log")"
grep -q "train: llama (.* 4 heads, 2 kv heads" "$work/one.log" ||
  fail "the run does not describe a llama with 2 kv heads: $(head -1 "$work/one.log")"
reference=$(losses "$work/one.log")
[ -n "$reference" ] || fail "the one-process run printed no val_loss"
echo "llama_layouts: one process: $reference"
runs=0
# against LAYOUT...: each layout (its rank count first, then its options) against the one-process
# run whose --save file and losses are $against_file and $against_losses, with $extra added.
against() {
  for layout in "$@"; do
    np=${layout%% *}
    # shellcheck disable=SC2086
    launch $layout $extra --save "$work/run.safetensors" >"$work/run.log" 2>&1 ||
      fail "-np $layout $extra: $(tail -3 "$work/run.log")"
    [ "$(losses "$work/run.log")" = "$against_losses" ] ||
      fail "-np $layout $extra printed $(losses "$work/run.log"), one process $against_losses"
    close_to "$against_file" "$work/run.safetensors" "-np $layout $extra"
    runs=$((runs + 1))
    echo "llama_layouts: -np $layout $extra: the same losses, weights within 1e-4 ($(tail -1 "$work/compare.txt"))"
  done
}
extra="" against_file=$work/one.safetensors against_losses=$reference
against "2 --dist ddp" "2 --dist ps" "2 --dist zero1" "2 --dist fsdp" \
  "3 --dist fsdp --grad-checkpoint 1" "2 --pp 2" \
  "2 --pp 2 --micro-batches 2 --schedule 1f1b" "4 --pp 2 --dist ddp" "1 --grad-checkpoint 1" \
  "2 --pp 2 --grad-checkpoint 1" "2 --tp 2" "4 --tp 2 --dist zero1" "4 --tp 2 --dist fsdp" \
  "4 --tp 2 --pp 2"

# A tied head (--tie-embeddings): under --tp the head is the vocabulary-split embedding's own rows,
# under --pp the first and last stages hold one weight.
"$gradus" "${common[@]}" --tie-embeddings --save "$work/tied.safetensors" >"$work/tied.log" 2>&1 ||
  fail "one process, tied: $(tail -3 "$work/tied.log")"
tied=$(losses "$work/tied.log")
[ -n "$tied" ] && [ "$tied" != "$reference" ] || fail "--tie-embeddings: $tied, untied $reference"
params() { grep -o 'llama ([0-9]* parameters' "$1" | grep -o '[0-9]*'; }
# One weight fewer: the head's [vocabulary, 32].
[ $(($(params "$work/one.log") - $(params "$work/tied.log"))) -gt 0 ] &&
  [ $((($(params "$work/one.log") - $(params "$work/tied.log")) % 32)) = 0 ] ||
  fail "tied: $(params "$work/tied.log") parameters, untied $(params "$work/one.log")"
echo "llama_layouts: one process, tied: $tied"
extra="--tie-embeddings" against_file=$work/tied.safetensors against_losses=$tied
against "2 --tp 2" "2 --pp 2" "4 --tp 2 --pp 2"

# Tensor parallelism splits heads: key/value heads that do not divide over the ranks are refused.
launch 2 --tp 2 --kv-heads 1 >"$work/run.log" 2>&1 && fail "--tp 2 with 1 key/value head was accepted"
grep -q "n_kv_head (1) does not divide over the 2 ranks" "$work/run.log" ||
  fail "--tp 2 --kv-heads 1: $(tail -2 "$work/run.log")"
runs=$((runs + 1))
echo "llama_layouts: --tp 2 with 1 key/value head refused by name"

# A ddp and a --tp 2 checkpoint after 3 steps (the latter written on a background thread), each
# resumed on one process: the uninterrupted run's end.
for layout in "--dist ddp" "--tp 2 --async-checkpoint"; do
  rm -rf "$work/ckpt"
  # shellcheck disable=SC2086
  launch 2 $layout --checkpoint-dir "$work/ckpt" --checkpoint-every 3 --stop-after-steps 3 \
    >"$work/stop.log" 2>&1 || true
  ls "$work/ckpt"/*.safetensors >/dev/null 2>&1 || fail "no $layout checkpoint: $(tail -3 "$work/stop.log")"
  "$gradus" "${common[@]}" --checkpoint-dir "$work/ckpt" --resume --save "$work/resumed.safetensors" \
    >"$work/resume.log" 2>&1 || fail "$layout resumed on one process: $(tail -3 "$work/resume.log")"
  close_to "$work/one.safetensors" "$work/resumed.safetensors" "$layout checkpoint resumed on one process"
  [ "$(losses "$work/resume.log" | awk '{print $NF}')" = "$(echo "$reference" | awk '{print $NF}')" ] ||
    fail "$layout resumed: $(losses "$work/resume.log"), one process $reference"
  runs=$((runs + 1))
  echo "llama_layouts: a $layout checkpoint resumed on one process: the same end"
done

# --save-hf from 2 pipeline stages: the one-process model (transformers' names are gradus's for
# the Llama), and gradus eval reads the directory as it reads the --save file.
launch 2 --pp 2 --save-hf "$work/hf" >"$work/hf.log" 2>&1 || fail "--save-hf under --pp 2: $(tail -3 "$work/hf.log")"
[ -f "$work/hf/config.json" ] && [ -f "$work/hf/model.safetensors" ] || fail "--save-hf wrote $(ls "$work/hf")"
close_to "$work/one.safetensors" "$work/hf/model.safetensors" "--save-hf under --pp 2"
for _ in $(seq 1 400); do printf "\\$(printf %o $((RANDOM % 40)))\\000"; done >"$work/tokens.bin"
[ "$(stat -c %s "$work/tokens.bin")" = 800 ] || fail "the token file has $(stat -c %s "$work/tokens.bin") bytes"
eval_loss() { "$gradus" eval --checkpoint "$1" --data tokens --data-file "$work/tokens.bin" \
  --context 16 --threads 1 | grep -o 'val_loss=[0-9.]*'; }
from_save=$(eval_loss "$work/one.safetensors") || fail "eval of the --save file"
from_hf=$(eval_loss "$work/hf") || fail "eval of the --save-hf directory"
[ -n "$from_save" ] && [ "${from_save:0:14}" = "${from_hf:0:14}" ] ||
  fail "eval: --save file $from_save, --save-hf directory $from_hf"
runs=$((runs + 1))
echo "llama_layouts: --save-hf under --pp 2 is the one-process model; eval: $from_save and $from_hf"
echo "llama_layouts: $runs checks PASS"
