#!/usr/bin/env bash
# Each library's private include root (cmake/GradusHelpers.cmake, gradus_private_root) lets it
# include its own private headers and the lower layers' internal headers it is allowed, and
# nothing else: compiled here with exactly the include flags the library gets (its root and the
# public headers), a private header of another layer is not found, while its own are.
# usage: check_private_roots.sh BUILD_DIR SOURCE_DIR CXX
set -uo pipefail
build=$1
src=$2
cxx=$3
fail() {
  echo "FAIL: $*"
  exit 1
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checks=0
compiles() {  # compiles LIBRARY HEADER: 0 when a file including HEADER compiles as LIBRARY would
  printf '#include "%s"\nint main() { return 0; }\n' "$2" >"$work/probe.cpp"
  "$cxx" -std=c++20 -fsyntax-only -I"$src/include" -I"$build/private_include/gradus_$1" \
    "$work/probe.cpp" >"$work/err" 2>&1
}
expect() {  # expect LIBRARY HEADER yes|no
  local got=no
  compiles "$1" "$2" && got=yes
  [ "$got" = "$3" ] || fail "gradus_$1 including $2: compiled=$got, expected $3 ($(head -2 "$work/err"))"
  # (Refused for the right reason: the header is not there, not some other error.)
  [ "$3" = yes ] || grep -q "$2: No such file" "$work/err" || fail "gradus_$1 including $2: $(head -2 "$work/err")"
  checks=$((checks + 1))
}
[ -d "$build/private_include/gradus_dist" ] || fail "no private include roots under $build/private_include"
expect dist dist/flat.h yes
expect dist core/shared_library.h yes
expect dist ops/common.h no
expect dist backend/cpu/loops.h no
expect nn dist/flat.h no
expect nn ops/autocast.h no
expect train dist/gather.h no
expect train data/loader_stages.h no
expect optim optim/common.h yes
expect optim backend/backend.h yes
expect optim ops/common.h no
expect autograd ops/common.h yes
expect autograd core/stream_order.h no
expect data data/loader_stages.h yes
expect data monitor/nvml_abi.h no
[ "$checks" -eq 15 ] || fail "$checks of 15 checks ran"
echo "private_roots: $checks includes found or refused as each library's root says: PASS"
