# validation/device/common.sh: sourced by the device scripts that take BUNDLE OUTDIR
# (validate.sh, scale.sh, collectives.sh): sets $bundle and $out from them, makes OUTDIR, sets
# $py (PYTHON, default python3) and the environment every run of the kernels needs.
set -u
bundle="$1"
out="$2"
mkdir -p "$out"
py=${PYTHON:-python3}
export CUDA_MODULE_LOADING=EAGER PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0

device_info() {  # the GPU (name, UUID), driver, date, torch, nvcc, compute-sanitizer
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  date -u +%Y-%m-%dT%H:%M:%SZ
  $py -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  command -v nvcc >/dev/null && nvcc --version | tail -1
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version | tail -1
}

coverage() {  # NAME CASES.json RESULTS.jsonl: one line, cases with a result, failed, not run
  $py - "$@" 2>&1 <<'PY'
import json, sys
name, cases, results = sys.argv[1:4]
ids = [c["id"] for c in json.load(open(cases)) if c.get("op")]
rows = {}
try:
    for line in open(results):
        if line.strip():
            r = json.loads(line)
            rows[r["id"]] = r
except FileNotFoundError:
    pass
ok = [i for i in ids if rows.get(i, {}).get("ok")]
left = [i for i in ids if i not in rows or rows[i].get("skipped")]
failed = [i for i in ids if i in rows and not rows[i].get("ok") and i not in left]
print(f"{name}: {len(ok)} of {len(ids)} cases ok, {len(failed)} failed, {len(left)} not run"
      + (f"; failed: {' '.join(failed[:10])}" if failed else "")
      + (f"; not run: {' '.join(left[:10])}{' ...' if len(left) > 10 else ''}" if left else ""))
PY
}
