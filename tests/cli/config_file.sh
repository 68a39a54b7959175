#!/usr/bin/env bash
# gradus train --config FILE: a TOML file of long option names trains bitwise what the same flags
# train (the saved weights are compared byte for byte), --print-config's output read back
# reproduces itself, command-line flags override the file, and bad files are refused by name.
# usage: config_file.sh GRADUS TEXT_SAMPLE
set -uo pipefail
gradus=$1
sample=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
flags=(--model gpt --data text --data-file "$sample" --context 16 --layers 1 --heads 2 --width 32
  --batch-size 4 --iters 12 --eval-every 6 --eval-iters 1 --threads 1 --seed 7 --lr 0.003)
"$gradus" train "${flags[@]}" --save "$work/flags.safetensors" >"$work/flags.log" 2>&1 ||
  fail "the run with flags failed: $(tail -3 "$work/flags.log")"

cat >"$work/run.toml" <<TOML
# the same run as the flags above
model = "gpt"
data = "text"
data-file = "$sample"
context = 16
layers = 1
heads = 2
width = 32
batch-size = 4
iters = 12
eval-every = 6
eval-iters = 1
threads = 1
seed = 7
lr = 0.003
TOML
"$gradus" train --config "$work/run.toml" --save "$work/config.safetensors" >"$work/config.log" 2>&1 ||
  fail "the run with --config failed: $(tail -3 "$work/config.log")"
cmp -s "$work/flags.safetensors" "$work/config.safetensors" ||
  fail "--config trained other weights than the same flags"
[ "$(grep '^val_loss=' "$work/flags.log")" = "$(grep '^val_loss=' "$work/config.log")" ] ||
  fail "val_loss differs: $(grep '^val_loss=' "$work/flags.log") vs $(grep '^val_loss=' "$work/config.log")"
echo "config_file: the file and the flags train the same weights, byte for byte"

# --print-config: what the run uses, and it reads back into itself.
"$gradus" train --config "$work/run.toml" --iters 20 --print-config >"$work/printed.toml" ||
  fail "--print-config failed"
grep -qx 'iters="\{0,1\}20"\{0,1\}' "$work/printed.toml" || fail "a command-line flag did not override the file: $(grep iters "$work/printed.toml")"
grep -q '^# epochs=10$' "$work/printed.toml" || fail "--print-config does not list the defaults"
"$gradus" train --config "$work/printed.toml" --print-config | cmp -s - "$work/printed.toml" ||
  fail "--print-config's output read back gives another configuration"
echo "config_file: --print-config reads back into the same configuration; flags override the file"

# Refusals, each naming what is wrong (exit status 2, like a bad flag).
printf 'no-such-option = 3\n' >"$work/unknown.toml"
out=$("$gradus" train --config "$work/unknown.toml" 2>&1)
[ $? -eq 2 ] && grep -q -- "--no-such-option" <<<"$out" || fail "unknown key: $out"
printf '[train]\nmodel = "gpt"\n' >"$work/section.toml"
out=$("$gradus" train --config "$work/section.toml" 2>&1)
[ $? -eq 2 ] && grep -q "sections are not read" <<<"$out" || fail "section: $out"
out=$("$gradus" train --config "$work/missing.toml" 2>&1)
[ $? -eq 2 ] && grep -q "missing.toml" <<<"$out" || fail "missing file: $out"
printf 'lr = nan\n' >"$work/nan.toml"
out=$("$gradus" train --config "$work/nan.toml" 2>&1)
[ $? -eq 2 ] && grep -q "'nan' is not a finite number" <<<"$out" || fail "NaN value: $out"
echo "config_file: unknown keys, sections, a missing file and NaN are refused by name"
echo "config_file: PASS"
