#!/usr/bin/env bash
# The portable build (GRADUS_NATIVE off, the default): the CPU backend exists twice, for any
# x86-64 CPU (lib/libgradus_backend_cpu.so) and for x86-64-v3 (lib/glibc-hwcaps/x86-64-v3/), and
# the dynamic loader picks the copy the CPU can run. Checks, each against what `gradus info`
# reports as the loaded copy:
#   1. this CPU gets the best copy its loader supports;
#   2. with AVX2 masked (GLIBC_TUNABLES) the baseline copy is loaded and trains to the same loss;
#   3. under QEMU emulating a CPU without AVX (Nehalem) the whole program, baseline copy included,
#      runs and trains to the same loss: no instruction the CPU lacks is executed anywhere;
#   4. the check in 3 can fail: the x86-64-v3 copy forced onto that emulated CPU dies with an
#      illegal instruction;
#   5. the kernel test executables given pass on the baseline copy (the whole suite runs on the
#      copy this CPU loads).
# usage: check_portable.sh GRADUS_EXE BASE_LIB V3_LIB TEXT_SAMPLE [TEST_EXE...]
set -uo pipefail
gradus=$1
base_lib=$2
v3_lib=$3
sample=$4
shift 4
kernel_tests=("$@")
fail() {
  echo "FAIL: $*"
  exit 1
}
[ -f "$base_lib" ] || fail "no baseline CPU backend at $base_lib"
[ -f "$v3_lib" ] || fail "no x86-64-v3 CPU backend at $v3_lib"
qemu=$(command -v qemu-x86_64) || fail "qemu-x86_64 not found (apt-get install qemu-user)"

kernels() {  # the 'CPU kernels:' line of `gradus info` run through "$@"
  "$@" "$gradus" info 2>&1 | grep '^CPU kernels:'
}
# Prints the final val_loss of a short GPT run through "$@". A run that prints none returns 1 and
# prints why instead: its exit status, or the signal that killed it (and its output's end on stderr).
train() {
  local log=/tmp/gradus_portable_train_$$.log rc loss
  "$@" "$gradus" train --model gpt --data text --data-file "$sample" --context 16 --layers 1 \
    --heads 2 --width 32 --batch-size 4 --iters 30 --eval-every 30 --eval-iters 1 --threads 2 \
    --seed 5 "${train_extra[@]}" >"$log" 2>&1
  rc=$?
  loss=$(sed -n 's/^val_loss=\([0-9.]*\)$/\1/p' "$log" | tail -1)
  if [ -z "$loss" ]; then
    local why="exit status $rc"
    [ "$rc" -gt 128 ] && why="killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null))"
    tail -5 "$log" | sed 's/^/  | /' >&2
    rm -f "$log"
    echo "no val_loss ($why)"
    return 1
  fi
  rm -f "$log"
  echo "$loss"
}
train_extra=()
close() {  # two losses within 1e-3 relative (the copies round differently: FMA, vector exp)
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-3 * a) }'
}

# 1. The loader's own list of the levels this CPU supports decides the expected copy.
ld_so=$(readlink -f /lib64/ld-linux-x86-64.so.2)
# (The help text read whole first: with pipefail, `ld.so --help | grep -q` fails when grep leaves
# at the match and ld.so, still writing, gets SIGPIPE.)
ld_help=$("$ld_so" --help 2>/dev/null)
if grep -q 'x86-64-v3 (supported' <<<"$ld_help"; then
  want="CPU kernels: x86-64-v3 (AVX2, FMA), $(readlink -f "$v3_lib")"
else
  want="CPU kernels: x86-64 (SSE2), $(readlink -f "$base_lib")"
fi
got=$(kernels env)
[ "$got" = "$want" ] || fail "this CPU: expected '$want', got '$got'"
echo "portable: this CPU loads: ${got#CPU kernels: }"
loss_host=$(train env) || fail "this CPU: $loss_host"

