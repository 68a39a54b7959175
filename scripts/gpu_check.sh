#!/usr/bin/env bash
# The one command to run on a GPU machine, from the bundle scripts/gpu_bundle.sh built here
# (.carry/gradus-gpu.tar.gz beside the tree: name `.carry` in the device tool's `carry`). It never
# compiles, and ends within 8 minutes (GRADUS_GPU_CHECK_SECONDS, default 470):
#   1. unpacks the bundle into a temporary folder and starts every program in it;
#   2. preflight: the NVIDIA driver, the CUDA backend loaded and a device seen, or it stops at once
#      saying which library or driver is missing (no suite of skipped tests);
#   3. every GPU test suite as its own process (a sticky CUDA fault in one cannot fail another),
#      four at a time, counting run, skipped and failed tests: all skipped is a failure;
#   4. compute-sanitizer memcheck over small tests of gradus's own kernels;
#   5. step time vs PyTorch (mlp, mlp-large, cnn, gpt), the GPT alone as a CUDA graph, under bf16
#      autocast and profiled op by op, 8192^3 GEMM in f32 and bf16 vs
#      torch.matmul, and 3 epochs of the MLP and the CNN on the GPU with their accuracy beside the
#      CPU's (measured when the bundle was built);
#   each stage with a hard time limit. Logs go to $OUT (the device tool's folder; else
#   ./gpu-check-out), seven files, and a one-screen summary is printed last.
#
#   scripts/gpu_check.sh --rehearse   runs the same script here, from the bundle alone, in a
#   private mount namespace where the build dependencies, OpenMPI, OpenBLAS and the CUDA toolkit
#   are hidden, on a machine without a GPU: every program must start, the bundle's CPU tests pass,
#   the NCCL test program run as a world of one, and the preflight stop because there is no NVIDIA
#   driver. Its last line starts with "rehearsal passed".
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${GRADUS_GPU_BUNDLE:-$ROOT/.carry/gradus-gpu.tar.gz}
REHEARSE=0
[ "${1:-}" = --rehearse ] && REHEARSE=1

# ------------------------------------------------------------------ the rehearsal's hiding
if [ "$REHEARSE" = 1 ] && [ -z "${GRADUS_GPU_REHEARSAL_HIDDEN:-}" ]; then
  [ -f "$BUNDLE" ] || { echo "rehearsal FAILED: no bundle at $BUNDLE (run scripts/gpu_bundle.sh)"; exit 1; }
  # A private mount namespace: as root, or else inside a user namespace where we are root.
  if unshare -m true 2>/dev/null; then
    hide=(unshare -m)
  elif unshare -rm true 2>/dev/null; then
    hide=(unshare -rm)
  else
    echo "rehearsal FAILED: neither 'unshare -m' (root) nor 'unshare -rm' (user namespaces) is permitted"
    exit 1
  fi
  exec "${hide[@]}" env GRADUS_GPU_REHEARSAL_HIDDEN=1 bash -c '
    set -e
    # Folders: the CUDA toolkit, the build dependencies, OpenMPI, the dataset.
    for d in /usr/local/cuda "$(readlink -f /usr/local/cuda)" /usr/include \
             /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/openblas-openmp \
             /usr/lib/x86_64-linux-gnu/blas /usr/lib/x86_64-linux-gnu/lapack /usr/share/openmpi \
             /etc/openmpi /usr/share/datasets /usr/lib/x86_64-linux-gnu/pmix2; do
      [ -d "$d" ] && mount -t tmpfs none "$d"
    done
    # Run-time libraries a GPU machine lacks: /dev/null over each, so a program that still
    # needs the system copy fails to load here as it would there.
    for f in /usr/lib/x86_64-linux-gnu/lib{mpi,open-rte,open-pal,openblas,gfortran,quadmath,gomp,hwloc,event,pmix,fabric,ucp,uct,ucs,ucm,gtest,gmock,cudart,cublas,cudnn,nccl,mca_common,psm,infinipath,ibverbs,rdmacm,nl-}*.so*; do
      [ -e "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"
    done
    exec "$0" --rehearse
  ' "$0"
fi

START=$(date +%s)
BUDGET=${GRADUS_GPU_CHECK_SECONDS:-470}
if [ "$REHEARSE" = 1 ]; then
  OUT=${OUT:-$(mktemp -d /tmp/gradus-rehearsal.XXXXXX)}
else
  OUT=${OUT:-$ROOT/gpu-check-out}
fi
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
ENVLOG=$OUT/env.txt
TESTLOG=$OUT/tests.log
: >"$SUMMARY"
: >"$ENVLOG"
: >"$TESTLOG"
FAILURES=0

note() { echo "$*" >>"$SUMMARY"; }
bad() {
  note "FAIL: $*"
  FAILURES=$((FAILURES + 1))
}
left() { echo $((BUDGET - ($(date +%s) - START))); }
finish() {
  note "total: $(($(date +%s) - START)) s, $FAILURES failure(s); logs in $OUT"
  echo "=================================== gpu_check summary"
  cat "$SUMMARY"
  exit "$1"
}
# stage NAME LIMIT LOG command...: runs with a time limit (never beyond the budget) and notes the
# exit status; returns the command's.
stage() {
  local name=$1 limit=$2 log=$3 remaining t0 rc
  shift 3
  remaining=$(($(left) - 5))
  if [ "$remaining" -le 5 ]; then
    note "$name: skipped (time budget spent)"
    return 124
  fi
  [ "$limit" -gt "$remaining" ] && limit=$remaining
  t0=$(date +%s)
  echo "=== $name (limit ${limit}s): $*" >>"$log"
  timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  [ "$rc" -eq 124 ] && echo "=== $name: TIMED OUT after ${limit}s" >>"$log"
  note "$name: exit $rc in $(($(date +%s) - t0)) s"
  return $rc
}

# ------------------------------------------------------------------ 1. unpack and start
[ -f "$BUNDLE" ] || { bad "no bundle at $BUNDLE (build it with scripts/gpu_bundle.sh and carry .carry)"; finish 1; }
B=$(mktemp -d /tmp/gradus-gpu.XXXXXX)
tar -C "$B" -xzf "$BUNDLE" || { bad "could not unpack $BUNDLE"; finish 1; }
DATA=$B/data/fashion-mnist
# The machine's CUDA libraries: the toolkit's and those of PyTorch's wheels (cuDNN, NCCL, cuBLAS).
PYLIBS=$(python3 -c '
import glob, os, site
dirs = []
for base in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib")))
    dirs += sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "lib")))
