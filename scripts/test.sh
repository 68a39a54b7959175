#!/usr/bin/env bash
# Builds gradus and runs the whole test suite (GPU tests skip cleanly without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir "${GRADUS_BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"
