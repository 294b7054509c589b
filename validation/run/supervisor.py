"""The one supervisor of the GPU runners (validation/run/collectives.py, fused.py): a worker
process runs the cases, writing a heartbeat before each; this process restarts it after a crash
or a hang and records the case that was running as failed, so one bad kernel cannot take the
whole run with it. Results already in the results file are skipped (resume). Also the rows'
common parts (appending one, the device fields) and ``run_bundle``, which runs a prepared
bundle's collectives and fused cases one after the other on this machine's GPU.
"""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from hwmodels.errors import ValidationError
from hwmodels.resources import import_root
from validation.layout import CASES, FUSED_DIR, FUSED_MEASURED, MEASURED
from validation.runtime.library import torch_module


def done_ids(out: Path) -> set[str]:
    if not out.exists():
        return set()
    ids = set()
    for line in out.read_text().splitlines():
        try:
            ids.add(json.loads(line)["id"])
        except (ValueError, KeyError):
            continue
    return ids


def append_row(out: Path, row: dict) -> None:
    with out.open("a") as f:
        f.write(json.dumps(row, default=str) + "\n")
        f.flush()


def device_info() -> dict:
    torch = torch_module()
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"device": p.name, "sms": p.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "date": datetime.date.today().isoformat()}



def context_healthy() -> bool:
    torch = torch_module()
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
        return True
    except Exception:
        return False



def supervise(case_ids: list[str], out: Path, worker_cmd: Callable[[Path], list[str]],
              case_timeout: float, deadline_s: float) -> int:
    """Run the cases not yet in ``out`` in a worker process (``worker_cmd(ids_file)``), which
    writes a heartbeat (``out.current``: the case and its start time) before each case.
    A worker that exits or hangs past ``case_timeout`` on a case is killed; its case is
    recorded as failed and a fresh worker takes the rest. A worker still running at the
    deadline is killed too, and the case it was on, like every other case left, is recorded
    as not run. Exit status: 0 all ok, 1 some failed, 2 a worker died before starting a
    case."""
    t_end = time.time() + deadline_s
    beat = Path(str(out) + ".current")
    while True:
        done = done_ids(out)
        remaining = [cid for cid in case_ids if cid not in done]
        if not remaining:
            break
        if time.time() > t_end:
            for cid in remaining:
                append_row(out, {"id": cid, "ok": False, "error": "not run: deadline reached",
                              "skipped": True})
            break
        ids_file = Path(str(out) + ".ids")
        ids_file.write_text(json.dumps(remaining))
        beat.unlink(missing_ok=True)
        proc = subprocess.Popen(worker_cmd(ids_file),
                                env=dict(os.environ, CUDA_MODULE_LOADING="EAGER"))
        killed = ""
        while proc.poll() is None:
            time.sleep(0.5)
            try:
                cur = json.loads(beat.read_text())
            except (OSError, ValueError):
                cur = None
            if cur and time.time() - cur["t"] > case_timeout:
                killed = f"killed after {case_timeout:.0f} s"
            elif time.time() > t_end:
                killed = "killed at the run's deadline"
            if killed:
                proc.kill()
                proc.wait()
                break
        try:
            cur = json.loads(beat.read_text())
        except (OSError, ValueError):
            cur = None
        if cur and killed.endswith("deadline"):
            # the run's time is up, not the case's fault: it stays without a row (not run;
            # a resumed run takes it again)
            print(f"{cur['id']}: not finished at the run's deadline", file=sys.stderr)
        elif cur and cur["id"] not in done_ids(out):
            append_row(out, {"id": cur["id"], "ok": False,
                          "error": f"worker {killed or f'exited with {proc.returncode}'} during this case"})
        elif proc.returncode not in (0, None) and not cur:
            print(f"worker exited with {proc.returncode} before starting a case", file=sys.stderr)
            return 2
    rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    bad = [r for r in rows if not r.get("ok")]
    print(f"{len(rows) - len(bad)}/{len(rows)} cases ok", file=sys.stderr)
    return 0 if not bad else 1


def run_bundle(out: Path, deadline_s: float, case_timeout_s: float = 120.0) -> int:
    """Run the bundle on this machine's GPU: the collectives (validation/run/collectives.py),
    then the fused cases (validation/run/fused.py), within ``deadline_s`` together. Both
    restart their worker after a crash or hang and resume from what their results file
    already holds; cases left when the time is up are reported as not measured."""
    t0 = time.monotonic()
    root = import_root()
    env = dict(os.environ, CUDA_MODULE_LOADING="EAGER",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    runs = []
    if json.loads((out / CASES).read_text()):
        runs.append([sys.executable, "-m", "validation.run.collectives", "--cases",
                     str(out / CASES), "--out", str(out / MEASURED)])
    if (out / FUSED_DIR / CASES).is_file():
        runs.append([sys.executable, "-m", "validation.run.fused", "--bundle",
                     str(out / FUSED_DIR), "--out", str(out / FUSED_MEASURED)])
    worst = 0
    for cmd in runs:
        left = deadline_s - (time.monotonic() - t0)
        cmd += ["--deadline-s", str(max(1.0, left)), "--case-timeout", str(case_timeout_s)]
        code = subprocess.run(cmd, env=env).returncode
        if code not in (0, 1):          # 1: some cases failed, which the report lists
            raise ValidationError(f"the GPU run stopped (exit {code}): {' '.join(cmd)}")
        worst = max(worst, code)
    return worst
