#!/usr/bin/env bash
# Every `gradus train` option against every task: each is either honoured (the run succeeds, and
# where the option changes the computation the result differs from the run without it) or
# refused with a message naming it. The table below is the contract; an option `train --help`
# lists that the table lacks fails the test, so a new option must be classified here.
# usage: every_option.sh GRADUS TEXT_SAMPLE [FASHION_MNIST_DIR]
set -uo pipefail
gradus=$1
sample=$2
mnist=${3:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
image_base=(train --model mlp --data-dir "$mnist" --limit-train 128 --limit-test 64 --epochs 1
  --batch-size 32 --threads 1 --no-progress --seed 1 --device cpu)
gpt_base=(train --model gpt --data text --data-file "$sample" --context 8 --layers 1 --heads 2
  --width 16 --batch-size 4 --iters 4 --eval-every 4 --eval-iters 1 --threads 1 --seed 1
  --device cpu)
W=$work
bpe=$(dirname "$sample")/../golden/bpe  # a small byte-level BPE tokenizer (tests/data/golden)
# option | image args | image expectation | gpt args | gpt expectation
# expectations: changes (honoured; the result differs from the base run's), ok (honoured;
# side effects only), refuse (exit status != 0 naming the option).
table="
context|--context 8|refuse|--context 12|changes
layers|--layers 1|refuse|--layers 2|changes
heads|--heads 2|refuse|--heads 4|changes
width|--width 16|refuse|--width 24|changes
data-file|--data-file $sample|refuse|--data-file $sample|ok
vocab-size|--vocab-size 100|refuse|--vocab-size 100|refuse
iters|--iters 4|refuse|--iters 6|changes
eval-every|--eval-every 2|refuse|--eval-every 2|ok
eval-iters|--eval-iters 2|refuse|--eval-iters 2|changes
min-lr|--min-lr 0.5|refuse|--warmup-steps 0 --lr 0.01 --min-lr 0.5|changes
beta2|--beta2 0.5|refuse|--beta2 0.5|changes
grad-clip|--grad-clip 0.01|changes|--grad-clip 0.01|ok
grad-accum|--grad-accum 2|changes|--grad-accum 2|changes
augment|--augment|changes|--augment|refuse
augment-padding|--augment --augment-padding 3|changes|--augment-padding 3|refuse
tp|--tp 2|refuse|--tp 2|refuse
pp|--pp 2|refuse|--pp 2|refuse
micro-batches|--micro-batches 2|refuse|--micro-batches 2|refuse
schedule|--schedule gpipe|refuse|--schedule gpipe|refuse
profile|--profile $W/p.json|ok|--profile $W/p.json|ok
profile-steps|--profile $W/p.json --profile-steps 1:1|ok|--profile $W/p.json --profile-steps 1:1|ok
data-dir|--data-dir $mnist|ok|--data-dir $mnist|refuse
dropout|--dropout 0.5|changes|--dropout 0.5|changes
init-from|--init-from $W/image.safetensors|changes|--init-from $W/gpt.safetensors|changes
freeze|--freeze 0.|changes|--freeze transformer.wte|changes
amp|--amp bf16|changes|--amp bf16|changes
grad-checkpoint|--grad-checkpoint 1|ok|--grad-checkpoint 1|ok
memory-limit|--memory-limit 4GiB|ok|--memory-limit 4GiB|ok
epochs|--epochs 2|changes|--epochs 2|refuse
batch-size|--batch-size 16|changes|--batch-size 2|changes
lr|--lr 0.01|changes|--lr 0.01|changes
optimizer|--optimizer sgd|changes|--optimizer sgd|refuse
momentum|--optimizer sgd --momentum 0.5|changes|--momentum 0.5|refuse
weight-decay|--weight-decay 0.5|changes|--weight-decay 0.9|changes
scheduler|--scheduler none|changes|--scheduler none|refuse
warmup-steps|--warmup-steps 2|changes|--warmup-steps 2|changes
step-epochs|--scheduler step --step-epochs 1|changes|--step-epochs 1|refuse
step-gamma|--scheduler step --step-epochs 1 --step-gamma 0.5|changes|--step-gamma 0.5|refuse
seed|--seed 2|changes|--seed 2|changes
device|--device cpu|ok|--device cpu|ok
threads|--threads 2|ok|--threads 2|ok
workers|--workers 2|ok|--workers 2|refuse
metrics|--metrics $W/m.jsonl|ok|--metrics $W/m.jsonl|ok
log-every|--metrics $W/m.jsonl --log-every 1|ok|--log-every 1|refuse
read-loss-every|--read-loss-every 2|ok|--read-loss-every 2|ok
limit-train|--limit-train 96|changes|--limit-train 96|refuse
limit-test|--limit-test 32|changes|--limit-test 32|refuse
no-progress|--no-progress|ok|--no-progress|ok
checkpoint-dir|--checkpoint-dir $W/CK|ok|--checkpoint-dir $W/CK|ok
checkpoint-every|--checkpoint-dir $W/CK --checkpoint-every 1|ok|--checkpoint-dir $W/CK --checkpoint-every 1|ok
keep-checkpoints|--checkpoint-dir $W/CK --keep-checkpoints 1|ok|--checkpoint-dir $W/CK --keep-checkpoints 1|ok
async-checkpoint|--checkpoint-dir $W/CK --async-checkpoint|ok|--checkpoint-dir $W/CK --async-checkpoint --checkpoint-every 1|ok
checkpoint-format|--checkpoint-dir $W/CK --checkpoint-format sharded|refuse|--checkpoint-dir $W/CK --checkpoint-format sharded|refuse
gather-dtype|--gather-dtype bf16|refuse|--gather-dtype bf16|refuse
reduce-dtype|--reduce-dtype bf16|refuse|--reduce-dtype bf16|refuse
resume|--checkpoint-dir $W/CK --resume|ok|--checkpoint-dir $W/CK --resume|ok
resume-or-start|--checkpoint-dir $W/CK --resume-or-start|ok|--checkpoint-dir $W/CK --resume-or-start|ok
save|--save $W/s.safetensors|ok|--save $W/s.safetensors|ok
stop-after-steps|--checkpoint-dir $W/CK --stop-after-steps 1|ok|--checkpoint-dir $W/CK --stop-after-steps 1|ok
detect-anomaly|--detect-anomaly|ok|--detect-anomaly|ok
deterministic|--deterministic|ok|--deterministic|ok
cuda-graph|--cuda-graph|refuse|--cuda-graph|refuse
dist|--dist ddp|ok|--dist ddp|ok
dist-timeout|--dist-timeout 30|ok|--dist-timeout 30|ok
lr-scaling|--lr-scaling linear --batch-size 64|changes|--lr-scaling linear|refuse
lr-reference-batch|--lr-scaling linear --lr-reference-batch 64|changes|--lr-reference-batch 64|refuse
kv-heads|--kv-heads 1|refuse|--kv-heads 1|refuse
ffn-width|--ffn-width 24|refuse|--ffn-width 24|refuse
rope-theta|--rope-theta 50|refuse|--rope-theta 50|refuse
tie-embeddings|--tie-embeddings|refuse|--tie-embeddings|refuse
token-dtype|--token-dtype uint32|refuse|--token-dtype uint32|refuse
save-hf|--save-hf $W/hf|refuse|--save-hf $W/hf|ok
tokenizer|--tokenizer $bpe|refuse|--tokenizer $bpe|changes
"
# The Llama's own options (refused above for the GPT) change a --model llama run.
llama_options="--kv-heads 1
--ffn-width 24
--rope-theta 50
--tie-embeddings"
# (cuda-graph is refused here because this machine has no GPU: it needs one. The GPT's --grad-clip
# is honoured but invisible in its result: clipping scales every gradient alike, and AdamW's step
# does not depend on the gradient's scale; dist.gpt_strategies checks its clipping.)
# A run's result: its epoch lines (losses and accuracy) or step lines (losses), timings cut off.
result() { grep -E '^(epoch [0-9]|step [0-9])' "$1" | sed 's/ (.*//; s/ lr .*//' | tr '\n' ' '; }

# (grep reads here-strings: with pipefail, `echo ... | grep -q` can fail when grep leaves at the
# first match and the writer gets SIGPIPE.)
# Every option of `train --help` is in the table (and --config/--print-config are tested apart).
for name in $("$gradus" train --help | grep -o '^  *--[a-z0-9-]*' | sed 's/ *--//' | sort -u); do
  case "$name" in config | print-config | model | data | help) continue ;; esac
  grep -q "^$name|" <<<"$table" || fail "--$name is not classified in every_option.sh's table"
