#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds + runs a separate consumer project
# that finds it with find_package(gradus), as a user would:
#  1. the installed libraries are shared, and none of them (nor the consumer) needs a CUDA or NCCL
#     library: only the run-time modules do;
#  2. on a machine with the CUDA toolkit, the consumer is configured, built and run again with the
#     toolkit hidden (an empty tmpfs over it in a private mount namespace), i.e. as on a machine
#     without CUDA: find_package must not need it, and gradus must fall back to the CPU.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
lib="$work/prefix/lib"
[[ -d "$lib" ]] || lib=$(dirname "$(find "$work/prefix" -name libgradus_core.so | head -1)")

cuda_needed() {  # prints the CUDA / NCCL libraries an ELF file asks for
  readelf -d "$1" | grep NEEDED | grep -E -o "lib(cudart|cublas|cublasLt|cudnn|nccl|cuda)[^]]*" || true
}
shopt -s nullglob
libs=("$lib"/libgradus_*.so)
(( ${#libs[@]} > 1 )) || { echo "FAIL: no shared gradus libraries in $lib"; exit 1; }
modules=0
for f in "${libs[@]}"; do
  case "$(basename "$f")" in
    libgradus_backend_cuda.so | libgradus_dist_nccl.so) modules=$((modules + 1)); continue ;;
  esac
  if [[ -n "$(cuda_needed "$f")" ]]; then
    echo "FAIL: $(basename "$f") needs $(cuda_needed "$f" | tr '\n' ' ')"
    exit 1
  fi
done
echo "install: ${#libs[@]} shared libraries, $modules run-time module(s), none of the others needs CUDA"
# A portable build's second copy of the CPU backend is installed where the loader looks for it.
hwcaps=glibc-hwcaps/x86-64-v3/libgradus_backend_cpu.so
if [[ -f "$build_dir/lib/$hwcaps" ]]; then
  [[ -f "$lib/$hwcaps" ]] || { echo "FAIL: $hwcaps was built but not installed"; exit 1; }
  echo "install: the x86-64-v3 copy of the CPU backend is installed"
fi

build_and_run() {  # $1: consumer build directory
  cmake -S "$source_dir/tests/install/consumer" -B "$1" -G Ninja \
    -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$1" >/dev/null
  if [[ -n "$(cuda_needed "$1/consumer")" ]]; then
    echo "FAIL: the consumer needs $(cuda_needed "$1/consumer" | tr '\n' ' ')"
    exit 1
  fi
  # The start-up guard (fits the BLAS threads to an address-space limit) is compiled into it.
  # (Not `readelf | grep -q`: under pipefail, grep quitting early fails readelf with SIGPIPE.)
  [[ $(readelf -S "$1/consumer") == *preinit_array* ]] ||
    { echo "FAIL: the consumer has no start-up guard (.preinit_array)"; exit 1; }
  "$1/consumer" | tee "$1/consumer.log"
  # The CPU backend the consumer ran comes from the install, not from the build tree.
  grep -q "^consumer: CPU kernels .* from $work/prefix/" "$1/consumer.log" ||
    { echo "FAIL: the consumer did not load its CPU backend from $work/prefix"; exit 1; }
}
build_and_run "$work/consumer"

cuda_root=$(readlink -f /usr/local/cuda 2>/dev/null || true)
if [[ -z "$cuda_root" || ! -d "$cuda_root" ]]; then
  echo "install: no CUDA toolkit on this machine, so the run above was already without it"
  echo "install: consumer without CUDA ok"
  exit 0
fi
# Hide the toolkit (and its libraries, which ld.so.conf may list) from everything below.
export -f build_and_run cuda_needed
export work source_dir cuda_root
# A private mount namespace: as root, or else inside a user namespace where we are root.
if unshare -m true 2>/dev/null; then
  hide=(unshare -m)
elif unshare -rm true 2>/dev/null; then
  hide=(unshare -rm)
else
  echo "FAIL: cannot hide the CUDA toolkit here: neither 'unshare -m' (needs root) nor"
  echo "      'unshare -rm' (needs user namespaces) is permitted"
  exit 1
fi
"${hide[@]}" bash -c '
  set -euo pipefail
  mount -t tmpfs none "$cuda_root"
  if command -v nvcc >/dev/null 2>&1 && nvcc --version >/dev/null 2>&1; then
    echo "FAIL: nvcc still runs with $cuda_root hidden"; exit 1
  fi
  echo "install: $cuda_root hidden"
  build_and_run "$work/consumer-nocuda"
' || { echo "FAIL: the consumer did not configure, build or run with the CUDA toolkit hidden"; exit 1; }
echo "install: consumer without CUDA ok"
