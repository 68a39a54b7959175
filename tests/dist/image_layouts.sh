#!/usr/bin/env bash
# Image classification under model-parallel layouts, through the training layer's Trainer, with
# what the separate model-parallel loop refused: checkpoints resumed across layouts (a 2-stage
# pipeline's on one process, one process's as 2 data x 2 tensor... x pipeline ranks, ZeRO-1 over
# the data ranks of a pipeline's under a parameter server with --tp), a pipeline run killed with
# SIGKILL and resumed (bitwise its uninterrupted run), and --amp bf16, --freeze, --init-from,
# --grad-checkpoint and --grad-clip under --pp/--tp against one process doing the same.
# usage: image_layouts.sh GRADUS MPIRUN
set -uo pipefail
gradus=$1
mpirun=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
common=(train --model mlp --optimizer adamw --lr 0.003 --epochs 2 --limit-train 512
  --limit-test 200 --batch-size 32 --threads 1 --no-progress --seed 7 --scheduler cosine)
one() { "$gradus" "${common[@]}" "$@"; }
launch() {  # launch NP ARGS...
  local np=$1
  shift
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -np "$np" "$gradus" "${common[@]}" "$@"
}
close_to() {  # close_to REFERENCE FILE WHAT [BOUND]: every tensor within BOUND (1e-4) relative
  local worst
  worst=$("$gradus" inspect "$2" --compare "$1" | sed -n 's/^max_relative_difference=//p')
  awk -v w="$worst" -v b="${4:-1e-4}" 'BEGIN { exit !(w != "" && w + 0 <= b) }' ||
    fail "$3: weights $worst (relative) from the reference's (bound ${4:-1e-4})"
}
cases=0
ok() {
  cases=$((cases + 1))
  echo "image_layouts: $*"
}

one --save "$work/one.safetensors" >"$work/one.log" 2>&1 || fail "one process: $(tail -3 "$work/one.log")"

# Checkpoints hold one process's model and optimizer state under every layout.
launch 2 --pp 2 --micro-batches 4 --checkpoint-dir "$work/ck_pp" --checkpoint-every 5 \
  --stop-after-steps 10 >"$work/run.log" 2>&1 || fail "--pp 2 stop: $(tail -3 "$work/run.log")"
grep -q "stopped_at_step=10" "$work/run.log" || fail "--pp 2 did not stop after step 10: $(tail -3 "$work/run.log")"
one --checkpoint-dir "$work/ck_pp" --resume --save "$work/pp_then_one.safetensors" >"$work/run.log" 2>&1 ||
  fail "--pp 2 -> one process: $(tail -3 "$work/run.log")"
grep -q "resuming from .* (step 10," "$work/run.log" || fail "--pp 2 -> one process did not resume from step 10"
close_to "$work/one.safetensors" "$work/pp_then_one.safetensors" "--pp 2 -> one process"
ok "a 2-stage pipeline's checkpoint resumed on one process ends at the one-process weights"

one --checkpoint-dir "$work/ck_one" --checkpoint-every 10 --stop-after-steps 10 >"$work/run.log" 2>&1 ||
  fail "one process stop: $(tail -3 "$work/run.log")"
cp -r "$work/ck_one" "$work/ck_one2"
launch 4 --tp 2 --pp 2 --micro-batches 2 --checkpoint-dir "$work/ck_one" --resume \
  --save "$work/one_then_tppp.safetensors" >"$work/run.log" 2>&1 ||
  fail "one process -> --tp 2 --pp 2: $(tail -3 "$work/run.log")"
grep -q "resuming from .* (step 10," "$work/run.log" || fail "one process -> --tp 2 --pp 2 did not resume from step 10"
close_to "$work/one.safetensors" "$work/one_then_tppp.safetensors" "one process -> --tp 2 --pp 2"
launch 4 --pp 2 --checkpoint-dir "$work/ck_one2" --resume --save "$work/one_then_dppp.safetensors" \
  >"$work/run.log" 2>&1 || fail "one process -> 2 data x 2 pipeline: $(tail -3 "$work/run.log")"
