#!/usr/bin/env bash
# Run the generated collectives on a GPU machine, from the repository root:
#   validation/device/collectives.sh BUNDLE OUTDIR
# BUNDLE comes from `python -m validation.prepare.collectives --out BUNDLE` (libraries, cases,
# sanitizer driver). Writes into OUTDIR: device.txt, collectives.jsonl (virtual ranks:
# correctness matrix, timing, copy bandwidth), memcheck.txt (compute-sanitizer on small cases),
# ipc.jsonl (two processes on one GPU through CUDA IPC, host-synchronised).
# Time limits (seconds): PK_MATRIX_DEADLINE (150), PK_SANITIZE_TIMEOUT (60), PK_IPC_TIMEOUT (45).
source validation/device/common.sh "$@"
device_info > "$out/device.txt" 2>&1

# The libraries were built elsewhere; rebuild here only if they do not load.
if ! $py -c "import ctypes, glob, sys; [ctypes.CDLL(p) for p in glob.glob(sys.argv[1] + '/lib/*.so')]" "$bundle" \
    2>> "$out/device.txt"; then
  echo "prebuilt libraries do not load here: rebuilding" >> "$out/device.txt"
  $py -c "from pathlib import Path; from validation.prepare.collectives import build_libs; build_libs(Path('$bundle'), 'h200-virtual')" \
    >> "$out/device.txt" 2>&1
fi

$py -m validation.run.collectives --cases "$bundle/cases.json" --out "$out/collectives.jsonl" \
  --deadline-s "${PK_MATRIX_DEADLINE:-150}" --case-timeout 40 2> "$out/matrix.log"
echo "matrix exit $?" >> "$out/matrix.log"

timeout --signal=KILL "${PK_SANITIZE_TIMEOUT:-60}" compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$bundle/sanitize_collectives" "$bundle"/lib/*.so > "$out/memcheck.txt" 2>&1
echo "memcheck exit $?" >> "$out/memcheck.txt"

timeout --signal=KILL "${PK_IPC_TIMEOUT:-45}" $py -m torch.distributed.run --nproc_per_node=2 \
  -m validation.run.collectives --ipc --cases "$bundle/ipc_cases.json" --out "$out/ipc.jsonl" \
  > "$out/ipc.log" 2>&1
echo "ipc exit $?" >> "$out/ipc.log"
tail -n 3 "$out/matrix.log" "$out/memcheck.txt" "$out/ipc.log"
