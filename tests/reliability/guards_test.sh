#!/usr/bin/env bash
# Guards against silent data loss (docs/reliability.md), each through the CLI as a user meets it:
#  1. two runs on one checkpoint directory: the second is refused (naming the first's pid) and
#     the first's checkpoints are intact;
#  2. a bit flipped in a weight, an Adam moment and each metadata field: `gradus inspect` exits 1
#     naming what is damaged, and --resume falls back to the newest good checkpoint; when every
#     checkpoint is damaged, --resume stops with an error (and --resume-or-start starts over);
#  3. an update that overflows: exit non-zero, no non-finite --save file and no checkpoint of it;
#  4. unwritable outputs (--save, --checkpoint-dir) fail before any data is read.
#   guards_test.sh GRADUS_EXE WORK_DIR
source "$(dirname "$0")/lib.sh"
make_data
BASE=(train --data mnist --data-dir data --batch-size 32 --threads 1 --device cpu --no-progress
  --model mlp --optimizer adam)

# --- 1. one writer per checkpoint directory -------------------------------------------------------
"$GRADUS" "${BASE[@]}" --epochs 40 --seed 1 --checkpoint-dir ck --checkpoint-every 4 \
  >first.out 2>&1 &
first=$!
for _ in $(seq 1 200); do [ -e ck/.gradus.lock ] && break; sleep 0.05; done
[ -e ck/.gradus.lock ] || fail "the first run never took the lock"
expect_fail "a second run on the same directory" "in use by another run \\(pid $first" \
  "$GRADUS" "${BASE[@]}" --epochs 40 --seed 2 --checkpoint-dir ck --resume
kill -TERM "$first"
rc=0
wait "$first" || rc=$?
[ "$rc" -eq 143 ] || fail "the first run: expected exit 143 after SIGTERM, got $rc: $(cat first.out)"
n=0
for f in ck/ckpt-*.safetensors; do
  "$GRADUS" inspect "$f" >/dev/null 2>&1 || fail "$f of the first run does not verify"
  # The run configuration (escaped JSON inside the metadata) names the first run's seed.
  grep -Eq '\\"seed\\":1,' <("$GRADUS" inspect --json "$f") || fail "$f is not the first run's"
  n=$((n + 1))
done
[ "$n" -ge 1 ] || fail "the first run left no checkpoint"
echo "ok: the first run's $n checkpoint(s) are intact and its own"

# --- 2. damage is detected, named, and resume falls back --------------------------------------------
rm -rf ck2
"$GRADUS" "${BASE[@]}" --epochs 1 --checkpoint-dir ck2 --checkpoint-every 4 --keep-checkpoints 0 \
  >/dev/null 2>&1 || fail "the checkpointing run failed"
newest=$(ls ck2/ckpt-*.safetensors | tail -1)
older=$(ls ck2/ckpt-*.safetensors | tail -2 | head -1)
[ "$newest" != "$older" ] || fail "expected at least two checkpoints"
cp "$newest" pristine.safetensors
# flip BYTE_OFFSET BIT: flips one bit of $newest in place.
flip() {
  perl -e 'open(my $f, "+<", $ARGV[0]) or die; binmode $f; seek($f, $ARGV[1], 0);
    read($f, my $b, 1); seek($f, $ARGV[1], 0); print $f chr(ord($b) ^ (1 << $ARGV[2]));' \
    "$newest" "$1" "$2"
}
# Byte ranges of a tensor's data in the file (8 + header length + its data_offsets).
data_offset() {
  "$GRADUS" inspect --json pristine.safetensors | perl -MJSON::PP -e '
    my $j = decode_json(join("", <STDIN>)); my $start = 8 + $j->{header_bytes};
    for my $t (@{$j->{tensors}}) { if ($t->{name} eq $ARGV[0]) {
      print $start + int(($t->{data_offsets}[0] + $t->{data_offsets}[1]) / 2); exit } }
    die "no tensor $ARGV[0]"' "$1"
}
detected=0
for t in model.0.weight optim.state.0.exp_avg optim.state.3.exp_avg_sq; do
  cp pristine.safetensors "$newest"
  flip "$(data_offset "$t")" 3
  expect_fail "a flipped bit in $t" "tensor '$t' is damaged" "$GRADUS" inspect "$newest"
  detected=$((detected + 1))
