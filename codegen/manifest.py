"""What every generated source's manifest records besides its build options, and the record
``emit`` returns (the collectives' ``codegen.emit`` and the fused ops' ``codegen.fused.emit``)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwmodels.errors import ConfigError
from hwmodels.system import System
from pksim_core.schedule import Schedule


@dataclass(frozen=True)
class Emitted:
    source: Path
    manifest: Path
    plan: Any                  # codegen.plan.KernelPlan or codegen.fused.FusedPlan


def unit_manifest(system: System, schedule: Schedule, prediction: Any, plan) -> dict:
    """The schedule, its key, the system, the prediction, the plan and the entry point."""
    out = {"schedule": schedule.to_dict(), "schedule_key": schedule.key(),
           "system": system.name,
           "prediction": prediction.to_dict() if prediction is not None else None,
           "plan": plan.to_dict(), "entry": plan.entry}
    # A multi-domain schedule: this unit is its NVLink part; the scale-out part is NCCL's,
    # named here and never emitted, and `calls` says in which order the two run.
    if getattr(plan, "scale_out", ()):
        out["scale_out"] = dict(plan.scale_out)
        out["calls"] = list(plan.calls)
    # The target when it is not the system's own (a system later than Blackwell).
    if getattr(plan, "arch_note", ""):
        out["target"] = {"arch": plan.arch, "note": plan.arch_note}
    return out


def read_manifest(path: str | Path) -> dict:
    """The manifest of a generated ``.cu`` (or the manifest file itself)."""
    p = Path(path)
    m = p if p.suffix == ".json" else p.with_suffix(".json")
    if not m.is_file():
        raise ConfigError(f"{p}: no manifest {m.name} next to it (write both with codegen.emit)")
    return json.loads(m.read_text())
