#!/usr/bin/env bash
# Checks gradus on a machine with an NVIDIA GPU and writes every log into OUT_DIR:
#   nvidia-smi.txt   the device            env.txt       toolchain and libraries seen
#   build.log        configure + build     ldd.txt       shared libraries of test_gpu
#   ctest_gpu.log    ctest -L gpu          ctest_all.log the whole suite
#   memcheck.log     compute-sanitizer memcheck on a slice of test_gpu
#   bench.log        gradus bench on cuda, the PyTorch comparisons (models; 8192^3 GEMM in f32
#                    and bf16) and the CPU-vs-GPU table
#   train.log        gradus train on Fashion-MNIST (MLP and CNN) on the GPU, with the metrics
#   summary.txt      one line per stage with its exit status and duration
#
# Usage: scripts/gpu_check.sh OUT_DIR [BUILD_DIR]
# GRADUS_GPU_CHECK_PART=test|bench|all (default all) picks the stages, so the check fits in two
# calls of at most ten minutes (the build stays between calls while the machine is warm).
#
# Dependencies: where the machine lacks gradus's build dependencies and nothing can be installed,
# run scripts/gpu_deps.sh first (it puts the Debian packages in .carry/debs) and carry .carry:
# this script unpacks them into a private root and builds against it, with Fashion-MNIST from
# there too.
#
# BUILD_DIR (default $GRADUS_BUILD_DIR or build-gpu) is used as is when it already holds
# tests/test_gpu (a build carried from another machine: configure it there with
# -DGRADUS_USE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGRADUS_NATIVE=OFF so its host code runs on
# this CPU; shared libraries it needs that this machine lacks can be put in BUILD_DIR/_libs).
# Otherwise it is configured and built here. Each stage has a time limit; a call stays under
# about nine minutes.
set -u
OUT=${1:?usage: scripts/gpu_check.sh OUT_DIR [BUILD_DIR]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${2:-${GRADUS_BUILD_DIR:-$ROOT/build-gpu}}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
BUDGET=${GRADUS_GPU_CHECK_BUDGET:-540}  # seconds for the whole script
JOBS=$(nproc 2>/dev/null || echo 4)
: > "$OUT/summary.txt"

left() { echo $((BUDGET - ($(date +%s) - START))); }
# stage NAME LIMIT_SECONDS LOG -- command...: runs with a time limit (never beyond the budget).
stage() {
  local name=$1 limit=$2 log=$3
  shift 4
  local remaining
  remaining=$(left)
  if [ "$remaining" -le 5 ]; then
    echo "$name: skipped (time budget spent)" | tee -a "$OUT/summary.txt"
    return 124
  fi
  [ "$limit" -gt "$remaining" ] && limit=$remaining
  local t0 rc
  t0=$(date +%s)
  echo "=== $name (limit ${limit}s): $*" >>"$log"
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  echo "$name: exit $rc in $(($(date +%s) - t0))s (log: $(basename "$log"))" | tee -a "$OUT/summary.txt"
  return $rc
}

# ------------------------------------------------------------------ device and environment
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (no driver?)" >>"$OUT/nvidia-smi.txt"
nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv >>"$OUT/nvidia-smi.txt" 2>&1 || true
{
  echo "date: $(date -u +%FT%TZ)  host: $(hostname)  commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
  echo "build dir: $BUILD"
  uname -a
  (command -v nvcc && nvcc --version) 2>&1 | tail -2
  cmake --version 2>&1 | head -1
  (c++ --version || g++ --version) 2>&1 | head -1
  ninja --version 2>&1 | sed 's/^/ninja /'
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  ldconfig -p 2>/dev/null | grep -E "libcudnn\.|libcublas|libcublasLt|libopenblas|libgtest|libz\.so" | head -20
} >"$OUT/env.txt" 2>&1

# Shared libraries a carried build may need: bundled ones, the toolkit's, and the cuDNN / cuBLAS
# wheels that ship with PyTorch.
LIBS="$BUILD/_libs:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib"
PYLIBS=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site
dirs = []
for base in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += glob.glob(os.path.join(base, "nvidia", "*", "lib"))
print(":".join(dirs))
EOF
)
# Build dependencies carried as Debian packages (scripts/gpu_deps.sh), unpacked once per machine.
DEBS=${GRADUS_GPU_DEBS:-$ROOT/.carry/debs}
DEPS_ROOT=${GRADUS_DEPS_ROOT:-/tmp/gradus-deps}
DATA_DIR=/usr/share/datasets/fashion-mnist
CMAKE_DEPS=()
if compgen -G "$DEBS/*.deb" >/dev/null; then
  if [ ! -f "$DEPS_ROOT/.unpacked" ]; then
    mkdir -p "$DEPS_ROOT"
    for deb in "$DEBS"/*.deb; do dpkg -x "$deb" "$DEPS_ROOT"; done
    arch_lib=$DEPS_ROOT/usr/lib/x86_64-linux-gnu
    # zlib1g-dev's libz.so points at the system's /lib/.../libz.so.1.2.13; use this system's.
    for z in /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1; do
      [ -e "$z" ] && ln -sf "$z" "$arch_lib/libz.so" && break
    done
    # Only OpenBLAS and its Fortran runtime go on the library path, not the packages' other
    # libraries (they must not shadow this system's newer ones for python3 and PyTorch).
    mkdir -p "$DEPS_ROOT/runtime"
    cp -P "$arch_lib"/libgfortran.so.5* "$arch_lib"/libquadmath.so.0* "$DEPS_ROOT/runtime/"
    touch "$DEPS_ROOT/.unpacked"
  fi
  CMAKE_DEPS=(-DGRADUS_DEPS_ROOT="$DEPS_ROOT")
  # (as an environment variable so the install test's consumer project finds them too)
  export CMAKE_PREFIX_PATH="$DEPS_ROOT/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  LIBS="$LIBS:$DEPS_ROOT/usr/lib/x86_64-linux-gnu/openblas-openmp:$DEPS_ROOT/runtime"
  [ -d "$DEPS_ROOT$DATA_DIR" ] && DATA_DIR=$DEPS_ROOT$DATA_DIR
  echo "dependencies: unpacked from $DEBS into $DEPS_ROOT" >>"$OUT/env.txt"
fi
export LD_LIBRARY_PATH="$LIBS${PYLIBS:+:$PYLIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >>"$OUT/env.txt"
PART=${GRADUS_GPU_CHECK_PART:-all}
echo "part: $PART" >>"$OUT/summary.txt"

# ------------------------------------------------------------------ build (unless carried)
if [ -x "$BUILD/tests/test_gpu" ]; then
  echo "using the carried build in $BUILD" | tee -a "$OUT/summary.txt" >"$OUT/build.log"
else
  GEN=()
  KEEP_GOING=(-- -k)
  if command -v ninja >/dev/null; then
    GEN=(-G Ninja)
    KEEP_GOING=(-- -k 0)
  fi
  stage configure 120 "$OUT/build.log" -- cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DGRADUS_USE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DGRADUS_BUILD_TESTS=ON -DGRADUS_CUDA_LINEINFO=ON -DGRADUS_WERROR=OFF "${CMAKE_DEPS[@]}"
  # What this check needs first, then everything else (a broken test elsewhere must not stop it).
  stage "build gpu targets" 270 "$OUT/build.log" -- cmake --build "$BUILD" -j"$JOBS" \
    --target test_gpu gradus_cli
  stage "build all" 120 "$OUT/build.log" -- cmake --build "$BUILD" -j"$JOBS" "${KEEP_GOING[@]}"
fi
if [ ! -x "$BUILD/tests/test_gpu" ]; then
  echo "no test_gpu binary: see build.log" | tee -a "$OUT/summary.txt"
  exit 1
fi
ldd "$BUILD/tests/test_gpu" >"$OUT/ldd.txt" 2>&1
grep "not found" "$OUT/ldd.txt" | sed 's/^/missing library: /' | tee -a "$OUT/summary.txt"

run_part() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }

# ------------------------------------------------------------------ tests
if run_part test; then
  if [ -f "$BUILD/CTestTestfile.cmake" ]; then
    stage ctest_gpu 200 "$OUT/ctest_gpu.log" -- ctest --test-dir "$BUILD" -L gpu \
      --output-on-failure --timeout 120
  else  # a bare carried binary: run it directly
    stage ctest_gpu 200 "$OUT/ctest_gpu.log" -- "$BUILD/tests/test_gpu" --gtest_color=no
  fi
  # How many GPU tests really ran (a skip means no device was seen).
  grep -cE "Skipped|SKIPPED" "$OUT/ctest_gpu.log" | sed 's/^/gpu tests skipped: /' >>"$OUT/summary.txt"
  if [ -f "$BUILD/CTestTestfile.cmake" ]; then
    stage ctest_all 150 "$OUT/ctest_all.log" -- ctest --test-dir "$BUILD" --output-on-failure \
      -j"$JOBS" --timeout 120 -LE gpu
  fi
  if command -v compute-sanitizer >/dev/null; then
    stage memcheck 90 "$OUT/memcheck.log" -- compute-sanitizer --tool memcheck \
      --error-exitcode 3 "$BUILD/tests/test_gpu" --gtest_color=no \
      --gtest_filter='CudaRuntime.*:CudaElementwise.Ternary:CudaReduce.IntegersAndBool:CudaSoftmax.*:CudaIndexing.*:CudaOptim.*:PhiloxParity.DropoutValuesAndMask:CudaTraining.MlpWithSgdMatchesCpu'
  else
    echo "compute-sanitizer: not installed" | tee -a "$OUT/summary.txt"
  fi
fi

# ------------------------------------------------------------------ benchmarks and training
GRADUS=$BUILD/apps/gradus/gradus
if run_part bench && [ -x "$GRADUS" ]; then
  for model in mlp mlp-large cnn; do
    stage "bench $model" 40 "$OUT/bench.log" -- "$GRADUS" bench --device cuda --model "$model"
  done
  # bench/compare_pytorch.py on the GPU with the same gradus binary.
  compare=(python3 "$ROOT/bench/compare_pytorch.py" --gradus "$GRADUS" --device cuda)
  stage "compare_pytorch models" 120 "$OUT/bench.log" -- "${compare[@]}" --repeats 5 --steps 100
  stage "compare_pytorch gemm 8192 f32" 60 "$OUT/bench.log" -- "${compare[@]}" --runs "" \
    --gemm 8192 --gemm-dtype f32 --repeats 5
  stage "compare_pytorch gemm 8192 bf16" 60 "$OUT/bench.log" -- "${compare[@]}" --runs "" \
    --gemm 8192 --gemm-dtype bf16 --repeats 5
  stage "compare-devices" 120 "$OUT/bench.log" -- "$GRADUS" bench --compare-devices \
    --threads "$JOBS" --steps 30
  if [ -f "$DATA_DIR/train-images-idx3-ubyte.gz" ]; then
    # (The metrics go to /tmp and are appended to train.log: the device tool returns at most
    # eight files.)
    for model in mlp cnn; do
      rm -f "/tmp/gradus-train-$model.jsonl"
      stage "train $model" 150 "$OUT/train.log" -- "$GRADUS" train --model "$model" --epochs 10 \
        --device cuda --data-dir "$DATA_DIR" --metrics "/tmp/gradus-train-$model.jsonl"
      { echo "=== metrics ($model)"; cat "/tmp/gradus-train-$model.jsonl"; } >>"$OUT/train.log" 2>&1
    done
    grep -h "test_accuracy=" "$OUT/train.log" | sed 's/^/train: /' >>"$OUT/summary.txt"
  else
    echo "train: no Fashion-MNIST in $DATA_DIR (run scripts/gpu_deps.sh, carry .carry)" |
      tee -a "$OUT/summary.txt"
  fi
fi

echo "total: $(($(date +%s) - START))s" | tee -a "$OUT/summary.txt"