print(":".join(dirs))' 2>/dev/null)
# The bundle's libraries reach gradus's programs only, through `genv` and the wrapper
# bin/gradus: python3 and PyTorch keep the machine's own libraries (the bundle's older copies,
# libexpat or libgomp say, could break them). The NCCL test runs as a world of one, which needs
# no mpirun and does not initialise MPI.
LIBPATH="$B/runtime:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${PYLIBS:+:$PYLIBS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
genv=(env LD_LIBRARY_PATH="$LIBPATH")
mkdir -p "$B/bin"
{
  echo '#!/usr/bin/env bash'
  printf 'exec'
  printf ' %q' "${genv[@]}" "$B/build/apps/gradus/gradus"
  echo ' "$@"'
} >"$B/bin/gradus"
chmod +x "$B/bin/gradus"
GRADUS=$B/bin/gradus
{
  echo "date: $(date -u +%FT%TZ)  host: $(uname -n)  tree commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
  cat "$B/BUNDLE"
  uname -a
  nvidia-smi 2>&1 || echo "nvidia-smi: not available"
  nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,driver_version --format=csv 2>&1 || true
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  echo "gradus's programs run with: ${genv[*]}"
} >>"$ENVLOG" 2>&1
note "bundle: $(head -1 "$B/BUNDLE")"

starts=0
for p in "$GRADUS" "$B"/build/tests/test_*; do
  if [ "$p" = "$GRADUS" ]; then args=(--version); else args=(--gtest_list_tests); fi
  if out=$(timeout 60 "${genv[@]}" "$p" "${args[@]}" 2>&1); then
    starts=$((starts + 1))
  else
    bad "$(basename "$p") does not start: $(echo "$out" | grep -m2 -iE 'error|not found|cannot' | tr '\n' ' ')"
  fi