close_to "$work/one.safetensors" "$work/one_then_dppp.safetensors" "one process -> 2 data x 2 pipeline"
ok "one process's checkpoint resumed as 2 tensor x 2 pipeline and as 2 data x 2 pipeline ranks ends at the one-process weights"

launch 4 --pp 2 --dist zero1 --checkpoint-dir "$work/ck_z" --checkpoint-every 10 --stop-after-steps 10 \
  >"$work/run.log" 2>&1 || fail "--pp 2 --dist zero1 stop: $(tail -3 "$work/run.log")"
launch 4 --tp 2 --dist ps --checkpoint-dir "$work/ck_z" --resume --save "$work/z_then_ps.safetensors" \
  >"$work/run.log" 2>&1 || fail "--pp 2 zero1 -> --tp 2 ps: $(tail -3 "$work/run.log")"
close_to "$work/one.safetensors" "$work/z_then_ps.safetensors" "--pp 2 --dist zero1 -> --tp 2 --dist ps"
ok "ZeRO-1 over a pipeline's data ranks resumed as a parameter server over tensor-parallel replicas ends at the one-process weights"

# SIGKILL under --pp 2 after a checkpoint, then resumed: bitwise the uninterrupted --pp 2 run.
launch 2 --pp 2 --save "$work/pp.safetensors" >"$work/run.log" 2>&1 || fail "--pp 2: $(tail -3 "$work/run.log")"
close_to "$work/one.safetensors" "$work/pp.safetensors" "--pp 2"
# 12 epochs (192 steps), so that the run is still going when the poll below sees its first
# checkpoint however fast the machine (2 epochs could end between two polls on a fast one).
long=(--pp 2 --epochs 12)
launch 2 "${long[@]}" --save "$work/pp_long.safetensors" >"$work/run.log" 2>&1 ||
  fail "--pp 2, 12 epochs: $(tail -3 "$work/run.log")"
launch 2 "${long[@]}" --checkpoint-dir "$work/ck_kill" --checkpoint-every 4 >"$work/kill.log" 2>&1 &
job=$!
killed=0
for _ in $(seq 1 600); do
  if ls "$work/ck_kill" 2>/dev/null | grep -q '^ckpt-.*safetensors$'; then
    pkill -KILL -f "gradus train --model mlp.*ck_kill" && killed=1
    break
  fi
  sleep 0.05
done
wait "$job"
rc=$?
[ "$killed" = 1 ] || fail "the --pp 2 run was not killed mid-run (no checkpoint appeared): $(tail -3 "$work/kill.log")"
[ "$rc" != 0 ] || fail "the killed --pp 2 run exited 0: the kill did not land"
grep -q "^test_accuracy=" "$work/kill.log" && fail "the killed run finished before the kill landed"
last=$(ls "$work/ck_kill" | grep -c "^ckpt-") || true
launch 2 "${long[@]}" --checkpoint-dir "$work/ck_kill" --resume --save "$work/pp_killed.safetensors" \
  >"$work/run.log" 2>&1 || fail "--pp 2 resume after SIGKILL: $(tail -3 "$work/run.log")"
grep -q "resuming from .* (step [1-9]" "$work/run.log" || fail "--pp 2 after SIGKILL did not resume: $(head -3 "$work/run.log")"
cmp -s "$work/pp_long.safetensors" "$work/pp_killed.safetensors" ||
  fail "--pp 2 killed and resumed ended elsewhere than uninterrupted: $("$gradus" inspect "$work/pp_long.safetensors" --compare "$work/pp_killed.safetensors" | tail -1)"
ok "--pp 2 killed (SIGKILL, 1 kill landed, mpirun exit $rc, $last checkpoint file(s) then) and resumed: bitwise the uninterrupted --pp 2 run"

