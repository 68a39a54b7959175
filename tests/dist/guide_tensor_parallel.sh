#!/usr/bin/env bash
# examples/guide/tensor_parallel.cpp and pipeline.cpp (the guide's model-parallel Trainers) train
# the same run on one process, on 2 tensor ranks (2 stages) and on 2 data x 2 tensor ranks (2 data
# x 2 stages): the same final loss.
# usage: guide_tensor_parallel.sh EXAMPLE MPIRUN [NAME]
set -uo pipefail
example=$1
mpirun=$2
one=$("$example" 2>&1) || { echo "FAIL: one process: $one"; exit 1; }
grep -q "^loss=[0-9]" <<<"$one" || { echo "FAIL: one process printed: $one"; exit 1; }
for np in 2 4; do
  got=$(timeout 120 "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
    -np "$np" "$example" 2>&1) || { echo "FAIL: -np $np: $got"; exit 1; }
  [ "$got" = "$one" ] || { echo "FAIL: -np $np printed '$got', one process '$one'"; exit 1; }
done
echo "${3:-guide_tensor_parallel}: 1, 2 and 4 ranks: $one PASS"
