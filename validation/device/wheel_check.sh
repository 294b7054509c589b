#!/usr/bin/env bash
# The wheel on the GPU machine, with no source tree: from the repository root of a GPU machine
# that has nvcc and python3 with torch, numpy, scipy, click, rich, matplotlib but not simpy
# (carry .whl/: python3 -m pip download --no-deps --only-binary=:all: -d .whl simpy; and,
# where this machine cannot build a wheel offline, the pksim wheel too: pip wheel . --no-deps
# -w .whl). Each step's output goes to OUTDIR/<step>.log, its exit code to OUTDIR/exit-codes.txt.
#
#   validation/device/wheel_check.sh OUTDIR
#
# Steps: wheel (pip wheel . --no-build-isolation --no-index, else the carried .whl/pksim-*.whl),
# install (the wheel and simpy with --no-deps --target a clean prefix on python3's path),
# import (pksim.__file__ under that prefix, from a temp dir: the checkout is off sys.path), env,
# calibrate (--quick -o cal.toml), run (all-reduce 64MiB, 8 virtual ranks), validate (--suite
# quick). Every step runs even when one before it failed, unless it needs what failed.
set -u
out="${1:?usage: validation/device/wheel_check.sh OUTDIR}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
repo=$(pwd)
tmp=$(mktemp -d /tmp/pksim-wheel.XXXXXX)
codes="$out/exit-codes.txt"
: > "$codes"
step() {  # step NAME TIMEOUT_S COMMAND...: run it, log its output and exit code
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout --signal=KILL "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name $rc $(( $(date +%s) - t0 ))s" | tee -a "$codes"
  return $rc
}
unset PYTHONPATH PKSIM_KERNELS
export CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0 PKSIM_CACHE="$tmp/cache"

# 1. the wheel: built here, else the one carried in .whl/
if step wheel 300 python3 -m pip wheel "$repo" --no-deps --no-build-isolation --no-index \
     -w "$tmp/dist"; then
  wheel=$(ls "$tmp"/dist/pksim-*.whl)
else
  wheel=$(ls "$repo"/.whl/pksim-*.whl 2>/dev/null | head -n 1)
  echo "wheel: not built here; carried: ${wheel:-none}" | tee -a "$codes"
fi
[ -n "${wheel:-}" ] || { echo "no wheel; stopping" | tee -a "$codes"; exit 1; }

# 2. a clean prefix: the wheel and simpy installed into an empty folder with --target, on
# python3's path beside its own packages (torch, numpy, ...); a venv made from python3 would
# not see them where python3 is itself a venv (as on the GPU machine)
prefix="$tmp/prefix"
py=python3
step install 300 "$py" -m pip install --no-deps --no-index --no-cache-dir --target "$prefix" \
  "$wheel" $(ls "$repo"/.whl/simpy-*.whl 2>/dev/null) || exit 1
export PYTHONPATH="$prefix" PATH="$prefix/bin:$PATH"

# 3. from a temporary directory: nothing of the checkout on sys.path
mkdir -p "$tmp/work" && cd "$tmp/work"
step import 60 "$py" -c "import pksim, sys; f = pksim.__file__; print(f); \
sys.exit(0 if f.startswith('$prefix/') else 1)"
step env 120 pksim env
pksim env --json > "$out/env.json" 2>/dev/null
step calibrate 540 pksim calibrate --quick -o cal.toml --results-out mb --force
cp cal.toml "$out/" 2>/dev/null; cp mb/microbench.json "$out/" 2>/dev/null
step run 300 pksim run --op all-reduce --bytes 64MiB --world 8 --virtual
step validate 540 pksim validate --suite quick -o val --force
tar czf "$out/validate.tgz" -C "$tmp/work" val 2>/dev/null
cd "$repo" && rm -rf "$tmp"
cat "$codes"