done
note "programs: $starts of $(($(ls "$B"/build/tests | wc -l) + 1)) start"
# The CUDA module's own libraries: everything but the machine's CUDA libraries must resolve.
for m in "$B"/build/lib/libgradus_backend_cuda.so "$B"/build/lib/libgradus_dist_nccl.so; do
  missing=$("${genv[@]}" ldd "$m" 2>&1 | awk '/not found/{print $1}' | grep -vE '^lib(cudart|cublas|cublasLt|cudnn|nccl|cuda)\b' | tr '\n' ' ')
  [ -z "$missing" ] || bad "$(basename "$m") needs libraries the bundle lacks: $missing"
  echo "ldd $(basename "$m"):" >>"$ENVLOG"
  "${genv[@]}" ldd "$m" >>"$ENVLOG" 2>&1
done

# The bundle's CPU tests (the rehearsal's proof that its libraries work, and a guard on the GPU
# machine's CPU): the CPU backend's kernels.
if [ "$REHEARSE" = 1 ]; then
  stage "cpu tests (test_backend)" 240 "$TESTLOG" "${genv[@]}" "$B/build/tests/test_backend" --gtest_brief=1 ||
    bad "test_backend failed on the CPU (tests.log)"
  # The NCCL test program runs as a world of one (its tests skip here, without a GPU).
  stage "world of one (test_dist Nccl.*)" 60 "$TESTLOG" "${genv[@]}" "$B/build/tests/test_dist" \
    --gtest_filter='Nccl.*' || bad "test_dist could not run as a world of one (tests.log)"
  grep -q "passed on every rank" "$TESTLOG" || bad "test_dist did not report 'passed on every rank'"
fi

# ------------------------------------------------------------------ 2. preflight
{
  echo "=== gradus info"
  "$GRADUS" info 2>&1
} >>"$ENVLOG"
backend_line=$(grep -m1 '^CUDA backend:' "$ENVLOG")
devices_line=$(grep -m1 '^devices:' "$ENVLOG")
note "preflight: ${backend_line:-no 'CUDA backend:' line from gradus info}; ${devices_line:-}"
driver=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
[ -n "$driver" ] || driver=$(ls /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 2>/dev/null | head -1)
# GRADUS_GPU_CHECK_PAST_PREFLIGHT=1 goes on without a GPU: only to exercise the later stages of
# this script on a machine without one (every GPU test then skips, and the check fails, as it must).
if [ -z "$driver" ] && [ "${GRADUS_GPU_CHECK_PAST_PREFLIGHT:-0}" != 1 ]; then
  note "preflight: STOP: no NVIDIA driver (libcuda.so.1 is not on this machine; nvidia-smi: $(command -v nvidia-smi || echo absent))"
  if [ "$REHEARSE" = 1 ]; then
    if [ "$FAILURES" -eq 0 ]; then
      note "rehearsal passed: every program starts, the CPU tests pass, the preflight stopped: no NVIDIA driver"
      finish 0
    fi
    note "rehearsal FAILED: $FAILURES failure(s) before the preflight"
    finish 1
  fi
  finish 2
fi
if { [[ $backend_line != *"loaded from"* ]] || [[ $devices_line == *"(0 CUDA devices)"* ]]; } &&
  [ "${GRADUS_GPU_CHECK_PAST_PREFLIGHT:-0}" != 1 ]; then
  note "preflight: STOP: the driver is $driver, but the CUDA backend did not load or sees no device (env.txt has gradus info and the module's ldd)"
  [ "$REHEARSE" = 1 ] && note "rehearsal FAILED: the preflight stopped for another reason than a missing driver"
  finish 2
fi
[ "$REHEARSE" = 1 ] && { note "rehearsal FAILED: a GPU was found"; finish 1; }

