#!/usr/bin/env bash
# One device call on a GPU that the kernel profile was not fitted on (issue #43: an H100,
# kind nvidia-h100-x1), from the repository root of a GPU machine with nvcc and python3 with
# torch (carry the simpy wheel in .whl/, as validation/device/env.sh says). Everything
# `pksim validate --ported` and `pksim calibrate` need from that GPU ends in
# OUTDIR/portability.tgz:
#
#   validation/device/portability.sh [--steps LIST] [--budget S] OUTDIR
#     --steps LIST   comma-separated, of:
#                      hardware  pksim calibrate --hardware-only (the hardware's primitives,
#                                run.py --budget-s 90): hw/calibrated.toml, hw/mb/microbench.json
#                      profile   the kernel profile's microbenchmarks (block_moves,
#                                epilogue_moves, fused_pull, signal_chain): prof/microbench.json
#                      suite     the default suite's collectives (validation/device/session.sh
#                                --steps suite): s/session.tgz
#                      fused     its fused kernels too (session.sh --steps suite,fused)
#                    [default: hardware,suite,fused]
#     --budget S     the whole call [560]; the suite gets what the steps before it left
#
# Then, here (no GPU): the H100 predicted from its datasheet with the H200's profile,
#   pksim validate --ported pk-hopper --system h100-virtual \
#     --measured v/measured.jsonl --measured v/fused-measured.jsonl -o OUT
# after its own --hardware-only calibration (make a virtual-rank child of hw/calibrated.toml),
#   pksim validate --ported pk-hopper --system H100-VIRTUAL-HW.toml --targets hardware-only ...
# and the reverse, once prof/ exists: pksim calibrate --from-json hw/mb/microbench.json
# --from-json prof/microbench.json -o h100-calibrated.toml (writes h100-calibrated.profile.toml),
#   pksim validate --ported ./h100-calibrated.profile.toml --system hgx-h200-virtual \
#     --measured validation/data/report/h200-validate-2026-12-04-tma-fix.jsonl.gz \
#     --measured validation/data/report/h200-fused-2026-12-04-tma-fix.jsonl.gz -o OUT
# Virtual ranks on one GPU never exercise NVLink: none of this judges a multi-GPU system.
set -u
steps=hardware,suite,fused
budget=560
while [ $# -gt 1 ]; do
  case "$1" in
    --steps) steps=$2;;
    --budget) budget=$2;;
    *) echo "portability.sh: unknown option $1" >&2; exit 2;;
  esac
  shift 2
done
out="${1:?usage: validation/device/portability.sh [--steps LIST] [--budget S] OUTDIR}"
t0=$(date +%s)
mkdir -p "$out"
source validation/device/env.sh
left() { echo $(( budget - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$out/gpu.csv"
case ",$steps," in *,hardware,*)
  mkdir -p "$out/hw"
  timeout 200 python3 -c "from pksim_cli.main import main; main()" calibrate --hardware-only \
    --python python3 --results-out "$out/hw/mb" -o "$out/hw/calibrated.toml" --json \
    > "$out/hw/calibrate.json" 2> "$out/hw/calibrate.log"
  echo "hardware exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/times.txt";;
esac
case ",$steps," in *,profile,*)
  cap=$(( $(left) / 2 ))
  python3 validation/microbench/run.py --out "$out/prof" --kernels kernels \
    --only block_moves,epilogue_moves,fused_pull,signal_chain --budget-s "$cap" \
    > "$out/prof.log" 2>&1
  echo "profile exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/times.txt";;
esac
session=; case ",$steps," in *,suite,*) session=suite;; esac
case ",$steps," in *,fused,*) session=${session:+$session,}fused;; esac
if [ -n "$session" ]; then
  bash validation/device/session.sh --steps "$session" --budget "$(left)" "$out/s" \
    > "$out/suite.log" 2>&1
  echo "suite exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/times.txt"
fi
rm -rf "$out/hw/mb/bin" "$out/prof/bin"
tar czf "$out/portability.tgz" -C "$out" $(cd "$out" && ls) && \
  find "$out" -mindepth 1 ! -name portability.tgz -delete
