#!/usr/bin/env bash
# Crash safety: `gradus train --checkpoint-every 1 --resume` is SIGKILLed at random moments once it
# is writing checkpoints (most of a step's time is spent writing its checkpoint, so many kills land
# mid-write) at least KILLS times (default 50); the test fails unless >= KILLS/10 kills left a
# half-written file, every kill was followed by an inspection and >= KILLS/2 by a resume. After every kill: every checkpoint file in the directory must pass
# `gradus inspect` (files appear only by atomic rename, so the newest is complete), and the next
# start must resume from the newest one. Every 10th interruption is a SIGTERM instead, which must
# stop cleanly with a checkpoint of the current step (exit code 143). Finally the run is let
# finish: its weights must be bitwise identical (SHA-256) to an uninterrupted run's and its
# per-step losses identical, i.e. the kills lost nothing and changed nothing.
# MIDWRITE_KILLS > 0 keeps killing (up to 10 x KILLS kills) until that many SIGKILLs landed while a
# checkpoint was being written; the remaining arguments are added to the training command (e.g.
# --async-checkpoint: the writes then run on a background thread while training goes on).
# RANKS=N (with MPIRUN and DIST, e.g. zero1) runs every job on N ranks under --dist DIST; each
# kill is then a SIGKILL to every process of the job at once (a machine lost), and with DIST's
# sharded checkpoints it lands while the ranks write their shards of a set or rank 0 its index.
#   [RANKS=N MPIRUN=mpirun DIST=zero1] crash_test.sh GRADUS_EXE WORK_DIR [KILLS] [MIDWRITE_KILLS] [TRAIN_OPTION...]
source "$(dirname "$0")/lib.sh"
KILLS="${3:-50}"
MIDWRITE_KILLS="${4:-0}"
EXTRA=("${@:5}")
RANKS="${RANKS:-1}"
make_data

CFG=(train --data mnist --data-dir data --epochs 12 --batch-size 24 --threads 1 --device cpu
  --no-progress --model mlp --dropout 0.2 --optimizer adam --scheduler cosine --warmup-steps 10)
LAUNCH=()
if [ "$RANKS" -gt 1 ]; then
  # Its own session, so that one signal reaches mpirun and every rank (pkill -s).
  LAUNCH=(setsid "$MPIRUN" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1
    -np "$RANKS")
  CFG+=(--dist "$DIST")
fi
"${LAUNCH[@]}" "$GRADUS" "${CFG[@]}" --metrics ref.jsonl --log-every 1 --save ref.safetensors \
  >/dev/null 2>&1 || fail "the reference run failed"
TOTAL=$(step_losses ref.jsonl | wc -l)

kills=0 terms=0 graceful=0 midwrite=0 resumed=0 rounds=0 inspected=0
start_s=$SECONDS
RUN=("${LAUNCH[@]}" "$GRADUS" "${CFG[@]}" --checkpoint-dir ck --checkpoint-every 1 --keep-checkpoints 3 --resume
  --metrics run.jsonl --log-every 1 --save final.safetensors "${EXTRA[@]}")

