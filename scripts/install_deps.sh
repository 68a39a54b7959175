#!/usr/bin/env bash
# Installs gradus's build and run dependencies from Debian's packages (idempotent).
set -euo pipefail
packages=(build-essential cmake ninja-build ccache pkg-config git
  libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev dataset-fashion-mnist
  openmpi-bin libopenmpi-dev procps libcairo2-dev libpcre2-dev
  iproute2
  qemu-user)  # tests: the portable build on an emulated CPU without AVX; hosts made of netns
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "gradus: installing ${missing[*]}" >&2
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
