"""The one public prediction: ``predict`` dispatches a schedule to the collectives' model
(``pksim_core.collective_model``: build, then the DES) or to the fused operations' (``pksim_core.fusion``)."""
from __future__ import annotations

from hwmodels.catalog import load_system
from hwmodels.system import System
from pksim_core.collective_model import build, simulate, simulated_time
from pksim_core.fusion import predict_fused
from pksim_core.prediction import Prediction
from pksim_core.schedule import Schedule
from pksim_core.workloads.fused_ops import FUSED_OPS


def predict(system: System | str, schedule: Schedule, reduced: bool = True,
            record: bool = False, host_lead_s: float = 0.0, cold: bool = False) -> Prediction:
    """Predict a collective or a fused compute + communication operation (``host_lead_s``
    and ``cold``: see ``build``; a fused op's inputs are always taken from HBM)."""
    if isinstance(system, str):
        system = load_system(system)
    if schedule.op in FUSED_OPS:
        return predict_fused(system, schedule, reduced, record)
    return simulate(build(system, schedule, reduced, host_lead_s, cold), record=record)


def predicted_time(system: System, schedule: Schedule, reduced: bool = True,
                   cold: bool = False) -> float:
    """``predict(system, schedule, reduced, cold=cold).time_s``, the same number, without
    what only the rest of a prediction needs (a collective's busy times and bound)."""
    if schedule.op in FUSED_OPS:
        return predict_fused(system, schedule, reduced, False).time_s
    return simulated_time(build(system, schedule, reduced, 0.0, cold))
