#!/usr/bin/env bash
# Builds the safetensors fuzzer with clang (libFuzzer + ASan + UBSan) against an existing gradus
# build directory's static libraries, then fuzzes for $SECONDS_TO_RUN seconds (default 60) from
# the golden files as seed corpus.
#   fuzz/run_fuzz_safetensors.sh [build-dir] [seconds]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
secs="${2:-60}"
out="$build/fuzz"
mkdir -p "$out/corpus"
cp "$root"/tests/data/safetensors/*.safetensors "$out/corpus/"
openblas_dir=$(dirname "$(find /usr/lib -path '*openblas-openmp*' -name 'libopenblas.so' | head -1)")
clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" \
  "$root/fuzz/fuzz_safetensors.cpp" "$root/src/io/safetensors.cpp" "$root/src/io/atomic_file.cpp" \
  "$build/src/libgradus_autograd.a" "$build/src/libgradus_backend_cpu.a" \
  "$build/src/libgradus_core.a" -fopenmp -L"$openblas_dir" -lopenblas \
  -o "$out/fuzz_safetensors"
"$out/fuzz_safetensors" -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 \
  -dict="$root/fuzz/safetensors.dict" "$out/corpus"