# Options the model-parallel loop refused, now against one process doing the same.
for opts in "--freeze 0" "--grad-clip 0.05" "--grad-checkpoint 1"; do
  # shellcheck disable=SC2086
  one $opts --save "$work/opt_one.safetensors" >"$work/run.log" 2>&1 || fail "one process $opts: $(tail -3 "$work/run.log")"
  for layout in "2 --pp 2 --micro-batches 4" "4 --tp 2 --pp 2"; do
    # shellcheck disable=SC2086
    launch $layout $opts --save "$work/opt.safetensors" >"$work/run.log" 2>&1 ||
      fail "-np $layout $opts: $(tail -3 "$work/run.log")"
    close_to "$work/opt_one.safetensors" "$work/opt.safetensors" "-np $layout $opts"
  done
  # (Recomputing activations changes no value: --grad-checkpoint must match the run without it.)
  [ "$opts" = "--grad-checkpoint 1" ] ||
    ! cmp -s "$work/opt_one.safetensors" "$work/one.safetensors" || fail "$opts changed nothing: its check is void"
  ok "$opts under --pp 2 and --tp 2 --pp 2 ends at one process's weights with $opts"
done
# --grad-accum 2 with half the batch: what one process trains with the whole batch, under DDP
# (whose all-reduce waits for the second half's backward) and a pipeline.
one --batch-size 16 --grad-accum 2 --save "$work/accum_one.safetensors" >"$work/run.log" 2>&1 ||
  fail "one process --grad-accum 2: $(tail -3 "$work/run.log")"
close_to "$work/one.safetensors" "$work/accum_one.safetensors" "one process --batch-size 16 --grad-accum 2"
for layout in "2 --dist ddp" "2 --pp 2 --micro-batches 2" "4 --pp 2 --dist zero1"; do
  # shellcheck disable=SC2086
  launch $layout --batch-size 16 --grad-accum 2 --save "$work/accum.safetensors" >"$work/run.log" 2>&1 ||
    fail "-np $layout --grad-accum 2: $(tail -3 "$work/run.log")"
  close_to "$work/one.safetensors" "$work/accum.safetensors" "-np $layout --batch-size 16 --grad-accum 2"
done
ok "--batch-size 16 --grad-accum 2 on one process, under ddp, a pipeline and zero1 over a pipeline: one process's --batch-size 32"
# --amp bf16: a pipeline of whole batches computes one process's bf16 products exactly; cut into
# micro-batches, or split over tensor ranks, the bf16 roundings differ (partial sums, per-slice
# gradients), so the weights end within bf16's noise: nearer one process's bf16 run than its
# float32 run is.
one --amp bf16 --save "$work/bf16_one.safetensors" >"$work/run.log" 2>&1 || fail "one process --amp bf16: $(tail -3 "$work/run.log")"
launch 2 --pp 2 --amp bf16 --save "$work/bf16.safetensors" >"$work/run.log" 2>&1 ||
  fail "--pp 2 --amp bf16: $(tail -3 "$work/run.log")"
close_to "$work/bf16_one.safetensors" "$work/bf16.safetensors" "--pp 2 --amp bf16"
f32_distance=$("$gradus" inspect "$work/one.safetensors" --compare "$work/bf16_one.safetensors" | sed -n 's/^max_relative_difference=//p')
for layout in "2 --pp 2 --micro-batches 4" "4 --tp 2 --pp 2"; do
  # shellcheck disable=SC2086
  launch $layout --amp bf16 --save "$work/bf16.safetensors" >"$work/run.log" 2>&1 ||
    fail "-np $layout --amp bf16: $(tail -3 "$work/run.log")"
  close_to "$work/bf16_one.safetensors" "$work/bf16.safetensors" "-np $layout --amp bf16" "$f32_distance"
done
ok "--amp bf16 under --pp 2 is one process's bf16 run; cut into micro-batches or tensor slices it stays nearer it (bound $f32_distance) than float32 is"
# --freeze: the frozen layer is the same after training at another learning rate (it is the
# initial one), while the others differ.
one --freeze 0 --lr 0.01 --save "$work/init.safetensors" >/dev/null 2>&1 || fail "one process --freeze 0 --lr 0.01"
launch 2 --pp 2 --freeze 0 --save "$work/frozen.safetensors" >/dev/null 2>&1 || fail "--pp 2 --freeze 0"
"$gradus" inspect "$work/frozen.safetensors" --compare "$work/init.safetensors" >"$work/compare.txt"
awk '$1 ~ /^0\./ && $2 + 0 != 0 { bad = 1 } $1 ~ /^4\./ && $2 + 0 > 0 { trained = 1 }
     END { exit bad || !trained }' "$work/compare.txt" ||
  fail "--pp 2 --freeze 0: layer 0 changed, or layer 4 did not: $(cat "$work/compare.txt")"
