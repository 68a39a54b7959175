#!/usr/bin/env bash
# Faults in a distributed run: one rank of a 3-rank `gradus train --dist ddp|zero1|fsdp` job (the
# strategies take turns between trials: DDP's all-reduces, ZeRO-1's reduce-scatter and
# all-gather, FSDP's per-layer all-gathers and reduce-scatters during forward and backward)
# is SIGKILLed, or SIGSTOPped (a stall, which MPI itself never reports), in the middle of training. The job must end
# non-zero within the timeout (--dist-timeout plus start/abort slack) and the output must name the
# rank; never hang (every trial runs under an outer `timeout`). The test counts the faults that
# really hit a running rank and fails unless every trial delivered one.
#
# usage: faults.sh GRADUS_BINARY MPIRUN [TRIALS]   (TRIALS per fault kind, default 20)
set -uo pipefail
gradus=$1
mpirun=$2
trials=${3:-20}
timeout_s=3    # --dist-timeout
limit_s=25     # the job must be over this long after the fault
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

rank_pid() {  # the pid of gradus rank $1 of the job started by mpirun pid $2
  local p
  for p in $(pgrep -f "gradus train --dist"); do
    [ -r "/proc/$p/environ" ] || continue
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

hits=0
failures=0
for kind in KILL STOP; do
  for ((t = 1; t <= trials; t++)); do
    victim=$((1 + RANDOM % 2))
    strategies=(ddp zero1 fsdp)
    strategy=${strategies[$((t % 3))]}
    log="$work/$kind-$t.log"
    metrics="$work/$kind-$t.jsonl"
    timeout -s KILL 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none \
      -x OMP_NUM_THREADS=1 -np 3 "$gradus" train --dist "$strategy" --dist-timeout "$timeout_s" \
      --model mlp --epochs 1000 --limit-train 3072 --limit-test 100 --batch-size 96 \
      --threads 1 --no-progress --log-every 1 --metrics "$metrics" >"$log" 2>&1 &
    job=$!
    # Wait until training runs (steps are being logged), then a little more at random.
    for _ in $(seq 1 200); do
      [ -s "$metrics" ] && break
      sleep 0.05
    done
    sleep "0.$((RANDOM % 9 + 1))"
    pid=$(rank_pid "$victim") || pid=""
    if [ -z "$pid" ] || ! kill -s "$kind" "$pid" 2>/dev/null; then
      echo "trial $kind $t ($strategy): rank $victim was not running; no fault delivered"
      kill -KILL "$job" 2>/dev/null
      wait "$job" 2>/dev/null
      failures=$((failures + 1))
      continue
    fi
    hits=$((hits + 1))
    start=$(date +%s%3N)
    # The job must end by itself.
    ended=0
    for _ in $(seq 1 $((limit_s * 10))); do
      if ! kill -0 "$job" 2>/dev/null; then
        ended=1
        break
      fi
      sleep 0.1
    done
    if [ $ended = 0 ]; then
      echo "trial $kind $t ($strategy): HANG: the job still runs ${limit_s} s after SIGSTOP/SIGKILL of rank $victim"
      pkill -KILL -f "gradus train --dist" 2>/dev/null
      kill -KILL "$job" 2>/dev/null
      wait "$job" 2>/dev/null
      failures=$((failures + 1))
      continue
    fi
    wait "$job"
    rc=$?
    took=$(awk -v a="$start" -v b="$(date +%s%3N)" 'BEGIN { printf "%.2f", (b - a) / 1000 }')
    named=0
    if [ "$kind" = STOP ]; then
      grep -q "rank $victim (last heard" "$log" && named=1
    else
      # A dead rank: MPI's launcher or the survivors' diagnosis names it.
      grep -Eq "rank $victim (\(last heard|with PID|on node)|process rank $victim" "$log" && named=1
    fi
    if [ "$rc" = 0 ] || [ $named = 0 ]; then
      echo "trial $kind $t ($strategy): rank $victim: exit $rc after ${took}s, rank named: $named"
      sed 's/^/    /' "$log" | tail -8
      failures=$((failures + 1))
    else
      echo "trial $kind $t ($strategy): rank $victim: exit $rc after ${took}s, named"
    fi
    pkill -KILL -f "gradus train --dist" 2>/dev/null  # a stopped rank left behind, if any
  done
done
echo "faults delivered: $hits of $((2 * trials)); failed trials: $failures"
[ "$hits" = $((2 * trials)) ] && [ "$failures" = 0 ] && echo "faults: PASS" && exit 0
echo "faults: FAIL"
exit 1
