#!/usr/bin/env bash
# gradus train --augment on the CPU: the augmented batches depend only on (seed, epoch, batch), so
# runs with 0 and 2 loader workers and a run stopped and resumed all end with bitwise-identical
# weights; the augmentation changes training (weights differ from a run without it); and every
# epoch line reports the loader's wait for data (data_wait_s).
#   augment_test.sh GRADUS_EXE WORK_DIR
source "$(dirname "$0")/lib.sh"
make_data

RUN=(train --data fashion-mnist --data-dir data --epochs 2 --batch-size 32 --limit-train 256
  --threads 2 --device cpu --no-progress --model mlp --optimizer adam --seed 3)

run() {  # run NAME ARGS...: -> NAME.safetensors, NAME.jsonl, NAME.out
  local name="$1"
  shift
  "$GRADUS" "$@" --metrics "$name.jsonl" --save "$name.safetensors" >"$name.out" 2>&1 ||
    fail "$name failed: $(cat "$name.out")"
}

run w2 "${RUN[@]}" --augment --workers 2
grep -q -- "--augment: random crop (padding 2), horizontal flip (p 0.5)" w2.out ||
  fail "no --augment summary line: $(cat w2.out)"
[ "$(grep -c '"data_wait_s":[0-9]' w2.jsonl)" -eq 2 ] || fail "data_wait_s missing: $(cat w2.jsonl)"
grep -Eq "data wait [0-9.]+ s \([0-9.]+%\)" w2.out || fail "no data wait in the epoch line"

run w0 "${RUN[@]}" --augment --workers 0
[ "$(sha w0.safetensors)" = "$(sha w2.safetensors)" ] || fail "0 and 2 workers trained differently"
echo "ok: --augment with 0 and 2 workers: same weights $(sha w2.safetensors | cut -c1-16)..."

run plain "${RUN[@]}" --workers 2
[ "$(sha plain.safetensors)" != "$(sha w2.safetensors)" ] || fail "--augment changed nothing"

"$GRADUS" "${RUN[@]}" --augment --workers 2 --checkpoint-dir ck --checkpoint-every 4 \
  --stop-after-steps 11 >part1.out 2>&1 || fail "the interrupted run failed: $(cat part1.out)"
run resumed "${RUN[@]}" --augment --workers 1 --checkpoint-dir ck --checkpoint-every 4 --resume
[ "$(sha resumed.safetensors)" = "$(sha w2.safetensors)" ] ||
  fail "the resumed --augment run ended with other weights"
echo "ok: stopped at step 11 and resumed: same weights"
echo "augment: PASS"
