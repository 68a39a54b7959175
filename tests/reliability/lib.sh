# Shared helpers of the reliability test scripts (sourced). Each script is called as
#   script.sh GRADUS_EXE WORK_DIR
# and exits 0 on success; every failure prints what was expected and what happened.
set -euo pipefail

GRADUS="$1"
WORK="$2"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# A tiny learnable MNIST-format dataset in ./data (512 train / 128 test examples).
make_data() {
  perl "$HERE/make_tiny_mnist.pl" data 512 128 7
}

# The per-step lines of a metrics file, "step loss" (exact values), deduplicated by step (the last
# line of a step wins: a run killed after logging step s re-logs s after resuming).
step_losses() {
  grep '"step"' "$1" | grep -v '"train_loss"' |
    sed -E 's/.*"step":([0-9]+).*"loss":([^,}]+).*/\1 \2/' |
    sort -n -k1,1 -s | awk '{last[$1]=$2} END {for (s in last) print s, last[s]}' | sort -n
}

# The per-epoch summary lines without their timing and memory fields (a resumed epoch's peak
# memory differs) and the device monitor's readings (a flat object, the line's last field).
epoch_lines() {
  grep '"train_loss"' "$1" |
    sed -E 's/"epoch_seconds":[^,]*,//; s/"samples_per_s":[^,]*,//; s/"peak_memory_bytes":[^,]*,//; s/"elapsed_s":[^,]*,//; s/"data_wait_s":[^,]*,//; s/,"monitor":\{[^}]*\}//'
}

sha() {
  sha256sum "$1" | cut -d' ' -f1
}

# expect_fail "what" REGEX cmd...: the command must exit 1 and print something matching REGEX.
expect_fail() {
  local what="$1" regex="$2"
  shift 2
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  [ "$rc" -eq 1 ] || fail "$what: expected exit code 1, got $rc; output: $out"
  echo "$out" | grep -Eq -- "$regex" || fail "$what: the output does not match '$regex': $out"
  echo "ok: $what -> $(echo "$out" | grep -E -- "$regex" | head -1)"
}
