#!/usr/bin/env bash
# A stop signal that reaches one rank stops the whole job after one agreed step: SIGTERM (trials
# 1-2) or SIGUSR1 (trial 3) to rank 1 alone, at whatever step it lands, makes both ranks stop
# after the same step (rank 0 reports it), write one checkpoint there and exit 128 + the signal;
# --resume then finishes the run. (Before the ranks decided on the exchanged request, a signal
# landing just after a step's exchange stopped rank 1 alone and rank 0 timed out in the next
# all-reduce: 2 of 4 trials.) Trials 4-5 signal mpirun instead (SIGUSR1, SIGTERM).
# usage: collective_stop.sh GRADUS MPIRUN DATA_DIR
set -uo pipefail
gradus=$1
mpirun=$2
data=$3
work=$(mktemp -d)
trap 'pkill -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
args=(train --model mlp --epochs 3 --threads 1 --batch-size 32 --limit-train 30000 --limit-test 500
  --no-progress --dist ddp --data-dir "$data" --checkpoint-every 100)
landed=0
# Trials 1-2 SIGTERM, trial 3 SIGUSR1 (Slurm's --signal=USR1@T warning): the same stop, exit 138.
for trial in 1 2 3; do
  signal=TERM
  [ "$trial" = 3 ] && signal=USR1
  code=$([ "$signal" = TERM ] && echo 143 || echo 138)
  dir=$work/ckpt$trial
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -np 2 "$gradus" "${args[@]}" --checkpoint-dir "$dir" >"$work/log$trial" 2>&1 &
  job=$!
  # Once training runs (the first checkpoint is there), a little later on each trial.
  for _ in $(seq 300); do [ -n "$(ls "$dir" 2>/dev/null)" ] && break; sleep 0.1; done
  [ -n "$(ls "$dir" 2>/dev/null)" ] || fail "trial $trial: training did not start: $(cat "$work/log$trial")"
  sleep "0.$((trial * 3))"
  victim=$(pgrep -f -- "--checkpoint-dir $dir" | sort -n | tail -1)
  [ -n "$victim" ] || fail "trial $trial: no rank process found"
  kill -"$signal" "$victim"
  wait "$job"
  rc=$?
  log=$(cat "$work/log$trial")
  [ "$rc" = "$code" ] || fail "trial $trial: exit $rc, expected $code: $log"
  # Rank 0 reports (after rank 1's signal reached it through the step's exchange); a rank that
  # went on alone would have timed out in the next all-reduce instead of exiting 128 + signal.
  steps=$(grep -o "stopped after step [0-9]* (SIG$signal)" <<<"$log" | sort -u)
  [ "$(grep -c 'stopped after step' <<<"$log")" = 1 ] && [ "$(wc -l <<<"$steps")" = 1 ] ||
    fail "trial $trial: not one stop report: $log"
  grep -q "timed out" <<<"$log" && fail "trial $trial: a rank went on alone: $log"
  step=$(grep -o '[0-9]*' <<<"$steps" | head -1)
  [ -f "$dir/ckpt-$(printf %010d "$step").safetensors" ] ||
    fail "trial $trial: no checkpoint at step $step: $(ls "$dir")"
  landed=$((landed + 1))
done
# Signals to mpirun itself. SIGUSR1 is forwarded to every rank at once: the same collective stop.
# SIGTERM makes mpirun send SIGCONT, wait odls_base_sigkill_timeout seconds, send SIGTERM, wait
# as long again, then SIGKILL: with the default of 1 s a checkpoint that takes longer to write is
# lost, so the timeout is raised as the README says. Both trials run 6 epochs (the SIGTERM lands
# 3 s late). mpirun itself exits 138 for SIGUSR1 and 1 for SIGTERM (it reports the kill).
for trial in 4 5; do
  signal=USR1
  mca=()
  if [ "$trial" = 5 ]; then
    signal=TERM
    mca=(--mca odls_base_sigkill_timeout 3)
  fi
  dir=$work/ckpt$trial
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    "${mca[@]}" -np 2 "$gradus" "${args[@]}" --epochs 6 --checkpoint-dir "$dir" >"$work/log$trial" 2>&1 &
  job=$!
  for _ in $(seq 300); do [ -n "$(ls "$dir" 2>/dev/null)" ] && break; sleep 0.1; done
  [ -n "$(ls "$dir" 2>/dev/null)" ] || fail "trial $trial: training did not start: $(cat "$work/log$trial")"
  launcher=$(pgrep -P "$job" | head -1)  # mpirun (or mpiexec), the child of `timeout`
  [ -n "$launcher" ] || fail "trial $trial: mpirun not found"
  kill -"$signal" "$launcher"
  wait "$job"
  rc=$?
  log=$(cat "$work/log$trial")
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "trial $trial: mpirun exit $rc: $log"
  steps=$(grep -o "stopped after step [0-9]* (SIG$signal)" <<<"$log" | sort -u)
  [ "$(grep -c 'stopped after step' <<<"$log")" = 1 ] && [ "$(wc -l <<<"$steps")" = 1 ] ||
    fail "trial $trial: SIG$signal to mpirun: not one stop report: $log"
  step=$(grep -o '[0-9]*' <<<"$steps" | head -1)
  [ -f "$dir/ckpt-$(printf %010d "$step").safetensors" ] ||
    fail "trial $trial: no checkpoint at step $step: $(ls "$dir")"
  landed=$((landed + 1))
done
# The third trial's run resumes and ends.
out=$(timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
  -np 2 "$gradus" "${args[@]}" --checkpoint-dir "$work/ckpt3" --resume 2>&1) ||
  fail "the resumed run failed: $out"
grep -q "resuming from" <<<"$out" && grep -q "test_accuracy=" <<<"$out" ||
  fail "the resumed run did not resume and finish: $out"
echo "collective_stop: the signal to one rank (3 trials) or to mpirun (2) landed $landed of 5 times, each time both ranks stopped at one step with one checkpoint, and the run resumed PASS"
