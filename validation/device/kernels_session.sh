#!/usr/bin/env bash
# Issue #38's device session in one call, from the repository root of a GPU machine (nvcc,
# python3 + torch; the simpy wheel in .whl/, validation/device/env.sh):
#
#   validation/device/kernels_session.sh [--budget S] [--hostcost DIR] [--gemm-lib SO] OUTDIR
#
# 1. the random-shape matrix with its memcheck and timed slices (random_matrix.sh --timed:
#    correctness of every kernel at >= 2,000 shapes, compute-sanitizer on a slice, a few hundred
#    random shapes timed and judged against this GPU's own calibration);
# 2. the host's time per fused launch with the tensor maps cached and encoded on every launch
#    (validation/run/fused_host.py; --hostcost: the libraries validation.prepare.fused_host
#    built, DIR/libs.json; skipped without it);
# 3. the GEMM against torch.matmul in turn (gemm.sh --no-profile; --gemm-lib: a library built
#    where nvcc is, else built here, about a minute more), within what is left of the budget.
# Everything ends in OUTDIR/kernels-session.tgz (one file: a device call returns at most 8);
# the reports are printed. Of the budget (540 s) the matrix gets all but 125 s, kept for the
# GEMM's three processes and the host cost (their times on an H100: D84).
set -u
budget=540
hostcost=
gemm_lib=()
while [ $# -gt 1 ]; do
  case "$1" in
    --budget) budget=$2; shift 2;;
    --hostcost) hostcost=$2; shift 2;;
    --gemm-lib) gemm_lib=(--lib "$2"); shift 2;;
    *) echo "kernels_session.sh: unknown option $1" >&2; exit 2;;
  esac
done
out="${1:?usage: validation/device/kernels_session.sh [--budget S] [--hostcost DIR] [--gemm-lib SO] OUTDIR}"
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
mkdir -p "$out/ks"
source validation/device/env.sh
rm_budget=$(( budget - 125 ))
bash validation/device/random_matrix.sh --timed --budget "$rm_budget" "$out/ks/matrix"
echo "matrix exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/ks/times.txt"
if [ -n "$hostcost" ] && [ -f "$hostcost/libs.json" ]; then
  timeout 30 python3 -m validation.run.fused_host --libs "$hostcost/libs.json" \
    --out "$out/ks/fused-host.jsonl" 2>&1 | tail -n 12 | tee "$out/ks/fused-host.txt"
  echo "host cost exit ${PIPESTATUS[0]} at $(( $(date +%s) - t0 )) s" | tee -a "$out/ks/times.txt"
fi
timeout --signal=KILL $(( $(left) - 10 )) bash validation/device/gemm.sh --no-profile \
  ${gemm_lib[@]+"${gemm_lib[@]}"} "$out/ks/gemm" > "$out/ks/gemm.log" 2>&1
echo "gemm exit $? at $(( $(date +%s) - t0 )) s" | tee -a "$out/ks/times.txt"
python3 -m validation.report.gemm "$out"/ks/gemm/gemm*.jsonl --smi "$out/ks/gemm/smi.csv" \
  > "$out/ks/gemm-report.md" 2>&1
tail -n 40 "$out/ks/gemm-report.md"
tar czf "$out/kernels-session.tgz" -C "$out" ks && rm -rf "$out/ks"
