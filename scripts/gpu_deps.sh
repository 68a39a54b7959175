#!/usr/bin/env bash
# Collects what scripts/gpu_check.sh needs on a GPU machine where nothing can be installed: the
# Debian packages of gradus's build dependencies and of Fashion-MNIST, as .deb files in
# .carry/debs (ignored by git; about 45 MB). Name `.carry` in the device tool's `carry`; the
# check unpacks them with `dpkg -x` into a private root and builds against it (GRADUS_DEPS_ROOT).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.carry/debs
mkdir -p "$dest"
packages=(libopenblas0-openmp libopenblas-openmp-dev libgfortran5 libquadmath0 libgtest-dev
  libgmock-dev libcli11-dev nlohmann-json3-dev zlib1g-dev dataset-fashion-mnist)
(cd "$dest" && rm -f ./*.deb && apt-get download "${packages[@]}")
du -sh "$dest"
