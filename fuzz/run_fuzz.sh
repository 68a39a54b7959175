#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan, GRADUS_FUZZ=ON) and fuzzes one of them.
#   fuzz/run_fuzz.sh TARGET [SECONDS] [BUILD_DIR]     TARGET: safetensors | idx
# The committed seeds (fuzz/corpus/TARGET, regenerate with fuzz/make_corpus.py) are read-only;
# new inputs go to BUILD_DIR/corpus-TARGET. A crash, leak or sanitizer report stops the run with
# a non-zero exit code and leaves crash-*/leak-* files (the reproducer) in BUILD_DIR.
# Summary (executions, corpus size) is printed at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${1:?usage: fuzz/run_fuzz.sh safetensors|idx [seconds] [build-dir]}"
secs="${2:-60}"
build="${3:-$root/build-fuzz}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DGRADUS_FUZZ=ON \
    -DGRADUS_USE_CUDA=OFF -DGRADUS_BUILD_TESTS=OFF -DGRADUS_BUILD_EXAMPLES=OFF \
    -DGRADUS_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" --target "fuzz_$target"
extra=()
[ "$target" = safetensors ] && extra+=(-dict="$root/fuzz/safetensors.dict")
mkdir -p "$build/corpus-$target"
cd "$build"
# -rss_limit_mb: a parser that allocates from an unchecked size is a bug, reported as a crash.
# Leak detection is on (detect_leaks=1 is ASan's default on Linux).
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "./fuzz/fuzz_$target" -max_total_time="$secs" -max_len=8192 -rss_limit_mb=2048 \
  -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 "${extra[@]}" \
  "corpus-$target" "$root/fuzz/corpus/$target"
