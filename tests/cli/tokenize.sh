#!/usr/bin/env bash
# `gradus tokenize` against Hugging Face tokenizers' ids: tests/data/golden/bpe/corpus.bin is
# corpus.txt encoded by tokenizers with tokenizer.json (tools/make_tokenizer_golden.py), as
# nanoGPT's uint16 .bin. Checks that file byte for byte on one and two threads, a 20-fold corpus
# (the blocks and threads path: tokenizers gives the corpus's ids 20 times), --dtype uint32, a
# vocabulary past 65536 ids (uint32 by default, uint16 refused by name) and the errors.
# usage: tokenize.sh GRADUS GOLDEN_BPE_DIR
set -uo pipefail
gradus=$1
golden=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
# Runs gradus, expecting exit code $1; its stdout + stderr in $out.
run() {
  local want=$1
  shift
  out=$("$gradus" "$@" 2>&1)
  local rc=$?
  [[ $rc == "$want" ]] || fail "gradus $* exited $rc, expected $want: $out"
}

for threads in 1 2; do
  run 0 tokenize --tokenizer "$golden" --input "$golden/corpus.txt" --output "$work/t$threads.bin" \
    --threads "$threads"
  cmp "$work/t$threads.bin" "$golden/corpus.bin" || fail "--threads $threads: not tokenizers' ids"
  [[ $out =~ corpus.txt:\ 16867\ bytes\ -\>\ 7565\ tokens\ \(uint16,\ vocabulary\ 603\)\ in\ .*\ MB/s\ on\ $threads\ thread ]] ||
    fail "unexpected report: $out"
done

# 20 copies: cut into blocks and chunks on several threads.
for _ in $(seq 20); do cat "$golden/corpus.txt"; done >"$work/big.txt"
for _ in $(seq 20); do cat "$golden/corpus.bin"; done >"$work/big_expected.bin"
run 0 tokenize --tokenizer "$golden/tokenizer.json" --input "$work/big.txt" --output "$work/big.bin" \
  --threads 3 --no-progress
cmp "$work/big.bin" "$work/big_expected.bin" || fail "20-fold corpus on 3 threads: not tokenizers' ids"

# uint32: the same ids, four bytes each.
run 0 tokenize --tokenizer "$golden" --input "$golden/corpus.txt" --output "$work/t32.bin" \
  --dtype uint32
[[ $(od -An -v -tu2 "$golden/corpus.bin" | tr -s ' \n' '\n') == \
  $(od -An -v -tu4 "$work/t32.bin" | tr -s ' \n' '\n') ]] || fail "--dtype uint32: other ids"

# A vocabulary of 70001 ids (an added token with id 70000): uint32 unless uint16 is asked for.
mkdir "$work/wide"
sed 's/"id": 602,/"id": 70000,/' "$golden/tokenizer.json" >"$work/wide/tokenizer.json"
printf 'Romeo, Romeo! wherefore art thou' >"$work/romeo.txt"
run 0 tokenize --tokenizer "$work/wide" --input "$work/romeo.txt" --output "$work/wide.bin"
[[ $out == *"(uint32, vocabulary 70001)"* ]] || fail "a 70001-id vocabulary not written as uint32"
[[ $(od -An -v -tu4 "$work/wide.bin" | tr -s ' \n' '\n' | grep -c '^70000$') == 1 ]] ||
  fail "the added token's id 70000 is not in the uint32 file"
run 1 tokenize --tokenizer "$work/wide" --input "$work/romeo.txt" --output "$work/no.bin" \
  --dtype uint16
[[ $out == *"--dtype uint16 cannot hold the ids of $work/wide/tokenizer.json (a vocabulary of 70001 ids"*"use --dtype uint32"* ]] ||
  fail "uint16 refusal: $out"
[[ ! -e "$work/no.bin" ]] || fail "a refused run wrote its output"

# An empty input gives an empty token file.
: >"$work/empty.txt"
run 0 tokenize --tokenizer "$golden" --input "$work/empty.txt" --output "$work/empty.bin"
[[ -f "$work/empty.bin" && ! -s "$work/empty.bin" ]] || fail "empty input: no empty output"

# Errors: what is wrong, and where.
run 1 tokenize --tokenizer "$work" --input "$golden/corpus.txt" --output "$work/x.bin"
[[ $out == *"$work has neither tokenizer.json nor vocab.json + merges.txt"* ]] || fail "$out"
run 1 tokenize --tokenizer "$golden" --input "$work/missing.txt" --output "$work/x.bin"
[[ $out == *"cannot open $work/missing.txt"* ]] || fail "$out"
run 1 tokenize --tokenizer "$golden" --input "$work" --output "$work/x.bin"
[[ $out == *"is not a regular file (a directory)"* ]] || fail "$out"
run 2 tokenize --tokenizer "$golden" --output "$work/x.bin"
[[ $out == *"--input is required"* ]] || fail "$out"
run 2 tokenize --tokenizer "$golden" --input "$golden/corpus.txt" --output "$work/x.bin" \
  --dtype int8
[[ $out == *"--dtype"* ]] || fail "$out"
echo "tokenize: PASS"
