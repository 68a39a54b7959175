#!/usr/bin/env bash
# Builds gradus and runs the whole test suite (GPU tests skip cleanly without a GPU), then builds
# the library again with AddressSanitizer + UndefinedBehaviorSanitizer and runs its unit tests
# under it. GRADUS_TEST_SANITIZERS=0 skips the sanitized pass (for quick local runs).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
build_dir=${GRADUS_BUILD_DIR:-build}
# Which kernels this run's tests use (the machine's OPENBLAS_CORETYPE, if any, decides OpenBLAS's):
# bitwise and tolerance checks can depend on them, so every CI log names them.
if [ -x "$build_dir/apps/gradus/gradus" ]; then
  echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
  "$build_dir/apps/gradus/gradus" info | grep -E '^(BLAS|CPU kernels|16-bit GEMMs|cpu):' || true
fi
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" "$@"

# The bundle a GPU machine's check runs from, rehearsed here with the dependencies and the CUDA
# toolkit hidden (about a minute; README, "Checking a GPU machine").
if [ -f "$build_dir/lib/libgradus_backend_cuda.so" ]; then
  echo "== GPU bundle and the rehearsal of its check"
  ./scripts/gpu_bundle.sh "$build_dir"
  ./scripts/gpu_check.sh --rehearse
fi

if [[ "${GRADUS_TEST_SANITIZERS:-1}" != 0 ]]; then
  asan_dir=${GRADUS_ASAN_BUILD_DIR:-build-asan}
  echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer ($asan_dir)"
  # GRADUS_NATIVE: one copy of the CPU kernels, the AVX2 ones this CPU runs in the release tests.
  # The library and its unit tests only: the command-line program's behaviour tests (tests/cli,
  # the CLI's reliability runs) run in the release tree above, and leaving them out here keeps
  # CI inside its time budget (docs/performance.md, "CI").
  cmake -S . -B "$asan_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADUS_SANITIZE=ON \
    -DGRADUS_USE_CUDA=OFF -DGRADUS_BUILD_EXAMPLES=OFF -DGRADUS_BUILD_CLI=OFF \
    -DGRADUS_NATIVE=ON >/dev/null
  cmake --build "$asan_dir" -j"$(nproc)"
  # UBSan aborts on the first report (the code is also built with -fno-sanitize-recover); ASan's
  # leak checker is on by default, minus third-party caches listed in tests/lsan_suppressions.txt.
  # An allocation the C library cannot serve returns null, as glibc's does (ASan would abort),
  # so the out-of-memory paths run here too.
  ASAN_OPTIONS=allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$PWD/tests/lsan_suppressions.txt" \
    ctest --test-dir "$asan_dir" -L unit --output-on-failure -j"$(nproc)" "$@"
fi