# ------------------------------------------------------------------ 3. GPU test suites
SUITES=$B/suites
mkdir -p "$SUITES"
# name|program|filter: every suite of test_gpu, the op tests' CUDA cases (the attention harness
# on every device), the input pipeline's CUDA path, and the NCCL engine as a world of one.
{
  "${genv[@]}" "$B/build/tests/test_gpu" --gtest_list_tests | sed -n 's/^\([A-Za-z0-9_]*\)\.$/\1/p' |
    while read -r s; do echo "gpu.$s|test_gpu|$s.*"; done
  echo "ops.cuda|test_ops|*cuda*:*Cuda*"
  echo "data.cuda|test_data|LoaderPipelineCuda.*"
  echo "dist.nccl|test_dist|Nccl.*"
} >"$SUITES/list"
run_suite() {  # name|program|filter -> $SUITES/<name>.log, exit status in <name>.rc
  IFS='|' read -r name prog filter <<<"$1"
  eval "local genv=($GENV_SERIALIZED)"
  timeout --kill-after=5 150 "${genv[@]}" "$B/build/tests/$prog" --gtest_filter="$filter" --gtest_color=no \
    >"$SUITES/$name.log" 2>&1
  echo $? >"$SUITES/$name.rc"
}
export -f run_suite
export B SUITES
export GENV_SERIALIZED="$(printf '%q ' "${genv[@]}")"
t0=$(date +%s)
tests_limit=$(($(left) < 200 ? $(left) : 200))
timeout "$tests_limit" xargs -a "$SUITES/list" -d '\n' -P 4 -I{} bash -c 'run_suite "$1"' _ {}
ran=0 skipped=0 failed=0 crashed=0
while IFS='|' read -r name prog filter; do
  log=$SUITES/$name.log
  rc=$(cat "$SUITES/$name.rc" 2>/dev/null || echo "none")
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" 2>/dev/null | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" 2>/dev/null | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" 2>/dev/null | tail -1)
  ran=$((ran + ${p:-0} + ${f:-0}))
  skipped=$((skipped + ${s:-0}))
  failed=$((failed + ${f:-0}))
  line="$name: exit $rc, passed ${p:-0}, skipped ${s:-0}, failed ${f:-0}"
  if [ "$rc" != 0 ] && [ -z "$f" ]; then
    crashed=$((crashed + 1))
    line="$line (no result: $([ "$rc" = none ] && echo 'not run, time out' || ([ "$rc" = 124 ] && echo 'timed out' || echo "died, $(tail -1 "$log")")))"
  fi
  echo "$line" >>"$TESTLOG.per_suite"
  # The summary names only the suites that did not simply pass.
  [ "$rc" = 0 ] && [ "${s:-0}" = 0 ] || echo "$line" >>"$TESTLOG.summary"
  { echo "=== $name ($prog --gtest_filter=$filter): exit $rc"; cat "$log" 2>/dev/null; } >>"$TESTLOG"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$log" 2>/dev/null | sort -u |
    while read -r failed_line; do echo "  $name: $failed_line"; done >>"$TESTLOG.summary"
done <"$SUITES/list"
note "gpu tests in $(($(date +%s) - t0)) s: $ran ran, $skipped skipped, $failed failed, $crashed suite(s) without a result"
touch "$TESTLOG.summary"
sed 's/^/  /' "$TESTLOG.summary" | head -25 >>"$SUMMARY"
{ echo "=== per suite"; cat "$TESTLOG.per_suite"; } >>"$TESTLOG"
rm -f "$TESTLOG.summary" "$TESTLOG.per_suite"
# Legitimate skips on one GPU are few (two devices, memory); most skipped means the tests did not
# see the device. The reasons given, most frequent first:
cat "$SUITES"/*.log 2>/dev/null | grep -A1 -E ': Skipped$' | grep -vE ': Skipped$|^--$' |
  sort | uniq -c | sort -rn | head -5 | sed 's/^/  skipped: /' >>"$SUMMARY"
[ "$ran" -gt 0 ] && [ "$skipped" -le "$ran" ] ||
  bad "GPU tests: $ran ran and $skipped skipped: the tests did not see the device"
[ "$failed" -eq 0 ] && [ "$crashed" -eq 0 ] || bad "GPU tests: $failed failed, $crashed suite(s) crashed or timed out (tests.log)"

# ------------------------------------------------------------------ 4. memcheck
SANITIZER=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$SANITIZER" ]; then
  stage memcheck 90 "$OUT/memcheck.log" "${genv[@]}" "$SANITIZER" --tool memcheck \
    --error-exitcode 3 --print-limit 20 "$B/build/tests/test_gpu" --gtest_color=no --gtest_brief=1 \
    --gtest_filter='CudaElementwise.*:CudaReduce.*:CudaCopy.*:CudaSoftmax.*:CudaLayerNorm.*:CudaPool.*:CudaIndexing.*:CudaIndexChecks.*:CudaOptim.*:PhiloxParity.*' ||
    bad "memcheck (memcheck.log)"
  grep -m3 -E 'ERROR SUMMARY|Invalid' "$OUT/memcheck.log" | sed 's/^/  /' >>"$SUMMARY"
else
  note "memcheck: compute-sanitizer not installed"
fi

# ------------------------------------------------------------------ 5. benchmarks and training
BENCH=$OUT/bench.log
compare=(python3 "$ROOT/bench/compare_pytorch.py" --gradus "$GRADUS" --device cuda)
stage "compare_pytorch mlp, mlp-large, cnn" 100 "$BENCH" "${compare[@]}" --repeats 3 --steps 100 --gemm 0 ||
  bad "compare_pytorch models (bench.log)"
stage "compare_gpt" 60 "$BENCH" python3 "$ROOT/bench/compare_gpt.py" --gradus "$GRADUS" --device cuda \
  --repeats 3 --steps 30 --batch 16 --context 256 --layers 6 --width 384 --heads 6 ||
  bad "compare_gpt (bench.log)"
for dt in f32 bf16; do
  stage "gemm 8192 $dt" 50 "$BENCH" "${compare[@]}" --runs "" --gemm 8192 --gemm-dtype "$dt" --repeats 3 ||
    bad "gemm 8192 $dt (bench.log)"
done
# The tables' rows, the GEMM lines and the GPT's ratio (bench.log has everything).
grep -hE '^(model|mlp|mlp-large|cnn) |^GEMM|time ratio' "$BENCH" | head -12 | sed 's/^/  /' >>"$SUMMARY"
sed -n 's/.*"gradus_ms": \([0-9.]*\), "torch_ms": \([0-9.]*\).*"speedup": \([0-9.]*\).*/  gpt 6x384 ctx 256: gradus \1 ms, PyTorch \2 ms, speedup \3 (> 1: gradus faster)/p' \
  "$BENCH" >>"$SUMMARY"
