#!/usr/bin/env bash
# `gradus inspect` on every committed fuzz seed (fuzz/corpus/safetensors: valid files and the
# classic attacks -- oversized/lying header lengths, overflowing shapes, overlapping/gapped/
# out-of-file offsets, truncation, bad UTF-8/JSON, unknown dtypes): valid files exit 0 and list
# their tensors; every invalid one exits 1 with "gradus: error: <file>: <reason>" -- never a
# crash or an abort. Then bad dataset files through `gradus train` (exit 1, clear message).
#   inspect_test.sh GRADUS_EXE WORK_DIR
source "$(dirname "$0")/lib.sh"
CORPUS="$HERE/../../fuzz/corpus"
valid=0 invalid=0
for f in "$CORPUS"/safetensors/*; do
  name=$(basename "$f")
  rc=0
  out=$("$GRADUS" inspect "$f" 2>&1) || rc=$?
  case "$name" in
  valid_* | zero_size_* | metadata_* | extra_field | header_leading_spaces)
    # Accepted by the reference implementation too (zero-size tensors, string metadata, ...)
    # -- except where gradus is stricter; either way: 0 or a clean error, never a crash.
    [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ] || fail "$name: exit code $rc: $out"
    ;;
  *)
    [ "$rc" -eq 1 ] || fail "$name: expected exit code 1 (invalid file), got $rc: $out"
    echo "$out" | grep -q "^gradus: error: .*$name" || fail "$name: the error does not name the file: $out"
    ;;
  esac
  if [ "$rc" -eq 0 ]; then valid=$((valid + 1)); else invalid=$((invalid + 1)); fi
  echo "$name: exit $rc: $(echo "$out" | head -1 | cut -c1-160)"
done
[ "$valid" -ge 5 ] || fail "only $valid seeds were accepted; the valid ones must load"
out=$("$GRADUS" inspect "$CORPUS/safetensors/valid_two_tensors_metadata" --json)
echo "$out" | grep -q '"name":"w","dtype":"F32","shape":\[2,3\],"bytes":24' || fail "inspect --json: $out"

# A checkpoint: inspect shows the run's position; --values counts NaN/Inf.
make_data
"$GRADUS" train --data mnist --data-dir data --epochs 1 --batch-size 64 --threads 1 --device cpu \
  --no-progress --checkpoint-dir ck --checkpoint-every 3 --stop-after-steps 3 >/dev/null 2>&1 ||
  fail "training for the checkpoint failed"
out=$("$GRADUS" inspect ck/ckpt-0000000003.safetensors --values)
echo "$out" | grep -q "gradus checkpoint: step 3, next batch 3 of epoch 0" || fail "inspect checkpoint: $out"
echo "$out" | grep -Eq "^model.0.weight +F32 +\[256, 784\] +802816  0$" || fail "inspect --values: $out"

# Bad dataset files: exit 1 with the file and the problem named.
cp -r data bad
head -c 1000 data/train-images-idx3-ubyte >bad/train-images-idx3-ubyte
expect_fail "truncated IDX images" "train-images-idx3-ubyte' is truncated or its dims are wrong" \
  "$GRADUS" train --data mnist --data-dir bad --device cpu --no-progress
printf 'PK\003\004junk' >bad/train-images-idx3-ubyte
expect_fail "IDX images with a wrong magic number" "has the magic number 0x504B0304, expected 0x00000803" \
  "$GRADUS" train --data mnist --data-dir bad --device cpu --no-progress
expect_fail "inspect a missing file" "gradus: error: .*no-such.safetensors" "$GRADUS" inspect no-such.safetensors
echo "PASS: $valid valid and $invalid invalid safetensors seeds handled; bad dataset files rejected"
