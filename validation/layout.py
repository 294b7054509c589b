"""The files of a prepared bundle (``pksim validate --prepare -o DIR``, validation/prepare/) and
of its GPU run (validation/run/), shared by the preparing, running and reporting halves.

``DIR/cases.json`` (the collectives' cases), ``DIR/prepare.json`` (suite, system, calibration
inputs, counts, estimated GPU time), ``DIR/fused/cases.json`` (the fused cases),
``DIR/fused/memcheck_libs.txt``; the GPU runs append to ``DIR/measured.jsonl`` and
``DIR/fused-measured.jsonl``.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from hwmodels.errors import ConfigError

CASES = "cases.json"
PREPARE = "prepare.json"
MEASURED = "measured.jsonl"
FUSED_DIR = "fused"
FUSED_MEASURED = "fused-measured.jsonl"
MEMCHECK_LIBS = "memcheck_libs.txt"
SANITIZE_FUSED = "sanitize_fused"           # the memcheck driver (validation/device/sanitize_fused.cpp)


def split_hint(out: str | Path = "DIR") -> str:
    return (f"split the run: `pksim validate --prepare -o {out}` where nvcc and the simulator "
            f"are, `python -m validation.run.collectives --cases {out}/{CASES} --out "
            f"{out}/{MEASURED}` (and, for fused kernels, `python -m validation.run.fused "
            f"--bundle {out}/{FUSED_DIR} --out {out}/{FUSED_MEASURED}`) on the GPU machine, "
            f"then `pksim validate --report {out}`")


def gpu_missing() -> str | None:
    """Why this machine cannot run the suite (None when it can)."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU on this machine (nvidia-smi not found)"
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e '.[validation]')"
    return None


def load_bundle(out: Path) -> tuple[dict, list[dict]]:
    """(prepare.json, cases.json) of a prepared bundle; one-line errors otherwise."""
    out = Path(out)
    for name in (CASES, PREPARE):
        if not (out / name).is_file():
            raise ConfigError(f"{out / name}: not found (is {out} a bundle written by "
                              f"`pksim validate --prepare -o {out}`?)")
    try:
        meta = json.loads((out / PREPARE).read_text())
        cases = json.loads((out / CASES).read_text())
    except ValueError as exc:
        raise ConfigError(f"{out}: cases.json or prepare.json is not valid JSON ({exc})") from None
    return meta, cases
