#!/usr/bin/env bash
# The layering, checked on the sources: each library includes only its own headers and the public
# (or build-internal) headers of the layers below it (docs/design.md, "Layers"). Fails naming
# every include that goes up a layer or skips to one it may not use.
# usage: check_layers.sh SOURCE_DIR
set -uo pipefail
root=${1:?usage: check_layers.sh SOURCE_DIR}
cd "$root" || exit 1

# The component a file or an included path belongs to.
component() {
  case "$1" in
    include/gradus/core/* | src/core/* | gradus/core/* | core/*) echo core ;;
    src/backend/* | backend/*) echo backend ;;
    # The autocast guard's header sits under amp/ where users look for it, but it is implemented
    # by the op layer (src/ops/autocast.cpp), which applies the policy inside each op.
    include/gradus/amp/autocast.h | gradus/amp/autocast.h) echo autograd ;;
    include/gradus/autograd.h | include/gradus/autograd/* | include/gradus/ops.h | src/ops/* | \
      src/autograd/* | gradus/autograd.h | gradus/autograd/* | gradus/ops.h | ops/* | autograd/*)
      echo autograd ;;
    include/gradus/nn/* | src/nn/* | gradus/nn/* | nn/*) echo nn ;;
    include/gradus/optim/* | src/optim/* | gradus/optim/* | optim/*) echo optim ;;
    include/gradus/data/* | src/data/* | gradus/data/* | data/*) echo data ;;
    include/gradus/io/* | src/io/* | gradus/io/* | io/*) echo io ;;
    include/gradus/amp/* | src/amp/* | gradus/amp/* | amp/*) echo amp ;;
    include/gradus/monitor/* | src/monitor/* | gradus/monitor/* | monitor/*) echo monitor ;;
    include/gradus/dist/* | src/dist/* | gradus/dist/* | dist/*) echo dist ;;
    include/gradus/train/* | src/train/* | gradus/train/* | train/*) echo train ;;
    include/gradus/gradus.h | gradus/gradus.h) echo umbrella ;;
    *) echo external ;;
  esac
}

# What each component may include besides itself (the CMake targets' dependencies).
allowed() {
  case "$1" in
    core) echo "" ;;
    # The backends: the core; src/backend/common is their shared op metadata.
    backend) echo "core" ;;
    autograd) echo "core backend" ;;
    nn | data) echo "core autograd" ;;
    # The optimizers' fused multi-tensor kernels are backend primitives without autograd:
    # optimizers (and the scaler's unscale-and-check) call them directly, as the op layer would
    # only pass them through.
    optim) echo "core autograd backend" ;;
    amp) echo "core autograd backend optim" ;;
    io) echo "core autograd nn optim" ;;
    monitor) echo "core" ;;
    dist) echo "core autograd nn optim io" ;;
    train) echo "core autograd nn optim data io amp monitor dist" ;;
    umbrella) echo "core autograd nn optim data io amp monitor dist" ;;
  esac
}

violations=0
checked=0
while IFS= read -r file; do
  from=$(component "$file")
  ok=" $from $(allowed "$from") "
  while IFS= read -r included; do
    to=$(component "$included")
    [ "$to" = external ] && continue
    checked=$((checked + 1))
    if [[ $ok != *" $to "* ]]; then
      echo "layering: $file ($from) includes \"$included\" ($to)"
      violations=$((violations + 1))
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find include src -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
[ "$checked" -gt 500 ] || { echo "FAIL: only $checked includes checked: the scan is broken"; exit 1; }
if [ "$violations" -gt 0 ]; then
  echo "FAIL: $violations include(s) go up a layer or skip to one the layer may not use"
  exit 1
fi
echo "layering: $checked includes between layers checked, none goes up: PASS"
