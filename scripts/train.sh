#!/usr/bin/env bash
# The main job: build gradus and train the default model on Fashion-MNIST (GPU when present).
# Extra arguments go to `gradus train` (see `build/apps/gradus/gradus train --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
exec "${GRADUS_BUILD_DIR:-build}/apps/gradus/gradus" train --device auto "$@"
