"""Running the microbenchmarks for ``pksim calibrate``: find the GPU, run
validation/microbench/run.py on it with its progress shown (it rewrites
microbench.json as results come)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

from hwmodels.errors import ValidationError
from hwmodels.resources import kernels_dir, microbench_dir


# ---- running the microbenchmarks ---------------------------------------------------------
def run_py() -> Path:
    """The microbenchmark driver, validation/microbench/run.py, where pksim is installed."""
    return microbench_dir() / "run.py"


def find_gpu(device: int) -> str:
    """The ``nvidia-smi -L`` line of CUDA device ``device``; a one-line ValidationError
    when this machine has no NVIDIA GPU (or not that many)."""
    hint = ("refit saved results with --from-json RESULTS.json (`pksim env` shows what this "
            "machine offers)")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise ValidationError(f"no NVIDIA GPU on this machine (nvidia-smi not found); {hint}")
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValidationError(f"nvidia-smi -L failed ({exc}); {hint}") from None
    gpus = [line.strip() for line in out.stdout.splitlines() if line.startswith("GPU ")]
    if out.returncode != 0 or not gpus:
        first = (out.stderr or out.stdout).strip().splitlines()[:1]
        raise ValidationError(f"no NVIDIA GPU usable (nvidia-smi -L: "
                              f"{first[0] if first else 'no GPU listed'}); {hint}")
    if not 0 <= device < len(gpus):
        raise ValidationError(f"--device {device}: this machine has {len(gpus)} GPU(s) "
                              f"(0..{len(gpus) - 1})")
    return gpus[device]


def run_microbenchmarks(out_dir: Path, device: int, python: str, quick: bool,
                        echo: Callable[[str], None], only: tuple[str, ...] = (),
                        budget_s: float | None = None) -> tuple[int, Path]:
    """Run validation/microbench/run.py on ``device`` (``only`` those benchmarks, within
    ``budget_s`` seconds of runs), echoing its progress; it writes out_dir/microbench.json as
    results come. Returns (exit status, results file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(run_py()), "--out", str(out_dir), "--python", python,
           "--kernels", str(kernels_dir())]
    if quick:
        cmd.append("--quick")
    if only:
        cmd += ["--only", ",".join(only)]
    if budget_s is not None:
        cmd += ["--budget-s", f"{budget_s:g}", "--timeout-s", f"{budget_s:g}"]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(device), PYTHONUNBUFFERED="1")
    echo("running: " + " ".join(cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, bufsize=1)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            echo(line.rstrip("\n"))
        status = proc.wait()
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGTERM)       # run.py keeps what it measured
        proc.wait()
        raise
    results = out_dir / "microbench.json"
    if not results.exists():
        raise ValidationError(f"the microbenchmarks wrote no results ({results}); "
                              f"run.py exit status {status}")
    return status, results


def failures(results: Path) -> dict[str, str]:
    """The microbenchmarks of a run that did not build, run or pass their checks: {name:
    why, in one line}, from the run's microbench.json (its "builds" and "runs")."""
    try:
        doc = json.loads(Path(results).read_text())
    except (OSError, ValueError) as exc:
        return {"microbench.json": f"unreadable ({exc})"}
    out: dict[str, str] = {}
    for b in doc.get("builds", []):
        if not b.get("ok"):
            tail = [ln for ln in str(b.get("log_tail", "")).splitlines() if "error" in ln.lower()]
            out[b["name"]] = "build failed" + (f": {tail[0].strip()[:200]}" if tail else "")
    for r in doc.get("runs", []):
        if r.get("status") != "ok" and r.get("bench") not in out:
            out[r["bench"]] = str(r.get("status"))
    if not doc.get("complete") and not out:
        out["run.py"] = "the run did not complete"
    return out

