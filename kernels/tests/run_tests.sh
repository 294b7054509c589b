#!/usr/bin/env bash
# Build every kernels/tests/test_*.cu for Hopper (sm_90a) into BUILD_DIR and run them on the
# GPU, one after the other. Each test prints one JSON line per case; this script keeps them in
# BUILD_DIR/<test>.jsonl, prints a summary and exits non-zero if any build, run or case failed.
#
#   kernels/tests/run_tests.sh [BUILD_DIR]          (default: build/pk-tests)
#
# Environment: NVCC (default nvcc), PK_NVCC_FLAGS (extra flags), PK_TEST_TIMEOUT (seconds per
# test program, default 300), PK_TESTS (space-separated names to run, default all).
set -u -o pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build/pk-tests}"
nvcc_bin="${NVCC:-nvcc}"
timeout_s="${PK_TEST_TIMEOUT:-300}"
mkdir -p "$build"

export CUDA_MODULE_LOADING=EAGER
flags=(-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -I"$root/kernels/include")
# shellcheck disable=SC2206
extra=(${PK_NVCC_FLAGS:-})

names=()
for src in "$here"/test_*.cu; do
  name="$(basename "$src" .cu)"
  if [ -n "${PK_TESTS:-}" ] && [[ " $PK_TESTS " != *" $name "* ]]; then continue; fi
  names+=("$name")
done
if [ "${#names[@]}" -eq 0 ]; then
  echo "no tests selected" >&2
  exit 2
fi

echo "== building ${#names[@]} tests into $build"
declare -A build_pid
for name in "${names[@]}"; do
  "$nvcc_bin" "${flags[@]}" "${extra[@]}" -o "$build/$name" "$here/$name.cu" \
    >"$build/$name.build.log" 2>&1 &
  build_pid[$name]=$!
done

declare -A status
failed=0
for name in "${names[@]}"; do
  if ! wait "${build_pid[$name]}"; then
    status[$name]="BUILD FAILED (see $build/$name.build.log)"
    cat "$build/$name.build.log" >&2
    failed=1
  fi
done

for name in "${names[@]}"; do
  [ -n "${status[$name]:-}" ] && continue
  echo "== $name"
  start=$(date +%s)
  timeout --signal=KILL "$timeout_s" "$build/$name" | tee "$build/$name.jsonl"
  rc=$?
  secs=$(( $(date +%s) - start ))
  cases=$(grep -c '"ok": ' "$build/$name.jsonl" || true)
  bad=$(grep -c '"ok": false' "$build/$name.jsonl" || true)
  if [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ] && [ "$cases" -gt 0 ]; then
    status[$name]="ok      ($cases cases, ${secs}s)"
  else
    if [ "$rc" -eq 137 ]; then why="killed after ${timeout_s}s"; else why="exit $rc"; fi
    status[$name]="FAILED  ($bad of $cases cases failed, $why, ${secs}s)"
    failed=1
  fi
done

echo
echo "== summary"
for name in "${names[@]}"; do
  printf '%-20s %s\n' "$name" "${status[$name]}"
done
exit "$failed"
