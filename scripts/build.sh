#!/usr/bin/env bash
# Configures and builds gradus in ./build (CUDA backend when the toolkit is found).
set -euo pipefail
cd "$(dirname "$0")/.."
"./scripts/install_deps.sh"
build_dir=${GRADUS_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${GRADUS_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
