#!/usr/bin/env bash
# Exact resume on the CPU: a run stopped at step k and resumed ends with bitwise-identical weights
# (SHA-256 of the --save file) and identical per-step losses and epoch summaries compared with an
# uninterrupted run -- mid-epoch, at an epoch boundary, from an older checkpoint, with dropout
# (RNG state), with batch norm (buffers) and SGD momentum, and with the losses read back in
# batches. Also: an incompatible --resume is
# refused naming the differing keys, and a non-empty checkpoint dir without --resume is refused.
#   resume_test.sh GRADUS_EXE WORK_DIR
source "$(dirname "$0")/lib.sh"
make_data

# The run configurations: 21 steps per epoch (the incomplete last batch is dropped), 2 epochs,
# 2 threads.
MLP=(train --data mnist --data-dir data --epochs 2 --batch-size 24 --threads 2 --device cpu
  --no-progress --model mlp --dropout 0.2 --optimizer adam --scheduler cosine --warmup-steps 5)
CNN=(train --data mnist --data-dir data --epochs 2 --batch-size 32 --limit-train 192 --threads 2
  --device cpu --no-progress --model cnn --optimizer sgd --lr 0.05 --momentum 0.9 --scheduler step
  --step-epochs 1 --step-gamma 0.5)

# reference NAME CONFIG...: an uninterrupted run -> NAME.safetensors, NAME.jsonl
reference() {
  local name="$1"
  shift
  "$GRADUS" "$@" --metrics "$name.jsonl" --log-every 1 --save "$name.safetensors" >/dev/null 2>&1 ||
    fail "the reference run $name failed"
}

# interrupted NAME REF STOP [DROP_NEWEST] CONFIG...: stop after STOP steps (checkpoint every 4),
# optionally delete the newest checkpoint (so the resume starts from an older one), resume, and
# compare with reference REF.
interrupted() {
  local name="$1" ref="$2" stop="$3" drop="$4"
  shift 4
  local ck="ck-$name"
  "$GRADUS" "$@" --metrics "$name.jsonl" --log-every 1 --checkpoint-dir "$ck" --checkpoint-every 4 \
    --stop-after-steps "$stop" >"$name.out1" 2>&1 || fail "$name: the first part failed: $(cat "$name.out1")"
  grep -q "stopped_at_step=$stop" "$name.out1" || fail "$name: did not stop at step $stop"
  if [ "$drop" = drop ]; then
    rm "$(ls "$ck"/ckpt-*.safetensors | tail -1)"
  fi
  "$GRADUS" "$@" --metrics "$name.jsonl" --log-every 1 --checkpoint-dir "$ck" --checkpoint-every 4 \
    --resume --save "$name.safetensors" >"$name.out2" 2>&1 || fail "$name: the resumed part failed: $(cat "$name.out2")"
  grep -q "resuming from" "$name.out2" || fail "$name: did not resume: $(cat "$name.out2")"
  [ "$(sha "$name.safetensors")" = "$(sha "$ref.safetensors")" ] ||
    fail "$name: the final weights differ from the uninterrupted run's ($(sha "$name.safetensors") vs $(sha "$ref.safetensors"))"
  diff <(step_losses "$ref.jsonl") <(step_losses "$name.jsonl") >/dev/null ||
    fail "$name: the per-step losses differ: $(diff <(step_losses "$ref.jsonl") <(step_losses "$name.jsonl") | head -5)"
  diff <(epoch_lines "$ref.jsonl") <(epoch_lines "$name.jsonl") >/dev/null ||
    fail "$name: the epoch summaries differ: $(diff <(epoch_lines "$ref.jsonl") <(epoch_lines "$name.jsonl"))"
  echo "ok: $name (stopped at $stop${drop:+, $drop}): weights sha256 $(sha "$name.safetensors" | cut -c1-16)..., $(step_losses "$name.jsonl" | wc -l) identical step losses"
}

reference mlp "${MLP[@]}"
[ "$(step_losses mlp.jsonl | wc -l)" -eq 42 ] || fail "expected 42 logged steps, got $(step_losses mlp.jsonl | wc -l)"
interrupted mlp-mid mlp 15 keep "${MLP[@]}"     # mid epoch 1
interrupted mlp-edge mlp 22 keep "${MLP[@]}"    # after the last batch of epoch 1, before its eval
interrupted mlp-older mlp 31 drop "${MLP[@]}"   # resumes from step 28 and redoes 29..31
# Losses read back 3 steps at a time (as on a GPU, every 20), and early at the
# checkpoints (every 4), the stop and the epoch's end: per-step losses, epoch summaries and weights
# must still be the reference's.
interrupted mlp-batched-reads mlp 15 keep "${MLP[@]}" --read-loss-every 3
reference cnn "${CNN[@]}"
interrupted cnn-mid cnn 9 keep "${CNN[@]}"      # mid epoch 2 (6 steps per epoch)

# A finished run resumed again has nothing left to do and ends with the same weights.
"$GRADUS" "${MLP[@]}" --checkpoint-dir ck-mlp-mid --resume --save again.safetensors >again.out 2>&1 ||
  fail "resuming a finished run failed: $(cat again.out)"
[ "$(sha again.safetensors)" = "$(sha mlp.safetensors)" ] || fail "resuming a finished run changed the weights"
echo "ok: resuming a finished run changes nothing"

# Refusals.
expect_fail "resume with another batch size and optimizer" \
  "refusing to resume .*differs from the checkpoint's in: batch_size \(checkpoint 24, now 32\), optimizer \(checkpoint \"adam\", now \"sgd\"\)" \
  "$GRADUS" "${MLP[@]}" --batch-size 32 --optimizer sgd --checkpoint-dir ck-mlp-mid --resume
expect_fail "resume with another model" "differs from the checkpoint's in: model \(checkpoint \"mlp\", now \"cnn\"\), dropout \(checkpoint 0.2, now 0.0\)" \
  "$GRADUS" "${MLP[@]}" --model cnn --dropout 0 --checkpoint-dir ck-mlp-mid --resume
expect_fail "a used checkpoint dir without --resume" "already holds .* checkpoint\(s\) .*pass --resume" \
  "$GRADUS" "${MLP[@]}" --checkpoint-dir ck-mlp-mid
out=$("$GRADUS" "${MLP[@]}" --threads 1 --checkpoint-dir ck-mlp-mid --resume 2>&1) ||
  fail "resume with another thread count must be allowed: $out"
echo "$out" | grep -q "warning: threads differs (checkpoint 2, now 1)" || fail "no thread-count warning: $out"
echo "ok: another thread count resumes with a warning"
echo "PASS"