done
# Metadata: flip the lowest bit of the first digit inside each field's value (found as text in
# the header): '4' becomes '5', so the header stays valid JSON and only the checksum can tell.
for key in step epoch batch_index rng optim.scalars scheduler config; do
  cp pristine.safetensors "$newest"
  off=$(perl -e 'open(my $f, "<", $ARGV[0]) or die; binmode $f; read($f, my $n, 8);
    my $len = unpack("Q<", $n); read($f, my $h, $len);
    my $i = index($h, "\"$ARGV[1]\":\""); die "no $ARGV[1]" if $i < 0;
    $i += length("\"$ARGV[1]\":\""); $i++ while substr($h, $i, 1) !~ /[0-9]/;
    print 8 + $i' "$newest" "$key")
  flip "$off" 0
  expect_fail "a flipped bit in metadata '$key'" "metadata .* is damaged: its CRC-32 does not match" \
    "$GRADUS" inspect "$newest"
  detected=$((detected + 1))
done
# The newest is damaged: resume must skip it, say so, and continue from the one before.
cp pristine.safetensors damaged.safetensors
newest_saved=$newest newest=damaged.safetensors
flip "$(data_offset model.0.weight)" 5
newest=$newest_saved
cp damaged.safetensors "$newest"
out=$("$GRADUS" "${BASE[@]}" --epochs 1 --checkpoint-dir ck2 --resume 2>&1) ||
  fail "resume with a damaged newest checkpoint failed: $out"
echo "$out" | grep -q "skipping $newest" || fail "resume did not name the damaged file: $out"
echo "$out" | grep -q "resuming from $older " || fail "resume did not fall back to $older: $out"
echo "ok: resume skipped $newest and resumed from $older"
# Every checkpoint damaged: an error, not a silent start from step 0.
rm -rf ck3 && mkdir ck3
cp damaged.safetensors ck3/"$(basename "$newest")"
cp damaged.safetensors ck3/"$(basename "$older")"
expect_fail "--resume with only damaged checkpoints" "none of the 2 checkpoint\\(s\\) can be resumed" \
  "$GRADUS" "${BASE[@]}" --epochs 1 --checkpoint-dir ck3 --resume
out=$("$GRADUS" "${BASE[@]}" --epochs 1 --checkpoint-dir ck3 --resume-or-start 2>&1) ||
  fail "--resume-or-start failed: $out"
echo "$out" | grep -q "starting at step 0" || fail "--resume-or-start did not start over: $out"
echo "ok: --resume refuses, --resume-or-start starts over"

# --- 3. overflow: nothing non-finite is written, the run fails ----------------------------------------
rm -rf ck4 overflow.safetensors
rc=0
out=$("$GRADUS" "${BASE[@]}" --epochs 2 --optimizer sgd --lr 1e20 --weight-decay 1e20 \
  --checkpoint-dir ck4 --checkpoint-every 1 --save overflow.safetensors 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "the overflowing run: expected exit 1, got $rc: $out"
[ ! -e overflow.safetensors ] || fail "the overflowing run wrote --save"
for f in ck4/ckpt-*.safetensors; do
  [ -e "$f" ] || continue
  "$GRADUS" inspect --values "$f" >/dev/null 2>&1 || fail "the overflowing run wrote a bad checkpoint $f"
done
echo "ok: overflow -> exit 1 ($(echo "$out" | grep error | head -1 | cut -c1-120)), nothing non-finite written"

# --- 4. unwritable outputs fail before the data is read ----------------------------------------------
expect_fail "--save under /proc" "cannot write in '/proc'" \
  "$GRADUS" train --data-dir /nonexistent --save /proc/w.safetensors --device cpu
expect_fail "--checkpoint-dir under /proc" "cannot (write in|create the directory) '/proc" \
  "$GRADUS" train --data-dir /nonexistent --checkpoint-dir /proc/ck --device cpu

# --- 5. a FIFO is refused at once; SIGHUP stops like SIGTERM (with a checkpoint) -------------------
mkfifo pipe.safetensors
rc=0
out=$(timeout 10 "$GRADUS" inspect pipe.safetensors 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "inspect on a FIFO: expected exit 1 at once, got $rc (124: it hung): $out"
echo "$out" | grep -q "not a regular file (a FIFO)" || fail "inspect on a FIFO: $out"
echo "ok: inspect on a FIFO -> $out"
rm -rf ck5
touch hup.mark
"$GRADUS" "${BASE[@]}" --epochs 40 --checkpoint-dir ck5 --checkpoint-every 2 >hup.out 2>&1 &
pid=$!
for _ in $(seq 1 400); do
  [ -n "$(find ck5 -newer hup.mark -name 'ckpt-*' 2>/dev/null | head -1)" ] && break
  sleep 0.05
done
kill -HUP "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" -eq 129 ] || fail "SIGHUP: expected exit 129 (128 + 1), got $rc: $(cat hup.out)"
grep -q "stopped after step [0-9]* (SIGHUP); checkpoint" hup.out || fail "SIGHUP: no checkpoint: $(cat hup.out)"
echo "ok: SIGHUP -> $(grep 'stopped after' hup.out)"

# --- 6. --batch-size auto under a CPU memory limit: it finds a size that fails, trains with a
# smaller one, and the run stays under the limit ---------------------------------------------------
out=$("$GRADUS" train --data mnist --data-dir data --model cnn --batch-size auto --memory-limit 48MiB \
  --epochs 1 --threads 1 --device cpu --no-progress 2>&1) || fail "--batch-size auto failed: $out"
echo "$out" | grep -q "does not" || fail "--batch-size auto never hit the limit: $out"
chosen=$(echo "$out" | sed -nE 's/.*; using ([0-9]+) .*/\1/p')
[ -n "$chosen" ] && echo "$out" | grep -q "batch $chosen," || fail "the run did not use the chosen batch: $out"
peak=$(echo "$out" | sed -nE 's/.*peak memory ([0-9.]+) MiB.*/\1/p')
awk -v p="$peak" 'BEGIN { exit !(p > 0 && p <= 48) }' || fail "peak memory $peak MiB is not within the 48 MiB limit"
echo "ok: --batch-size auto under 48 MiB -> batch $chosen, peak $peak MiB"

echo "PASS: guards ($detected damaged checkpoints detected)"