# Each side's fastest mode for the GPT: bf16 autocast on both, torch.compile for PyTorch, a CUDA
# graph for gradus (last of all: compiling may take long). Then where gradus's eager step goes:
# the profiler's table of one step's ops with their GPU times.
PROFILE=$OUT/profile.log
cat "$ROOT"/README.md "$ROOT"/docs/*.md >"$B/gpt.txt"
stage "gpt profile" 60 "$PROFILE" "$GRADUS" train --model gpt --data text --data-file "$B/gpt.txt" \
  --device cuda --batch-size 16 --context 256 --layers 6 --width 384 --heads 6 \
  --profile "$B/gpt_trace.json" --profile-steps 4:6 --stop-after-steps 7 ||
  bad "gpt profile (profile.log)"
grep -hE 'ms per step' "$PROFILE" | tail -1 | sed 's/^/  gpt profile: /' >>"$SUMMARY"
TRAIN=$OUT/train.log
for model in mlp cnn; do
  stage "train $model 3 epochs" 60 "$TRAIN" "$GRADUS" train --model "$model" --epochs 3 --device cuda \
    --data-dir "$DATA" --seed 1 || bad "train $model (train.log)"
  gpu_acc=$(awk -v m="$model" '/^=== train/{cur = ($0 ~ "train " m " ")} cur && /test_accuracy=/{sub(/.*test_accuracy=/, ""); a = $0} END {print a}' "$TRAIN")
  cpu_acc=$(sed -n "s/^cpu_accuracy_$model=//p" "$B/BUNDLE")
  note "  $model: GPU test_accuracy ${gpu_acc:-none}, CPU ${cpu_acc:-not measured} (target: within 0.005)"
  if [ -n "$gpu_acc" ] && [ -n "$cpu_acc" ]; then
    awk -v g="$gpu_acc" -v c="$cpu_acc" 'BEGIN { d = g - c; if (d < 0) d = -d; exit !(d <= 0.005) }' ||
      bad "$model: GPU accuracy $gpu_acc vs CPU $cpu_acc"
  fi
done
stage "compare_gpt best modes" 150 "$BENCH" python3 "$ROOT/bench/compare_gpt.py" --gradus "$GRADUS" \
  --device cuda --repeats 2 --steps 30 --warmup 8 --batch 16 --context 256 --layers 6 --width 384 \
  --heads 6 --amp bf16 --compile --cuda-graph || bad "compare_gpt best modes (bench.log)"
sed -n 's/.*"amp": "bf16".*"gradus_ms": \([0-9.]*\), "torch_ms": \([0-9.]*\).*"speedup": \([0-9.]*\).*/  gpt bf16, gradus CUDA graph vs torch.compile: gradus \1 ms, PyTorch \2 ms, speedup \3/p' \
  "$BENCH" >>"$SUMMARY"
rm -rf "$B"
finish $((FAILURES > 0))