ok "--pp 2 --freeze 0 leaves layer 0 at its initial weights"
# --init-from a saved model under --tp 2: each split layer takes its slice.
one --init-from "$work/one.safetensors" --epochs 1 --save "$work/init_one.safetensors" >/dev/null 2>&1 ||
  fail "one process --init-from"
launch 2 --tp 2 --init-from "$work/one.safetensors" --epochs 1 --save "$work/init_tp.safetensors" \
  >"$work/run.log" 2>&1 || fail "--tp 2 --init-from: $(tail -3 "$work/run.log")"
close_to "$work/init_one.safetensors" "$work/init_tp.safetensors" "--tp 2 --init-from"
ok "--tp 2 --init-from a saved model trains as one process from it"
# --profile under a pipeline: the run's first rank writes the trace of the chosen steps.
launch 2 --pp 2 --epochs 1 --profile "$work/trace.json" --profile-steps 2:3 >"$work/run.log" 2>&1 ||
  fail "--pp 2 --profile: $(tail -3 "$work/run.log")"
grep -q "profile of steps 2-3 .* written to $work/trace.json" "$work/run.log" ||
  fail "--pp 2 --profile wrote no trace: $(tail -3 "$work/run.log")"
[ "$(grep -o '"ProfilerStep#[0-9]*"' "$work/trace.json" | sort -u | wc -l)" = 2 ] ||
  fail "--pp 2 --profile-steps 2:3: the trace does not mark 2 steps"
ok "--profile under --pp 2 writes the trace of steps 2-3"
# The CNN (batch norm) as a 2-stage pipeline of whole batches is one process exactly; cut into
# micro-batches its batch norm sees each one's statistics (GPipe's), which the run says.
cnn=(--model cnn --optimizer sgd --lr 0.05 --epochs 1 --limit-train 256 --limit-test 100)
one "${cnn[@]}" --save "$work/cnn_one.safetensors" >"$work/run.log" 2>&1 || fail "one process cnn: $(tail -3 "$work/run.log")"
launch 2 "${cnn[@]}" --pp 2 --save "$work/cnn_pp.safetensors" >"$work/run.log" 2>&1 ||
  fail "cnn --pp 2: $(tail -3 "$work/run.log")"
cmp -s "$work/cnn_one.safetensors" "$work/cnn_pp.safetensors" ||
  fail "cnn --pp 2 ended elsewhere: $("$gradus" inspect "$work/cnn_pp.safetensors" --compare "$work/cnn_one.safetensors" | tail -1)"
launch 2 "${cnn[@]}" --pp 2 --micro-batches 2 >"$work/run.log" 2>&1 || fail "cnn --pp 2 --micro-batches 2: $(tail -3 "$work/run.log")"
grep -q "has batch norm, which normalises each of the 2 micro-batches with its own statistics" "$work/run.log" ||
  fail "cnn --pp 2 --micro-batches 2 did not say that batch norm sees each micro-batch"
ok "the CNN as a 2-stage pipeline: bitwise one process; with micro-batches, the batch-norm note"
# What a pipeline cannot do is refused on every rank, naming the option.
launch 2 --pp 2 --amp f16 >"$work/run.log" 2>&1 && fail "--pp 2 --amp f16 was accepted"
grep -q -- "--amp f16 is not supported with --pp" "$work/run.log" || fail "--pp 2 --amp f16: $(tail -3 "$work/run.log")"
one --micro-batches 4 >"$work/run.log" 2>&1 && fail "--micro-batches without --pp was accepted"
grep -q -- "--micro-batches cuts a pipeline's batch; it needs --pp > 1" "$work/run.log" || fail "--micro-batches alone: $(tail -3 "$work/run.log")"
ok "--amp f16 under --pp and --micro-batches without --pp are refused by name"
[ "$cases" -eq 14 ] || fail "$cases of 14 cases ran"
echo "image_layouts: PASS"
