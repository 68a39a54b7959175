#!/usr/bin/env bash
# Start-up waits are bounded: a rank that never calls MPI_Init (here a process that only sleeps)
# ends the job within twice --dist-timeout, naming the cause, instead of holding the others in
# MPI_Init forever; a rank launched without --dist beside one with it is refused at once, and the
# job ends.
# usage: startup.sh GRADUS MPIRUN DATA_DIR
set -uo pipefail
gradus=$1
mpirun=$2
data=$3
fail() {
  echo "FAIL: $*"
  exit 1
}
mpi=("$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
run=(train --epochs 1 --limit-train 64 --limit-test 64 --no-progress --data-dir "$data" --threads 1)
start=$(date +%s)
out=$(timeout 60 "${mpi[@]}" -np 1 "$gradus" "${run[@]}" --dist ddp --dist-timeout 2 : \
  -np 1 sh -c 'sleep 50' 2>&1)
rc=$?
took=$(($(date +%s) - start))
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a rank that never started: exit $rc after $took s: $out"
[ "$took" -lt 30 ] || fail "a rank that never started: the job took $took s to end"
[ "$(grep -c "the ranks did not all start within 4 s" <<<"$out")" = 1 ] ||
  fail "a rank that never started: no start-up timeout message: $out"
start=$(date +%s)
out=$(timeout 60 "${mpi[@]}" -np 1 "$gradus" "${run[@]}" --dist ddp --dist-timeout 2 : \
  -np 1 "$gradus" "${run[@]}" 2>&1)
rc=$?
took2=$(($(date +%s) - start))
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "a rank without --dist: exit $rc after $took2 s: $out"
[ "$took2" -lt 30 ] || fail "a rank without --dist: the job took $took2 s to end"
grep -q "no parallel option was given" <<<"$out" || fail "a rank without --dist: not refused: $out"
echo "startup: a rank that never started ended the job in $took s, a rank without --dist in $took2 s PASS"