# Checks every checkpoint in ck/; sets $newest (the file a resume must pick).
check_dir() {
  newest=""
  local n=0 f
  for f in ck/ckpt-*.safetensors; do
    [ -e "$f" ] || continue
    case "$f" in *.shard-*) continue ;; esac  # a set's shards: its index verifies them
    n=$((n + 1))
    "$GRADUS" inspect "$f" >inspect.out 2>&1 || fail "after kill $kills: $f does not load: $(cat inspect.out)"
    inspected=$((inspected + 1))
    newest="$f"
  done
  # Keep 3, plus at most one written whose oldest was not deleted yet (a resume prunes again).
  [ "$n" -le 4 ] || fail "after kill $kills: $n checkpoints in ck/ (--keep-checkpoints 3)"
  # A write in flight: a temp file, or a set's shards whose index is not there yet.
  local in_flight=0
  if ls ck/*.tmp.* >/dev/null 2>&1; then in_flight=1; fi
  for f in ck/ckpt-*.shard-*.safetensors; do
    [ -e "$f" ] && [ ! -e "${f%%.shard-*}.safetensors" ] && in_flight=1
  done
  midwrite=$((midwrite + in_flight))
}

# Whether to go on killing: KILLS kills, and MIDWRITE_KILLS of them during a write (bounded).
more_kills() {
  [ "$kills" -lt "$KILLS" ] && return 0
  [ "$midwrite_kills" -lt "$MIDWRITE_KILLS" ] && [ "$kills" -lt $((10 * KILLS)) ]
}
midwrite_kills=0
# Rounds: a fast machine may finish a run before KILLS kills; then a fresh round starts.
while more_kills; do
  rounds=$((rounds + 1))
  rm -rf ck run.jsonl final.safetensors
  expected_resume=""
  while more_kills; do
    # (A kill within a few microseconds can come before the redirection truncates run.out.)
    rm -f run.out
    touch started.mark
    "${RUN[@]}" >run.out 2>&1 &
    pid=$!
    # Adaptive: wait until this run writes checkpoints (a file in ck/ newer than its start; the
    # start-up time differs a lot between machines: loading the CUDA libraries alone can take
    # 0.3 s), then kill at a random moment 0..49 ms later, within the next few steps' writes.
    waited=0
    while kill -0 "$pid" 2>/dev/null && [ -z "$(find ck -newer started.mark -name 'ckpt-*' 2>/dev/null | head -1)" ]; do
      sleep 0.005
      waited=$((waited + 1))
      [ "$waited" -lt 6000 ] || fail "no checkpoint write within 30 s of a start: $(cat run.out)"
    done
    sleep "0.0$(printf '%02d' $((RANDOM % 50)))"
    sig=KILL
    if [ "$RANKS" -gt 1 ]; then
      pkill -KILL -s "$pid" 2>/dev/null || true
    else
      [ $(((kills + terms + 1) % 10)) -eq 0 ] && sig=TERM
      kill -s "$sig" "$pid" 2>/dev/null || true
    fi
    rc=0
    wait "$pid" || rc=$?
    if [ -n "$expected_resume" ] && grep -qs "resuming from" run.out; then
      grep -q "resuming from $expected_resume " run.out ||
        fail "expected a resume from $expected_resume: $(grep 'resuming from' run.out)"
      resumed=$((resumed + 1))
    fi
    if [ "$rc" -eq 0 ]; then
      break  # finished before the signal: this round is complete
    fi
    if [ "$sig" = TERM ]; then
      terms=$((terms + 1))
      [ "$rc" -eq 143 ] || fail "SIGTERM: expected exit code 143, got $rc: $(cat run.out 2>/dev/null)"
      if grep -qs "stopped after step" run.out; then
        graceful=$((graceful + 1))
        step=$(sed -nE 's/.*stopped after step ([0-9]+).*/\1/p' run.out)
        check_dir
        [ "$newest" = "ck/$(printf 'ckpt-%010d.safetensors' "$step")" ] ||
          fail "SIGTERM at step $step: the newest checkpoint is $newest"
      fi
    else
      kills=$((kills + 1))
      [ "$rc" -eq 137 ] || fail "kill $kills: expected exit code 137 (SIGKILL), got $rc: $(cat run.out 2>/dev/null)"
    fi
    before=$midwrite
    check_dir
    [ "$sig" = KILL ] && [ "$midwrite" -gt "$before" ] && midwrite_kills=$((midwrite_kills + 1))
    echo "pid $pid: SIG$sig, exit $rc, $(grep -so 'resuming from [^ ]*' run.out), newest now $newest" >>cycles.log
    expected_resume="$newest"
  done
  # Let the round finish undisturbed and compare with the uninterrupted run.
  "${RUN[@]}" >run.out 2>&1 || fail "the final resume failed: $(cat run.out 2>/dev/null)"
  [ "$RANKS" -le 1 ] || ls ck/ckpt-*.shard-*.safetensors >/dev/null 2>&1 ||
    fail "round $rounds: --dist $DIST on $RANKS ranks wrote no sharded checkpoint set"
  [ "$(sha final.safetensors)" = "$(sha ref.safetensors)" ] ||
    fail "round $rounds: the final weights differ from the uninterrupted run's"
  diff <(step_losses ref.jsonl) <(step_losses run.jsonl) >/dev/null ||
    fail "round $rounds: the per-step losses differ: $(diff <(step_losses ref.jsonl) <(step_losses run.jsonl) | head -4)"
done

# The test must have tested something: enough kills landed while a checkpoint was being written,
# and enough files were inspected and resumed from.
[ "$midwrite" -ge $((KILLS / 10)) ] ||
  fail "only $midwrite of $kills kills landed during a checkpoint write (want >= $((KILLS / 10)))"
[ "$midwrite_kills" -ge "$MIDWRITE_KILLS" ] ||
  fail "only $midwrite_kills of $kills SIGKILLs landed during a checkpoint write (want >= $MIDWRITE_KILLS)"
[ "$inspected" -ge "$kills" ] || fail "only $inspected checkpoint files inspected after $kills kills"
[ "$resumed" -ge $((KILLS / 2)) ] || fail "only $resumed resumes after $kills kills (want >= $((KILLS / 2)))"
echo "PASS${EXTRA[*]:+ (${EXTRA[*]})}$([ "$RANKS" -gt 1 ] && echo " on $RANKS ranks, --dist $DIST"): $kills SIGKILLs ($midwrite_kills during a write) + $terms SIGTERMs ($graceful stopped with a checkpoint) in $rounds round(s)" \
  "of $TOTAL steps; $midwrite kills left a write in flight (a temp file, or a set without its index); $inspected checkpoint files" \
  "inspected, all valid; $resumed resumes from the newest checkpoint; final weights and all losses" \
  "bitwise identical to the uninterrupted run ($((SECONDS - start_s)) s)"
