#!/usr/bin/env bash
# SIGKILL under a model-parallel layout: the GPT on 2 tensor-parallel ranks, then as a 2-stage
# pipeline, one rank killed with SIGKILL once checkpoints are being written (mpirun then ends the
# job), resumed on the same layout from the newest good checkpoint, ends bitwise where the
# uninterrupted run ends (the checkpoint holds one process's model and optimizer state, gathered
# from the shards or the stages, and the resume takes them back: nothing is lost or rounded on
# the way).
# usage: gpt_kill_resume.sh GRADUS MPIRUN TEXT_SAMPLE
set -uo pipefail
gradus=$1
mpirun=$2
sample=$3
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
common=(train --model gpt --data text --data-file "$sample" --context 16 --layers 2 --heads 2
  --width 32 --batch-size 8 --iters 1500 --eval-every 500 --eval-iters 2 --threads 1 --seed 4)
trials=0
for layout in "--tp 2" "--pp 2 --micro-batches 2"; do
launch() {
  # shellcheck disable=SC2086
  timeout 200 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -np 2 "$gradus" "${common[@]}" $layout "$@"
}
rm -rf "$work/ck"
launch --save "$work/whole.safetensors" >"$work/whole.log" 2>&1 ||
  fail "the uninterrupted run: $(tail -3 "$work/whole.log")"

launch --checkpoint-dir "$work/ck" --checkpoint-every 50 >"$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 600); do
  [ "$(ls "$work/ck" 2>/dev/null | grep -c '^ckpt-.*safetensors$')" -ge 3 ] && break
  sleep 0.05
done
victim=$(pgrep -f -- "--checkpoint-dir $work/ck" | sort -n | tail -1)
[ -n "$victim" ] || fail "no rank to kill (the run ended first?): $(tail -3 "$work/killed.log")"
kill -KILL "$victim"
wait "$job"
rc=$?
[ "$rc" != 0 ] || fail "the killed run exited 0: the kill did not land"
grep -q "^val_loss=" "$work/killed.log" && fail "the killed run finished anyway"
newest=$(ls "$work/ck" | grep '^ckpt-.*safetensors$' | sort | tail -1)
echo "gpt_kill_resume: SIGKILL landed 1 time (mpirun exit $rc); newest checkpoint $newest"

launch --checkpoint-dir "$work/ck" --checkpoint-every 50 --resume --save "$work/resumed.safetensors" \
  >"$work/resumed.log" 2>&1 || fail "the resumed run: $(tail -3 "$work/resumed.log")"
grep -q "resuming from .*ckpt-" "$work/resumed.log" || fail "no resume: $(head -3 "$work/resumed.log")"
cmp -s "$work/whole.safetensors" "$work/resumed.safetensors" ||
  fail "killed and resumed, the run ended elsewhere: $("$gradus" inspect "$work/whole.safetensors" --compare "$work/resumed.safetensors" | tail -1)"
echo "gpt_kill_resume: killed under $layout and resumed from $(grep -o 'step [0-9]*' <<<"$(grep resuming "$work/resumed.log")" | head -1): bitwise the uninterrupted run"
trials=$((trials + 1))
done
[ "$trials" = 2 ] || fail "$trials of 2 layouts ran"
echo "gpt_kill_resume: $trials layouts: PASS"