# 2. AVX2 masked: the baseline copy, same training.
masked=(env GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2)
want_base="CPU kernels: x86-64 (SSE2), $(readlink -f "$base_lib")"
got=$(kernels "${masked[@]}")
[ "$got" = "$want_base" ] || fail "AVX2 masked: expected '$want_base', got '$got'"
loss_base=$(train "${masked[@]}") || fail "AVX2 masked: $loss_base"
close "$loss_host" "$loss_base" || fail "baseline copy: val_loss $loss_base vs $loss_host"
echo "portable: AVX2 masked loads the baseline; val_loss $loss_base (this CPU's copy: $loss_host)"

# 3. An emulated CPU without AVX: everything runs, and trains to the same loss. OpenBLAS is told
# the emulated CPU's kernels for these commands only: a coretype inherited from the environment
# (OPENBLAS_CORETYPE=Haswell on some hosts) would make it run AVX2 kernels there.
old_cpu=("$qemu" -cpu Nehalem -E OPENBLAS_CORETYPE=Nehalem)
got=$(kernels "${old_cpu[@]}")
[ "$got" = "$want_base" ] || fail "emulated Nehalem: expected '$want_base', got '$got'"
loss_old=$(train "${old_cpu[@]}") || fail "emulated Nehalem: $loss_old"
close "$loss_host" "$loss_old" || fail "emulated Nehalem: val_loss '$loss_old' vs $loss_host"
echo "portable: emulated Nehalem (no AVX) loads the baseline; val_loss $loss_old"

# 3b. bf16 on that CPU: no bf16 instructions, so GEMMs convert to float32 (the native path on a
# CPU that has them is the host's, when it has them); both train to nearly the same loss (the two
# paths accumulate in different orders, so bf16 roundings differ: 2% relative).
half=$("${old_cpu[@]}" "$gradus" info 2>&1 | grep '^16-bit GEMMs:')
grep -q 'converted to float32' <<<"$half" || fail "emulated Nehalem: expected the float32 path, got '$half'"
train_extra=(--amp bf16)
loss_host_bf16=$(train env) || fail "this CPU, --amp bf16: $loss_host_bf16"
loss_old_bf16=$(train "${old_cpu[@]}") || fail "emulated Nehalem, --amp bf16: $loss_old_bf16"
train_extra=()
awk -v a="$loss_host_bf16" -v b="$loss_old_bf16" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 2e-2 * a) }' ||
  fail "--amp bf16: emulated Nehalem's val_loss $loss_old_bf16 vs this CPU's $loss_host_bf16"
echo "portable: emulated Nehalem, --amp bf16: ${half#16-bit GEMMs: }; val_loss $loss_old_bf16 (this CPU: $loss_host_bf16, $("$gradus" info | grep '^16-bit GEMMs:'))"

# 4. The same emulated CPU with the x86-64-v3 copy forced (LD_LIBRARY_PATH wins over the
# loader's choice): it must die on an illegal instruction, or step 3 proved nothing.
"${old_cpu[@]}" -E LD_LIBRARY_PATH="$(dirname "$v3_lib")" "$gradus" train --model gpt --data text \
  --data-file "$sample" --context 16 --layers 1 --heads 2 --width 32 --batch-size 4 --iters 2 \
  --eval-every 2 --eval-iters 1 --threads 1 > /tmp/gradus_portable_$$.log 2>&1
rc=$?
grep -q "Illegal instruction\|signal 4" /tmp/gradus_portable_$$.log || [ $rc -eq 132 ] ||
  fail "the x86-64-v3 copy ran on an emulated CPU without AVX2 (rc $rc): the emulation checks nothing"
rm -f /tmp/gradus_portable_$$.log
echo "portable: the x86-64-v3 copy forced onto it: illegal instruction (rc $rc), as it must"
# 5. The kernel tests on the baseline copy.
for t in "${kernel_tests[@]}"; do
  "${masked[@]}" "$t" > /tmp/gradus_portable_$$.log 2>&1 ||
    { tail -30 /tmp/gradus_portable_$$.log; fail "$(basename "$t") on the baseline copy"; }
  echo "portable: $(basename "$t") on the baseline copy: $(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' /tmp/gradus_portable_$$.log), all passed"
done
rm -f /tmp/gradus_portable_$$.log
echo "portable: PASS"
