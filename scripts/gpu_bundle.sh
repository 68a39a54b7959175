#!/usr/bin/env bash
# Builds what scripts/gpu_check.sh runs on a GPU machine that has the NVIDIA driver, the CUDA
# toolkit and PyTorch but none of gradus's build or run dependencies, and nothing to install them
# with: .carry/gradus-gpu.tar.gz (ignored by git) holds
#   build/      the CLI, the test programs the check runs and every library and run-time module
#               (CUDA backend for sm_90, NCCL engine, both copies of the CPU backend), at their
#               build-tree paths so that their $ORIGIN run paths find each other;
#   runtime/    the shared libraries they need that such a machine lacks (OpenBLAS, its Fortran
#               runtime, libgomp, OpenMPI's libmpi and what it links), found with ldd. A world of
#               one (the NCCL test on one GPU) needs no mpirun and does not initialise MPI, so
#               OpenMPI's launcher and components stay behind;
#   data/       a slice of Fashion-MNIST (the first 20,000 training and 5,000 test images).
# The CUDA libraries (cudart, cuBLAS(Lt), cuDNN, NCCL) are the machine's: the toolkit's and the
# ones PyTorch's wheels ship. Name `.carry` in the device tool's `carry`; the working tree plus
# .carry stays under 60 MiB (checked here).
#
# usage: scripts/gpu_bundle.sh [BUILD_DIR]   (default $GRADUS_BUILD_DIR or build; configured here
#        with the CUDA backend for sm_90 and the portable CPU backend if it is not already)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-${GRADUS_BUILD_DIR:-build}}
"./scripts/install_deps.sh"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADUS_USE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGRADUS_NATIVE=OFF >/dev/null
# The programs the check runs (gpu_check.sh's lists) and the run-time modules they load.
programs=(apps/gradus/gradus tests/test_gpu tests/test_dist tests/test_ops tests/test_backend
  tests/test_data)
cmake --build "$build" -j"$(nproc)" --target gradus_cli test_gpu test_dist test_ops test_backend \
  test_data \
  gradus_backend_cuda gradus_dist_nccl

stage=$root/.carry/stage
rm -rf "$stage" .carry/gradus-gpu.tar.gz
mkdir -p "$stage/build/lib" "$stage/runtime" "$stage/data"
for p in "${programs[@]}"; do
  install -D "$build/$p" "$stage/build/$p"
done
# Every library of the build, the glibc-hwcaps copy of the CPU backend included (not the test
# fakes of libnvidia-ml).
(cd "$build/lib" && find . \( -name '*.so' -o -name '*.so.*' \) ! -name 'libfake_nvml*' -print0 |
  xargs -0 -I{} install -D {} "$stage/build/lib/{}")

# Shared libraries the machine lacks: everything ldd resolves for the programs and the libraries,
# except glibc's, the C++ and GCC runtimes and zlib (every such machine has
# them, newer than this one's: a copy of ours would shadow them for PyTorch) and the CUDA
# libraries (the machine's own must match its driver).
system_libs='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libz|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnvrtc|libnvJitLink|libcupti|libnvidia-ml)\.so'
mapfile -t objects < <(find "$stage/build" -type f \( -perm -u+x -o -name '*.so*' \))
ldd "${objects[@]}" 2>/dev/null | awk '/=> \//{print $1, $3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $system_libs ]] && continue
    [[ $path == "$stage"/* ]] && continue
    cp -L "$path" "$stage/runtime/$name"
  done
# OpenBLAS's OpenMP build under its generic soname (the alternatives link ldd resolved above).
compgen -G "$stage/runtime/libopenblas*" >/dev/null || { echo "gpu_bundle: OpenBLAS not found by ldd" >&2; exit 1; }

# A slice of Fashion-MNIST, as gzipped IDX files under the usual names.
python3 - "$stage/data/fashion-mnist" <<'EOF'
import gzip, os, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
os.makedirs(dst, exist_ok=True)
for prefix, n in (("train", 20000), ("t10k", 5000)):
    for kind, item in (("images-idx3-ubyte", 784), ("labels-idx1-ubyte", 1)):
        with gzip.open(f"{src}/{prefix}-{kind}.gz", "rb") as f:
            raw = f.read()
        dims = raw[3]
        head = bytearray(raw[:4 + 4 * dims])
        struct.pack_into(">I", head, 4, n)
        body = raw[4 + 4 * dims: 4 + 4 * dims + n * item]
        with gzip.open(f"{dst}/{prefix}-{kind}.gz", "wb", compresslevel=9) as f:
            f.write(bytes(head) + body)
EOF

# The CPU's accuracy on that slice with the check's command, for its GPU-vs-CPU comparison.
cpu_accuracy() {
  "$build/apps/gradus/gradus" train --model "$1" --epochs 3 --device cpu \
    --data-dir "$stage/data/fashion-mnist" --seed 1 2>/dev/null | sed -n 's/^test_accuracy=//p' | tail -1
}
acc_mlp=$(cpu_accuracy mlp)
acc_cnn=$(cpu_accuracy cnn)
[ -n "$acc_mlp" ] && [ -n "$acc_cnn" ] || { echo "gpu_bundle: the CPU reference runs failed" >&2; exit 1; }

strip --strip-unneeded "$stage"/build/apps/gradus/gradus "$stage"/build/tests/* 2>/dev/null || true
{
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include apps tests || echo ' (with local changes)')"
  echo "built: $(date -u +%FT%TZ) on $(uname -n), $(c++ --version | head -1)"
  echo "cuda: $(/usr/local/cuda/bin/nvcc --version | tail -1)"
  echo "cpu_accuracy_mlp=$acc_mlp"
  echo "cpu_accuracy_cnn=$acc_cnn"
} >"$stage/BUNDLE"
tar -C "$stage" -czf .carry/gradus-gpu.tar.gz .
rm -rf "$stage"

# The device tool carries at most 64 MiB: the tracked and untracked files plus .carry.
tree_kib=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 du -k -c 2>/dev/null |
  awk '/\ttotal$/{s += $1} END {print s + 0}'))
carry_kib=$(du -k -s .carry | cut -f1)
total_mib=$(((tree_kib + carry_kib) / 1024))
echo "gpu_bundle: .carry/gradus-gpu.tar.gz $((carry_kib / 1024)) MiB; with the working tree ${total_mib} MiB"
if [ "$total_mib" -gt 60 ]; then
  echo "gpu_bundle: over the 60 MiB the device tool can carry beside the tree" >&2
  exit 1
fi