done

have_images=0
[ -f "$mnist/train-images-idx3-ubyte.gz" ] && have_images=1
"$gradus" "${gpt_base[@]}" --save "$W/gpt.safetensors" >"$W/gpt_base.log" 2>&1 || fail "gpt base run: $(tail -2 "$W/gpt_base.log")"
gpt_result=$(result "$W/gpt_base.log")
if [ $have_images = 1 ]; then
  "$gradus" "${image_base[@]}" --save "$W/image.safetensors" >"$W/image_base.log" 2>&1 ||
    fail "image base run: $(tail -2 "$W/image_base.log")"
  image_result=$(result "$W/image_base.log")
else
  echo "every_option: no Fashion-MNIST in $mnist: the image task's column is not checked"
fi

checked=0
while IFS='|' read -r name iargs iwant gargs gwant; do
  [ -n "$name" ] || continue
  for task in image gpt; do
    if [ $task = image ]; then
      [ $have_images = 1 ] || continue
      base=("${image_base[@]}") args=$iargs want=$iwant ref=$image_result
    else
      base=("${gpt_base[@]}") args=$gargs want=$gwant ref=$gpt_result
    fi
    rm -rf "$W/CK" "$W/p.json" "$W/m.jsonl" "$W/c.safetensors"
    save=()
    [ "$want" = changes ] && save=(--save "$W/c.safetensors")
    # shellcheck disable=SC2086
    timeout 120 "$gradus" "${base[@]}" $args "${save[@]}" >"$W/run.log" 2>&1
    rc=$?
    if [ "$want" = refuse ]; then
      [ $rc -ne 0 ] && [ $rc -lt 124 ] || fail "$task --$name ($args): expected a refusal, got exit $rc: $(tail -2 "$W/run.log")"
      grep -q -- "--$name" "$W/run.log" || fail "$task --$name: refused without naming it: $(tail -2 "$W/run.log")"
    else
      [ $rc -eq 0 ] || fail "$task --$name ($args): exit $rc: $(tail -3 "$W/run.log")"
      if [ "$want" = changes ]; then
        # Changed: the printed losses, or else the weights (a few steps move a loss less than
        # its printed digits).
        got=$(result "$W/run.log")
        if [ "$got" = "$ref" ]; then
          diff=$("$gradus" inspect "$W/$task.safetensors" --compare "$W/c.safetensors" 2>&1 |
            sed -n 's/^max_relative_difference=//p')
          awk -v d="${diff:-0}" 'BEGIN { exit !(d > 1e-6) }' ||
            fail "$task --$name ($args) was accepted but changed nothing: $got (weights: ${diff:-not comparable})"
        fi
      fi
    fi
    checked=$((checked + 1))
  done
done <<<"$table"
llama_base=("${gpt_base[@]}" --model llama)
"$gradus" "${llama_base[@]}" --save "$W/llama.safetensors" >"$W/llama_base.log" 2>&1 ||
  fail "llama base run: $(tail -2 "$W/llama_base.log")"
llama_result=$(result "$W/llama_base.log")
while read -r option; do
  # shellcheck disable=SC2086
  timeout 120 "$gradus" "${llama_base[@]}" $option --save "$W/c.safetensors" >"$W/run.log" 2>&1 ||
    fail "llama $option: $(tail -2 "$W/run.log")"
  if [ "$(result "$W/run.log")" = "$llama_result" ]; then  # the losses' digits, else the weights
    diff=$("$gradus" inspect "$W/llama.safetensors" --compare "$W/c.safetensors" 2>&1 |
      sed -n 's/^max_relative_difference=//p')
    awk -v d="${diff:-0}" 'BEGIN { exit !(d > 1e-6) }' ||
      fail "llama $option changed nothing: $llama_result (weights: ${diff:-not comparable})"
  fi
  checked=$((checked + 1))
done <<<"$llama_options"
echo "every_option: $checked option/task pairs honoured or refused by name"
echo "every_option: PASS"
